//! Origins of elements: the read positions a DYNAMIC pipeline reports.

use super::*;

use crate::position::{ElementOrigin, SourceRange, SplitPositions};

/// Reads every element of a DYNAMIC pipeline over `def` given `splits` (all provided up
/// front, as a get-split reply carrying several), with each element's origin.
fn read_with_origins(
    def: &DatasetDef,
    splits: Vec<(Value, Option<SplitPositions>)>,
    files: &Files,
) -> Vec<(Value, Option<ElementOrigin>)> {
    let mut p = Pipeline::new(def, Sharding::Dynamic).unwrap();
    let mut splits = Some(splits);
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        match p.next() {
            Step::Element(e) => out.push((json_of(e), p.origin())),
            Step::NeedRows(r) => provide_fake_rows(&mut p, files, &r),
            Step::NeedOutputs(_) => panic!("only a producer's pipeline asks for outputs"),
            Step::NeedSplit { repetition } => match splits.take() {
                Some(splits) => {
                    for s in splits {
                        p.provide_split_at(repetition, Some(s));
                    }
                }
                None => p.provide_split_at(repetition, None),
            },
            Step::NeedFile { path } => p.provide_file(&path, &files[&path]),
            Step::Yield => {}
            Step::End => {
                assert_eq!(p.origin(), None, "no origin after the end");
                return out;
            }
            Step::Error(e) => panic!("{e}"),
        }
    }
    panic!("did not end");
}

fn at(start: u64, stop: u64, skip: u64) -> Option<SplitPositions> {
    Some(SplitPositions { start, stop, skip, until: None })
}

fn origin(start: u64, stop: u64, offset: u64, end: bool) -> Option<ElementOrigin> {
    Some(ElementOrigin { split: SourceRange { start, stop }, offset, end })
}

#[test]
fn range_and_list_elements_have_offsets_and_end_flags_and_skips_move_the_cursor() {
    let splits = vec![
        (json!({"start": 0, "stop": 3}), at(0, 3, 0)),
        (json!({"start": 6, "stop": 10}), at(6, 10, 2)),
        (json!({"start": 3, "stop": 6}), at(3, 6, 9)), // skips more than it has: nothing
        (json!({"start": 10, "stop": 12}), None),      // no positions: no origin
    ];
    let got = read_with_origins(&range(12), splits, &Files::new());
    assert_eq!(
        got,
        vec![
            (json!(0), origin(0, 3, 0, false)),
            (json!(1), origin(0, 3, 1, false)),
            (json!(2), origin(0, 3, 2, true)),
            (json!(8), origin(6, 10, 2, false)),
            (json!(9), origin(6, 10, 3, true)),
            (json!(10), None),
            (json!(11), None),
        ]
    );
    let list = def(r#"{"source": {"list": {"elements": ["a", "b", "c"]}}}"#);
    let got = read_with_origins(
        &list,
        vec![(json!({"start": 0, "stop": 3}), at(0, 3, 1))],
        &Files::new(),
    );
    assert_eq!(
        got,
        vec![(json!("b"), origin(0, 3, 1, false)), (json!("c"), origin(0, 3, 2, true))]
    );
}

#[test]
fn items_and_bytes_files_are_one_element_left_out_whole_by_a_skip() {
    let items = def(r#"{"source": {"splits": {"items": ["x", "y"]}}}"#);
    let got = read_with_origins(
        &items,
        vec![(json!("x"), at(0, 1, 0)), (json!("y"), at(1, 2, 1))],
        &Files::new(),
    );
    assert_eq!(got, vec![(json!("x"), origin(0, 1, 0, true))]);
    let bytes = def(r#"{"source": {"files": {"paths": ["a", "b"], "format": "bytes"}}}"#);
    let files: Files = [("a".to_owned(), b"A".to_vec())].into_iter().collect();
    // "b" is skipped whole: it is never even asked for (it is not in `files`).
    let got = read_with_origins(
        &bytes,
        vec![(json!("b"), at(1, 2, 1)), (json!("a"), at(0, 1, 0))],
        &files,
    );
    assert_eq!(got, vec![(json!("QQ=="), origin(0, 1, 0, true))]);
}

#[test]
fn text_files_skip_records_and_know_their_last_record_when_they_emit_it() {
    let (jsonl, files) = record_files(3);
    let got = read_with_origins(
        &jsonl,
        vec![
            (json!("r0.jsonl"), at(0, 1, 0)),
            (json!("r1.jsonl"), at(1, 2, 7)),
            (json!("r2.jsonl"), at(2, 3, 1_000_000)),
        ],
        &files,
    );
    let mut want: Vec<_> = (0..10).map(|j| (json!(j), origin(0, 1, j, j == 9))).collect();
    want.extend((17..20).map(|v| (json!(v), origin(1, 2, v - 10, v == 19))));
    assert_eq!(got, want);
    // Trailing blank lines do not hide the end of a JSON Lines file; lines count every line.
    let mut files = Files::new();
    files.insert("j".into(), b"1\n\n2\n  \n\n".to_vec());
    files.insert("l".into(), b"a\n\nb".to_vec());
    let j = def(r#"{"source": {"files": {"paths": ["j"], "format": "jsonl"}}}"#);
    let got = read_with_origins(&j, vec![(json!("j"), at(0, 1, 1))], &files);
    assert_eq!(got, vec![(json!(2), origin(0, 1, 1, true))]);
    let l = def(r#"{"source": {"files": {"paths": ["l"], "format": "lines"}}}"#);
    let got = read_with_origins(&l, vec![(json!("l"), at(0, 1, 1))], &files);
    assert_eq!(got, vec![(json!(""), origin(0, 1, 1, false)), (json!("b"), origin(0, 1, 2, true))]);
}

#[test]
fn a_split_cut_short_stops_at_its_until_without_an_end_flag() {
    // The parts of files a resumed read left: records 2..5 of r0, 7.. of r0 (its end), 0..1 of
    // r1; the cut parts never claim their split's end.
    let (jsonl, files) = record_files(2);
    let part = |start, stop, skip, until| Some(SplitPositions { start, stop, skip, until });
    let got = read_with_origins(
        &jsonl,
        vec![
            (json!("r0.jsonl"), part(0, 1, 2, Some(5))),
            (json!("r0.jsonl"), part(0, 1, 7, None)),
            (json!("r1.jsonl"), part(1, 2, 0, Some(1))),
        ],
        &files,
    );
    let mut want: Vec<_> = (2..5).map(|j| (json!(j), origin(0, 1, j, false))).collect();
    want.extend((7..10).map(|j| (json!(j), origin(0, 1, j, j == 9))));
    want.push((json!(10), origin(1, 2, 0, false)));
    assert_eq!(got, want);
    // A range's split cut short too (the dispatcher cuts ranges into positions instead, but
    // the rule is the same for every source).
    let range = def(r#"{"source": {"range": {"stop": 10}}}"#);
    let got = read_with_origins(
        &range,
        vec![(json!({"start": 0, "stop": 10}), part(0, 10, 1, Some(3)))],
        &Files::new(),
    );
    assert_eq!(got, vec![(json!(1), origin(0, 10, 1, false)), (json!(2), origin(0, 10, 2, false))]);
}

#[test]
fn pipelines_that_buffer_or_count_across_splits_and_static_pipelines_have_no_origins() {
    let splits = || vec![(json!({"start": 0, "stop": 4}), at(0, 4, 0))];
    for transforms in [
        json!([{"shuffle": {"buffer": 2, "seed": 1}}]),
        json!([{"batch": {"size": 2}}]),
        json!([{"take": 3}]),
        json!([{"skip": 1}]),
    ] {
        let got = read_with_origins(&with(range(4), transforms.clone()), splits(), &Files::new());
        assert!(!got.is_empty(), "{transforms}");
        assert!(got.iter().all(|(_, o)| o.is_none()), "{transforms}: {got:?}");
    }
    for sharding in [Sharding::Off, data(2, 0)] {
        let mut p = Pipeline::new(&range(3), sharding).unwrap();
        assert!(matches!(p.next(), Step::Element(_)));
        assert_eq!(p.origin(), None, "{sharding:?}");
    }
    // A resumable pipeline's origin is for the element just returned, not a request.
    let mut p = Pipeline::new(&range(3), Sharding::Dynamic).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    assert_eq!(p.origin(), None);
    p.provide_split_at(0, Some((json!({"start": 0, "stop": 3}), at(0, 3, 0))));
    assert_eq!(p.next(), Step::Element(json!(0).into()));
    assert_eq!(p.origin(), origin(0, 3, 0, false));
}

/// `Pipeline::take_origins`, taken every `chunk` elements, gives the runs that folding each
/// element's `origin` gives (what a worker sends beside each batch it buffers).
#[test]
fn origins_taken_per_batch_are_the_runs_of_the_elements_origins() {
    use crate::position::OriginRun;
    let files: Files = [
        ("/d/a".to_owned(), b"x\ny\nz\n".to_vec()),
        ("/d/b".to_owned(), b"p\nq\n".to_vec()),
        ("/p/a".to_owned(), b"7".to_vec()),
        ("/p/b".to_owned(), b"0".to_vec()),
        ("/p/c".to_owned(), b"5".to_vec()),
    ]
    .into_iter()
    .collect();
    let parquet = |split: &str| {
        let mut v = json!({"source": {"files": {
            "paths": ["/p/a", "/p/b", "/p/c"], "format": "parquet", "split": split,
        }}});
        if split == "rows" {
            v["source"]["files"]["rows"] = json!([7, 0, 5]);
        }
        def_json(v)
    };
    type Splits = Vec<(Value, Option<SplitPositions>)>;
    let cases: Vec<(DatasetDef, Splits)> = vec![
        (
            range(12),
            vec![
                (json!({"start": 0, "stop": 3}), at(0, 3, 0)),
                (json!({"start": 6, "stop": 10}), at(6, 10, 2)),
                (json!({"start": 3, "stop": 6}), at(3, 6, 9)),
                (json!({"start": 10, "stop": 12}), at(10, 12, 0)),
            ],
        ),
        (
            def(r#"{"source": {"files": {"paths": ["/d/a", "/d/b"], "format": "lines"}}}"#),
            vec![(json!("/d/b"), at(1, 2, 0)), (json!("/d/a"), at(0, 1, 1))],
        ),
        (
            parquet("files"),
            vec![
                (json!("/p/c"), at(2, 3, 0)),
                (json!("/p/a"), at(0, 1, 4)),
                (json!("/p/b"), at(1, 2, 0)),
            ],
        ),
        (
            // Splits by rows: one inside a file, one across the empty file, one resumed.
            parquet("rows"),
            vec![
                (json!({"start": 0, "stop": 4}), at(0, 4, 0)),
                (json!({"start": 4, "stop": 12}), at(4, 12, 0)),
                (json!({"start": 0, "stop": 4}), at(0, 4, 2)),
            ],
        ),
    ];
    for (def, splits) in cases {
        for chunk in 1..6 {
            let mut p = Pipeline::new(&def, Sharding::Dynamic).unwrap();
            let mut splits = Some(splits.clone());
            let (mut want, mut got, mut since) = (Vec::new(), Vec::new(), 0);
            loop {
                match p.next() {
                    Step::Element(_) => {
                        OriginRun::push(&mut want, p.origin().expect("an origin"));
                        since += 1;
                        if since == chunk {
                            got.extend(p.take_origins().expect("resumable"));
                            since = 0;
                        }
                    }
                    Step::NeedSplit { repetition } => match splits.take() {
                        Some(s) => {
                            s.into_iter().for_each(|s| p.provide_split_at(repetition, Some(s)))
                        }
                        None => p.provide_split_at(repetition, None),
                    },
                    Step::NeedFile { path } => p.provide_file(&path, &files[&path]),
                    Step::NeedRows(r) => provide_fake_rows(&mut p, &files, &r),
                    Step::NeedOutputs(_) => panic!("only a producer's pipeline asks for outputs"),
                    Step::Yield => {}
                    Step::End => break,
                    Step::Error(e) => panic!("{e}"),
                }
            }
            got.extend(p.take_origins().expect("resumable"));
            // Runs cut at batch boundaries join back into the per-element fold.
            let mut joined: Vec<OriginRun> = Vec::new();
            for r in got {
                match joined.last_mut() {
                    Some(l) if l.split == r.split && l.offset + l.count == r.offset => {
                        l.count += r.count;
                        l.end = r.end;
                    }
                    _ => joined.push(r),
                }
            }
            assert_eq!(joined, want, "chunk {chunk}");
        }
    }
    let mut shuffled = Pipeline::new(
        &def(r#"{"source": {"range": {"stop": 4}}, "transforms": [{"shuffle": {"buffer": 2, "seed": 1}}]}"#),
        Sharding::Dynamic,
    )
    .unwrap();
    assert_eq!(shuffled.take_origins(), None);
}
