//! The leader's journal writer: group commits as fenced etcd transactions (see the core's
//! [`replica_log`](shardwise_core::dispatch::replica_log)).
//!
//! It runs on the driver's syncer thread (and a compaction's snapshot on a thread of its own),
//! which block on the etcd calls. Every write is one transaction that holds only while
//! `P/leader` has this term's create revision: a deposed leader's write fails and ends its
//! term. A write whose outcome is unknown (etcd did not answer) is a failure too: the term
//! ends without acknowledging it, and the replica reads the journal back from etcd before it
//! serves again, so whatever etcd did commit is replayed, and nothing is acknowledged that it
//! did not.

use std::io;

use shardwise_core::dispatch::Update;
use shardwise_core::dispatch::framing::segment_header;
use shardwise_core::dispatch::journal::encode_update;
use shardwise_core::dispatch::replica_log::{
    ENTRY_BYTES, EntryHeader, Layout, Manifest, encode_entry, entries,
};

use crate::dispatcher::core::{JournalWriter, SnapshotWriter, StagedSnapshot};
use crate::etcd;

/// What a term writes with.
#[derive(Clone)]
pub(super) struct Fence {
    pub client: etcd::Client,
    pub layout: Layout,
    /// The create revision of this term's `P/leader`.
    pub term: i64,
    /// This replica's id (written into every entry).
    pub writer: String,
    pub runtime: tokio::runtime::Handle,
    /// How long a write may keep being retried while etcd does not answer (the lease: by then
    /// the term is over anyway).
    pub patience: std::time::Duration,
    /// False once the term ended: a write in progress stops retrying.
    pub live: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").field("term", &self.term).field("writer", &self.writer).finish()
    }
}

impl Fence {
    /// Runs `ops` in one transaction that holds only while this term leads; an error when etcd
    /// refused, the term is over, or etcd did not answer for longer than the lease (the
    /// outcome is then unknown). While etcd does not answer (an etcd election, a member
    /// down), the same transaction is sent again: it is idempotent (the same values at the same
    /// keys, under the same fence), so a first attempt that did commit changes nothing.
    pub(super) fn write(&self, ops: Vec<etcd::RequestOp>) -> io::Result<i64> {
        let started = std::time::Instant::now();
        loop {
            match self.write_once(ops.clone()) {
                Err(Retry::Later(e))
                    if started.elapsed() < self.patience
                        && self.live.load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    tracing::debug!(error = %e, "journal write: etcd did not answer; again");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(Retry::Later(e) | Retry::Never(e)) => return Err(e),
                Ok(revision) => return Ok(revision),
            }
        }
    }

    /// One attempt; the transaction's revision when it held.
    fn write_once(&self, ops: Vec<etcd::RequestOp>) -> Result<i64, Retry> {
        let txn = etcd::TxnRequest {
            compare: vec![etcd::Compare::create_revision(
                self.layout.leader(),
                etcd::CompareResult::Equal,
                self.term,
            )],
            success: ops,
            failure: Vec::new(),
        };
        let client = self.client.clone();
        let reply = self.runtime.block_on(async move { client.txn(txn).await });
        match reply {
            Ok(r) if r.succeeded => Ok(r.revision()),
            Ok(_) => Err(Retry::Never(io::Error::other(format!(
                "this dispatcher no longer leads (term {} ended: {} has another holder or none)",
                self.term,
                String::from_utf8_lossy(&self.layout.leader())
            )))),
            Err(e) if e.is_space_exceeded() => {
                tracing::error!(error = %e, "{}", etcd::SPACE_EXCEEDED_REMEDY);
                Err(Retry::Never(io::Error::other(format!(
                    "etcd: {e}; {}",
                    etcd::SPACE_EXCEEDED_REMEDY
                ))))
            }
            Err(e @ etcd::Error::Unavailable { .. }) => {
                Err(Retry::Later(io::Error::other(format!("etcd: {e}"))))
            }
            Err(e) => Err(Retry::Never(io::Error::other(format!("etcd: {e}")))),
        }
    }

    fn entry(&self, more: bool, payload: &[u8]) -> Vec<u8> {
        let term = u64::try_from(self.term).unwrap_or(0);
        encode_entry(&EntryHeader { term, more, writer: self.writer.clone() }, payload)
    }
}

/// A failed write: worth sending again, or not.
enum Retry {
    Later(io::Error),
    Never(io::Error),
}

/// The journal in etcd, as the leader of one term writes it.
#[derive(Debug)]
pub(super) struct EtcdJournal {
    fence: Fence,
    /// The batch being built: a segment header and framed records.
    batch: Vec<u8>,
    /// The index of the next entry.
    next: u64,
    /// Bytes of entries since the snapshot.
    bytes: u64,
    /// Bytes of entries written since the compaction in progress began.
    bytes_since_begin: u64,
    /// The current snapshot.
    snapshot: Option<u64>,
    /// The compaction in progress: its snapshot's id and the last entry it covers.
    compacting: Option<(u64, u64)>,
    /// The revision of the last compaction's transaction: etcd's history before it is
    /// compacted at the next one.
    compacted_at: Option<i64>,
}

impl EtcdJournal {
    pub(super) fn new(fence: Fence, next: u64, bytes: u64, snapshot: Option<u64>) -> EtcdJournal {
        EtcdJournal {
            fence,
            batch: Vec::new(),
            next,
            bytes,
            bytes_since_begin: 0,
            snapshot,
            compacting: None,
            compacted_at: None,
        }
    }
}

impl JournalWriter for EtcdJournal {
    fn append(&mut self, updates: &[Update]) -> io::Result<()> {
        if self.batch.is_empty() {
            self.batch.extend_from_slice(&segment_header());
        }
        for u in updates {
            encode_update(u, &mut self.batch).map_err(io::Error::other)?;
        }
        Ok(())
    }

    fn commit(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        for (payload, more) in entries(&batch) {
            let value = self.fence.entry(more, payload);
            let len = value.len() as u64;
            self.fence.write(vec![etcd::RequestOp::put(
                self.fence.layout.log(self.next),
                value,
                0,
            )])?;
            self.next += 1;
            self.bytes += len;
            self.bytes_since_begin += len;
        }
        Ok(())
    }

    fn segment_bytes(&self) -> u64 {
        self.bytes
    }

    fn begin_compaction(&mut self) -> io::Result<Box<dyn SnapshotWriter>> {
        let id = self.snapshot.map_or(1, |s| s + 1);
        let covers = self.next - 1;
        self.compacting = Some((id, covers));
        self.bytes_since_begin = 0;
        Ok(Box::new(EtcdSnapshot { fence: self.fence.clone(), id, covers }))
    }

    fn finish_compaction(&mut self, staged: StagedSnapshot) -> io::Result<()> {
        let manifest = staged
            .downcast::<Manifest>()
            .map_err(|_| io::Error::other("a snapshot written for another journal (a bug)"))?;
        if self.compacting.take() != Some((manifest.id, manifest.index)) {
            return Err(io::Error::other("a snapshot of another compaction (a bug)"));
        }
        let layout = &self.fence.layout;
        let value = serde_json::to_vec(&*manifest).map_err(io::Error::other)?;
        let mut ops = vec![
            etcd::RequestOp::put(layout.manifest(), value, 0),
            // Every entry the snapshot covers (from the first: earlier ones are gone already).
            etcd::RequestOp::delete_range(layout.log(0), layout.log(manifest.index + 1)),
        ];
        if let Some(old) = self.snapshot {
            let (start, end) = layout.chunks(old);
            ops.push(etcd::RequestOp::delete_range(start, end));
        }
        let revision = self.fence.write(ops)?;
        self.snapshot = Some(manifest.id);
        self.bytes = self.bytes_since_begin;
        // etcd keeps every revision of the deleted entries until its history is compacted
        // (its database would fill its quota): compact it up to the previous compaction, so
        // that one compaction interval of history stays for watchers (a standby further
        // behind reads the journal again).
        if let Some(previous) = self.compacted_at.replace(revision) {
            let client = self.fence.client.clone();
            match self.fence.runtime.block_on(async move { client.compact(previous).await }) {
                Ok(_) => tracing::debug!(revision = previous, "etcd history compacted"),
                // (e.g. etcd compacted past it already: its own --auto-compaction-retention)
                Err(e) => tracing::debug!(error = %e, "etcd history not compacted"),
            }
        }
        Ok(())
    }
}

/// Writes a snapshot's chunks (each a fenced transaction), then hands back its manifest.
struct EtcdSnapshot {
    fence: Fence,
    id: u64,
    covers: u64,
}

impl SnapshotWriter for EtcdSnapshot {
    fn write(self: Box<Self>, snapshot: &Update) -> io::Result<StagedSnapshot> {
        let mut bytes = segment_header().to_vec();
        encode_update(snapshot, &mut bytes).map_err(io::Error::other)?;
        let layout = &self.fence.layout;
        // Chunks of a former attempt with this id (a leader that died mid-compaction) are
        // overwritten or, past the new last one, deleted with the manifest's predecessor.
        let (start, end) = layout.chunks(self.id);
        self.fence.write(vec![etcd::RequestOp::delete_range(start, end)])?;
        let mut chunks = 0;
        for (i, chunk) in bytes.chunks(ENTRY_BYTES).enumerate() {
            let key = layout.chunk(self.id, i as u64);
            self.fence.write(vec![etcd::RequestOp::put(key, chunk.to_vec(), 0)])?;
            chunks += 1;
        }
        let manifest =
            Manifest { id: self.id, chunks, bytes: bytes.len() as u64, index: self.covers };
        Ok(Box::new(manifest))
    }
}
