//! Crash consistency, checked exhaustively: a simulated disk that loses power at every
//! possible storage operation, in every way a file system may leave unsynced data.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use shardwise_core::dispatch::{ClientId, Millis, State, Update};

use crate::*;

/// What survives of data written but not yet synced when the power goes.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// Nothing unsynced survives (and an unsynced new file is gone).
    Everything,
    /// Everything survives.
    Nothing,
    /// Half of the unsynced bytes survive.
    Half,
    /// The file grew, but the unsynced bytes read as zeros.
    Zeros,
}
const LOSSES: [Loss; 4] = [Loss::Everything, Loss::Nothing, Loss::Half, Loss::Zeros];

#[derive(Debug, Clone, Default)]
struct File {
    durable: Vec<u8>,
    pending: Vec<u8>,
    /// The directory entry is durable.
    linked: bool,
}

/// An operation cut short by a crash: applied only if the crash loses nothing.
type TornOp = Box<dyn FnOnce(&mut BTreeMap<u64, File>) + Send>;

#[derive(Default)]
struct Disk {
    files: BTreeMap<u64, File>,
    /// Staged segments, durable once staged (replay never reads them).
    staged: BTreeMap<u64, Vec<u8>>,
    current: Option<u64>,
    ops: usize,
    crash_at: Option<usize>,
    crashed: bool,
    torn_op: Option<TornOp>,
}

/// Storage over a shared [`Disk`].
#[derive(Clone)]
struct Sim(Arc<Mutex<Disk>>);

impl Sim {
    fn new(files: BTreeMap<u64, File>, crash_at: Option<usize>) -> Sim {
        Sim(Arc::new(Mutex::new(Disk { files, crash_at, ..Disk::default() })))
    }

    /// Counts an operation; `Err` if the power went before or during it.
    fn step(&self, torn: impl FnOnce(&mut BTreeMap<u64, File>) + Send + 'static) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        if d.crashed {
            return Err(io::Error::other("powered off"));
        }
        d.ops += 1;
        if d.crash_at == Some(d.ops) {
            d.crashed = true;
            d.torn_op = Some(Box::new(torn));
            return Err(io::Error::other("power failure"));
        }
        Ok(())
    }

    /// The files as they are after the power comes back.
    fn after_crash(&self, loss: Loss) -> BTreeMap<u64, File> {
        let mut d = self.0.lock().unwrap();
        let mut files = d.files.clone();
        if let (Some(op), Loss::Nothing) = (d.torn_op.take(), loss) {
            op(&mut files);
        }
        files
            .into_iter()
            .filter_map(|(n, f)| {
                let kept = match loss {
                    Loss::Everything => Vec::new(),
                    Loss::Nothing => f.pending.clone(),
                    Loss::Half => f.pending[..f.pending.len() / 2].to_vec(),
                    Loss::Zeros => vec![0; f.pending.len()],
                };
                if !f.linked && matches!(loss, Loss::Everything) {
                    return None;
                }
                let mut durable = f.durable;
                durable.extend_from_slice(&kept);
                Some((n, File { durable, pending: Vec::new(), linked: true }))
            })
            .collect()
    }

    fn ops(&self) -> usize {
        self.0.lock().unwrap().ops
    }
}

impl Storage for Sim {
    fn list(&self) -> io::Result<Vec<u64>> {
        let d = self.0.lock().unwrap();
        if d.crashed {
            return Err(io::Error::other("powered off"));
        }
        Ok(d.files.keys().copied().collect())
    }
    fn read(&self, s: u64) -> io::Result<Vec<u8>> {
        let d = self.0.lock().unwrap();
        let f = d.files.get(&s).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok([f.durable.as_slice(), f.pending.as_slice()].concat())
    }
    fn create(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
        let bytes = b.to_vec();
        let torn = bytes.clone();
        // Cut short: the file exists, unlinked, with its bytes unsynced.
        self.step(move |files| {
            files.insert(s, File { durable: Vec::new(), pending: torn, linked: false });
        })
        .inspect_err(|_| {
            self.0
                .lock()
                .unwrap()
                .files
                .insert(s, File { durable: Vec::new(), pending: b.to_vec(), linked: false });
        })?;
        let mut d = self.0.lock().unwrap();
        d.files.insert(s, File { durable: bytes, pending: Vec::new(), linked: true });
        d.current = Some(s);
        Ok(())
    }
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        let cur = self.0.lock().unwrap().current;
        let Some(cur) = cur else { return Err(io::Error::other("no segment")) };
        // Appended bytes are unsynced either way: a crash during the write leaves them
        // as pending as a completed write does.
        let r = self.step(|_| {});
        let mut d = self.0.lock().unwrap();
        if r.is_ok() || d.torn_op.is_some() {
            d.files.get_mut(&cur).unwrap().pending.extend_from_slice(b);
        }
        r
    }
    fn sync(&mut self) -> io::Result<()> {
        let cur = self.0.lock().unwrap().current;
        let Some(cur) = cur else { return Err(io::Error::other("no segment")) };
        self.step(move |files| {
            let f = files.get_mut(&cur).unwrap();
            let p = std::mem::take(&mut f.pending);
            f.durable.extend_from_slice(&p);
        })?;
        let mut d = self.0.lock().unwrap();
        let f = d.files.get_mut(&cur).unwrap();
        let p = std::mem::take(&mut f.pending);
        f.durable.extend_from_slice(&p);
        Ok(())
    }
    fn truncate(&mut self, s: u64, len: u64) -> io::Result<()> {
        let cut = move |files: &mut BTreeMap<u64, File>| {
            let f = files.get_mut(&s).unwrap();
            let mut all = std::mem::take(&mut f.durable);
            all.append(&mut f.pending);
            all.truncate(len as usize);
            f.durable = all;
        };
        self.step(cut)?;
        cut(&mut self.0.lock().unwrap().files);
        Ok(())
    }
    fn remove(&mut self, s: u64) -> io::Result<()> {
        self.step(move |files| {
            files.remove(&s);
        })?;
        self.0.lock().unwrap().files.remove(&s);
        Ok(())
    }
    fn describe(&self, s: u64) -> String {
        format!("sim/{s}")
    }
    fn stager(&self) -> Box<dyn Stager> {
        Box::new(self.clone())
    }
    fn install(&mut self, s: u64, tail: &[u8]) -> io::Result<()> {
        // Three operations: the tail appended to the staged file, its fsync, and the
        // rename with its directory fsync. Cut short, the first two leave the segments
        // as they were; the rename happens whole or not at all.
        self.step(|_| {})?;
        self.step(|_| {})?;
        let staged = self.0.lock().unwrap().staged.get(&s).cloned();
        let Some(mut bytes) = staged else { return Err(io::Error::other("not staged")) };
        bytes.extend_from_slice(tail);
        let renamed = File { durable: bytes, pending: Vec::new(), linked: true };
        let torn = renamed.clone();
        self.step(move |files| {
            files.insert(s, torn);
        })?;
        let mut d = self.0.lock().unwrap();
        d.staged.remove(&s);
        d.files.insert(s, renamed);
        d.current = Some(s);
        Ok(())
    }
    fn discard_staged(&mut self) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        if d.crashed {
            return Err(io::Error::other("powered off"));
        }
        d.staged.clear();
        Ok(())
    }
}

impl Stager for Sim {
    fn stage(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
        // Cut short, a staged file is as good as absent: nothing reads it.
        self.step(|_| {})?;
        self.0.lock().unwrap().staged.insert(s, b.to_vec());
        Ok(())
    }
}

fn rec(i: u64) -> Update {
    Update::ReleaseClient { client_id: ClientId(3000 + i), at: Millis(i) }
}

/// A snapshot standing for records `1..=k`.
fn snap(k: u64) -> Update {
    Update::Snapshot { state: Box::new(State::new(vec![format!("covers-{k}")])) }
}

/// The record numbers a replay stands for.
fn logical(updates: &[Update]) -> Vec<u64> {
    let mut out = Vec::new();
    for u in updates {
        match u {
            Update::ReleaseClient { client_id, .. } => out.push(client_id.0 - 3000),
            Update::Snapshot { .. } => {
                let k = (0..=100).find(|k| snap(*k) == *u).expect("a known snapshot");
                out = (1..=k).collect();
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    out
}

/// Like [`run`], but each compaction runs in the background as the dispatcher runs it:
/// begun at every fifth record (the snapshot covering it), the snapshot staged one record
/// later, and finished two records after that, with appends and commits in between.
fn run_background(disk: &Sim, from: u64, to: u64) -> (u64, u64) {
    let Ok((mut j, replay)) = Journal::open(disk.clone(), true) else {
        return (0, 0);
    };
    let base = logical(&replay.updates);
    assert_eq!(base, (1..from).collect::<Vec<_>>(), "a run starts from the whole history");
    let (mut acked, mut written) = (from - 1, from - 1);
    let mut begun: Option<(Compaction, u64)> = None;
    let mut staged: Option<Staged> = None;
    for i in from..=to {
        written = i;
        if j.append(&[rec(i)]).is_err() {
            break;
        }
        if i % 2 == 0 {
            if j.commit().is_err() {
                break;
            }
            acked = i;
        }
        if let Some((c, k)) = begun.take_if(|(_, k)| i == *k + 1) {
            match c.write(&snap(k)) {
                Ok(s) => staged = Some(s),
                Err(_) => break,
            }
        }
        if i % 5 == 3
            && let Some(s) = staged.take()
            && j.finish_compaction(s).is_err()
        {
            break;
        }
        if i % 5 == 0 {
            match j.begin_compaction() {
                Ok(c) => begun = Some((c, i)),
                Err(_) => break,
            }
        }
    }
    (acked, written)
}

/// One dispatcher run: replays, then appends `from..=to`, committing every second record
/// and compacting every fifth, until the power fails. Returns the highest acknowledged
/// record (what a reply was sent for) and the highest record handed to the journal.
fn run(disk: &Sim, from: u64, to: u64) -> (u64, u64) {
    let Ok((mut j, replay)) = Journal::open(disk.clone(), true) else {
        return (0, 0);
    };
    let base = logical(&replay.updates);
    assert_eq!(base, (1..from).collect::<Vec<_>>(), "a run starts from the whole history");
    let (mut acked, mut written) = (from - 1, from - 1);
    for i in from..=to {
        // Handed to the journal: on disk or not, it may come back.
        written = i;
        if j.append(&[rec(i)]).is_err() {
            break;
        }
        if i % 2 == 0 {
            if j.commit().is_err() {
                break;
            }
            acked = i;
        }
        if i % 5 == 0 && j.compact(&snap(i)).is_err() {
            break;
        }
    }
    (acked, written)
}

/// Replays what a crash left; every acknowledged record is there, in order, and nothing
/// that was never written.
fn check(files: BTreeMap<u64, File>, acked: u64, written: u64, what: &str) -> u64 {
    let disk = Sim::new(files, None);
    let (_, replay) = Journal::open(disk, true)
        .unwrap_or_else(|e| panic!("{what}: the journal does not open after a crash: {e}"));
    let got = logical(&replay.updates);
    let m = got.len() as u64;
    assert_eq!(got, (1..=m).collect::<Vec<_>>(), "{what}: records out of order or lost");
    assert!(m >= acked, "{what}: acknowledged record {acked} lost (replayed {m})");
    assert!(m <= written, "{what}: replayed {m} records but only {written} were written");
    m
}

#[test]
fn power_loss_at_every_storage_operation_loses_nothing_acknowledged() {
    power_loss_at_every_operation(run);
}

/// The same for compactions written in the background ([`Journal::begin_compaction`]):
/// every storage operation of the staging, the tail, the rename and the deletes.
#[test]
fn power_loss_during_a_background_compaction_loses_nothing_acknowledged() {
    power_loss_at_every_operation(run_background);
}

fn power_loss_at_every_operation(run: fn(&Sim, u64, u64) -> (u64, u64)) {
    // History from earlier runs: records 1..=6, one compaction.
    let history = Sim::new(BTreeMap::new(), None);
    assert_eq!(run(&history, 1, 6), (6, 6));
    let history = history.after_crash(Loss::Everything);

    let total = {
        let dry = Sim::new(history.clone(), None);
        run(&dry, 7, 23);
        dry.ops()
    };
    let mut cases = 0;
    for crash_at in 1..=total + 1 {
        for loss in LOSSES {
            let disk = Sim::new(history.clone(), Some(crash_at));
            let (acked, written) = run(&disk, 7, 23);
            let (acked, written) = (acked.max(6), written.max(6));
            let after = disk.after_crash(loss);
            let what = format!("crash at op {crash_at}/{total}, {loss:?} lost");
            let m = check(after.clone(), acked, written, &what);
            // The next start crashes too, at each of its own operations: nothing it
            // replayed (the state it would have served) is lost, and a third start works.
            for again in 1..=4 {
                for loss2 in LOSSES {
                    let disk2 = Sim::new(after.clone(), Some(again));
                    let _ = Journal::open(disk2.clone(), true);
                    let what = format!("{what}, then at op {again} of the restart, {loss2:?}");
                    check(disk2.after_crash(loss2), m, written, &what);
                    cases += 1;
                }
            }
        }
    }
    println!(
        "{total} storage operations; {} crashes, then {cases} crashed restarts",
        4 * (total + 1)
    );
    assert!(cases > 1000, "{cases} crash cases");
}
