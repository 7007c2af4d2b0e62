//! The fake Kubernetes API server, driven with a raw std TCP client: lists, selectors, watches,
//! history expiry and injected faults. No sleeps: every wait is on the server's condition
//! variable or on a socket read (with a generous timeout as a safety net only).

use std::io;
use std::time::Duration;

use serde_json::{Value, json};
use shardwise_core::cluster::pods::{PodList, WatchEvent, WatchEventType};
use shardwise_tests::fake_k8s::{FakeKube, PodSpec};
use shardwise_tests::rawhttp::{Conn, Request};
use shardwise_tests::{TempDir, http};

/// How long any wait may take before the test fails (never reached when things work).
const PATIENCE: Duration = Duration::from_secs(20);

fn worker(ns: &str, name: &str, ip: &str) -> PodSpec {
    PodSpec::new(ns, name).label("job", "worker").ip(ip).named_port("grpc", 8470)
}

fn get(kube: &FakeKube, path: &str) -> (u16, Value) {
    let r = http("GET", &kube.url(), path, None).expect("request to the fake API server");
    assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    (r.status, r.json())
}

fn names(list: &Value) -> Vec<String> {
    let items = list["items"].as_array().expect("items");
    items.iter().map(|p| p["metadata"]["name"].as_str().expect("name").to_owned()).collect()
}

/// A watch response read chunk by chunk.
struct Watch {
    conn: Conn,
    status: u16,
    headers: Vec<(String, String)>,
}

impl Watch {
    fn open(kube: &FakeKube, path: &str) -> Watch {
        Self::open_with(kube, path, None)
    }

    /// With `Authorization: Bearer TOKEN` when `token` is given.
    fn open_with(kube: &FakeKube, path: &str, token: Option<&str>) -> Watch {
        let mut conn = Conn::open(&kube.url(), PATIENCE).expect("connect");
        conn.send(&Request::new("GET", path).bearer(token)).expect("send");
        let head = conn.read_head().expect("status line and headers");
        Watch { conn, status: head.status, headers: head.headers }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The next event; `Ok(None)` at the terminating chunk (no trailers after it), an error
    /// when the connection ends without it or a chunk does not end with CRLF.
    fn next(&mut self) -> io::Result<Option<Value>> {
        let Some(data) = self.conn.read_chunk()? else { return Ok(None) };
        assert_eq!(data.last(), Some(&b'\n'), "one event per line");
        serde_json::from_slice(&data).map(Some).map_err(io::Error::other)
    }

    fn event(&mut self) -> Value {
        self.next().expect("watch stream").expect("an event, not the end of the stream")
    }

    /// Reads the terminating chunk.
    fn expect_clean_end(&mut self) {
        assert_eq!(self.next().expect("watch stream").map(|v| v.to_string()), None);
    }
}

fn rv_of(event: &Value) -> u64 {
    event["object"]["metadata"]["resourceVersion"].as_str().expect("rv").parse().expect("number")
}

#[test]
fn lists_pods_of_all_namespaces_or_one_with_selectors() {
    let kube = FakeKube::start();
    kube.add_pod(worker("ml", "w-0", "10.0.0.1").label("rank", "0"));
    kube.add_pod(worker("ml", "w-1", "10.0.0.2").label("rank", "1").ready(false));
    kube.add_pod(PodSpec::new("ml", "ps-0").label("job", "ps").ip("10.0.0.3").phase("Pending"));
    kube.add_pod(worker("other", "w-0", "10.1.0.1").host_ip("192.168.0.7").node("n1"));
    let rv = kube.resource_version();
    assert_eq!(rv, 5);

    let (status, all) = get(&kube, "/api/v1/pods");
    assert_eq!(status, 200);
    assert_eq!(all["kind"], "PodList");
    assert_eq!(all["apiVersion"], "v1");
    assert_eq!(all["metadata"], json!({"resourceVersion": "5"}));
    assert_eq!(names(&all), ["ps-0", "w-0", "w-1", "w-0"]);
    let w0 = &all["items"][1];
    assert_eq!(w0["metadata"]["namespace"], "ml");
    assert_eq!(w0["metadata"]["labels"], json!({"job": "worker", "rank": "0"}));
    assert_eq!(w0["metadata"]["resourceVersion"], "2");
    assert_eq!(w0["status"]["podIP"], "10.0.0.1");
    assert_eq!(w0["status"]["phase"], "Running");
    assert!(w0["status"]["conditions"].as_array().unwrap().contains(&json!({
        "type": "Ready", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": "2024-01-01T00:00:00Z"})));
    assert_eq!(
        w0["spec"]["containers"][0]["ports"],
        json!([{"name": "grpc", "containerPort": 8470, "protocol": "TCP"}])
    );
    assert!(w0.get("kind").is_none(), "list items carry no type meta, as in real lists");
    assert!(w0["metadata"].get("deletionTimestamp").is_none());

    // Shardwise's own decoder reads it.
    let decoded = PodList::from_json(&all).expect("Shardwise decodes the list");
    assert_eq!(decoded.resource_version.as_deref(), Some("5"));
    let w1 = &decoded.items[2];
    assert_eq!((w1.name.as_str(), w1.ready), ("w-1", Some(false)));
    let other = &decoded.items[3];
    assert_eq!(other.namespace.as_deref(), Some("other"));
    assert_eq!(other.host_ip.as_deref(), Some("192.168.0.7"));
    assert_eq!(decoded.items[0].phase.as_deref(), Some("Pending"));

    let ml = |query: &str| {
        let (status, list) = get(&kube, &format!("/api/v1/namespaces/ml/pods{query}"));
        assert_eq!(status, 200, "{query}: {list}");
        assert_eq!(list["metadata"]["resourceVersion"], "5");
        names(&list)
    };
    assert_eq!(ml(""), ["ps-0", "w-0", "w-1"]);
    assert_eq!(ml("?labelSelector=job%3Dworker"), ["w-0", "w-1"]);
    assert_eq!(ml("?labelSelector=job%3D%3Dworker%2Crank%3D1"), ["w-1"]);
    assert_eq!(ml("?labelSelector=job!%3Dworker"), ["ps-0"]);
    assert_eq!(ml("?labelSelector=rank+in+%280%2C7%29"), ["w-0"]);
    assert_eq!(ml("?labelSelector=rank%20notin%20(0)"), ["ps-0", "w-1"]);
    assert_eq!(ml("?labelSelector=rank"), ["w-0", "w-1"]);
    assert_eq!(ml("?labelSelector=!rank"), ["ps-0"]);
    assert_eq!(ml("?labelSelector=rank%3E0"), ["w-1"]);
    assert_eq!(ml("?labelSelector=nothing%3Dhere"), Vec::<String>::new());
    assert_eq!(ml("?fieldSelector=metadata.name%3Dw-1"), ["w-1"]);
    assert_eq!(ml("?fieldSelector=status.phase!%3DRunning"), ["ps-0"]);
    assert_eq!(ml("?labelSelector=job%3Dworker&fieldSelector=metadata.name!%3Dw-1"), ["w-0"]);
    // Parameters Shardwise's client sends along are accepted.
    assert_eq!(ml("?resourceVersion=0&timeoutSeconds=30&labelSelector=job%3Dps"), ["ps-0"]);
    let (_, all) = get(&kube, "/api/v1/pods?labelSelector=job%3Dworker&limit=500");
    assert_eq!(names(&all), ["w-0", "w-1", "w-0"]);

    // One pod.
    let (status, pod) = get(&kube, "/api/v1/namespaces/other/pods/w-0");
    assert_eq!(status, 200);
    assert_eq!((&pod["kind"], &pod["apiVersion"]), (&json!("Pod"), &json!("v1")));
    assert_eq!(pod["spec"]["nodeName"], "n1");
    assert_eq!(Some(&pod), kube.pod_json("other", "w-0").as_ref());
    let (status, missing) = get(&kube, "/api/v1/namespaces/other/pods/w-9");
    assert_eq!(status, 404);
    assert_eq!(
        missing,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"w-9\" not found", "reason": "NotFound",
               "details": {"name": "w-9", "kind": "pods"}, "code": 404})
    );
    assert_eq!((kube.list_requests(), kube.get_requests(), kube.watch_requests()), (16, 2, 0));
}

#[test]
fn bad_requests_and_unknown_paths_are_status_objects() {
    let kube = FakeKube::start();
    let (status, body) = get(&kube, "/api/v1/pods?labelSelector=a+in+%28");
    assert_eq!(status, 400);
    assert_eq!(
        (&body["kind"], &body["reason"], &body["code"]),
        (&json!("Status"), &json!("BadRequest"), &json!(400))
    );
    let (status, body) = get(&kube, "/api/v1/pods?fieldSelector=spec.restartPolicy%3DNever");
    assert_eq!(
        (status, body["message"].as_str()),
        (400, Some("field label not supported: spec.restartPolicy"))
    );
    let (status, body) = get(&kube, "/apis/apps/v1/deployments");
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "the server could not find the requested resource",
               "reason": "NotFound", "details": {}, "code": 404})
    );
    let r = http("POST", &kube.url(), "/api/v1/namespaces/ml/pods", Some(&json!({}))).unwrap();
    assert_eq!((r.status, r.json()["reason"].as_str()), (405, Some("MethodNotAllowed")));
    let (status, version) = get(&kube, "/version");
    assert_eq!((status, version["major"].as_str()), (200, Some("1")));
}

#[test]
fn keeps_connections_alive_between_requests() {
    let kube = FakeKube::start();
    kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    let mut conn = Conn::open(&kube.url(), PATIENCE).unwrap();
    for path in ["/api/v1/pods", "/api/v1/namespaces/ml/pods", "/api/v1/namespaces/ml/pods/w-0"] {
        conn.send(&Request::new("GET", path).header("Accept", "application/json")).unwrap();
        let head = conn.read_head().unwrap();
        assert_eq!(head.status_line, "HTTP/1.1 200 OK");
        for (k, v) in &head.headers {
            assert!(!(k == "connection" && v.eq_ignore_ascii_case("close")), "{k}: {v}");
        }
        assert!(head.header("content-length").is_some(), "Content-Length");
        let body = conn.read_body(&head).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["kind"] == "PodList" || v["kind"] == "Pod", "{v}");
    }
    assert_eq!((kube.connections(), kube.requests()), (1, 3));
}

#[test]
fn watch_sends_added_modified_deleted_in_order() {
    let kube = FakeKube::start();
    kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    let (_, list) = get(&kube, "/api/v1/namespaces/ml/pods?labelSelector=job%3Dworker");
    let from = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();

    let mut watch = Watch::open(
        &kube,
        &format!(
            "/api/v1/namespaces/ml/pods?watch=true&labelSelector=job%3Dworker&resourceVersion={from}\
             &allowWatchBookmarks=true&timeoutSeconds=290"
        ),
    );
    assert_eq!(watch.status, 200);
    assert_eq!(watch.header("transfer-encoding"), Some("chunked"));
    assert_eq!(watch.header("content-type"), Some("application/json"));
    assert!(kube.wait_for_watchers(1, PATIENCE));
    assert_eq!(kube.watch_requests(), 1);

    let added = kube.add_pod(worker("ml", "w-1", "10.0.0.2"));
    kube.add_pod(worker("other", "w-1", "10.1.0.2")); // another namespace
    kube.add_pod(PodSpec::new("ml", "ps-0").label("job", "ps")); // another selector
    let modified = kube.update_pod("ml", "w-1", |p| p.ready = Some(false));
    let terminating = kube.terminate_pod("ml", "w-1");
    let deleted = kube.delete_pod("ml", "w-1");

    let mut seen = Vec::new();
    for _ in 0..4 {
        let e = watch.event();
        let decoded = WatchEvent::from_json(&e).expect("Shardwise decodes the event");
        assert_eq!(decoded.pod.as_ref().map(|p| p.name.as_str()), Some("w-1"));
        assert_eq!(e["object"]["kind"], "Pod");
        assert_eq!(e["object"]["apiVersion"], "v1");
        seen.push((e["type"].as_str().unwrap().to_owned(), rv_of(&e), decoded));
    }
    let kinds: Vec<&str> = seen.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    let rvs: Vec<u64> = seen.iter().map(|(_, rv, _)| *rv).collect();
    assert_eq!(rvs, [added, modified, terminating, deleted]);
    assert!(rvs.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(seen[1].2.pod.as_ref().unwrap().ready, Some(false));
    assert!(seen[2].2.pod.as_ref().unwrap().is_terminating());
    assert_eq!(seen[3].2.kind, WatchEventType::Deleted);

    // A bookmark carries the current version.
    kube.send_bookmark();
    let bookmark = watch.event();
    assert_eq!(
        bookmark,
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"resourceVersion": kube.resource_version().to_string()}}})
    );
    assert_eq!(WatchEvent::from_json(&bookmark).unwrap().kind, WatchEventType::Bookmark);

    // The test ends it: the terminating chunk.
    kube.end_watches();
    watch.expect_clean_end();
    assert!(kube.wait_for_watchers_at_most(0, PATIENCE));
}

#[test]
fn watch_without_version_starts_with_the_current_state_and_follows_label_changes() {
    let kube = FakeKube::start();
    kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    kube.add_pod(worker("other", "w-0", "10.1.0.1"));
    kube.add_pod(PodSpec::new("ml", "spare").label("job", "spare"));
    let mut watch = Watch::open(&kube, "/api/v1/watch/pods?labelSelector=job%3Dworker");
    assert_eq!(watch.status, 200);
    let initial: Vec<(String, String)> = (0..2)
        .map(|_| {
            let e = watch.event();
            assert_eq!(e["type"], "ADDED");
            let m = &e["object"]["metadata"];
            (m["namespace"].as_str().unwrap().to_owned(), m["name"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(initial, [("ml".into(), "w-0".into()), ("other".into(), "w-0".into())]);
    assert!(kube.wait_for_watchers(1, PATIENCE));

    // Entering the selector is ADDED, leaving it is DELETED (with the new version).
    let entered = kube.update_pod("ml", "spare", |p| {
        p.labels.insert("job".into(), "worker".into());
    });
    let left = kube.update_pod("ml", "w-0", |p| {
        p.labels.insert("job".into(), "retired".into());
    });
    let e = watch.event();
    assert_eq!((e["type"].as_str(), rv_of(&e)), (Some("ADDED"), entered));
    assert_eq!(e["object"]["metadata"]["name"], "spare");
    let e = watch.event();
    assert_eq!((e["type"].as_str(), rv_of(&e)), (Some("DELETED"), left));
    assert_eq!(e["object"]["metadata"]["labels"]["job"], "worker", "its last matching state");
}

#[test]
fn watch_replays_history_after_the_given_version() {
    let kube = FakeKube::start();
    let start = kube.resource_version();
    let a = kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    let b = kube.update_pod("ml", "w-0", |p| p.phase = Some("Failed".into()));
    let c = kube.delete_pod("ml", "w-0");
    let mut watch = Watch::open(&kube, &format!("/api/v1/pods?watch=1&resourceVersion={start}"));
    let got: Vec<(String, u64)> = (0..3)
        .map(|_| {
            let e = watch.event();
            (e["type"].as_str().unwrap().to_owned(), rv_of(&e))
        })
        .collect();
    assert_eq!(got, [("ADDED".into(), a), ("MODIFIED".into(), b), ("DELETED".into(), c)]);
    // From the middle: only what is newer.
    let mut watch = Watch::open(&kube, &format!("/api/v1/pods?watch=true&resourceVersion={b}"));
    let e = watch.event();
    assert_eq!((e["type"].as_str(), rv_of(&e)), (Some("DELETED"), c));
}

#[test]
fn expired_history_gives_410() {
    let kube = FakeKube::start();
    let old = kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    kube.update_pod("ml", "w-0", |p| p.ready = Some(false));
    kube.expire_history();
    let now = kube.resource_version();

    let mut watch =
        Watch::open(&kube, &format!("/api/v1/namespaces/ml/pods?watch=true&resourceVersion={old}"));
    assert_eq!(watch.status, 200);
    let error = watch.event();
    assert_eq!(
        error,
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
               "status": "Failure", "message": format!("too old resource version: {old} ({now})"),
               "reason": "Expired", "code": 410}})
    );
    assert_eq!(WatchEvent::from_json(&error).unwrap().kind, WatchEventType::Error);
    watch.expect_clean_end();

    // From the current version it works.
    let mut watch =
        Watch::open(&kube, &format!("/api/v1/namespaces/ml/pods?watch=true&resourceVersion={now}"));
    assert!(kube.wait_for_watchers(1, PATIENCE));
    let rv = kube.delete_pod("ml", "w-0");
    assert_eq!(rv_of(&watch.event()), rv);

    // A short history expires by itself.
    kube.set_history_limit(1);
    let first = kube.add_pod(worker("ml", "w-1", "10.0.0.2"));
    kube.add_pod(worker("ml", "w-2", "10.0.0.3"));
    kube.add_pod(worker("ml", "w-3", "10.0.0.4"));
    let mut watch = Watch::open(&kube, &format!("/api/v1/pods?watch=true&resourceVersion={first}"));
    assert_eq!(watch.event()["object"]["code"], 410);
    watch.expect_clean_end();
}

#[test]
fn pages_are_consistent_and_continue_tokens_expire() {
    let kube = FakeKube::start();
    for i in 0..5 {
        kube.add_pod(worker("ml", &format!("w-{i}"), &format!("10.0.0.{i}")));
    }
    let (_, page1) = get(&kube, "/api/v1/namespaces/ml/pods?limit=2");
    assert_eq!(names(&page1), ["w-0", "w-1"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 3);
    let token = page1["metadata"]["continue"].as_str().unwrap().to_owned();
    // Changes after the first page do not show in the next ones.
    kube.delete_pod("ml", "w-2");
    kube.add_pod(worker("ml", "w-9", "10.0.0.9"));
    let (_, page2) = get(&kube, &format!("/api/v1/namespaces/ml/pods?limit=2&continue={token}"));
    assert_eq!(names(&page2), ["w-2", "w-3"]);
    assert_eq!(page2["metadata"]["resourceVersion"], page1["metadata"]["resourceVersion"]);
    let token2 = page2["metadata"]["continue"].as_str().unwrap().to_owned();
    let (_, page3) = get(&kube, &format!("/api/v1/namespaces/ml/pods?limit=2&continue={token2}"));
    assert_eq!(names(&page3), ["w-4"]);
    assert!(page3["metadata"].get("continue").is_none());

    kube.expire_history();
    let (status, body) =
        get(&kube, &format!("/api/v1/namespaces/ml/pods?limit=2&continue={token}"));
    assert_eq!(
        (status, body["reason"].as_str(), body["code"].as_u64()),
        (410, Some("Expired"), Some(410))
    );
}

#[test]
fn injected_failures_are_status_objects_and_run_out() {
    let kube = FakeKube::start();
    kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    kube.fail_next(1, 403);
    let (status, body) = get(&kube, "/api/v1/namespaces/ml/pods?labelSelector=job%3Dworker");
    assert_eq!(status, 403);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods is forbidden: User \"system:serviceaccount:default:shardwise\" \
                           cannot list resource \"pods\" in API group \"\" in the namespace \"ml\"",
               "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
    );
    assert_eq!(get(&kube, "/api/v1/namespaces/ml/pods").0, 200);

    kube.fail_next(2, 500);
    kube.fail_next_with(1, 410, "Gone", "gone for good");
    assert_eq!(get(&kube, "/api/v1/pods").1["reason"], "InternalError");
    // A watch request fails the same way (an HTTP status, not a stream).
    let watch = Watch::open(&kube, "/api/v1/pods?watch=true");
    assert_eq!(watch.status, 500);
    let (status, body) = get(&kube, "/api/v1/pods");
    assert_eq!(
        (status, body["reason"].as_str(), body["message"].as_str()),
        (410, Some("Gone"), Some("gone for good"))
    );
    assert_eq!(get(&kube, "/api/v1/pods").0, 200);
    assert_eq!((kube.list_requests(), kube.watch_requests()), (5, 1));
}

#[test]
fn reset_watches_cuts_the_stream_without_the_terminating_chunk() {
    let kube = FakeKube::start();
    kube.add_pod(worker("ml", "w-0", "10.0.0.1"));
    let mut watch = Watch::open(&kube, "/api/v1/namespaces/ml/pods?watch=true&resourceVersion=0");
    assert_eq!(watch.event()["type"], "ADDED");
    assert!(kube.wait_for_watchers(1, PATIENCE));
    kube.reset_watches();
    assert_eq!(kube.watchers(), 0, "reset watches stop counting at once");
    let err = watch.next().expect_err("the stream is cut, not ended");
    assert!(
        matches!(err.kind(), io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset),
        "{err:?}"
    );
    // A new watch works and sees later changes.
    let mut watch = Watch::open(
        &kube,
        &format!(
            "/api/v1/namespaces/ml/pods?watch=true&resourceVersion={}",
            kube.resource_version()
        ),
    );
    assert!(kube.wait_for_watchers(1, PATIENCE));
    let rv = kube.delete_pod("ml", "w-0");
    assert_eq!(rv_of(&watch.event()), rv);
}

#[test]
fn reset_next_closes_new_connections() {
    let kube = FakeKube::start();
    kube.reset_next(2);
    for _ in 0..2 {
        let r = http("GET", &kube.url(), "/api/v1/pods", None);
        assert!(r.is_err(), "{r:?}");
    }
    assert_eq!(get(&kube, "/api/v1/pods").0, 200);
    assert_eq!((kube.connections(), kube.requests()), (3, 1));
}

#[test]
fn watch_ends_when_the_timeout_elapses_or_the_server_stops() {
    let kube = FakeKube::start();
    let mut watch = Watch::open(&kube, "/api/v1/pods?watch=true&timeoutSeconds=1");
    watch.expect_clean_end();

    let mut watch = Watch::open(&kube, "/api/v1/pods?watch=true");
    assert!(kube.wait_for_watchers(1, PATIENCE));
    drop(kube);
    assert!(watch.next().is_err(), "a stopped server cuts its watches");
}

#[test]
fn a_client_that_hangs_up_stops_counting_as_a_watcher() {
    let kube = FakeKube::start();
    let a = Watch::open(&kube, "/api/v1/pods?watch=true");
    let _b = Watch::open(&kube, "/api/v1/pods?watch=true&labelSelector=x");
    assert!(kube.wait_for_watchers(2, PATIENCE));
    drop(a);
    assert!(kube.wait_for_watchers_at_most(1, PATIENCE));
    assert_eq!(kube.watchers(), 1);
}

#[test]
fn kubeconfig_and_authorization() {
    let kube = FakeKube::start();
    let dir = TempDir::new("fake-k8s");
    let path = kube.kubeconfig(&dir.0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("kind: Config"), "{text}");
    assert!(text.contains(&format!("server: \"{}\"", kube.url())), "{text}");
    assert!(text.contains(&format!("token: \"{}\"", kube.token())), "{text}");
    assert!(text.contains("current-context: fake-kube"), "{text}");

    kube.require_token(true);
    let (status, body) = get(&kube, "/api/v1/pods");
    assert_eq!((status, body["reason"].as_str()), (401, Some("Unauthorized")));
    assert_eq!(kube.last_authorization(), None);
    let mut watch = Watch::open_with(&kube, "/api/v1/pods?watch=true", Some(kube.token()));
    assert_eq!(watch.status, 200);
    assert_eq!(kube.last_authorization(), Some(format!("Bearer {}", kube.token())));
    assert!(kube.wait_for_watchers(1, PATIENCE));
    kube.end_watches();
    watch.expect_clean_end();
}
