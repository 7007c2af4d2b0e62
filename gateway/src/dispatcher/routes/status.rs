//! The dispatcher's status: `GET /v1/status` (what the status page at `/` polls).

use std::sync::atomic::Ordering;

use serde::Serialize;
use shardwise_core::dispatch::{GetStatus, STATUS_LIST_CAP, StatusReport};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::dispatcher::replica::LeaderReport;
use crate::http::auth::{Caller, Role};
use crate::http::{ApiResult, ok};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_status))
}

/// Where the journal lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JournalMode {
    /// No journal: state is lost on restart (`--fault-tolerant` not set, no `--work-dir`).
    Memory,
    /// Segments and snapshots in `--work-dir`.
    WorkDir,
    /// Replicated dispatchers sharing a journal in etcd (`--etcd`).
    Etcd,
}

/// The journal, as this process measures it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JournalStatus {
    /// Where it lives.
    pub mode: JournalMode,
    /// Whether replies wait for records to be durable.
    pub fault_tolerant: bool,
    /// Bytes in the journal's current segment (records since the last compaction), after
    /// the last commit; `null` in memory mode.
    pub segment_bytes: Option<u64>,
    /// The segment size that starts a compaction (`--compact-at-bytes`).
    pub compact_at_bytes: u64,
    /// Commits (one fsync each in fault-tolerant mode) since this process started.
    pub commits: u64,
    /// Records written since this process started.
    pub records: u64,
    /// How long the last commit took, in microseconds (`null`: none yet).
    pub last_commit_micros: Option<u64>,
    /// The mean commit time, in microseconds (`null`: none yet).
    pub mean_commit_micros: Option<u64>,
    /// When the last compaction finished, in milliseconds since the Unix epoch (`null`: none
    /// since this process started).
    pub last_compaction_ms: Option<u64>,
}

/// The `--cluster-config` membership and its freshness (as `GET /v1/cluster` has them).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterStatus {
    /// The members, job by job (at most the status list cap in all; none for a caller with
    /// a `monitor` token, which may not read `GET /v1/cluster` either).
    pub members: Vec<ClusterMember>,
    /// The members were left out for this caller's role (`monitor`).
    pub members_hidden: bool,
    /// Members in all.
    pub total_members: u64,
    /// Kept live by Kubernetes watches (false: resolved once at start).
    pub live: bool,
    /// A watch is failing: the membership is the last good one.
    pub stale: bool,
    /// How long it has been stale, in milliseconds.
    pub stale_for_ms: Option<u64>,
    /// Bumped on every change.
    pub version: u64,
    /// Milliseconds since the membership or its freshness last changed (or was first
    /// resolved).
    pub since_change_ms: u64,
    /// Why the membership is not known (yet), when it is not.
    pub error: Option<String>,
}

/// One task of the cluster.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterMember {
    /// The job (`worker`, `ps`, `chief`, ...).
    pub job: String,
    /// The task index.
    pub index: i64,
    /// Its address.
    pub address: String,
}

/// Requests answered by one route since this process started.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RouteCount {
    /// The method.
    pub method: String,
    /// The route template (`/v1/jobs/{job_id}`).
    pub route: String,
    /// Answers of every status.
    pub requests: u64,
    /// Answers with a 4xx or 5xx status.
    pub errors: u64,
}

/// `GET /v1/status`: the dispatcher's state and what only this process knows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DispatcherStatus {
    /// The dispatcher's state; `null` while it does not serve (replaying its journal, or a
    /// replica that does not lead: see `replica`).
    pub state: Option<StatusReport>,
    /// Why `state` is `null`.
    pub state_unavailable: Option<String>,
    /// The journal.
    pub journal: JournalStatus,
    /// Who leads (a single dispatcher always does).
    pub replica: LeaderReport,
    /// The `--cluster-config` membership (`null` without one).
    pub cluster: Option<ClusterStatus>,
    /// Requests per route since this process started: two polls give the request rate.
    pub routes: Vec<RouteCount>,
    /// Dispatcher requests handled since this process started.
    pub requests_total: u64,
}

/// `GET /v1/status`.
#[utoipa::path(
    get,
    path = "/v1/status",
    tag = "dispatcher",
    operation_id = "get_status",
    summary = "The dispatcher's status: workers, datasets, jobs, iterations with their split \
               progress, clients, the journal, the leader, the cluster and request counters.",
    description = "What the status page at `/` shows. Lists hold at most 500 entries each \
                   (workers by address, datasets by id; jobs, iterations and clients newest \
                   first); `state.totals` counts everything. A replica that does not lead \
                   answers too, with `state` null. Readable with the `monitor` role, which sees the \
                   cluster's size and freshness but not its members (`GET /v1/cluster` is not \
                   readable with it either); admin sees them.",
    responses((status = 200, description = "The status.", body = DispatcherStatus))
)]
pub(super) async fn get_status(
    axum::extract::State(s): axum::extract::State<AppState>,
    caller: Option<axum::Extension<Caller>>,
) -> ApiResult {
    // A monitor token sees the cluster's size and freshness, not its hosts: it may not read
    // `GET /v1/cluster` either (the view names every host of the training job).
    let members_hidden = caller.is_some_and(|c| c.0.0 == Role::Monitor);
    let (state, state_unavailable) = match s.driver.call(GetStatus).await {
        Ok(r) => (Some(*r), None),
        Err(p) => (None, Some(p.detail)),
    };
    let st = &s.driver.stats;
    let commits = st.commit_latency.count();
    let journal = JournalStatus {
        mode: s.journal_mode,
        fault_tolerant: s.fault_tolerant,
        segment_bytes: (s.journal_mode != JournalMode::Memory)
            .then(|| st.segment_bytes.load(Ordering::Relaxed)),
        compact_at_bytes: s.compact_at_bytes,
        commits: st.commits.load(Ordering::Relaxed),
        records: st.records.load(Ordering::Relaxed),
        last_commit_micros: (commits > 0).then(|| st.last_commit_micros.load(Ordering::Relaxed)),
        mean_commit_micros: (commits > 0).then(|| st.commit_latency.sum_micros() / commits),
        last_compaction_ms: Some(st.last_compaction_ms.load(Ordering::Relaxed)).filter(|t| *t > 0),
    };
    let cluster = s.cluster.as_ref().map(|c| {
        let since_change_ms = u64::try_from(c.since_change().as_millis()).unwrap_or(u64::MAX);
        match c.view() {
            Ok(view) => {
                let mut members = Vec::new();
                let mut total = 0u64;
                for job in &view.reply.cluster_def {
                    for (index, address) in &job.tasks {
                        total += 1;
                        if !members_hidden && members.len() < STATUS_LIST_CAP {
                            members.push(ClusterMember {
                                job: job.name.clone(),
                                index: *index,
                                address: address.clone(),
                            });
                        }
                    }
                }
                ClusterStatus {
                    members,
                    members_hidden,
                    total_members: total,
                    live: view.freshness.live,
                    stale: view.freshness.stale,
                    stale_for_ms: view.freshness.stale_for_ms,
                    version: view.freshness.version,
                    since_change_ms,
                    error: None,
                }
            }
            Err(e) => ClusterStatus {
                members: Vec::new(),
                members_hidden,
                total_members: 0,
                live: true,
                stale: true,
                stale_for_ms: None,
                version: 0,
                since_change_ms,
                error: Some(e.to_string()),
            },
        }
    });
    let routes = s
        .routes
        .counts()
        .into_iter()
        .map(|(method, route, requests, errors)| RouteCount { method, route, requests, errors })
        .collect();
    ok(&DispatcherStatus {
        state,
        state_unavailable,
        journal,
        replica: s.replica.report(),
        cluster,
        routes,
        requests_total: st.requests.load(Ordering::Relaxed),
    })
}
