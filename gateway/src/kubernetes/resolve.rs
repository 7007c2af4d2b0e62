//! `shardwise resolve`: one resolve request from stdin or a file, one JSON answer on stdout,
//! or (`--print torch-env|jax-env`) the task's launcher environment as shell `export` lines.
//!
//! The environment forms exist so that a launch script can do
//! `eval "$(shardwise resolve --print torch-env < request.json)"` before `python train.py`:
//! nothing but `export` lines ever reaches standard output, every value is shell-quoted, and a
//! failure prints its problem on standard error with an empty standard output (an `eval` of
//! it does nothing) and exit status 1.

use std::io::Read;
use std::path::PathBuf;

use shardwise_core::cluster::launch::{Launch, not_in_group};
use shardwise_core::cluster::request::{ResolveReply, ResolveRequest};
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
    /// What to print: the JSON reply, or this task's launcher environment as shell `export`
    /// lines for `eval`: torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
    /// LOCAL_WORLD_SIZE (torch-env), or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
    /// JAX_PROCESS_ID (jax-env). The environment forms compute the request's `launch` (its
    /// defaults when it has none) and fail for a task without a rank
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Print::Json)]
    pub print: Print,
    /// The most tasks a resolved cluster may have: a Slurm hostlist or tasks-per-node list
    /// expanding to more is refused (counted before anything is built), and so is a
    /// cluster of more tasks from any resolver. Raise it for a giant cluster.
    #[arg(long, env = "SHARDWISE_MAX_RESOLVE_TASKS", default_value_t = DEFAULT_MAX_TASKS, value_parser = parse_max_tasks)]
    pub max_resolve_tasks: usize,
}

/// What `shardwise resolve` prints (`--print`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Print {
    /// The reply (or the problem) as JSON.
    #[default]
    Json,
    /// `export` lines of PyTorch's `env://` variables.
    TorchEnv,
    /// `export` lines of JAX's coordinator address, process count and process id.
    JaxEnv,
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
    let reply = match ResolveRequest::from_json(text) {
        Ok(request) => resolve_request(&request, kube, max_tasks).await.and_then(|r| {
            serde_json::to_value(r)
                .map_err(|e| ClusterError::invalid_input(format!("cannot encode the reply: {e}")))
        }),
        Err(e) => Err(e),
    };
    match reply {
        Ok(reply) => Outcome { json: reply, exit_code: 0 },
        Err(e) => Outcome {
            json: serde_json::to_value(Problem::from(&e)).unwrap_or_default(),
            exit_code: 1,
        },
    }
}

/// This task's launcher environment from a request text: the request's `launch` options, or
/// their defaults when it has none. A task without a rank (a `ps`, an `evaluator`, no task) is
/// a `FAILED_PRECONDITION` saying so.
pub async fn resolve_launch(
    text: &str,
    kube: &KubeSlot,
    max_tasks: usize,
) -> Result<Launch, ClusterError> {
    let mut request = ResolveRequest::from_json(text)?;
    let options = request.launch.get_or_insert_default().clone();
    let reply = resolve_request(&request, kube, max_tasks).await?;
    match reply.launch {
        Some(Some(launch)) => Ok(launch),
        _ => Err(not_in_group(reply.task_type.as_deref(), reply.task_id, &options)),
    }
}

/// Resolves a decoded request with the host's inputs (see [`resolve_text`]).
pub async fn resolve_request(
    request: &ResolveRequest,
    kube: &KubeSlot,
    max_tasks: usize,
) -> Result<ResolveReply, ClusterError> {
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
    request.resolve_with(&resolver)
}

/// `export NAME=VALUE` lines, one per variable, each value quoted for a POSIX shell.
pub fn export_lines<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    vars.into_iter()
        .map(|(name, value)| format!("export {name}={}\n", shell_quote(value)))
        .collect()
}

/// `value` as one shell word: as it is when it has only characters no shell treats specially,
/// else in single quotes (a `'` inside written `'\''`).
pub fn shell_quote(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'_' | b'-' | b'.' | b',' | b':' | b'/' | b'@' | b'%' | b'+' | b'=')
        });
    if plain { value.to_owned() } else { format!("'{}'", value.replace('\'', r"'\''")) }
}

/// The `export` lines of `--print torch-env` or `--print jax-env` (`None` for `json`).
pub fn launch_exports(launch: &Launch, print: Print) -> Option<String> {
    match print {
        Print::Json => None,
        Print::TorchEnv => Some(export_lines(launch.torch.vars())),
        Print::JaxEnv => {
            let vars = launch.jax.vars();
            Some(export_lines(vars.iter().map(|(n, v)| (*n, v.as_str()))))
        }
    }
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
    if args.print != Print::Json {
        let launch =
            runtime.block_on(resolve_launch(&text, &KubeSlot::default(), args.max_resolve_tasks));
        return match launch.map(|l| launch_exports(&l, args.print)) {
            Ok(Some(lines)) => {
                print!("{lines}");
                0
            }
            Ok(None) => 0,
            Err(e) => {
                eprintln!("shardwise resolve: {}: {}", e.code(), e.detail());
                1
            }
        };
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words() {
        assert_eq!(shell_quote("10.0.0.1"), "10.0.0.1");
        assert_eq!(shell_quote("fe80::1%eth0"), "fe80::1%eth0");
        assert_eq!(shell_quote("[fd00::1]:8470"), "'[fd00::1]:8470'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("$(x)`y`"), "'$(x)`y`'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(export_lines([("A", "1"), ("B", "x y")]), "export A=1\nexport B='x y'\n");
    }
}
