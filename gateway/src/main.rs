//! `shardwise`: the command-line entry point.

use clap::{Parser, Subcommand};
use shardwise_gateway::dispatcher::{self, DispatcherArgs};
use shardwise_gateway::kubernetes::resolve::{self, ResolveArgs};
use shardwise_gateway::worker::{self, WorkerArgs};

/// A worker's Arrow chunks and answers are tens of megabytes each: glibc's allocator maps and
/// unmaps such blocks every time, so every byte served cost a page fault and the kernel's
/// zeroing of the page; mimalloc reuses its pages (the columnar benchmark measures the
/// difference, examples/columnar_bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Coordinate distributed training input: run a dispatcher that hands out data splits
/// (`dispatcher`), a worker that reads them (`worker`), or resolve who is in a cluster
/// (`resolve`).
#[derive(Debug, Parser)]
#[command(name = "shardwise", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the dispatcher: the v1 REST API that registers workers and datasets, creates
    /// jobs and iterations and hands out splits (in memory by default; --work-dir journals).
    Dispatcher(DispatcherArgs),
    /// Run a worker: register with a dispatcher, run the tasks it hands out and serve their
    /// elements to clients.
    Worker(WorkerArgs),
    /// Print the OpenAPI document of the REST API.
    Openapi,
    /// Inspect a dispatcher's journal.
    #[command(subcommand)]
    Journal(JournalCommand),
    /// Resolve a cluster (TF_CONFIG, Slurm, Kubernetes, a static list, or a union) from a JSON
    /// request on stdin or --input, and print the answer as JSON.
    Resolve(ResolveArgs),
}

#[derive(Debug, Subcommand)]
enum JournalCommand {
    /// Print every record of the journal in a work dir, or in etcd, as JSON lines.
    Dump {
        /// The dispatcher's --work-dir.
        #[arg(required_unless_present = "etcd")]
        dir: Option<std::path::PathBuf>,
        /// The replicas' --etcd: read the journal they keep in etcd.
        #[arg(
            long,
            env = "SHARDWISE_ETCD",
            value_delimiter = ',',
            value_name = "URL",
            conflicts_with = "dir"
        )]
        etcd: Vec<String>,
        /// The replicas' --etcd-prefix.
        #[arg(long, env = "SHARDWISE_ETCD_PREFIX", default_value = dispatcher::replica::DEFAULT_PREFIX, value_parser = dispatcher::replica::check_prefix)]
        etcd_prefix: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Resolve(args) => resolve::run(&args),
        Command::Dispatcher(args) => dispatcher::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Openapi => {
            print!("{}", shardwise_gateway::openapi::document_json());
            0
        }
        Command::Journal(JournalCommand::Dump { dir: None, etcd, etcd_prefix }) => {
            let mut out = Stdout::new();
            let dumped = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| {
                    rt.block_on(dispatcher::replica::dump(&etcd, &etcd_prefix, &mut out))
                });
            dump_exit(dumped, &out)
        }
        Command::Journal(JournalCommand::Dump { dir: Some(dir), .. }) => {
            let mut out = Stdout::new();
            let dumped = shardwise_journal::dump(&dir, &mut out);
            dump_exit(dumped, &out)
        }
    };
    std::process::exit(code);
}

/// Standard output that remembers when its reader went away (`shardwise journal dump | head`):
/// the dump then stops, and the command exits 0 without an error, as `cat` would.
struct Stdout {
    inner: std::io::StdoutLock<'static>,
    reader_gone: bool,
}

impl Stdout {
    fn new() -> Stdout {
        Stdout { inner: std::io::stdout().lock(), reader_gone: false }
    }

    fn note<T>(&mut self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result {
            self.reader_gone |= e.kind() == std::io::ErrorKind::BrokenPipe;
        }
        result
    }
}

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let result = self.inner.write(buf);
        self.note(result)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.inner.flush();
        self.note(result)
    }
}

/// The exit status of a dump: 0 when it ended or its reader stopped reading, else 1 with the
/// error on stderr.
fn dump_exit<E: std::fmt::Display>(dumped: Result<usize, E>, out: &Stdout) -> i32 {
    match dumped {
        Ok(_) => 0,
        Err(_) if out.reader_gone => 0,
        Err(e) => {
            eprintln!("shardwise journal dump: {e}");
            1
        }
    }
}
