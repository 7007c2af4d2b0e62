//! The load generator's fleet mode at a tiny scale, against an in-process dispatcher, so
//! that it cannot rot: every scheduled heartbeat is answered, without errors, and the fleet
//! reaches its steady state (each worker registered, holding its one task).

use std::time::Duration;

use shardwise_examples::fleet::{self, Options};
use shardwise_gateway::dispatcher::{self, DispatcherArgs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_fleet_heartbeats_without_errors() {
    let dispatcher = dispatcher::start(DispatcherArgs { port: 0, ..DispatcherArgs::default() })
        .await
        .expect("the dispatcher starts");
    let opts = Options {
        workers: 200,
        clients: 20,
        rate_hz: 4.0,
        connections: 4,
        warmup: Duration::from_millis(500),
        duration: Duration::from_secs(2),
        report_every: Duration::from_secs(1),
        batch: Duration::ZERO,
        dispatcher_pid: Some(std::process::id()),
        verbose: false,
    };
    let report =
        tokio::time::timeout(Duration::from_secs(120), fleet::run(dispatcher.addr(), &opts))
            .await
            .expect("the fleet run finishes")
            .expect("the fleet run succeeds");
    eprintln!("{}", report.render(&opts));
    assert_eq!(report.errors, 0, "{:?}", report.first_error);
    assert_eq!(report.behind, 0);
    // 2 s at 4 Hz: 8 heartbeats of each of the 220, all answered; 2 warm-up ticks before.
    assert_eq!(report.worker.count, 200 * 8);
    assert_eq!(report.client.count, 20 * 8);
    assert_eq!(report.total_requests, 220 * 10);
    assert_eq!(report.workers_with_a_task, 200, "each worker holds its task of the iteration");
    assert_eq!(report.task_changes, 0, "the measured window is the steady state");
    assert!(report.worker.p50 <= report.worker.p99 && report.worker.p99 <= report.worker.max);
    // Clients send back the tasks_version they kept: in the steady state the 200-task list
    // (over 20 kB) is left out of every reply.
    assert!(report.client_reply_bytes < 1_000.0, "{} bytes", report.client_reply_bytes);
    assert!(report.dispatcher_cpu_pct.is_some() && report.generator_cpu_pct.is_some());
    assert!(report.rss.len() >= 3 && report.rss.iter().all(|&(_, kb)| kb > 0), "{:?}", report.rss);

    // The same fleet, pipelined.
    let opts = Options { batch: Duration::from_millis(20), ..opts };
    let report = fleet::run(dispatcher.addr(), &opts).await.expect("the pipelined run succeeds");
    assert_eq!(report.errors, 0, "{:?}", report.first_error);
    assert_eq!(report.worker.count + report.client.count, 220 * 8);
    dispatcher.stop().await;
}
