//! The load generator's bare axum yardstick answers the shapes its workloads check, so a
//! `--compare` run measures what it says it measures.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

async fn call(addr: std::net::SocketAddr, method: Method, path: &str, body: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a request");
    let res = sender.send_request(req).await.expect("an answer");
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.expect("a body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bare_server_answers_health_and_steady_heartbeats() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(shardwise_examples::bare::serve(listener));
    for path in ["/healthz", "/readyz"] {
        assert_eq!(call(addr, Method::GET, path, "").await, (200, r#"{"status":"ok"}"#.into()));
    }
    let hb = r#"{"worker_address":"127.0.0.1:20000","current_tasks":[7]}"#;
    let (status, body) = call(addr, Method::POST, "/v1/workers/heartbeat", hb).await;
    assert_eq!(status, 200, "{body}");
    // What the generator's `worker_hb` workload checks of a steady-state reply.
    assert!(body.contains(r#""new_tasks":[]"#) && body.contains(r#""tasks_to_delete":[]"#));
    assert!(body.contains(r#""current":1"#), "the body was decoded: {body}");
    // A body it cannot decode is refused, as any axum JSON route refuses it.
    let (status, _) = call(addr, Method::POST, "/v1/workers/heartbeat", "{").await;
    assert!((400..500).contains(&status), "{status}");
}
