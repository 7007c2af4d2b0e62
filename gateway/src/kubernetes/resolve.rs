//! `shardwise resolve`: one resolve request from stdin or a file, one JSON answer on stdout.

use std::io::Read;
use std::path::PathBuf;

use shardwise_core::cluster::request::ResolveRequest;
use shardwise_core::cluster::slurm::DEFAULT_MAX_TASKS;
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
    /// The most tasks a resolved cluster may have: a Slurm hostlist or tasks-per-node list
    /// expanding to more is refused (counted before anything is built), and so is a
    /// cluster of more tasks from any resolver. Raise it for a giant cluster.
    #[arg(long, env = "SHARDWISE_MAX_RESOLVE_TASKS", default_value_t = DEFAULT_MAX_TASKS, value_parser = parse_max_tasks)]
    pub max_resolve_tasks: usize,
}

/// `--max-resolve-tasks`: at least 1.
pub fn parse_max_tasks(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
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
/// `pods` list them from the API `kube` connects to. A cluster of more than `max_tasks`
/// tasks is refused (`--max-resolve-tasks`).
pub async fn resolve_text(text: &str, kube: &KubeSlot, max_tasks: usize) -> Outcome {
    match try_resolve(text, kube, max_tasks).await {
        Ok(reply) => Outcome { json: reply, exit_code: 0 },
        Err(e) => Outcome {
            json: serde_json::to_value(Problem::from(&e)).unwrap_or_default(),
            exit_code: 1,
        },
    }
}

async fn try_resolve(
    text: &str,
    kube: &KubeSlot,
    max_tasks: usize,
) -> Result<serde_json::Value, ClusterError> {
    let request = ResolveRequest::from_json(text)?;
    let req = request.clone();
    // Host inputs may run `nvidia-smi`: off the async threads.
    let mut resolver = tokio::task::spawn_blocking(move || {
        let host = host_inputs(&req, max_tasks)?;
        req.build(&host)
    })
    .await
    .map_err(|e| ClusterError::invalid_input(format!("the resolve task failed: {e}")))??;
    if !resolver.kubernetes_without_pods().is_empty() {
        resolver.attach_pods(kube.get().await?).await?;
    }
    // Touch the cluster first so that a missing pod source is reported as such; and bound the
    // reply: however a resolver found its tasks (Slurm counts before expanding; pods and
    // unions are listed), no more than `max_tasks` are answered.
    let total = resolver.cluster_spec()?.total_tasks();
    if total > max_tasks {
        return Err(ClusterError::invalid_input(format!(
            "the cluster has {total} tasks; at most {max_tasks} are resolved (raise the bound \
             with --max-resolve-tasks for a larger cluster)"
        )));
    }
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
    let outcome =
        runtime.block_on(resolve_text(&text, &KubeSlot::default(), args.max_resolve_tasks));
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
