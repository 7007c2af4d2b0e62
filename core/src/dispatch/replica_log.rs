//! A replicated dispatcher's journal as it lies in etcd, and the fold of it that every replica
//! keeps: the key layout, the entry format and the fold, as values (the gateway's replicas
//! read and write etcd, and hand what they read in here).
//!
//! Keys, under the prefix `P` (`--etcd-prefix`):
//!
//! | key                      | value                                                           |
//! |--------------------------|-----------------------------------------------------------------|
//! | `P/leader`               | the leader's [`LeaderValue`] (JSON), put with its lease; its create revision is the term |
//! | `P/log/<index>`          | a journal entry ([`encode_entry`]); `<index>` is 20 decimal digits, from 1, consecutive |
//! | `P/snapshot`             | the latest snapshot's [`Manifest`] (JSON)                        |
//! | `P/snap/<id>/<chunk>`    | its bytes, cut in chunks; `<id>` 20 digits, `<chunk>` 6 digits   |
//!
//! A group commit is one entry, written by one etcd transaction that holds only if `P/leader`
//! still has the writer's create revision (the fence). An entry's payload is a piece of a
//! *batch*: a work-dir journal segment (its header, then framed records, each with its CRC). A
//! batch bigger than [`ENTRY_BYTES`] spans consecutive entries, each but the last flagged
//! `more`; its records apply only once its last entry is there. A leader that died between
//! the entries of one batch leaves a torn batch (never acknowledged): the next leader deletes
//! its entries before it writes ([`Fold::torn`]).
//!
//! A snapshot (compaction) covers the log up to its manifest's `index`: the entries up to it
//! are deleted in the same transaction that puts the manifest.
//!
//! Keys are parsed strictly: another dispatcher whose prefix starts with this one's (e.g.
//! `P/log`) has keys that never parse as this one's.

use crate::dispatch::framing::Tail;
use crate::dispatch::journal::decode_updates;
use crate::dispatch::{State, Update, apply};

/// The most payload bytes in one entry or snapshot chunk: one transaction stays well under
/// etcd's default request limit (1.5 MiB, `--max-request-bytes`).
pub const ENTRY_BYTES: usize = 1 << 20;

/// Magic of an entry value.
const ENTRY_MAGIC: &[u8; 4] = b"SWE1";
/// An entry's flag: the batch continues in the next entry.
const MORE: u8 = 1;
/// Longest writer id kept in an entry.
const MAX_WRITER: usize = 1024;

/// Why the journal in etcd cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// An entry's value is not one this build writes.
    #[error("journal entry {index} in etcd is damaged: {reason}")]
    BadEntry {
        /// The entry's index.
        index: u64,
        /// What is wrong.
        reason: String,
    },
    /// Entries are missing between the ones read.
    #[error("journal entry {expected} in etcd is missing (found {found} next)")]
    Gap {
        /// The index expected next.
        expected: u64,
        /// The index found.
        found: u64,
    },
    /// A batch's records do not decode.
    #[error("the journal batch ending at entry {index} in etcd does not decode: {reason}")]
    BadBatch {
        /// The batch's last entry.
        index: u64,
        /// What the decoder said.
        reason: String,
    },
    /// The snapshot does not match its manifest or does not decode.
    #[error("the snapshot {id} in etcd is damaged: {reason}")]
    BadSnapshot {
        /// The snapshot's id.
        id: u64,
        /// What is wrong.
        reason: String,
    },
}

/// The value of `P/leader`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderValue {
    /// Where the leader serves (its `--advertise-url`).
    pub url: String,
    /// The leader's replica id (unique per process).
    pub id: String,
}

/// The value of `P/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The snapshot's id (its chunks are under `P/snap/<id>/`).
    pub id: u64,
    /// How many chunks.
    pub chunks: u64,
    /// Their bytes, summed.
    pub bytes: u64,
    /// The last log entry the snapshot covers.
    pub index: u64,
}

/// The keys of one journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    prefix: String,
}

/// What a key of the journal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `P/leader`.
    Leader,
    /// `P/log/<index>`.
    Log(u64),
    /// `P/snapshot`.
    Manifest,
    /// `P/snap/<id>/<chunk>`.
    Chunk(u64, u64),
}

impl Layout {
    /// The journal under `prefix` (checked by the caller: see `check_prefix`).
    pub fn new(prefix: &str) -> Layout {
        Layout { prefix: prefix.trim_end_matches('/').to_owned() }
    }
    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// Every key of this journal is in `[all_start, all_end)`.
    pub fn all_start(&self) -> Vec<u8> {
        format!("{}/", self.prefix).into_bytes()
    }
    /// See [`Layout::all_start`].
    pub fn all_end(&self) -> Vec<u8> {
        format!("{}0", self.prefix).into_bytes()
    }
    /// `P/leader`.
    pub fn leader(&self) -> Vec<u8> {
        format!("{}/leader", self.prefix).into_bytes()
    }
    /// `P/log/<index>`.
    pub fn log(&self, index: u64) -> Vec<u8> {
        format!("{}/log/{index:020}", self.prefix).into_bytes()
    }
    /// The end of the log's range (exclusive).
    pub fn log_end(&self) -> Vec<u8> {
        format!("{}/log0", self.prefix).into_bytes()
    }
    /// `P/snapshot`.
    pub fn manifest(&self) -> Vec<u8> {
        format!("{}/snapshot", self.prefix).into_bytes()
    }
    /// `P/snap/<id>/<chunk>`.
    pub fn chunk(&self, id: u64, chunk: u64) -> Vec<u8> {
        format!("{}/snap/{id:020}/{chunk:06}", self.prefix).into_bytes()
    }
    /// The range of snapshot `id`'s chunks: `[start, end)`.
    pub fn chunks(&self, id: u64) -> (Vec<u8>, Vec<u8>) {
        (
            format!("{}/snap/{id:020}/", self.prefix).into_bytes(),
            format!("{}/snap/{id:020}0", self.prefix).into_bytes(),
        )
    }

    /// What `key` is; `None` for keys that are not this journal's.
    pub fn parse(&self, key: &[u8]) -> Option<Key> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(self.prefix.as_str())?.strip_prefix('/')?;
        let digits = |s: &str, n: usize| {
            (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u64>().ok())?
        };
        match rest {
            "leader" => Some(Key::Leader),
            "snapshot" => Some(Key::Manifest),
            _ => {
                if let Some(i) = rest.strip_prefix("log/") {
                    return digits(i, 20).map(Key::Log);
                }
                let (id, chunk) = rest.strip_prefix("snap/")?.split_once('/')?;
                Some(Key::Chunk(digits(id, 20)?, digits(chunk, 6)?))
            }
        }
    }
}

/// An entry's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHeader {
    /// The term of the leader that wrote it.
    pub term: u64,
    /// Whether its batch continues in the next entry.
    pub more: bool,
    /// The writer's replica id.
    pub writer: String,
}

/// An entry's value: `SWE1`, flags (1 byte), term (u64 BE), writer id length (u16 BE), writer
/// id, payload.
pub fn encode_entry(header: &EntryHeader, payload: &[u8]) -> Vec<u8> {
    let writer = &header.writer.as_bytes()[..header.writer.len().min(MAX_WRITER)];
    let mut out = Vec::with_capacity(15 + writer.len() + payload.len());
    out.extend_from_slice(ENTRY_MAGIC);
    out.push(if header.more { MORE } else { 0 });
    out.extend_from_slice(&header.term.to_be_bytes());
    out.extend_from_slice(&u16::try_from(writer.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(writer);
    out.extend_from_slice(payload);
    out
}

/// Reads an entry's value (see [`encode_entry`]).
pub fn decode_entry(index: u64, value: &[u8]) -> Result<(EntryHeader, &[u8]), LogError> {
    let bad = |reason: &str| LogError::BadEntry { index, reason: reason.to_owned() };
    let rest = value.strip_prefix(ENTRY_MAGIC.as_slice()).ok_or_else(|| bad("no entry magic"))?;
    let (&flags, rest) = rest.split_first().ok_or_else(|| bad("cut short"))?;
    if flags & !MORE != 0 {
        return Err(bad("unknown flags"));
    }
    let (term, rest) = rest.split_first_chunk::<8>().ok_or_else(|| bad("cut short"))?;
    let (len, rest) = rest.split_first_chunk::<2>().ok_or_else(|| bad("cut short"))?;
    let len = usize::from(u16::from_be_bytes(*len));
    if rest.len() < len {
        return Err(bad("cut short"));
    }
    let (writer, payload) = rest.split_at(len);
    let writer = std::str::from_utf8(writer).map_err(|_| bad("writer id is not UTF-8"))?;
    let header = EntryHeader {
        term: u64::from_be_bytes(*term),
        more: flags & MORE != 0,
        writer: writer.to_owned(),
    };
    Ok((header, payload))
}

/// Decodes one whole batch (a segment: header and records).
pub fn decode_batch(index: u64, bytes: &[u8]) -> Result<Vec<Update>, LogError> {
    let bad = |reason: String| LogError::BadBatch { index, reason };
    let replayed = decode_updates(bytes).map_err(|e| bad(e.to_string()))?;
    match replayed.tail {
        Tail::Clean => Ok(replayed.updates),
        Tail::Torn { offset, reason, .. } => {
            Err(bad(format!("torn at byte offset {offset}: {reason}")))
        }
    }
}

/// The state a replica folds from the journal, and where it is in the log.
#[derive(Debug, Clone)]
pub struct Fold {
    /// The state up to the last complete batch.
    pub state: State,
    /// The index of the next entry to apply.
    pub next: u64,
    /// The payload of an incomplete batch, and the index of its first entry.
    pending: Option<(u64, Vec<u8>)>,
    /// The etcd revision read up to.
    pub revision: i64,
    /// Records applied.
    pub records: u64,
    /// Bytes of the entries applied since the snapshot (when to compact next).
    pub bytes: u64,
    /// The current snapshot's id (its chunks are deleted when the next one is written).
    pub snapshot: Option<u64>,
}

impl Fold {
    /// An empty journal's fold (entries start at 1).
    pub fn new(worker_addresses: Vec<String>) -> Fold {
        Fold {
            state: State::new(worker_addresses),
            next: 1,
            pending: None,
            revision: 0,
            records: 0,
            bytes: 0,
            snapshot: None,
        }
    }

    /// Starts from a snapshot's bytes (a segment holding one snapshot record) covering the log
    /// up to `manifest.index`.
    pub fn from_snapshot(
        worker_addresses: Vec<String>,
        manifest: &Manifest,
        bytes: &[u8],
    ) -> Result<Fold, LogError> {
        let bad = |reason: String| LogError::BadSnapshot { id: manifest.id, reason };
        if bytes.len() as u64 != manifest.bytes {
            return Err(bad(format!(
                "{} bytes, its manifest says {}",
                bytes.len(),
                manifest.bytes
            )));
        }
        let updates = decode_batch(manifest.index, bytes).map_err(|e| bad(e.to_string()))?;
        let mut fold = Fold::new(worker_addresses);
        for u in &updates {
            apply(&mut fold.state, u);
        }
        fold.next = manifest.index.saturating_add(1);
        fold.snapshot = Some(manifest.id);
        Ok(fold)
    }

    /// Applies entry `index` (its value as read from etcd). Entries before [`Fold::next`] were
    /// applied already and are skipped; a later one is a [`LogError::Gap`].
    pub fn apply_entry(&mut self, index: u64, value: &[u8]) -> Result<(), LogError> {
        if index < self.next {
            return Ok(());
        }
        if index > self.next {
            return Err(LogError::Gap { expected: self.next, found: index });
        }
        let (header, payload) = decode_entry(index, value)?;
        let (first, mut bytes) = self.pending.take().unwrap_or((index, Vec::new()));
        bytes.extend_from_slice(payload);
        self.next = index + 1;
        self.bytes += value.len() as u64;
        if header.more {
            self.pending = Some((first, bytes));
            return Ok(());
        }
        for u in decode_batch(index, &bytes)? {
            apply(&mut self.state, &u);
            self.records += 1;
        }
        Ok(())
    }

    /// An entry was deleted: a new leader removing a torn batch rewinds the fold to the
    /// batch's first entry (its records were never applied). Deletions of applied entries
    /// (compaction) change nothing.
    pub fn delete_entry(&mut self, index: u64) {
        if let Some((first, _)) = &self.pending
            && index >= *first
        {
            self.next = *first;
            self.pending = None;
        }
    }

    /// The entries of a torn batch, `[first, next)`, if the log ends in one.
    pub fn torn(&self) -> Option<(u64, u64)> {
        self.pending.as_ref().map(|(first, _)| (*first, self.next))
    }

    /// Forgets a torn batch whose entries were deleted: the log continues at its first entry.
    pub fn drop_torn(&mut self) {
        if let Some((first, _)) = self.pending.take() {
            self.next = first;
        }
    }
}

/// Cuts a batch into entry payloads of at most [`ENTRY_BYTES`].
pub fn entries(batch: &[u8]) -> impl Iterator<Item = (&[u8], bool)> {
    let n = batch.len().div_ceil(ENTRY_BYTES).max(1);
    (0..n).map(move |i| {
        let end = ((i + 1) * ENTRY_BYTES).min(batch.len());
        (&batch[i * ENTRY_BYTES..end], i + 1 < n)
    })
}

#[cfg(test)]
mod tests {
    use crate::dispatch::framing::segment_header;
    use crate::dispatch::journal::encode_update;

    use super::*;

    fn batch(updates: &[Update]) -> Vec<u8> {
        let mut out = segment_header().to_vec();
        for u in updates {
            encode_update(u, &mut out).unwrap();
        }
        out
    }

    fn started(n: usize) -> Update {
        Update::Started { incarnation: format!("inc-{n}-{}", "x".repeat(n)) }
    }

    #[test]
    fn keys_parse_strictly() {
        let l = Layout::new("/shardwise/a/");
        assert_eq!(l.prefix(), "/shardwise/a");
        assert_eq!(l.parse(&l.leader()), Some(Key::Leader));
        assert_eq!(l.parse(&l.log(7)), Some(Key::Log(7)));
        assert_eq!(l.parse(&l.manifest()), Some(Key::Manifest));
        assert_eq!(l.parse(&l.chunk(3, 4)), Some(Key::Chunk(3, 4)));
        // A nested prefix's keys are not this journal's.
        let nested = Layout::new("/shardwise/a/log");
        for key in [nested.leader(), nested.log(1), nested.chunk(1, 1), nested.manifest()] {
            assert_eq!(l.parse(&key), None, "{}", String::from_utf8_lossy(&key));
        }
        for bad in [
            "/shardwise/a/log/1",
            "/shardwise/a/log/0000000000000000000x",
            "/shardwise/ab/leader",
            "/shardwise/a/leaderx",
        ] {
            assert_eq!(l.parse(bad.as_bytes()), None, "{bad}");
        }
        // The journal's whole range covers its keys and not its neighbours'.
        for key in [l.leader(), l.log(u64::MAX), l.chunk(1, 1), l.manifest()] {
            assert!(key >= l.all_start() && key < l.all_end());
            assert!(key < l.log_end() || l.parse(&key) != Some(Key::Log(0)));
        }
        assert!(b"/shardwise/ab/leader".to_vec() >= l.all_end());
    }

    #[test]
    fn entries_round_trip_and_damage_is_named() {
        let h = EntryHeader { term: 42, more: true, writer: "r-1".into() };
        let v = encode_entry(&h, b"payload");
        assert_eq!(decode_entry(3, &v).unwrap(), (h, b"payload".as_slice()));
        for cut in 0..15 {
            let e = decode_entry(3, &v[..cut]).unwrap_err();
            assert!(matches!(e, LogError::BadEntry { index: 3, .. }), "{e}");
        }
        let mut flags = v.clone();
        flags[4] = 0x80;
        assert!(decode_entry(1, &flags).is_err());
    }

    #[test]
    fn a_batch_spanning_entries_applies_with_its_last_and_a_torn_one_rewinds() {
        // A batch over three entries (a record bigger than two entries).
        let big = started(2 * ENTRY_BYTES + 10);
        let bytes = batch(std::slice::from_ref(&big));
        let parts: Vec<_> = entries(&bytes).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.iter().filter(|(_, more)| *more).count(), 2);
        let entry = |(p, more): (&[u8], bool)| {
            encode_entry(&EntryHeader { term: 1, more, writer: "w".into() }, p)
        };
        let mut fold = Fold::new(vec![]);
        fold.apply_entry(1, &entry(parts[0])).unwrap();
        fold.apply_entry(2, &entry(parts[1])).unwrap();
        assert_eq!(fold.records, 0, "nothing applies before the batch's last entry");
        assert_eq!(fold.torn(), Some((1, 3)));
        // A new leader deletes the torn batch: the fold goes back to its first entry.
        fold.delete_entry(2);
        assert_eq!((fold.next, fold.torn()), (1, None));
        // The whole batch, written again, applies.
        for (i, p) in parts.iter().enumerate() {
            fold.apply_entry(i as u64 + 1, &entry(*p)).unwrap();
        }
        assert_eq!(fold.records, 1);
        assert_eq!(
            fold.state.incarnation(),
            format!("inc-{0}-{1}", 2 * ENTRY_BYTES + 10, "x".repeat(2 * ENTRY_BYTES + 10))
        );
        // Applied entries are skipped; a gap is an error.
        fold.apply_entry(2, b"ignored").unwrap();
        assert_eq!(fold.apply_entry(9, b"x"), Err(LogError::Gap { expected: 4, found: 9 }));
        // A small batch is one entry.
        assert_eq!(entries(&batch(&[started(1)])).count(), 1);
    }

    #[test]
    fn a_snapshot_must_match_its_manifest() {
        let bytes = batch(&[started(3)]);
        let m = Manifest { id: 1, chunks: 1, bytes: bytes.len() as u64, index: 5 };
        let fold = Fold::from_snapshot(vec![], &m, &bytes).unwrap();
        assert_eq!(fold.next, 6);
        let short = Manifest { bytes: 3, ..m.clone() };
        assert!(matches!(
            Fold::from_snapshot(vec![], &short, &bytes),
            Err(LogError::BadSnapshot { id: 1, .. })
        ));
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(Fold::from_snapshot(vec![], &m, &damaged).is_err());
    }
}
