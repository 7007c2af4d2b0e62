//! `--cluster-config`: a resolve request the dispatcher keeps resolved, live.
//!
//! Kubernetes resolvers without inline pods are fed by a list + watch per label selector
//! into a core [`Membership`](shardwise_core::cluster::Membership), so task indices stay
//! stable while pods come and go. When the API fails (refused, unreachable, the watch reset)
//! the last good membership stays in force and the reply reports how stale it is; the watch
//! retries with capped exponential backoff and lists again after `410 Gone`. Other resolvers
//! (simple, TF_CONFIG, Slurm) are resolved from what the process was started with.
//!
//! `GET /v1/cluster` reads the current view; `?after=VERSION&wait=DURATION` waits (bounded)
//! until the view's version passes `VERSION`, so a caller can follow changes without polling.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use shardwise_core::cluster::ClusterError;
use shardwise_core::cluster::kubernetes::PodQuery;
use shardwise_core::cluster::request::{ResolveReply, ResolveRequest, Resolver};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{ApiFailure, KubeApi};
use crate::http::client::Backoff;

/// Backoff after a failed list or watch: doubles from the first value up to the cap.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(10);

/// How current the view is.
#[derive(Debug, Clone, Serialize)]
pub struct Freshness {
    /// The view is kept by Kubernetes watches (false: resolved once at start).
    pub live: bool,
    /// Some watch is failing: the view is the last good membership.
    pub stale: bool,
    /// How long the view has been stale, in milliseconds (`null` when fresh).
    pub stale_for_ms: Option<u64>,
    /// Bumped on every change of the view or of its freshness.
    pub version: u64,
    /// One entry per label selector watched.
    pub watches: Vec<WatchStatusView>,
}

/// One watch, as `GET /v1/cluster` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WatchStatusView {
    /// `null`: all namespaces.
    pub namespace: Option<String>,
    /// The label selector.
    pub selector: String,
    /// A list has succeeded at least once.
    pub synced: bool,
    /// The last list or watch call succeeded (or the watch is open).
    pub healthy: bool,
    /// The resource version the watch resumes from.
    pub resource_version: Option<String>,
    /// The last failure, while unhealthy.
    pub last_error: Option<String>,
    /// Lists made (the first one, and one after each `410 Gone` or failed watch).
    pub lists: u64,
    /// Watch events applied.
    pub events: u64,
}

struct Watch {
    resolver: usize,
    query: PodQuery,
    synced: bool,
    healthy: bool,
    last_error: Option<String>,
    unhealthy_since: Option<Instant>,
    lists: u64,
    events: u64,
}

struct Inner {
    resolver: Resolver,
    watches: Vec<Watch>,
}

/// The live cluster of `--cluster-config`.
pub struct LiveCluster {
    request: ResolveRequest,
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
    /// When `version` last changed (or the cluster was first resolved).
    changed_at: Mutex<Instant>,
}

impl std::fmt::Debug for LiveCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCluster").finish_non_exhaustive()
    }
}

/// A `--cluster-config` that cannot be served (a usage error: the process does not start).
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    /// The file cannot be read.
    #[error("cannot read --cluster-config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The request is invalid, cannot be resolved on this host, or needs a Kubernetes API
    /// that cannot be reached.
    #[error("--cluster-config {}: {error}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        error: ClusterError,
    },
    /// Building the resolver panicked (a bug).
    #[error("--cluster-config {}: {source}", path.display())]
    Panicked {
        /// The file.
        path: PathBuf,
        /// The panic.
        source: tokio::task::JoinError,
    },
}

/// What `GET /v1/cluster` answers.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    /// The resolve reply (section 3's contract).
    #[serde(flatten)]
    pub reply: ResolveReply,
    /// How current it is.
    pub freshness: Freshness,
}

impl LiveCluster {
    /// Reads and validates `--cluster-config`, connects to Kubernetes if a resolver needs
    /// it, and starts the watches (on the current tokio runtime).
    pub async fn start(
        path: &Path,
        max_tasks: usize,
    ) -> Result<Arc<LiveCluster>, ClusterConfigError> {
        let invalid =
            |error: ClusterError| ClusterConfigError::Invalid { path: path.to_owned(), error };
        let text = std::fs::read_to_string(path)
            .map_err(|source| ClusterConfigError::Read { path: path.to_owned(), source })?;
        let request = ResolveRequest::from_json(&text).map_err(invalid)?;
        let req = request.clone();
        let mut resolver = tokio::task::spawn_blocking(move || {
            let host = super::host::host_inputs(&req, max_tasks)?;
            req.build(&host)
        })
        .await
        .map_err(|source| ClusterConfigError::Panicked { path: path.to_owned(), source })?
        .map_err(invalid)?;
        let mut watches = Vec::new();
        for (i, k) in resolver.kubernetes_mut().into_iter().enumerate() {
            if k.has_snapshot() {
                continue;
            }
            for query in k.config().queries() {
                watches.push(Watch {
                    resolver: i,
                    query,
                    synced: false,
                    healthy: false,
                    last_error: None,
                    unhealthy_since: None,
                    lists: 0,
                    events: 0,
                });
            }
            k.go_live().map_err(invalid)?;
        }
        let api = if watches.is_empty() {
            None
        } else {
            Some(KubeApi::connect().await.map_err(invalid)?)
        };
        let n = watches.len();
        let live = Arc::new(LiveCluster {
            request,
            inner: Mutex::new(Inner { resolver, watches }),
            version: watch::Sender::new(0),
            changed_at: Mutex::new(Instant::now()),
        });
        if let Some(api) = api {
            for w in 0..n {
                tokio::spawn(run_watch(Arc::clone(&live), api.clone(), w));
            }
        }
        Ok(live)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
        *self.changed_at.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// How long ago the view or its freshness last changed (or the cluster was first
    /// resolved).
    pub fn since_change(&self) -> Duration {
        self.changed_at.lock().unwrap_or_else(|e| e.into_inner()).elapsed()
    }

    /// The current view. While a watch has never listed, `UNAVAILABLE`.
    pub fn view(&self) -> Result<ClusterView, ClusterError> {
        let inner = self.lock();
        let version = *self.version.borrow();
        if let Some(w) = inner.watches.iter().find(|w| !w.synced) {
            return Err(ClusterError::Unavailable {
                detail: format!(
                    "the cluster is not known yet: no pod list for label selector {:?}{}",
                    w.query.selector.as_str(),
                    w.last_error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
                ),
                missing: Default::default(),
            });
        }
        let reply = self.request.resolve_with(&inner.resolver)?;
        let now = Instant::now();
        let stale_since = inner.watches.iter().filter_map(|w| w.unhealthy_since).min();
        let freshness = Freshness {
            live: !inner.watches.is_empty(),
            stale: stale_since.is_some(),
            stale_for_ms: stale_since
                .map(|t| u64::try_from(now.duration_since(t).as_millis()).unwrap_or(u64::MAX)),
            version,
            watches: inner
                .watches
                .iter()
                .map(|w| WatchStatusView {
                    namespace: w.query.namespace.clone(),
                    selector: w.query.selector.as_str().to_owned(),
                    synced: w.synced,
                    healthy: w.healthy,
                    resource_version: resource_version(&inner.resolver, w).map(str::to_owned),
                    last_error: w.last_error.clone(),
                    lists: w.lists,
                    events: w.events,
                })
                .collect(),
        };
        Ok(ClusterView { reply, freshness })
    }

    /// Waits until the version passes `after`, at most `wait`.
    pub async fn wait_past(&self, after: u64, wait: Duration) {
        let mut rx = self.version.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|v| *v > after)).await;
    }

    fn with_watch<R>(&self, w: usize, f: impl FnOnce(&mut Inner, usize) -> R) -> R {
        let mut inner = self.lock();
        let r = f(&mut inner, w);
        drop(inner);
        self.bump();
        r
    }

    fn failed(&self, w: usize, message: &str) {
        tracing::warn!(target: "shardwise::cluster", "{message}");
        self.with_watch(w, |inner, w| {
            let watch = &mut inner.watches[w];
            watch.healthy = false;
            watch.last_error = Some(message.to_owned());
            watch.unhealthy_since.get_or_insert_with(Instant::now);
        });
    }

    fn healthy(&self, inner: &mut Inner, w: usize) {
        let watch = &mut inner.watches[w];
        watch.healthy = true;
        watch.last_error = None;
        watch.unhealthy_since = None;
    }
}

fn resource_version<'a>(resolver: &'a Resolver, w: &Watch) -> Option<&'a str> {
    let k = resolver.kubernetes().into_iter().nth(w.resolver)?;
    k.membership()?.resource_version(w.query.selector.as_str())
}

/// One selector's list + watch loop, for as long as the process runs.
async fn run_watch(live: Arc<LiveCluster>, api: KubeApi, w: usize) {
    let (k, query) = {
        let inner = live.lock();
        (inner.watches[w].resolver, inner.watches[w].query.clone())
    };
    let selector = query.selector.as_str().to_owned();
    let mut backoff = Backoff::new(BACKOFF_FIRST, BACKOFF_CAP);
    'list: loop {
        let list = match api.list(&query).await {
            Ok(list) => list,
            Err(f) => {
                live.failed(w, f.message());
                tokio::time::sleep(backoff.next_delay()).await;
                continue 'list;
            }
        };
        live.with_watch(w, |inner, w| {
            if let Some(m) = inner.resolver.kubernetes_mut()[k].membership_mut() {
                m.reset(&selector, &list);
            }
            let watch = &mut inner.watches[w];
            watch.synced = true;
            watch.lists += 1;
            live.healthy(inner, w);
        });
        backoff.reset();
        'watch: loop {
            let rv = {
                let mut inner = live.lock();
                inner.resolver.kubernetes_mut()[k]
                    .membership_mut()
                    .and_then(|m| m.resource_version(&selector).map(str::to_owned))
            };
            let Some(rv) = rv else {
                // A list without a resource version cannot be watched from: list again.
                live.failed(w, &format!("the pod list for {selector:?} has no resourceVersion"));
                tokio::time::sleep(backoff.next_delay()).await;
                continue 'list;
            };
            let events = match api.watch(&query, &rv).await {
                Ok(events) => events,
                Err(ApiFailure::Gone(_)) => continue 'list,
                Err(f) => {
                    live.failed(w, f.message());
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue 'watch;
                }
            };
            live.with_watch(w, |inner, w| live.healthy(inner, w));
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(f) => {
                        live.failed(w, f.message());
                        tokio::time::sleep(backoff.next_delay()).await;
                        continue 'watch;
                    }
                };
                if event.is_gone() {
                    continue 'list;
                }
                let applied = live.with_watch(w, |inner, w| {
                    let r = match inner.resolver.kubernetes_mut()[k].membership_mut() {
                        Some(m) => m.apply(&selector, &event),
                        None => Ok(false),
                    };
                    inner.watches[w].events += 1;
                    r
                });
                if let Err(e) = applied {
                    live.failed(w, &e.to_string());
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue 'list;
                }
                backoff.reset();
            }
            // The server ended the watch (its timeout): resume from the last version.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardwise_core::cluster::slurm::DEFAULT_MAX_TASKS;

    #[tokio::test]
    async fn an_unusable_cluster_config_is_a_typed_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("shardwise-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.json");
        let e = LiveCluster::start(&missing, DEFAULT_MAX_TASKS).await.unwrap_err();
        assert!(matches!(&e, ClusterConfigError::Read { path, .. } if *path == missing), "{e}");
        assert!(e.to_string().starts_with("cannot read --cluster-config "), "{e}");
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"resolver\": 1}").unwrap();
        let e = LiveCluster::start(&bad, DEFAULT_MAX_TASKS).await.unwrap_err();
        assert!(matches!(&e, ClusterConfigError::Invalid { .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("--cluster-config {}: ", bad.display())));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
