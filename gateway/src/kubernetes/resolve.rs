//! `shardwise resolve`: one resolve request from stdin or a file, one JSON answer on stdout.

use std::io::Read;
use std::path::PathBuf;

use shardwise_core::cluster::request::ResolveRequest;
use shardwise_core::cluster::{ClusterError, ClusterResolver};

use super::KubeApi;
use super::host::host_inputs;
use crate::http::Problem;

/// Arguments of `shardwise resolve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResolveArgs {
    /// Read the request from FILE instead of standard input.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Print compact JSON instead of indented JSON.
    #[arg(long)]
    pub compact: bool,
}

/// The outcome of one resolve: the JSON document to print and the exit status.
#[derive(Debug)]
pub struct Outcome {
    /// The reply or the problem, as JSON.
    pub json: serde_json::Value,
    /// 0 for a reply, 1 for a problem.
    pub exit_code: i32,
}

/// The Kubernetes API, connected on first use (a failed connection is not remembered, so
/// a kubeconfig that appears later is used).
#[derive(Debug, Default)]
pub struct KubeSlot(tokio::sync::OnceCell<KubeApi>);

impl KubeSlot {
    /// The connection, made now if there is none yet.
    pub async fn get(&self) -> Result<&KubeApi, ClusterError> {
        self.0.get_or_try_init(KubeApi::connect).await
    }
}

/// Resolves a request text with the host's inputs; Kubernetes resolvers without inline
/// `pods` list them from the API `kube` connects to.
pub async fn resolve_text(text: &str, kube: &KubeSlot) -> Outcome {
    match try_resolve(text, kube).await {
        Ok(reply) => Outcome { json: reply, exit_code: 0 },
        Err(e) => Outcome {
            json: serde_json::to_value(Problem::from(&e)).unwrap_or_default(),
            exit_code: 1,
        },
    }
}

async fn try_resolve(text: &str, kube: &KubeSlot) -> Result<serde_json::Value, ClusterError> {
    let request = ResolveRequest::from_json(text)?;
    let req = request.clone();
    // Host inputs may run `nvidia-smi`: off the async threads.
    let mut resolver = tokio::task::spawn_blocking(move || {
        let host = host_inputs(&req)?;
        req.build(&host)
    })
    .await
    .map_err(|e| ClusterError::invalid_input(format!("the resolve task failed: {e}")))??;
    if !resolver.kubernetes_without_pods().is_empty() {
        resolver.attach_pods(kube.get().await?).await?;
    }
    // Touch the cluster first so that a missing pod source is reported as such.
    resolver.cluster_spec()?;
    let reply = request.resolve_with(&resolver)?;
    serde_json::to_value(reply)
        .map_err(|e| ClusterError::invalid_input(format!("cannot encode the reply: {e}")))
}

/// Runs `shardwise resolve`; returns the process exit status.
pub fn run(args: &ResolveArgs) -> i32 {
    let text = match &args.input {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --input {}: {e}", path.display())),
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map(|_| s)
                .map_err(|e| format!("cannot read standard input: {e}"))
        }
    };
    let text = match text {
        Ok(t) => t,
        Err(msg) => {
            eprintln!("shardwise resolve: {msg}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shardwise resolve: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let outcome = runtime.block_on(resolve_text(&text, &KubeSlot::default()));
    let rendered = if args.compact {
        serde_json::to_string(&outcome.json)
    } else {
        serde_json::to_string_pretty(&outcome.json)
    };
    match rendered {
        Ok(s) => println!("{s}"),
        Err(e) => {
            eprintln!("shardwise resolve: cannot print the answer: {e}");
            return 1;
        }
    }
    outcome.exit_code
}
