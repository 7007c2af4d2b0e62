//! `--auth-tokens`: every role against the routes it may and may not call, over HTTP.

use serde_json::json;
use shardwise_tests::{Dispatcher, TempDir, http};

const ADMIN: &str = "admin-token-0123456789";
const WORKER: &str = "worker-token-0123456789";
const CLIENT: &str = "client-token-0123456789";

fn call(
    d: &Dispatcher,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, String) {
    use std::io::{Read, Write};
    let host = d.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}", payload.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, out)
}

#[test]
fn roles_are_enforced_and_tokens_never_echoed() {
    let dir = TempDir::new("auth");
    let file = dir.0.join("tokens.json");
    std::fs::write(&file, json!({"tokens": [
        {"role": "admin", "token": ADMIN}, {"role": "worker", "token": WORKER}, {"role": "client", "token": CLIENT}
    ]}).to_string()).unwrap();
    let d = Dispatcher::start(&["--auth-tokens", file.to_str().unwrap()]);
    // Open routes.
    assert_eq!(http("GET", &d.url, "/healthz", None).unwrap().status, 200);
    assert_eq!(http("GET", &d.url, "/openapi.json", None).unwrap().status, 200);
    // No token, a wrong token: 401 with a problem body and WWW-Authenticate.
    let (st, raw) = call(&d, "GET", "/v1/version", None, None);
    assert_eq!(st, 401);
    assert!(raw.to_ascii_lowercase().contains("www-authenticate: bearer"), "{raw}");
    assert!(raw.contains("\"code\":\"UNAUTHENTICATED\""), "{raw}");
    let (st, raw) = call(&d, "GET", "/v1/version", Some("not-a-real-token-at-all"), None);
    assert_eq!(st, 401);
    assert!(!raw.contains("not-a-real-token-at-all"), "the token is not echoed");
    // Every role may read the version.
    for t in [ADMIN, WORKER, CLIENT] {
        assert_eq!(call(&d, "GET", "/v1/version", Some(t), None).0, 200);
    }
    // Client routes.
    let ds = json!({"dataset": {"source": {"range": {"stop": 3}}}});
    assert_eq!(call(&d, "POST", "/v1/datasets", Some(CLIENT), Some(ds.clone())).0, 200);
    let (st, raw) = call(&d, "POST", "/v1/datasets", Some(WORKER), Some(ds.clone()));
    assert_eq!(st, 403);
    assert!(raw.contains("\"code\":\"PERMISSION_DENIED\"") && !raw.contains(WORKER), "{raw}");
    assert_eq!(call(&d, "POST", "/v1/datasets", Some(ADMIN), Some(ds)).0, 200);
    // Worker routes.
    let hb = json!({"worker_address": "w:1"});
    assert_eq!(call(&d, "POST", "/v1/workers/heartbeat", Some(WORKER), Some(hb.clone())).0, 200);
    assert_eq!(call(&d, "POST", "/v1/workers/heartbeat", Some(CLIENT), Some(hb)).0, 403);
    // Admin-only routes.
    assert_eq!(call(&d, "GET", "/v1/workers", Some(CLIENT), None).0, 403);
    assert_eq!(call(&d, "GET", "/v1/workers", Some(WORKER), None).0, 403);
    assert_eq!(call(&d, "GET", "/v1/workers", Some(ADMIN), None).0, 200);
    assert_eq!(call(&d, "GET", "/metrics", Some(ADMIN), None).0, 200);
    // Nothing the dispatcher printed contains a token.
    let printed = d.output();
    for t in [ADMIN, WORKER, CLIENT] {
        assert!(!printed.contains(t), "token in the output");
    }
}

#[test]
fn bad_token_files_refuse_to_start() {
    let dir = TempDir::new("authbad");
    let file = dir.0.join("tokens.json");
    for text in [
        "{",
        r#"{"tokens": []}"#,
        r#"{"tokens": [{"role": "god", "token": "0123456789abcdefgh"}]}"#,
    ] {
        std::fs::write(&file, text).unwrap();
        let err = Dispatcher::try_start(&["--auth-tokens", file.to_str().unwrap()]).unwrap_err();
        assert!(
            err.contains("exited with Some(2)") && err.contains("--auth-tokens"),
            "{text}: {err}"
        );
    }
    let err = Dispatcher::try_start(&["--auth-tokens", "/nonexistent/tokens.json"]).unwrap_err();
    assert!(err.contains("cannot read --auth-tokens"), "{err}");
}
