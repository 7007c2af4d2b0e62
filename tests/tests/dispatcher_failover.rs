//! "Any address works", on the client side: `shardwise worker --dispatcher A,B,C` and the Rust
//! client's `distribute` over several URLs, in front of a real `shardwise dispatcher`, with a
//! dead address (a port bound, then closed) and a fake follower in process that answers as a
//! replica on etcd does: `307 Temporary Redirect` with `Location: <leader><path and query>`
//! and a problem+json body whose `leader` member is the leader's URL.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_gateway::client::{Dispatchers, DistributeOptions, distribute};
use shardwise_tests::{Dispatcher, Worker, ints, ok, runtime};

const WORKER: &[&str] = &["--heartbeat-interval", "200ms"];

/// A fake replica on `127.0.0.1:0` on `rt`: a follower redirecting every request to
/// `leader` (307 + Location + problem+json `leader`), or, without a leader, a plain server
/// answering `{}`. Returns its URL and how many requests it got.
fn fake(rt: &tokio::runtime::Runtime, leader: Option<String>) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&count);
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        n.fetch_add(1, Ordering::SeqCst);
        let response = match &leader {
            Some(leader) => {
                let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
                let body = json!({
                    "type": "urn:shardwise:problem:unavailable",
                    "title": "Temporary redirect",
                    "status": 307,
                    "detail": format!("this replica follows; the leader is {leader}"),
                    "code": "UNAVAILABLE",
                    "leader": leader,
                });
                axum::response::Response::builder()
                    .status(307)
                    .header("location", format!("{leader}{path}"))
                    .header("content-type", "application/problem+json")
                    .body(axum::body::Body::from(body.to_string()))
            }
            None => axum::response::Response::builder()
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{}")),
        };
        async move { response.expect("a response") }
    });
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    rt.spawn(async move { axum::serve(listener, app).await });
    (url, count)
}

/// A URL nothing listens on: a port bound, then closed (connection refused).
fn dead() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("http://{}", l.local_addr().expect("address"))
}

/// Reads a whole `distributed_epoch` of `range(stop)` through `dispatchers` (bounded to 60 s).
fn read_all(rt: &tokio::runtime::Runtime, dispatchers: impl Dispatchers, stop: u64) -> Vec<Value> {
    let dataset = DatasetDef::from_json(&json!({"source": {"range": {"stop": stop}}})).unwrap();
    let options = DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        unavailable_timeout: Duration::from_secs(30),
        ..shardwise_tests::fast_options()
    };
    rt.block_on(async {
        let read = distribute(dispatchers, dataset, options).try_collect::<Vec<Value>>();
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the epoch ends in time")
            .expect("the whole epoch")
    })
}

fn sorted(values: &[Value]) -> Vec<i64> {
    let mut v = ints(values);
    v.sort_unstable();
    v
}

/// `dead,follower,real`: the worker registers through the list (the dead address refused,
/// the follower's redirect to the real dispatcher followed) and runs its task; a client over
/// the same list reads the whole dataset, its splits served through the worker's failover.
#[test]
fn worker_and_client_fail_over_past_a_dead_address_and_a_follower() {
    let rt = runtime();
    let d = Dispatcher::start(&[]);
    let (follower, follower_calls) = fake(&rt, Some(d.url.clone()));
    let list = format!("{},{follower},{}", dead(), d.url);
    let w = Worker::start(&list, WORKER);
    let workers = ok(&d.call("GET", "/v1/workers", None));
    assert!(workers.to_string().contains(w.address()), "registered: {workers}");
    assert!(follower_calls.load(Ordering::SeqCst) >= 1, "the worker went through the follower");

    let before = follower_calls.load(Ordering::SeqCst);
    let all = read_all(&rt, list.as_str(), 500);
    assert_eq!(sorted(&all), (0..500).collect::<Vec<i64>>());
    assert!(follower_calls.load(Ordering::SeqCst) > before, "the client went through it too");
    // A list given item by item (the idiomatic form) works the same.
    let all = read_all(&rt, [dead(), follower.clone(), d.url.clone()], 50);
    assert_eq!(sorted(&all), (0..50).collect::<Vec<i64>>());
    assert!(!w.output().contains("incarnation"), "no dispatcher change seen as a restart");
}

/// A follower that redirects outside the configured list: the redirect target is never called
/// (the worker's token must not go there), the next configured URL is, and the worker warns.
#[test]
fn a_redirect_outside_the_list_is_never_followed() {
    let rt = runtime();
    let d = Dispatcher::start(&[]);
    let (outside, outside_calls) = fake(&rt, None);
    let (rogue, rogue_calls) = fake(&rt, Some(outside.clone()));
    let list = format!("{},{rogue},{}", dead(), d.url);
    let w = Worker::start(&list, WORKER);
    assert!(rogue_calls.load(Ordering::SeqCst) >= 1, "the worker asked the rogue follower");
    let all = read_all(&rt, format!("{rogue},{}", d.url), 100);
    assert_eq!(sorted(&all), (0..100).collect::<Vec<i64>>());
    assert!(
        w.wait_for_output("redirected to an address that is not configured"),
        "the worker warns: {}",
        w.output()
    );
    assert_eq!(w.output().matches("not configured").count(), 1, "once: {}", w.output());
    assert_eq!(outside_calls.load(Ordering::SeqCst), 0, "the outside address was never called");
}

/// A list with a bad address is a usage error naming it.
#[test]
fn a_bad_address_in_the_list_is_a_usage_error() {
    let d = Dispatcher::start(&[]);
    let e = Worker::try_start(&format!("{},ftp://d.example:1", d.url), &[]).unwrap_err();
    assert!(e.starts_with("exited with Some(2)"), "{e}");
    assert!(e.contains("--dispatcher: \"ftp://d.example:1\" is not an http:// or https://"), "{e}");
    assert!(e.contains("(address 2 of 2)"), "{e}");
}
