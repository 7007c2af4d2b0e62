//! The live Kubernetes API: pod lists and watches through `kube`'s client, decoded by core.
//!
//! The client comes from [`kube::Config::infer`]: the in-cluster service account when the
//! process runs in a pod, else the kubeconfig (`KUBECONFIG` honoured). Only the transport is
//! `kube`'s (authentication, TLS, proxies); requests are the plain v1 paths and the bodies are
//! decoded by `shardwise_core::cluster::pods`, the same decoder inline `pods` go through.
//!
//! Errors never carry credentials: they name the path asked and the API's `Status` message.

pub mod host;
pub mod live;
pub mod resolve;

use std::time::Duration;

use async_trait::async_trait;
use futures::{AsyncBufReadExt, Stream, StreamExt, TryStreamExt};
use shardwise_core::cluster::kubernetes::{PodLister, PodQuery};
use shardwise_core::cluster::pods::{PodList, WatchEvent};
use shardwise_core::cluster::{ClusterError, LabelSelector};

/// How long one watch request may stay open before the API server ends it (it is then
/// resumed from the last resource version, which is normal, not an error).
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(290);

/// A connection to a Kubernetes API server.
#[derive(Clone)]
pub struct KubeApi {
    client: kube::Client,
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi").finish_non_exhaustive()
    }
}

/// Why a list or watch failed, as the watch loop needs to tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiFailure {
    /// `410 Gone`: the resource version is too old; list again.
    Gone(String),
    /// Anything else (refused, unreachable, reset, undecodable).
    Other(String),
}

impl ApiFailure {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            ApiFailure::Gone(m) | ApiFailure::Other(m) => m,
        }
    }
}

impl From<ApiFailure> for ClusterError {
    fn from(f: ApiFailure) -> ClusterError {
        ClusterError::Unavailable { detail: f.message().to_owned(), missing: Default::default() }
    }
}

impl KubeApi {
    /// Connects with the inferred configuration (in-cluster, or the kubeconfig).
    pub async fn connect() -> Result<KubeApi, ClusterError> {
        let config = kube::Config::infer().await.map_err(|e| {
            ClusterError::precondition(
                None,
                format!(
                    "no Kubernetes API to ask (neither an in-cluster service account nor a \
                     usable kubeconfig): {e}; give the pods inline with `pods` instead"
                ),
            )
        })?;
        KubeApi::from_config(config)
    }

    /// Connects with an explicit configuration.
    pub fn from_config(config: kube::Config) -> Result<KubeApi, ClusterError> {
        let client = kube::Client::try_from(config).map_err(|e| {
            ClusterError::precondition(None, format!("cannot build the Kubernetes client: {e}"))
        })?;
        Ok(KubeApi { client })
    }

    /// Lists the pods of one query.
    pub async fn list(&self, query: &PodQuery) -> Result<PodList, ApiFailure> {
        let path = pods_path(query, &[]);
        let text = self.client.request_text(get(&path)).await.map_err(|e| failure(&path, e))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ApiFailure::Other(format!("GET {path}: the answer is not JSON: {e}")))?;
        PodList::from_json(&value).map_err(|e| ApiFailure::Other(format!("GET {path}: {e}")))
    }

    /// Watches one query from `resource_version`: a stream of decoded events that ends when
    /// the server ends the watch (after about [`WATCH_TIMEOUT`]).
    pub async fn watch(
        &self,
        query: &PodQuery,
        resource_version: &str,
    ) -> Result<impl Stream<Item = Result<WatchEvent, ApiFailure>> + Send + use<>, ApiFailure> {
        let timeout = WATCH_TIMEOUT.as_secs().to_string();
        let path = pods_path(
            query,
            &[
                ("watch", "true"),
                ("resourceVersion", resource_version),
                ("timeoutSeconds", &timeout),
                ("allowWatchBookmarks", "true"),
            ],
        );
        let body = self.client.request_stream(get(&path)).await.map_err(|e| failure(&path, e))?;
        let lines = body.lines();
        Ok(lines
            .map_err(move |e| ApiFailure::Other(format!("the watch GET {path} broke off: {e}")))
            .filter_map(|line| async move {
                match line {
                    Err(e) => Some(Err(e)),
                    Ok(l) if l.trim().is_empty() => None,
                    Ok(l) => Some(decode_event(&l)),
                }
            }))
    }
}

fn decode_event(line: &str) -> Result<WatchEvent, ApiFailure> {
    let value: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| ApiFailure::Other(format!("a watch event is not JSON: {e}")))?;
    WatchEvent::from_json(&value).map_err(|e| ApiFailure::Other(e.to_string()))
}

fn get(path: &str) -> http::Request<Vec<u8>> {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = path.parse().unwrap_or_else(|_| http::Uri::from_static("/"));
    req
}

fn failure(path: &str, e: kube::Error) -> ApiFailure {
    match e {
        kube::Error::Api(status) => {
            let text = format!(
                "the Kubernetes API answered GET {path} with {} {}: {}",
                status.code, status.reason, status.message
            );
            if status.code == 410 || status.reason == "Expired" || status.reason == "Gone" {
                ApiFailure::Gone(text)
            } else {
                ApiFailure::Other(text)
            }
        }
        other => {
            ApiFailure::Other(format!("the Kubernetes API is unreachable (GET {path}): {other}"))
        }
    }
}

/// `/api/v1/pods` or `/api/v1/namespaces/{ns}/pods`, with `labelSelector` and `extra`.
pub fn pods_path(query: &PodQuery, extra: &[(&str, &str)]) -> String {
    let mut path = match &query.namespace {
        None => "/api/v1/pods".to_owned(),
        Some(ns) => format!("/api/v1/namespaces/{}/pods", encode(ns)),
    };
    let selector: &LabelSelector = &query.selector;
    let mut sep = '?';
    if !selector.as_str().is_empty() {
        path.push_str(&format!("?labelSelector={}", encode(selector.as_str())));
        sep = '&';
    }
    for (k, v) in extra {
        path.push_str(&format!("{sep}{k}={}", encode(v)));
        sep = '&';
    }
    path
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[async_trait]
impl PodLister for KubeApi {
    async fn list_pods(&self, query: &PodQuery) -> Result<PodList, ClusterError> {
        Ok(self.list(query).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(ns: Option<&str>, selector: &str) -> PodQuery {
        PodQuery {
            namespace: ns.map(str::to_owned),
            selector: LabelSelector::parse(selector).expect("selector"),
        }
    }

    #[test]
    fn paths_encode_selectors_and_namespaces() {
        assert_eq!(
            pods_path(&query(None, "job-name=tensorflow"), &[]),
            "/api/v1/pods?labelSelector=job-name%3Dtensorflow"
        );
        assert_eq!(
            pods_path(&query(Some("ml"), "app in (a, b),!x"), &[("watch", "true")]),
            "/api/v1/namespaces/ml/pods?labelSelector=app%20in%20%28a%2C%20b%29%2C%21x&watch=true"
        );
    }

    #[test]
    fn gone_is_told_apart() {
        let status = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure("too old resource version", reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(matches!(failure("/p", status(410, "Expired")), ApiFailure::Gone(_)));
        let forbidden = failure("/p", status(403, "Forbidden"));
        assert!(matches!(&forbidden, ApiFailure::Other(m) if m.contains("403 Forbidden")));
    }
}
