//! Payloads of many rows per item (a client's record batches): the reader hands a read's
//! payload out whole and counts its rows; positions count rows, however the stream cuts them.

use super::*;

/// A payload of chunks of rows (each number: one chunk's rows), as record batches are.
#[derive(Debug, Clone, PartialEq)]
struct Chunks(Vec<usize>);

impl Rows for Chunks {
    fn rows(&self) -> usize {
        self.0.iter().sum()
    }
}

fn chunks(rows: &[usize], end: bool, origin: Option<Vec<OriginRun>>) -> Reply<Chunks> {
    Reply { elements: Chunks(rows.to_vec()), end_of_sequence: end, origin }
}

fn run(start: u64, stop: u64, offset: u64, count: u64, end: bool) -> OriginRun {
    OriginRun { split: SourceRange { start, stop }, offset, count, end }
}

fn reads(reader: &mut Reader<Fail, Chunks>) -> Vec<TaskId> {
    std::iter::from_fn(|| reader.poll_transmit())
        .filter_map(|t| match t {
            Transmit::GetElements { task, .. } => Some(task),
            _ => None,
        })
        .collect()
}

#[test]
fn a_read_of_many_chunks_is_one_batch_and_chunks_of_no_rows_are_nothing_read() {
    let mut r = Reader::<Fail, Chunks>::new(config(), Millis(0));
    assert!(reads(&mut r).is_empty(), "the heartbeat first");
    r.handle_heartbeat(Millis(1), reply(&[task(1)], true));
    assert_eq!(reads(&mut r), [TaskId(1)]);
    // Chunks without a row: nothing arrived within the worker's wait, ask again.
    r.handle_elements(Millis(2), TaskId(1), chunks(&[0, 0], false, None));
    assert_eq!(r.poll_event(), None);
    assert_eq!(reads(&mut r), [TaskId(1)]);
    let origin = Some(vec![run(0, 5, 0, 5, true)]);
    r.handle_elements(Millis(3), TaskId(1), chunks(&[2, 3], false, origin.clone()));
    assert_eq!(reads(&mut r), [], "nothing more read until the caller takes the batch");
    let Some(Event::Batch(b)) = r.poll_event() else { panic!("a batch") };
    assert_eq!(b, Batch { elements: Chunks(vec![2, 3]), origin });
    assert_eq!(reads(&mut r), [TaskId(1)]);
    r.handle_elements(Millis(4), TaskId(1), chunks(&[], true, None));
    assert!(!r.is_reading(), "every task at its end and the iteration finished");
    assert_eq!(r.poll_transmit(), Some(Transmit::Release { client_id: ClientId(3000) }));
    r.handle_released(Millis(5));
    assert_eq!(r.poll_event(), Some(Event::End));
    assert!(r.is_done());
}

#[test]
fn coordinated_reads_take_a_payload_of_rows_per_task_and_round() {
    let mut r = Reader::<Fail, Chunks>::new(coordinated(), Millis(0));
    assert!(reads(&mut r).is_empty(), "the heartbeat first");
    r.handle_heartbeat(Millis(1), reply(&[task(1), task(2)], false));
    assert_eq!(reads(&mut r), [TaskId(1)]);
    r.handle_elements(Millis(2), TaskId(1), chunks(&[0], false, None));
    assert_eq!(reads(&mut r), [TaskId(1)], "nothing yet: the same task again");
    r.handle_elements(Millis(3), TaskId(1), chunks(&[1], false, None));
    let Some(Event::Batch(b)) = r.poll_event() else { panic!("a batch") };
    assert_eq!(b.elements, Chunks(vec![1]));
    assert_eq!(reads(&mut r), [TaskId(2)], "the next task of the round");
    assert_eq!(r.current_round(), 0);
    r.handle_elements(Millis(4), TaskId(2), chunks(&[1], false, None));
    assert!(matches!(r.poll_event(), Some(Event::Batch(_))));
    assert_eq!(reads(&mut r), [TaskId(1)]);
    assert_eq!(r.current_round(), 1);
}

#[test]
fn positions_count_rows_of_reads_handed_out_batch_by_batch() {
    let dataset: DatasetDef = r#"{"source": {"range": {"stop": 100}}}"#.parse().unwrap();
    let mut p = Positions::new(&dataset, "ds".into(), ShardingPolicy::Dynamic, false, 0, None);
    let r = |start, stop| SourceRange { start, stop };
    // A read of 5 rows from two splits, in three record batches of 1, 3 and 1 rows.
    p.arrived(5, Some(&[run(0, 3, 0, 3, true), run(10, 20, 0, 2, false)]));
    let none = p.position(5).unwrap();
    assert_eq!((none.done, none.partial), (vec![], vec![]), "no batch handed out yet");
    let got = p.position(4).unwrap();
    assert_eq!((got.done, got.partial), (vec![], vec![PartialSplit::prefix(r(0, 3), 1)]));
    // The second batch's rows straddle the two splits.
    let got = p.position(1).unwrap();
    assert_eq!(got.done, [r(0, 3)]);
    assert_eq!(got.partial, [PartialSplit::prefix(r(10, 20), 1)]);
    let got = p.position(0).unwrap();
    assert_eq!(got.partial, [PartialSplit::prefix(r(10, 20), 2)]);
    // The next read folds the whole previous one.
    p.arrived(3, Some(&[run(10, 20, 2, 3, false)]));
    let got = p.position(3).unwrap();
    assert_eq!(got.done, [r(0, 3)]);
    assert_eq!(got.partial, [PartialSplit::prefix(r(10, 20), 2)]);
    assert_eq!(p.position(0).unwrap().partial, [PartialSplit::prefix(r(10, 20), 5)]);
    // More pending rows than the read has: nothing of it handed out.
    assert_eq!(p.position(7).unwrap(), p.position(3).unwrap());
    // Origins that cover another number of rows than the read has count as none.
    p.arrived(4, Some(&[run(10, 20, 5, 3, false)]));
    assert!(p.position(4).is_ok(), "none of its rows handed out yet");
    let why = p.position(2).unwrap_err();
    assert!(why.contains("without origin"), "{why}");
}
