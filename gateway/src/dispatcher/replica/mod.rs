//! A replicated dispatcher: the journal in etcd, one leader elected with an etcd lease, hot
//! standbys (`shardwise dispatcher --etcd`).
//!
//! Every replica runs [`supervise`]: it reads the journal from etcd into a [`Fold`] (the
//! state, kept in memory), then either leads or follows.
//! - **Campaign.** A replica with a lease of its own (`--leader-lease`) creates `P/leader` if
//!   no one holds it (one transaction: only one replica can win). The key's create revision
//!   is the new term.
//! - **Lead.** The winner reads the journal to the last committed revision, deletes a torn
//!   batch a former leader left, and begins a term of the [`DriverHandle`] with an
//!   [`EtcdJournal`](journal::EtcdJournal): every group commit is a transaction fenced on its
//!   term, so a deposed leader (e.g. a process paused longer than its lease) never writes
//!   again. A write etcd does not answer is sent again (it is idempotent) for up to the lease.
//!   It keeps its lease alive, and counts it on its own monotonic clock ([`LeaseClock`]): once
//!   that runs out it answers nothing, reads included. The term ends when a write is refused
//!   or unanswered for a lease, the fence fails, or the lease cannot be renewed in time. Then
//!   it stops acknowledging (UNAVAILABLE), revokes its lease and starts over as a follower,
//!   reading the journal back from etcd. After each journal compaction it also compacts
//!   etcd's history, up to the previous one.
//! - **Follow.** A follower watches the journal's keys and applies every entry to its fold
//!   (a watch quiet for half a lease is opened again: its member may have stopped answering);
//!   when `P/leader` is deleted (the leader's lease expired or was revoked) it campaigns.
//!
//! [`ReplicaStatus`] says who leads and at which term (`GET /v1/leader`); followers redirect
//! REST calls to the leader, and only the leader is ready (`/readyz`).

mod journal;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use shardwise_core::dispatch::replica_log::{
    self, Fold, Key, Layout, LeaderValue, LogError, Manifest,
};
use shardwise_core::dispatch::{Dispatcher, DispatcherConfig};

use self::journal::{EtcdJournal, Fence};
use super::core::{DriverHandle, LeaseClock, now};
use crate::etcd;

/// `--etcd-prefix`'s default.
pub const DEFAULT_PREFIX: &str = "/shardwise/default";

/// Checks an `--etcd-prefix`: `/` then up to 255 printable ASCII characters, no trailing `/`.
pub fn check_prefix(prefix: &str) -> Result<String, String> {
    let ok = prefix.starts_with('/')
        && prefix.len() > 1
        && prefix.len() <= 256
        && !prefix.ends_with('/')
        && prefix.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(prefix.to_owned())
    } else {
        Err(format!(
            "{prefix:?} is not a key prefix: it starts with '/', does not end with '/', and has \
             up to 256 printable ASCII characters (e.g. {DEFAULT_PREFIX})"
        ))
    }
}

/// How a replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaOptions {
    /// The journal's key prefix.
    pub prefix: String,
    /// The leader's lease.
    pub lease: Duration,
    /// Where this replica serves (redirects name the leader's).
    pub advertise_url: String,
    /// The state machine's configuration.
    pub config: DispatcherConfig,
    /// The incarnation id a fresh journal gets.
    pub incarnation: String,
}

/// The role, as `GET /v1/leader` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Serves the API.
    Leader,
    /// Follows the leader (redirects to it).
    Follower,
    /// Neither: reading the journal, campaigning, or cut off from etcd.
    Candidate,
}

/// Who leads.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LeaderRef {
    /// The leader's `--advertise-url`.
    pub url: String,
    /// Its term: the etcd revision at which it became leader (grows with every election).
    pub term: u64,
}

/// `GET /v1/leader`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LeaderReport {
    /// `none` (a single dispatcher) or `etcd` (replicas sharing a journal in etcd).
    pub replication: &'static str,
    /// This replica's role.
    pub role: Role,
    /// This replica's URL.
    pub this: String,
    /// The leader, if known.
    pub leader: Option<LeaderRef>,
}

/// Who leads, as this replica knows it (shared with the HTTP front).
#[derive(Debug)]
pub struct ReplicaStatus {
    replicated: bool,
    this: String,
    now: RwLock<(Role, Option<LeaderRef>)>,
    /// Told why calls are refused while this replica does not lead.
    driver: std::sync::OnceLock<DriverHandle>,
    /// Where the leader's key is read while this replica steps down (its lease lapsed).
    lookup: std::sync::OnceLock<(etcd::Client, Layout, String)>,
    /// The replica that leads after this one, once known while it steps down.
    successor: RwLock<Option<LeaderRef>>,
}

impl ReplicaStatus {
    /// A single dispatcher: it always leads, at term 0.
    pub fn single(this: String) -> ReplicaStatus {
        let leader = LeaderRef { url: this.clone(), term: 0 };
        ReplicaStatus {
            replicated: false,
            this,
            now: RwLock::new((Role::Leader, Some(leader))),
            driver: std::sync::OnceLock::new(),
            lookup: std::sync::OnceLock::new(),
            successor: RwLock::new(None),
        }
    }

    /// A replica, not leading yet.
    pub fn replica(this: String) -> ReplicaStatus {
        ReplicaStatus {
            replicated: true,
            this,
            now: RwLock::new((Role::Candidate, None)),
            driver: std::sync::OnceLock::new(),
            lookup: std::sync::OnceLock::new(),
            successor: RwLock::new(None),
        }
    }

    fn set(&self, role: Role, leader: Option<LeaderRef>) {
        if role == Role::Leader {
            *self.successor.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        let mut now = self.now.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if now.0 != role || now.1 != leader {
            tracing::info!(?role, leader = ?leader, "replica role");
            if let Some(driver) = self.driver.get() {
                driver.set_idle_reason(match (&role, &leader) {
                    (Role::Leader, _) => "This dispatcher replica is taking over as leader; retry \
                                          shortly."
                        .to_owned(),
                    (_, Some(l)) => format!(
                        "This dispatcher replica does not lead; the leader is {} (term {}).",
                        l.url, l.term
                    ),
                    (_, None) => "No dispatcher replica leads now (an election is under way, \
                                  or etcd is unreachable); retry shortly."
                        .to_owned(),
                });
            }
        }
        *now = (role, leader);
    }

    /// The report of `GET /v1/leader`.
    pub fn report(&self) -> LeaderReport {
        let now = self.now.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        LeaderReport {
            replication: if self.replicated { "etcd" } else { "none" },
            role: now.0,
            this: self.this.clone(),
            leader: now.1,
        }
    }

    /// Where a REST call to this replica belongs: `None` to serve it here (the leader, or a
    /// single dispatcher), else the leader's URL if known (`Some(None)`: no leader known now).
    /// A leader whose lease lapsed (e.g. a process paused past it) steps down: it reads who
    /// leads now from etcd and redirects there, as a follower does.
    pub async fn redirect(&self) -> Option<Option<String>> {
        if !self.replicated {
            return None;
        }
        let now = self.now.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match now {
            (Role::Leader, _) if self.driver.get().is_some_and(DriverHandle::lease_lapsed) => {
                Some(self.successor().await.map(|l| l.url))
            }
            (Role::Leader, _) => None,
            (_, leader) => Some(leader.map(|l| l.url).filter(|u| *u != self.this)),
        }
    }

    /// Why no replica is known to lead, for a 503 and `/readyz` (e.g. an election, or etcd at
    /// its space quota and what to do about it).
    pub fn no_leader_reason(&self) -> String {
        match self.driver.get() {
            Some(driver) if driver.lease_lapsed() => "This dispatcher replica could not renew its \
                leadership in time and no other replica is known to lead yet; retry shortly."
                .to_owned(),
            Some(driver) if !driver.is_ready() => driver.unready_reason(),
            _ => "No dispatcher replica leads now (an election is under way, or etcd is \
                  unreachable); retry shortly."
                .to_owned(),
        }
    }

    /// The replica that leads in place of this one, as etcd says now (remembered once known;
    /// `None` if no other replica leads or etcd does not answer within a second).
    async fn successor(&self) -> Option<LeaderRef> {
        if let Some(known) =
            self.successor.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
        {
            return Some(known);
        }
        let (client, layout, id) = self.lookup.get()?;
        let read = client.range(layout.leader(), Vec::new(), etcd::RangeOptions::default());
        let reply = tokio::time::timeout(Duration::from_secs(1), read).await.ok()?.ok()?;
        let kv = reply.kvs.first()?;
        let holder: LeaderValue = serde_json::from_slice(&kv.value).ok()?;
        if holder.id == *id || holder.url == self.this {
            return None;
        }
        let leader =
            LeaderRef { url: holder.url, term: u64::try_from(kv.create_revision).unwrap_or(0) };
        *self.successor.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(leader.clone());
        Some(leader)
    }

    /// After a term: a candidate again, still pointing at its successor if it learnt it.
    async fn stepped_down(&self) {
        let successor = self.successor().await;
        self.set(if successor.is_some() { Role::Follower } else { Role::Candidate }, successor);
    }
}

/// Why a replica starts over (it then reads the journal from etcd again).
#[derive(Debug, thiserror::Error)]
enum ReplicaError {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd::Error),
    #[error("{0}")]
    Log(#[from] LogError),
    #[error("the dispatcher refused the journal's state: {0}")]
    Dispatch(#[from] shardwise_core::DispatchError),
    #[error("{0}")]
    Other(String),
}

/// A running replica (see the module docs).
#[derive(Debug, Clone)]
pub struct Replica {
    stop: Arc<tokio::sync::watch::Sender<bool>>,
    done: Arc<tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Replica {
    /// Starts the replica's supervisor on this runtime.
    pub fn start(
        options: ReplicaOptions,
        client: etcd::Client,
        driver: DriverHandle,
        status: Arc<ReplicaStatus>,
    ) -> Replica {
        let stop = Arc::new(tokio::sync::watch::Sender::new(false));
        let _ = status.driver.set(driver.clone());
        let id = format!("{}-{}", options.advertise_url, crate::http::incarnation());
        let _ = status.lookup.set((client.clone(), Layout::new(&options.prefix), id.clone()));
        let ctx = Ctx {
            layout: Layout::new(&options.prefix),
            id,
            client,
            driver,
            status,
            options,
            stop: stop.clone(),
        };
        let task = tokio::spawn(supervise(Arc::new(ctx)));
        Replica { stop, done: Arc::new(tokio::sync::Mutex::new(Some(task))) }
    }

    /// Stops: a leader ends its term and revokes its lease (a standby takes over at once).
    pub async fn stop(&self) {
        self.stop.send_replace(true);
        if let Some(task) = self.done.lock().await.take() {
            let _ = task.await;
        }
    }
}

struct Ctx {
    options: ReplicaOptions,
    layout: Layout,
    /// This process's replica id.
    id: String,
    client: etcd::Client,
    driver: DriverHandle,
    status: Arc<ReplicaStatus>,
    stop: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Ctx {
    /// Resolves once the replica is asked to stop (at once if it was).
    async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// Runs the replica until stopped: read, follow or lead, and start over after every term or
/// etcd failure (with a growing pause while etcd fails).
async fn supervise(ctx: Arc<Ctx>) {
    let mut pause = Duration::from_millis(100);
    loop {
        // Reading and following hold nothing in etcd: a stop simply drops them. A term is
        // ended by `lead` itself (it revokes the lease: a standby takes over at once).
        let won = tokio::select! {
            biased;
            r = until_won(&ctx) => r,
            () = ctx.stopped() => return,
        };
        let outcome = match won {
            Ok(won) => {
                let outcome = lead(&ctx, won).await;
                // A term that ended because etcd is at its space quota says so until the next
                // campaign is refused the same way, not that an election is under way.
                let at_quota = ctx
                    .driver
                    .last_term_failure()
                    .is_some_and(|cause| cause.contains(etcd::SPACE_EXCEEDED_REMEDY));
                ctx.status.stepped_down().await;
                if at_quota {
                    ctx.driver.set_idle_reason(no_leader_at_quota());
                }
                outcome
            }
            Err(e) => {
                ctx.status.set(Role::Candidate, None);
                Err(e)
            }
        };
        match outcome {
            Ok(Stopped::Yes) => return,
            Ok(Stopped::No) => pause = Duration::from_millis(100),
            Err(ReplicaError::Etcd(e)) if e.is_space_exceeded() => {
                // No restart helps: etcd refuses writes (a campaign too) until disarmed.
                tracing::error!(error = %e, "replica starts over: {}", etcd::SPACE_EXCEEDED_REMEDY);
                ctx.driver.set_idle_reason(no_leader_at_quota());
                tokio::select! {
                    () = ctx.stopped() => return,
                    () = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::warn!(error = %e, "replica starts over");
                tokio::select! {
                    () = ctx.stopped() => return,
                    () = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Why no replica leads while etcd is at its space quota, and what to do.
fn no_leader_at_quota() -> String {
    format!("No dispatcher replica can lead now: {}.", etcd::SPACE_EXCEEDED_REMEDY)
}

enum Stopped {
    Yes,
    No,
}

/// A won campaign: the journal as read so far, the term and its lease.
struct Won {
    fold: Fold,
    term: i64,
    lease: i64,
    granted: Instant,
}

/// Reads the journal, follows until the leader is gone, campaigns; until this replica wins.
async fn until_won(ctx: &Ctx) -> Result<Won, ReplicaError> {
    let mut fold = load(ctx).await?;
    tracing::info!(
        records = fold.records,
        next = fold.next,
        revision = fold.revision,
        "journal read from etcd"
    );
    loop {
        match campaign(ctx).await? {
            Campaign::Won { term, lease, granted } => {
                return Ok(Won { fold, term, lease, granted });
            }
            Campaign::Lost => follow(ctx, &mut fold).await?,
        }
    }
}

/// Reads the snapshot and the log at one revision.
async fn load(ctx: &Ctx) -> Result<Fold, ReplicaError> {
    let workers = ctx.options.config.worker_addresses.clone();
    let (revision, snapshot) = read_snapshot(&ctx.client, &ctx.layout).await?;
    let mut fold = match snapshot {
        None => Fold::new(workers),
        Some((m, bytes)) => Fold::from_snapshot(workers, &m, &bytes)?,
    };
    fold.revision = revision;
    read_log(ctx, &mut fold, revision).await?;
    Ok(fold)
}

/// The latest snapshot's manifest and bytes (none before the first compaction), read at one
/// revision, which it returns too; its chunks are checked against the manifest.
async fn read_snapshot(
    client: &etcd::Client,
    l: &Layout,
) -> Result<(i64, Option<(Manifest, Vec<u8>)>), ReplicaError> {
    let manifest = client.range(l.manifest(), Vec::new(), etcd::RangeOptions::default()).await?;
    let revision = manifest.revision();
    let Some(kv) = manifest.kvs.first() else { return Ok((revision, None)) };
    let bad = |id: u64, reason: String| ReplicaError::Log(LogError::BadSnapshot { id, reason });
    let m: Manifest =
        serde_json::from_slice(&kv.value).map_err(|e| bad(0, format!("manifest: {e}")))?;
    let (start, end) = l.chunks(m.id);
    let chunks = client.range_all(start, end, revision).await?.kvs;
    if chunks.len() as u64 != m.chunks {
        let reason = format!("{} chunks, its manifest says {}", chunks.len(), m.chunks);
        return Err(bad(m.id, reason));
    }
    // (The manifest's size is checked against the chunks, not trusted for an allocation.)
    let mut bytes = Vec::with_capacity(usize::try_from(m.bytes).unwrap_or(0).min(64 << 20));
    for (i, kv) in chunks.iter().enumerate() {
        if l.parse(&kv.key) != Some(Key::Chunk(m.id, i as u64)) {
            return Err(bad(m.id, format!("chunk {i} is missing")));
        }
        bytes.extend_from_slice(&kv.value);
    }
    Ok((revision, Some((m, bytes))))
}

/// Applies the log entries after the fold's, as of `revision` (0: the latest).
async fn read_log(ctx: &Ctx, fold: &mut Fold, revision: i64) -> Result<(), ReplicaError> {
    let l = &ctx.layout;
    let read = ctx.client.range_all(l.log(fold.next), l.log_end(), revision).await?;
    for kv in &read.kvs {
        if let Some(Key::Log(i)) = l.parse(&kv.key) {
            fold.apply_entry(i, &kv.value)?;
        }
    }
    fold.revision = fold.revision.max(read.revision);
    Ok(())
}

enum Campaign {
    /// The term, its lease, and when the lease was asked for (it holds for its TTL from about
    /// then).
    Won {
        term: i64,
        lease: i64,
        granted: Instant,
    },
    Lost,
}

/// Tries to become the leader (only when no one is).
async fn campaign(ctx: &Ctx) -> Result<Campaign, ReplicaError> {
    let l = &ctx.layout;
    let current = ctx.client.range(l.leader(), Vec::new(), etcd::RangeOptions::default()).await?;
    if let Some(kv) = current.kvs.first() {
        let holder: Option<LeaderValue> = serde_json::from_slice(&kv.value).ok();
        if holder.as_ref().is_some_and(|h| h.id == ctx.id) {
            // Our own key from a term that ended (e.g. etcd lost its quorum under it): give it
            // up at once rather than wait for its lease.
            let txn = etcd::TxnRequest {
                compare: vec![etcd::Compare::create_revision(
                    l.leader(),
                    etcd::CompareResult::Equal,
                    kv.create_revision,
                )],
                success: vec![etcd::RequestOp::delete_range(l.leader(), Vec::new())],
                failure: Vec::new(),
            };
            ctx.client.txn(txn).await?;
            let _ = ctx.client.lease_revoke(kv.lease).await;
        } else {
            let leader = holder.map(|h| LeaderRef {
                url: h.url,
                term: u64::try_from(kv.create_revision).unwrap_or(0),
            });
            ctx.status.set(Role::Follower, leader);
            return Ok(Campaign::Lost);
        }
    }
    let ttl = i64::try_from(ctx.options.lease.as_secs().max(1)).unwrap_or(i64::MAX);
    let granted = Instant::now();
    let (lease, _) = ctx.client.lease_grant(ttl).await?;
    let value = serde_json::to_vec(&LeaderValue {
        url: ctx.options.advertise_url.clone(),
        id: ctx.id.clone(),
    })
    .map_err(|e| ReplicaError::Other(e.to_string()))?;
    let txn = etcd::TxnRequest {
        compare: vec![etcd::Compare::create_revision(l.leader(), etcd::CompareResult::Equal, 0)],
        success: vec![etcd::RequestOp::put(l.leader(), value, lease)],
        failure: Vec::new(),
    };
    let reply = ctx.client.txn(txn).await?;
    if reply.succeeded {
        let term = reply.revision();
        return Ok(Campaign::Won { term, lease, granted });
    }
    let _ = ctx.client.lease_revoke(lease).await;
    Ok(Campaign::Lost)
}

/// Follows: applies the journal's entries as they are written, until `P/leader` is gone.
async fn follow(ctx: &Ctx, fold: &mut Fold) -> Result<(), ReplicaError> {
    let l = &ctx.layout;
    loop {
        let mut watch = ctx.client.watch(l.all_start(), l.all_end(), fold.revision + 1).await?;
        loop {
            // A member that stopped answering (paused, cut off) leaves a watch silent rather
            // than broken: a watch quiet for half a lease is opened again (on another member
            // if this one does not answer), from the last revision applied.
            let Ok(next) = tokio::time::timeout(ctx.options.lease / 2, watch.next()).await else {
                tracing::debug!("watch quiet for half a lease; watching again");
                break;
            };
            let batch = match next {
                Ok(b) => b,
                Err(etcd::Error::Compacted { compact_revision }) => {
                    return Err(ReplicaError::Other(format!(
                        "the journal's history was compacted (at revision {compact_revision}) \
                         before this replica read it"
                    )));
                }
                // A broken stream: watch again from where it stopped.
                Err(e) => {
                    tracing::debug!(error = %e, "watch broken; watching again");
                    break;
                }
            };
            let mut leader_gone = false;
            for ev in &batch.events {
                let Some(kv) = &ev.kv else { continue };
                let put = ev.r#type == etcd::EventType::Put as i32;
                match l.parse(&kv.key) {
                    Some(Key::Log(i)) if put => fold.apply_entry(i, &kv.value)?,
                    Some(Key::Log(i)) => fold.delete_entry(i),
                    Some(Key::Manifest) if put => {
                        if let Ok(m) = serde_json::from_slice::<Manifest>(&kv.value) {
                            fold.snapshot = Some(m.id);
                            fold.bytes = 0;
                        }
                    }
                    Some(Key::Leader) if put => {
                        let leader =
                            serde_json::from_slice::<LeaderValue>(&kv.value).ok().map(|h| {
                                LeaderRef {
                                    url: h.url,
                                    term: u64::try_from(kv.create_revision).unwrap_or(0),
                                }
                            });
                        ctx.status.set(Role::Follower, leader);
                    }
                    Some(Key::Leader) => leader_gone = true,
                    _ => {}
                }
                fold.revision = fold.revision.max(kv.mod_revision);
            }
            fold.revision = fold.revision.max(batch.revision);
            if leader_gone {
                ctx.status.set(Role::Candidate, None);
                return Ok(());
            }
        }
    }
}

/// Leads one term (see the module docs).
async fn lead(ctx: &Ctx, won: Won) -> Result<Stopped, ReplicaError> {
    let Won { mut fold, term, lease, granted } = won;
    // Leadership is known to hold until the lease's TTL, less a margin, from its request;
    // every renewal extends it (see `keep_alive`).
    let clock = LeaseClock::until(granted + held(ctx.options.lease));
    let started = Instant::now();
    let live = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fence = Fence {
        client: ctx.client.clone(),
        layout: ctx.layout.clone(),
        term,
        writer: ctx.id.clone(),
        runtime: tokio::runtime::Handle::current(),
        patience: ctx.options.lease,
        live: live.clone(),
    };
    let resign = || async {
        live.store(false, std::sync::atomic::Ordering::SeqCst);
        ctx.driver.end_term();
        let _ = ctx.client.lease_revoke(lease).await;
    };
    // Everything committed before this term began.
    if let Err(e) = read_log(ctx, &mut fold, 0).await {
        resign().await;
        return Err(e);
    }
    if let Some((first, end)) = fold.torn() {
        tracing::warn!(
            first,
            end,
            "deleting a torn batch a former leader left (never acknowledged)"
        );
        let f = fence.clone();
        let (start, stop) = (ctx.layout.log(first), ctx.layout.log(end));
        let r = tokio::task::spawn_blocking(move || {
            f.write(vec![etcd::RequestOp::delete_range(start, stop)])
        })
        .await;
        if !matches!(r, Ok(Ok(_))) {
            resign().await;
            return Err(ReplicaError::Other("cannot delete a torn batch".into()));
        }
        fold.drop_torn();
    }
    let d = match Dispatcher::resume(
        ctx.options.config.clone(),
        ctx.options.incarnation.clone(),
        now(),
        fold.state,
    ) {
        Ok(d) => d,
        Err(e) => {
            resign().await;
            return Err(e.into());
        }
    };
    let journal = EtcdJournal::new(fence, fold.next, fold.bytes, fold.snapshot);
    let ended = ctx.driver.begin_leased_term(d, Some(Box::new(journal)), Some(clock.clone()));
    let term_u = u64::try_from(term).unwrap_or(0);
    ctx.status.set(
        Role::Leader,
        Some(LeaderRef { url: ctx.options.advertise_url.clone(), term: term_u }),
    );
    tracing::info!(
        term,
        records = fold.records,
        takeover_ms = started.elapsed().as_millis() as u64,
        "leading"
    );
    let stopped = tokio::select! {
        () = ended.wait() => { tracing::warn!(term, "term ended: the journal could not be written"); Stopped::No }
        e = keep_alive(ctx, lease, &clock) => { tracing::warn!(term, error = %e, "term ended: the lease"); Stopped::No }
        () = ctx.stopped() => Stopped::Yes,
    };
    // Stepping down: redirect to the successor if etcd names one, else a candidate.
    ctx.status.stepped_down().await;
    resign().await;
    Ok(stopped)
}

/// How long a lease is counted on from the moment its grant or renewal was asked for: its
/// TTL less a quarter (clock rates differ a little; etcd counts from when it got the request).
fn held(ttl: Duration) -> Duration {
    ttl - ttl / 4
}

/// Renews the lease every third of its TTL, extending `clock` with each renewal; returns when
/// the lease cannot be kept (gone, or not renewed before `clock` ran out).
async fn keep_alive(ctx: &Ctx, lease: i64, clock: &LeaseClock) -> String {
    let ttl = ctx.options.lease;
    loop {
        tokio::time::sleep(ttl / 3).await;
        let sent = Instant::now();
        match ctx.client.lease_keep_alive(lease).await {
            Ok(_) => clock.extend_to(sent + held(ttl)),
            Err(etcd::Error::LeaseGone) => return "the lease expired".into(),
            Err(e) => {
                if !clock.holds() {
                    return format!("the lease was not renewed in time: {e}");
                }
            }
        }
        if !clock.holds() {
            return "the lease was not renewed in time".into();
        }
    }
}

/// `shardwise journal dump --etcd`: the journal in etcd as JSON lines, read at one revision:
/// the snapshot's records (`{"snapshot", "update"}`), then every record of the log
/// (`{"index", "revision", "term", "writer", "update"}`: the entry that completed its batch,
/// that entry's etcd revision, and the term and replica that wrote it). A torn batch at the
/// end (a leader died mid-batch, nothing of it acknowledged) is reported on stderr.
pub async fn dump(
    endpoints: &[String],
    prefix: &str,
    out: &mut dyn std::io::Write,
) -> Result<usize, String> {
    let client =
        etcd::Client::new(endpoints, etcd::Options::default()).map_err(|e| e.to_string())?;
    let l = Layout::new(prefix);
    let (revision, snapshot) = read_snapshot(&client, &l).await.map_err(|e| e.to_string())?;
    let mut n = 0;
    let mut line = |out: &mut dyn std::io::Write, v: serde_json::Value| {
        n += 1;
        writeln!(out, "{v}").map_err(|e| e.to_string())
    };
    if let Some((m, bytes)) = snapshot {
        for u in replica_log::decode_batch(m.index, &bytes).map_err(|e| e.to_string())? {
            line(out, serde_json::json!({"snapshot": m.id, "update": u}))?;
        }
    }
    let entries =
        client.range_all(l.log(0), l.log_end(), revision).await.map_err(|e| e.to_string())?;
    let mut batch: Vec<u8> = Vec::new();
    let mut first = None;
    for kv in &entries.kvs {
        let Some(Key::Log(index)) = l.parse(&kv.key) else { continue };
        let (header, payload) =
            replica_log::decode_entry(index, &kv.value).map_err(|e| e.to_string())?;
        first.get_or_insert(index);
        batch.extend_from_slice(payload);
        if header.more {
            continue;
        }
        for u in replica_log::decode_batch(index, &batch).map_err(|e| e.to_string())? {
            line(
                out,
                serde_json::json!({
                    "index": index,
                    "revision": kv.mod_revision,
                    "term": header.term,
                    "writer": header.writer,
                    "update": u,
                }),
            )?;
        }
        batch.clear();
        first = None;
    }
    if let Some(first) = first {
        eprintln!("the log ends in a torn batch from entry {first} (never acknowledged)");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leader whose lease lapsed (a paused process, continued) no longer serves
    /// calls (they would answer 503): it redirects to its successor once known, else says
    /// no replica is known to lead; once stepped down it follows that successor.
    #[tokio::test]
    async fn a_leader_whose_lease_lapsed_redirects_to_its_successor() {
        let status = ReplicaStatus::replica("http://127.0.0.1:1".into());
        let driver = DriverHandle::idle(u64::MAX);
        let _ = status.driver.set(driver.clone());
        let d =
            Dispatcher::new(DispatcherConfig::default(), "test".into(), now()).expect("dispatcher");
        let clock = LeaseClock::until(Instant::now() + Duration::from_secs(3600));
        drop(driver.begin_leased_term(d, None, Some(clock)));
        let me = LeaderRef { url: "http://127.0.0.1:1".into(), term: 5 };
        status.set(Role::Leader, Some(me));
        assert_eq!(status.redirect().await, None, "a leader holding its lease serves");

        // The lease lapses (the process was paused past it).
        let d =
            Dispatcher::new(DispatcherConfig::default(), "test".into(), now()).expect("dispatcher");
        drop(driver.begin_leased_term(d, None, Some(LeaseClock::until(Instant::now()))));
        assert!(driver.lease_lapsed());
        assert_eq!(status.redirect().await, Some(None), "no successor known: 503, not served");

        let next = LeaderRef { url: "http://127.0.0.1:2".into(), term: 9 };
        *status.successor.write().expect("lock") = Some(next.clone());
        assert_eq!(status.redirect().await, Some(Some(next.url.clone())));
        status.stepped_down().await;
        let report = status.report();
        assert_eq!((report.role, report.leader), (Role::Follower, Some(next.clone())));
        assert_eq!(status.redirect().await, Some(Some(next.url)));
    }
}
