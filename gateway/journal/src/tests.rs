//! The journal over an in-memory storage whose failures tests switch on, and over real files.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::{fs, io};

use shardwise_core::dispatch::{ClientId, Millis, State, Update};

use crate::*;

/// In-memory storage whose failures tests switch on.
#[derive(Clone, Default)]
struct Mem {
    files: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
    staged: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
    current: Option<u64>,
    fail_append: bool,
    fail_sync: bool,
}

impl Storage for Mem {
    fn list(&self) -> io::Result<Vec<u64>> {
        Ok(self.files.lock().unwrap().keys().copied().collect())
    }
    fn read(&self, s: u64) -> io::Result<Vec<u8>> {
        Ok(self.files.lock().unwrap()[&s].clone())
    }
    fn create(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
        self.files.lock().unwrap().insert(s, b.to_vec());
        self.current = Some(s);
        Ok(())
    }
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        if self.fail_append {
            return Err(io::Error::other("disk full"));
        }
        let s = self.current.unwrap();
        self.files.lock().unwrap().get_mut(&s).unwrap().extend_from_slice(b);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        if self.fail_sync { Err(io::Error::other("fsync failed")) } else { Ok(()) }
    }
    fn truncate(&mut self, s: u64, len: u64) -> io::Result<()> {
        self.files.lock().unwrap().get_mut(&s).unwrap().truncate(len as usize);
        Ok(())
    }
    fn remove(&mut self, s: u64) -> io::Result<()> {
        self.files.lock().unwrap().remove(&s);
        Ok(())
    }
    fn describe(&self, s: u64) -> String {
        format!("mem/{s}")
    }
    fn stager(&self) -> Box<dyn Stager> {
        Box::new(self.clone())
    }
    fn install(&mut self, s: u64, tail: &[u8]) -> io::Result<()> {
        let mut bytes = self.staged.lock().unwrap().remove(&s).unwrap();
        bytes.extend_from_slice(tail);
        self.files.lock().unwrap().insert(s, bytes);
        self.current = Some(s);
        Ok(())
    }
    fn discard_staged(&mut self) -> io::Result<()> {
        self.staged.lock().unwrap().clear();
        Ok(())
    }
}

impl Stager for Mem {
    fn stage(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
        self.staged.lock().unwrap().insert(s, b.to_vec());
        Ok(())
    }
}

fn rec(i: u64) -> Update {
    Update::ReleaseClient { client_id: ClientId(3000 + i), at: Millis(i) }
}

#[test]
fn every_run_gets_its_own_segment_and_replay_reads_them_all() {
    let mem = Mem::default();
    let (mut j, r) = Journal::open(mem.clone(), true).unwrap();
    assert!(r.updates.is_empty());
    j.append(&[rec(1), rec(2)]).unwrap();
    j.commit().unwrap();
    let (mut j2, r) = Journal::open(mem.clone(), true).unwrap();
    assert_eq!(r.updates, vec![rec(1), rec(2)]);
    assert_eq!(j2.segment(), 1);
    j2.append(&[rec(3)]).unwrap();
    let (_, r) = Journal::open(mem.clone(), true).unwrap();
    assert_eq!(r.updates, vec![rec(1), rec(2), rec(3)]);
    assert_eq!(mem.files.lock().unwrap().len(), 3);
}

#[test]
fn torn_tail_is_truncated_with_a_warning() {
    let mem = Mem::default();
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    j.append(&[rec(1), rec(2)]).unwrap();
    {
        let mut files = mem.files.lock().unwrap();
        let seg = files.get_mut(&0).unwrap();
        let len = seg.len();
        seg.truncate(len - 3);
    }
    // The torn segment is the newest one: truncated, the first record kept.
    let (_, r) = Journal::open(mem.clone(), true).unwrap();
    assert_eq!(r.updates, vec![rec(1)]);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("truncated a torn final record"));
}

#[test]
fn corruption_in_the_middle_refuses_with_file_and_offset() {
    let mem = Mem::default();
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    j.append(&[rec(1), rec(2), rec(3)]).unwrap();
    mem.files.lock().unwrap().get_mut(&0).unwrap()[30] ^= 0x40;
    let e = Journal::open(mem.clone(), true).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("journal file mem/0 is corrupt at byte offset 16"), "{msg}");
}

#[test]
fn a_missing_segment_refuses() {
    let mem = Mem::default();
    for _ in 0..3 {
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.append(&[rec(1)]).unwrap();
    }
    mem.files.lock().unwrap().remove(&1);
    let e = Journal::open(mem.clone(), true).unwrap_err();
    assert!(matches!(e, OpenError::MissingSegment { missing: 1, .. }), "{e}");
}

#[test]
fn write_and_fsync_failures_surface() {
    let mut mem = Mem::default();
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    j.storage.fail_sync = true;
    j.append(&[rec(1)]).unwrap();
    assert!(j.commit().is_err(), "a failed fsync is reported, never acknowledged");
    mem.fail_append = true;
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    assert!(j.append(&[rec(2)]).is_err());
    // Without fault tolerance commit does not sync.
    let (mut j, _) = Journal::open(Mem { fail_sync: true, ..Mem::default() }, false).unwrap();
    assert!(j.commit().is_ok());
}

#[test]
fn compaction_keeps_only_the_snapshot_and_what_follows() {
    let mem = Mem::default();
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    j.append(&[rec(1), rec(2)]).unwrap();
    let snap = Update::Snapshot { state: Box::new(State::new(vec![])) };
    j.compact(&snap).unwrap();
    j.append(&[rec(3)]).unwrap();
    assert_eq!(mem.files.lock().unwrap().keys().copied().collect::<Vec<_>>(), vec![1]);
    let (_, r) = Journal::open(mem.clone(), true).unwrap();
    assert_eq!(r.updates, vec![snap, rec(3)]);
}

/// Appends go on while the snapshot is written: they land in the old segment and, when
/// the compaction finishes, after the snapshot in the new one; before that replay does
/// not see the snapshot at all.
#[test]
fn a_compaction_in_flight_keeps_the_records_appended_meanwhile() {
    let mem = Mem::default();
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    j.append(&[rec(1), rec(2)]).unwrap();
    j.commit().unwrap();
    let snap = Update::Snapshot { state: Box::new(State::new(vec!["at-2".into()])) };
    let compaction = j.begin_compaction().unwrap();
    assert!(j.begin_compaction().is_err(), "one compaction at a time");
    j.append(&[rec(3)]).unwrap();
    j.commit().unwrap();
    let staged = std::thread::scope(|s| s.spawn(|| compaction.write(&snap)).join()).unwrap();
    assert!(staged.is_ok(), "the snapshot is written on another thread");
    j.append(&[rec(4)]).unwrap();
    j.commit().unwrap();
    // Written, not installed: a restart replays the old segment only.
    let (_, r) = Journal::open(mem.clone(), true).unwrap();
    assert_eq!(r.updates, vec![rec(1), rec(2), rec(3), rec(4)]);
    // (That restart discarded the staged segment and opened segment 1, as a crash and a
    // restart would; start over on a journal of our own.)
    let mem = Mem::default();
    let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
    j.append(&[rec(1), rec(2)]).unwrap();
    let compaction = j.begin_compaction().unwrap();
    j.append(&[rec(3)]).unwrap();
    let staged2 = compaction.write(&snap).unwrap();
    j.append(&[rec(4)]).unwrap();
    j.finish_compaction(staged2).unwrap();
    assert!(!j.compacting());
    j.append(&[rec(5)]).unwrap();
    assert_eq!(mem.files.lock().unwrap().keys().copied().collect::<Vec<_>>(), vec![1]);
    let (_, r) = Journal::open(mem.clone(), true).unwrap();
    assert_eq!(r.updates, vec![snap, rec(3), rec(4), rec(5)]);
}

#[test]
fn dir_storage_round_trip() {
    let dir = std::env::temp_dir().join(format!("shardwise-journal-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let (mut j, _) = Journal::open(DirStorage::open(&dir).unwrap(), true).unwrap();
    j.append(&[rec(1)]).unwrap();
    j.commit().unwrap();
    let (_, r) = Journal::open(DirStorage::open(&dir).unwrap(), true).unwrap();
    assert_eq!(r.updates, vec![rec(1)]);
    fs::write(dir.join("journal").join("stray.txt"), b"x").unwrap();
    assert!(Journal::open(DirStorage::open(&dir).unwrap(), true).is_err());
    fs::remove_dir_all(&dir).unwrap();
}

/// One owner per work dir: a second lock (another open file, as another process would
/// have) is refused naming the dir and the pid; `dump` reads without it; dropping the
/// journal releases it.
#[test]
fn a_work_dir_has_one_owner() {
    let dir = std::env::temp_dir().join(format!("shardwise-lock-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let (mut j, _) = Journal::open(DirStorage::exclusive(&dir).unwrap(), true).unwrap();
    j.append(&[rec(1)]).unwrap();
    j.commit().unwrap();
    let pid = std::process::id().to_string();
    assert_eq!(fs::read_to_string(dir.join(LOCK_FILE)).unwrap().trim(), pid);
    let err = DirStorage::exclusive(&dir).unwrap_err().to_string();
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    // The lock file is not a segment: dump and replay never see it.
    let mut out = Vec::new();
    assert_eq!(dump(&dir, &mut out).unwrap(), 1);
    assert!(DirStorage::exclusive(&dir).is_err(), "dump left the lock alone");
    drop(j);
    let (_, r) = Journal::open(DirStorage::exclusive(&dir).unwrap(), true).unwrap();
    assert_eq!(r.updates, vec![rec(1)]);
    fs::remove_dir_all(&dir).unwrap();
}
