//! Live Kubernetes: the real `shardwise` binary against a fake Kubernetes API server on
//! 127.0.0.1 that speaks the v1 wire format (lists, watches, 403, 410 Gone, resets).
//!
//! The dispatcher finds the fake through `KUBECONFIG`, as it would find a real cluster.
//! Changes are followed with `GET /v1/cluster?after=VERSION&wait=…` (a long poll), and the
//! fake's condition variables (`wait_for_watchers`, ...), never with sleeps.

use std::time::Duration;

use serde_json::{Value, json};
use shardwise_tests::fake_k8s::{FakeKube, PodSpec};
use shardwise_tests::{Dispatcher, HttpResponse, TempDir, run_shardwise};

const WAIT: Duration = Duration::from_secs(20);

fn worker(name: &str, ip: &str) -> PodSpec {
    PodSpec::new("ml", name).label("job-name", "tensorflow").ip(ip).port(8470)
}

fn config(dir: &TempDir) -> String {
    let path = format!("{}/cluster.json", dir.path());
    let request = json!({
        "resolver": {"kubernetes": {
            "job_to_label_mapping": {"worker": ["job-name=tensorflow"]},
            "namespace": "ml"
        }},
        "task_type": "worker",
        "task_id": 0
    });
    std::fs::write(&path, request.to_string()).expect("write the cluster config");
    path
}

struct Setup {
    kube: FakeKube,
    dispatcher: Dispatcher,
    _dir: TempDir,
}

fn start(name: &str, pods: &[PodSpec]) -> Setup {
    let dir = TempDir::new(name);
    let kube = FakeKube::start();
    for p in pods {
        kube.add_pod(p.clone());
    }
    let kubeconfig = kube.kubeconfig(std::path::Path::new(dir.path()));
    let cfg = config(&dir);
    let dispatcher = Dispatcher::try_start_env(
        &["--cluster-config", &cfg],
        &[("KUBECONFIG", kubeconfig.to_str().expect("utf-8 path"))],
    )
    .unwrap_or_else(|e| panic!("dispatcher did not start: {e}"));
    // The watch opens after the first list: from then on the view is served.
    assert!(kube.wait_for_watchers(1, WAIT), "no watch opened: {}", dispatcher.output());
    Setup { kube, dispatcher, _dir: dir }
}

fn cluster(d: &Dispatcher) -> Value {
    let r = d.call("GET", "/v1/cluster", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// Long-polls `GET /v1/cluster` until `done` holds for the view (bounded).
fn wait_for(d: &Dispatcher, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut view = cluster(d);
    for _ in 0..50 {
        if done(&view) {
            return view;
        }
        let version = view["freshness"]["version"].as_u64().expect("version");
        let r = d.call("GET", &format!("/v1/cluster?after={version}&wait=10s"), None);
        assert_eq!(r.status, 200, "{}", r.body);
        view = r.json();
    }
    panic!("never saw {what}; last view {view:#}\n{}", d.output());
}

#[test]
fn the_cluster_follows_pods_through_the_watch_with_stable_indices() {
    let s = start("live-follow", &[worker("w-0", "10.0.0.1"), worker("w-1", "10.0.0.2")]);
    let view = cluster(&s.dispatcher);
    assert_eq!(view["cluster"], json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]}));
    assert_eq!(view["master"], "grpc://10.0.0.1:8470");
    assert_eq!(view["freshness"]["live"], true);
    assert_eq!(view["freshness"]["stale"], false);
    assert_eq!(view["freshness"]["watches"][0]["selector"], "job-name=tensorflow");
    assert_eq!(view["freshness"]["watches"][0]["namespace"], "ml");
    // The API was asked with the kubeconfig's token.
    assert_eq!(s.kube.last_authorization(), Some(format!("Bearer {}", s.kube.token())));

    // A new pod takes the next index.
    s.kube.add_pod(worker("w-2", "10.0.0.3"));
    let view = wait_for(&s.dispatcher, "three workers", |v| {
        v["cluster"]["worker"].as_array().is_some_and(|a| a.len() == 3)
    });
    assert_eq!(view["cluster"]["worker"][2], "10.0.0.3:8470");
    // A pod in another namespace with the label is not ours.
    s.kube.add_pod(PodSpec::new("other", "x").label("job-name", "tensorflow").ip("10.9.9.9"));
    // The first pod leaves: the others keep their indices (the job becomes sparse), unlike a
    // fresh list, which would renumber them.
    s.kube.delete_pod("ml", "w-0");
    let view = wait_for(&s.dispatcher, "w-0 gone", |v| v["cluster"]["worker"].is_object());
    assert_eq!(view["cluster"], json!({"worker": {"1": "10.0.0.2:8470", "2": "10.0.0.3:8470"}}));
    // The task of this process (worker 0) is not in the cluster any more: no master.
    assert_eq!(view["master"], Value::Null);
    // A pod that stops being ready... is still a task unless require_ready; one that stops
    // running leaves; a replacement fills the lowest free index.
    s.kube.update_pod("ml", "w-1", |p| *p = p.clone().phase("Failed"));
    s.kube.add_pod(worker("w-3", "10.0.0.4"));
    let view = wait_for(&s.dispatcher, "w-3 in slot 0", |v| {
        v["cluster"]["worker"].get("0").is_some_and(|a| a == "10.0.0.4:8470")
            && v["cluster"]["worker"].get("1").is_none()
    });
    assert_eq!(view["cluster"], json!({"worker": {"0": "10.0.0.4:8470", "2": "10.0.0.3:8470"}}));
}

#[test]
fn api_failures_keep_the_last_good_membership_and_report_staleness() {
    let s = start("live-stale", &[worker("w-0", "10.0.0.1")]);
    let before = cluster(&s.dispatcher);
    assert_eq!(before["freshness"]["stale"], false);
    // The watch is cut and every call is refused from now on.
    s.kube.fail_next(1_000_000, 403);
    s.kube.reset_watches();
    let view = wait_for(&s.dispatcher, "a stale view refused with 403", |v| {
        v["freshness"]["stale"] == true
            && v["freshness"]["watches"][0]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("403"))
    });
    assert_eq!(view["cluster"], before["cluster"], "the last good membership is kept");
    let error = view["freshness"]["watches"][0]["last_error"].as_str().expect("an error");
    assert!(error.contains("403"), "{error}");
    assert!(!error.contains(s.kube.token()), "the token leaked: {error}");
    assert_eq!(view["freshness"]["watches"][0]["healthy"], false);
    assert!(view["freshness"]["stale_for_ms"].is_u64(), "{view:#}");
    // A pod changes while the API refuses; once it answers again, the change arrives and
    // the view is fresh.
    s.kube.add_pod(worker("w-1", "10.0.0.2"));
    s.kube.clear_faults();
    let view = wait_for(&s.dispatcher, "a fresh view with w-1", |v| {
        v["freshness"]["stale"] == false
            && v["cluster"]["worker"].as_array().is_some_and(|a| a.len() == 2)
    });
    assert_eq!(view["freshness"]["stale_for_ms"], Value::Null);
    assert_eq!(view["freshness"]["watches"][0]["last_error"], Value::Null);
    assert!(!s.dispatcher.output().contains(s.kube.token()), "the token was logged");
}

#[test]
fn an_expired_watch_lists_again() {
    let s = start("live-gone", &[worker("w-0", "10.0.0.1")]);
    assert_eq!(cluster(&s.dispatcher)["freshness"]["watches"][0]["lists"], 1);
    // Changes happen while the watch is down, and the history that would replay them is
    // gone: resuming gets 410, and only a new list can catch up.
    s.kube.reset_watches();
    s.kube.add_pod(worker("w-1", "10.0.0.2"));
    s.kube.expire_history();
    let view = wait_for(&s.dispatcher, "a re-list with w-1", |v| {
        v["freshness"]["watches"][0]["lists"] == 2
            && v["cluster"]["worker"].as_array().is_some_and(|a| a.len() == 2)
    });
    assert_eq!(view["cluster"], json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]}));
    assert_eq!(view["freshness"]["stale"], false);
    assert!(s.kube.list_requests() >= 2);
}

#[test]
fn the_watch_resumes_after_a_normal_end_without_listing_again() {
    let s = start("live-resume", &[worker("w-0", "10.0.0.1")]);
    let watches = s.kube.watch_requests();
    s.kube.end_watches();
    assert!(s.kube.wait_for_watch_requests(watches + 1, WAIT), "the watch was not resumed");
    assert!(s.kube.wait_for_watchers(1, WAIT));
    s.kube.add_pod(worker("w-1", "10.0.0.2"));
    let view = wait_for(&s.dispatcher, "w-1", |v| {
        v["cluster"]["worker"].as_array().is_some_and(|a| a.len() == 2)
    });
    assert_eq!(view["freshness"]["watches"][0]["lists"], 1, "resumed, not re-listed");
}

#[test]
fn resolve_without_inline_pods_asks_the_api() {
    let dir = TempDir::new("live-resolve");
    let kube = FakeKube::start();
    kube.add_pod(worker("w-0", "10.0.0.1"));
    kube.add_pod(worker("w-1", "10.0.0.2"));
    let kubeconfig = kube.kubeconfig(std::path::Path::new(dir.path()));
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    let request = json!({
        "resolver": {"kubernetes": {"job_to_label_mapping": {"worker": ["job-name=tensorflow"]}}},
        "task_type": "worker", "task_id": 1
    });
    // Over HTTP.
    let d = Dispatcher::try_start_env(&[], &[("KUBECONFIG", kubeconfig)]).expect("start");
    let r = d.call("POST", "/v1/cluster/resolve", Some(request.clone()));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cluster"], json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]}));
    assert_eq!(r.json()["master"], "grpc://10.0.0.2:8470");
    // The API refuses: 503 UNAVAILABLE naming the refusal, no token in the body.
    kube.fail_next(1, 403);
    let r: HttpResponse = d.call("POST", "/v1/cluster/resolve", Some(request.clone()));
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["code"], "UNAVAILABLE");
    assert!(r.json()["detail"].as_str().unwrap().contains("403"), "{}", r.body);
    assert!(!r.body.contains(kube.token()));
    // From the command line.
    let run = run_shardwise(&["resolve"], &request.to_string(), &[("KUBECONFIG", kubeconfig)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["cluster"], json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]}));
}

#[test]
fn without_a_kubernetes_api_a_resolve_without_pods_is_a_failed_precondition() {
    let dir = TempDir::new("live-noapi");
    let missing = format!("{}/no-such-kubeconfig", dir.path());
    let request = json!({"resolver": {"kubernetes": {}}});
    let run = run_shardwise(
        &["resolve"],
        &request.to_string(),
        &[("KUBECONFIG", &missing), ("KUBERNETES_SERVICE_HOST", "")],
    );
    assert_eq!(run.code, 1);
    assert_eq!(run.json()["code"], "FAILED_PRECONDITION", "{}", run.stdout);
    assert!(run.json()["detail"].as_str().unwrap().contains("inline"), "{}", run.stdout);
}

#[test]
fn cluster_config_errors_stop_startup_and_get_cluster_needs_one() {
    let dir = TempDir::new("live-config-errors");
    let bad = format!("{}/bad.json", dir.path());
    std::fs::write(
        &bad,
        r#"{"resolver": {"kubernetes": {"job_to_label_mapping": {"w": ["a in"]}}}}"#,
    )
    .unwrap();
    let Err(err) = Dispatcher::try_start(&["--cluster-config", &bad]) else { panic!("started") };
    assert!(err.contains("--cluster-config") && err.contains("Some(2)"), "{err}");
    let missing = format!("{}/missing.json", dir.path());
    let Err(err) = Dispatcher::try_start(&["--cluster-config", &missing]) else {
        panic!("started")
    };
    assert!(err.contains("cannot read"), "{err}");

    // A static cluster is served, not live.
    let simple = format!("{}/simple.json", dir.path());
    std::fs::write(
        &simple,
        json!({"resolver": {"simple": {"cluster": {"worker": ["a:1", "b:2"]}}}}).to_string(),
    )
    .unwrap();
    let d = Dispatcher::start(&["--cluster-config", &simple]);
    let view = cluster(&d);
    assert_eq!(view["cluster"], json!({"worker": ["a:1", "b:2"]}));
    assert_eq!(view["freshness"]["live"], false);
    for bad_query in ["after=x", "wait=forever", "color=blue"] {
        let r = d.call("GET", &format!("/v1/cluster?{bad_query}"), None);
        assert_eq!(r.status, 400, "{bad_query}: {}", r.body);
        assert_eq!(r.json()["code"], "INVALID_ARGUMENT");
    }
    // A long poll with nothing changing answers after its wait with the same view.
    let r = d.call("GET", "/v1/cluster?after=0&wait=50ms", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["cluster"], view["cluster"]);

    let plain = Dispatcher::start(&[]);
    let r = plain.call("GET", "/v1/cluster", None);
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.json()["detail"].as_str().unwrap().contains("--cluster-config"));
}
