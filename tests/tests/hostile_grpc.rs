//! Hostile gRPC connections against the real `shardwise dispatcher` binary, driven with a raw
//! HTTP/2 client (the `h2` crate) so that a test can do what no well-behaved gRPC client does:
//! grant no flow-control window, never read its replies, send malformed length-prefixed
//! frames, stall in the middle of a request message.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_tests::graphs::{range_graph, weights};
use shardwise_tests::tf_fake::dispatcher_client as client;
use shardwise_tests::{Dispatcher, http};
use tonic::codegen::Bytes;
use tonic::codegen::http::{HeaderMap, Request};

const GET_DATASET_DEF: &str = "/tensorflow.data.DispatcherService/GetDatasetDef";
const GET_VERSION: &str = "/tensorflow.data.DispatcherService/GetVersion";

/// `range(0, 10)` as TensorFlow serializes it, plus a `Const` node of `bytes` bytes (a model's
/// weights captured by the dataset, say).
fn big_graph(bytes: usize) -> Vec<u8> {
    range_graph(0, 10, 1, vec![weights("weights", bytes)])
}

/// Registers a TensorFlow dataset whose graph is `bytes` bytes and more: its id.
async fn register_big(url: &str, bytes: usize) -> String {
    let req = tf::GetOrRegisterDatasetRequest {
        dataset: Some(tf::DatasetDef { graph: big_graph(bytes).into() }),
        metadata: Some(tf::DataServiceMetadata {
            optional_element_spec: None,
            compression: 1,
            cardinality: 10,
        }),
        optional_dataset_id: None,
    };
    client(url)
        .await
        .get_or_register_dataset(req)
        .await
        .expect("registered")
        .into_inner()
        .dataset_id
}

/// A message as one gRPC length-prefixed frame (uncompressed).
fn frame(msg: &impl prost::Message) -> Vec<u8> {
    let body = msg.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&u32::try_from(body.len()).expect("small").to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The resident set of process `pid`, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a process");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).expect("a number").parse().expect("a number");
    kib * 1024
}

/// `host:port` of `http://host:port`.
fn authority(url: &str) -> &str {
    url.strip_prefix("http://").expect("an http URL")
}

/// An HTTP/2 connection to the dispatcher at `url`, granting `window` bytes of flow-control
/// window per stream; the connection is driven in the background.
async fn h2_connect(url: &str, window: u32) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(authority(url)).await.expect("connected");
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("an HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// A gRPC request of `path` (headers only; the body is sent on the stream).
fn grpc_request(url: &str, path: &str) -> Request<()> {
    Request::post(format!("{url}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request")
}

/// Sends `body` on a new stream of `send` (ending the stream when `end`): the reply's future.
async fn start_call(
    send: &h2::client::SendRequest<Bytes>,
    url: &str,
    path: &str,
    body: Vec<u8>,
    end: bool,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut send = send.clone().ready().await.expect("a stream");
    let (reply, mut stream) = send.send_request(grpc_request(url, path), false).expect("sent");
    stream.send_data(Bytes::from(body), end).expect("sent");
    (reply, stream)
}

/// The `grpc-status` of a call's answer (trailers-only, or after its messages), with its
/// `grpc-message`.
async fn grpc_status(reply: h2::client::ResponseFuture) -> (String, String) {
    let (parts, mut body) = reply.await.expect("an answer").into_parts();
    let from = |h: &HeaderMap| {
        let get = |k: &str| h.get(k).map(|v| v.to_str().unwrap_or("?").to_owned());
        get("grpc-status").map(|s| (s, get("grpc-message").unwrap_or_default()))
    };
    if let Some(status) = from(&parts.headers) {
        return status;
    }
    while let Some(data) = body.data().await {
        let data = data.expect("data");
        let _ = body.flow_control().release_capacity(data.len());
    }
    let trailers = body.trailers().await.expect("trailers").expect("trailers");
    from(&trailers).expect("a grpc-status")
}

/// One HTTP/2 connection that grants no flow-control window and opens many
/// `GetDatasetDef` streams of a 15 MiB graph, never reading them, held every reply in memory
/// (about 2 GB for 128 streams) and slowed every other caller. The replies a connection has
/// not read are bounded: the dispatcher's memory stays within a bound, `/healthz` answers
/// promptly on another connection meanwhile, and the replies flow once the connection is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_reads_no_replies_cannot_make_the_dispatcher_hold_them_all() {
    const GRAPH: usize = 15 << 20;
    const STREAMS: usize = 128;
    let d = Dispatcher::start(&["--max-body-bytes", "33554432"]);
    let pid = d.child.id();
    let id = register_big(&d.url, GRAPH).await;
    // One honest read first: the allocator's pools for a reply of this size are there before
    // the baseline.
    let mut honest = client(&d.url).await;
    let def = honest.get_dataset_def(tf::GetDatasetDefRequest { dataset_id: id.clone() }).await;
    assert!(def.expect("read").into_inner().dataset_def.expect("a def").graph.len() > GRAPH);
    let baseline = rss_bytes(pid);

    let hostile = h2_connect(&d.url, 0).await;
    let request = frame(&tf::GetDatasetDefRequest { dataset_id: id.clone() });
    let answered = Arc::new(Mutex::new(Vec::new()));
    for _ in 0..STREAMS {
        let (reply, stream) =
            start_call(&hostile, &d.url, GET_DATASET_DEF, request.clone(), true).await;
        let answered = answered.clone();
        tokio::spawn(async move {
            // The answer's headers, and then its body held, never read.
            if let Ok(res) = reply.await {
                answered.lock().expect("lock").push((res, stream));
            }
        });
    }
    // Some replies are under way (their headers came); the rest wait their turn, or came too.
    shardwise_tests::poll_until("replies begin", Duration::from_secs(30), || {
        let n = answered.lock().expect("lock").len();
        if n >= 2 { Ok(()) } else { Err(n) }
    });
    let mut peak = 0;
    let mut slowest = Duration::ZERO;
    let url = d.url.clone();
    for _ in 0..10 {
        peak = peak.max(rss_bytes(pid));
        let url = url.clone();
        let started = Instant::now();
        let health = tokio::task::spawn_blocking(move || http("GET", &url, "/healthz", None))
            .await
            .expect("joined")
            .expect("an answer");
        assert_eq!(health.status, 200, "{}", health.body);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "{STREAMS} unread GetDatasetDef streams: {} of {STREAMS} answered, RSS +{} MiB \
         (baseline {} MiB), slowest /healthz {slowest:?}",
        answered.lock().expect("lock").len(),
        grown >> 20,
        baseline >> 20
    );
    assert!(grown < 300 << 20, "the dispatcher grew by {} MiB", grown >> 20);
    assert!(slowest < Duration::from_secs(1), "/healthz took {slowest:?}");

    // The connection goes: what it held is released, and an honest reader is served.
    drop(hostile);
    answered.lock().expect("lock").clear();
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        honest.get_dataset_def(tf::GetDatasetDefRequest { dataset_id: id }),
    );
    let def = read.await.expect("answered in time").expect("read").into_inner();
    assert!(def.dataset_def.expect("a def").graph.len() > GRAPH);
}

/// Malformed length-prefixed frames are the caller's error, `INVALID_ARGUMENT`, whatever their
/// shape: a length prefix longer than the body, bytes after the message, no message at all,
/// two messages in a unary call. The dispatcher keeps serving.
#[tokio::test]
async fn malformed_grpc_frames_are_invalid_argument() {
    let d = Dispatcher::start(&[]);
    let conn = h2_connect(&d.url, 1 << 20).await;
    let one = frame(&tf::GetVersionRequest {});
    let mut too_long = vec![0, 0, 0, 0, 100];
    too_long.extend_from_slice(&[0; 10]);
    let mut trailing = one.clone();
    trailing.extend_from_slice(&[0, 0, 0]);
    let mut two = one.clone();
    two.extend_from_slice(&one);
    let shapes = [
        ("a length prefix longer than the body", too_long),
        ("bytes after the message", trailing),
        ("no message", Vec::new()),
        ("two messages in a unary call", two),
    ];
    for (what, body) in shapes {
        let (reply, _stream) = start_call(&conn, &d.url, GET_VERSION, body, true).await;
        let (status, message) =
            tokio::time::timeout(Duration::from_secs(10), grpc_status(reply)).await.expect(what);
        assert_eq!(status, "3", "{what}: {message}");
        assert!(!message.is_empty(), "{what}");
    }
    // A well-formed call on the same connection is answered.
    let (reply, _stream) = start_call(&conn, &d.url, GET_VERSION, one, true).await;
    assert_eq!(grpc_status(reply).await.0, "0");
}

/// A request message that stops arriving is answered at `--read-timeout` (as REST answers
/// 408), not held for the 30 s call bound: `DEADLINE_EXCEEDED`, naming the flag, and the stream
/// is closed.
#[tokio::test]
async fn a_stalled_grpc_request_message_is_answered_at_the_read_timeout() {
    let d = Dispatcher::start(&["--read-timeout", "300ms"]);
    let conn = h2_connect(&d.url, 1 << 20).await;
    // The frame's header promises 20 bytes; 2 come, then nothing (the stream stays open).
    let started = Instant::now();
    let (reply, mut stream) =
        start_call(&conn, &d.url, GET_VERSION, vec![0, 0, 0, 0, 20, 1, 2], false).await;
    let (status, message) = tokio::time::timeout(Duration::from_secs(10), grpc_status(reply))
        .await
        .expect("answered before the 30 s call bound");
    assert_eq!(status, "4", "DEADLINE_EXCEEDED: {message}");
    assert!(message.contains("--read-timeout"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // The stream is closed (reset by the server): the rest of the message has nowhere to go.
    let reset = std::future::poll_fn(|cx| stream.poll_reset(cx));
    let reset = tokio::time::timeout(Duration::from_secs(5), reset).await;
    assert!(reset.is_ok(), "the stream was left open");
}

/// What one HTTP/2 connection uploading stalled bodies made of the dispatcher.
struct Stalled {
    /// The dispatcher's resident set grew by this much at most.
    grown: u64,
    /// `/healthz` on another connection took this long.
    slowest: Duration,
    /// The answers of the streams.
    replies: Vec<h2::client::ResponseFuture>,
    /// Ends the senders (their streams stay open until then).
    stop: tokio::sync::watch::Sender<bool>,
}

/// The time `/healthz` of `d` takes to answer 200.
async fn health(d: &Dispatcher) -> Duration {
    let url = d.url.clone();
    let started = Instant::now();
    let answer = tokio::task::spawn_blocking(move || http("GET", &url, "/healthz", None))
        .await
        .expect("joined")
        .expect("an answer");
    assert_eq!(answer.status, 200, "{}", answer.body);
    started.elapsed()
}

/// Opens `streams` streams of `request()` on one HTTP/2 connection to `d`, each sending `head`
/// and then `body` bytes as fast as flow control lets it, and never ending: until every byte
/// went or none went for a second (the dispatcher stopped taking them).
async fn stalled_uploads(
    d: &Dispatcher,
    streams: usize,
    request: impl Fn() -> Request<()>,
    head: &[u8],
    body: usize,
) -> Stalled {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pid = d.child.id();
    health(d).await;
    let baseline = rss_bytes(pid);
    let conn = h2_connect(&d.url, 1 << 20).await;
    let zeros = Bytes::from(vec![b'0'; 1 << 20]);
    let sent = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut replies = Vec::new();
    for _ in 0..streams {
        let mut send = conn.clone().ready().await.expect("a stream");
        let (reply, mut stream) = send.send_request(request(), false).expect("sent");
        replies.push(reply);
        let (zeros, sent, mut stopped) = (zeros.clone(), sent.clone(), stopped.clone());
        let head = Bytes::copy_from_slice(head);
        tokio::spawn(async move {
            let _ = stream.send_data(head, false);
            let mut left = body;
            while left > 0 {
                stream.reserve_capacity(left.min(zeros.len()));
                let granted = tokio::select! {
                    granted = std::future::poll_fn(|cx| stream.poll_capacity(cx)) => granted,
                    _ = stopped.changed() => return,
                };
                let Some(Ok(n)) = granted else { return };
                let n = n.min(left);
                if stream.send_data(zeros.slice(..n), false).is_err() {
                    return;
                }
                sent.fetch_add(n, Ordering::SeqCst);
                left -= n;
            }
            // Stalled, the stream open, until the test ends.
            let _ = stopped.changed().await;
        });
    }
    let (mut peak, mut last, mut still) = (0, usize::MAX, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        peak = peak.max(rss_bytes(pid));
        let now = sent.load(Ordering::SeqCst);
        if now == streams * body {
            break;
        }
        still = if now == last { still + 1 } else { 0 };
        if still >= 5 {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    peak = peak.max(rss_bytes(pid));
    let slowest = health(d).await;
    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "{streams} stalled uploads of {} MiB: {} MiB sent, RSS +{} MiB (baseline {} MiB), \
         /healthz {slowest:?}",
        body >> 20,
        sent.load(Ordering::SeqCst) >> 20,
        grown >> 20,
        baseline >> 20
    );
    Stalled { grown, slowest, replies, stop }
}

/// One HTTP/2 connection opened many streams, each uploading most of a request
/// message as large as `--max-body-bytes` allows and then stalling, and the dispatcher read
/// every one into memory (256 streams of 16 MiB: 4 GiB per connection; 48 of 15 MiB took
/// +724 MiB). The request bytes a connection has buffered are bounded
/// (`--max-request-bytes-per-connection`, and `--max-request-bytes` in all): the dispatcher's
/// memory stays within a bound, `/healthz` answers on another connection meanwhile, and a
/// stream that found no room is answered `RESOURCE_EXHAUSTED` at the read timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_uploading_many_stalled_bodies_cannot_make_the_dispatcher_buffer_them_all() {
    const BODY: usize = 15 << 20;
    let d = Dispatcher::start(&["--read-timeout", "10s"]);
    // The message promises one more MiB than is sent: it never ends.
    let mut head = vec![0u8];
    head.extend_from_slice(&u32::try_from(BODY + (1 << 20)).expect("small").to_be_bytes());
    let stalled = stalled_uploads(&d, 48, || grpc_request(&d.url, GET_VERSION), &head, BODY).await;
    assert!(stalled.grown < 250 << 20, "the dispatcher grew by {} MiB", stalled.grown >> 20);
    assert!(stalled.slowest < Duration::from_secs(1), "/healthz took {:?}", stalled.slowest);

    // At the read timeout every stream is answered: those that found no room in the budget
    // RESOURCE_EXHAUSTED, naming the flag.
    let mut exhausted = 0;
    for reply in stalled.replies {
        let (status, message) = tokio::time::timeout(Duration::from_secs(30), grpc_status(reply))
            .await
            .expect("answered at the read timeout");
        if status == "8" {
            assert!(message.contains("--max-request-bytes-per-connection"), "{message}");
            exhausted += 1;
        } else {
            assert_eq!(status, "4", "DEADLINE_EXCEEDED: {message}");
        }
    }
    assert!(exhausted > 0, "no stream was refused for want of room");
    let _ = stalled.stop.send(true);
    health(&d).await;
}

/// The same over REST: one HTTP/2 connection whose streams each send most of a JSON body of
/// 15 MiB to `POST /v1/jobs` and stall. The dispatcher stays within a bound, and the streams
/// that found no room are answered 503 problem+json naming the flag at the read timeout (the
/// others 408).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_bodies_of_one_connection_are_budgeted_too() {
    const BODY: usize = 15 << 20;
    let d = Dispatcher::start(&["--read-timeout", "10s"]);
    let request = || {
        Request::post(format!("{}/v1/jobs", d.url))
            .header("content-type", "application/json")
            .body(())
            .expect("a request")
    };
    let stalled = stalled_uploads(&d, 48, request, b"{\"name\": \"", BODY).await;
    assert!(stalled.grown < 250 << 20, "the dispatcher grew by {} MiB", stalled.grown >> 20);
    assert!(stalled.slowest < Duration::from_secs(1), "/healthz took {:?}", stalled.slowest);

    let mut exhausted = 0;
    for reply in stalled.replies {
        let answer = tokio::time::timeout(Duration::from_secs(30), reply)
            .await
            .expect("answered at the read timeout")
            .expect("an answer");
        let (parts, mut body) = answer.into_parts();
        let mut text = Vec::new();
        while let Some(data) = body.data().await {
            let data = data.expect("data");
            let _ = body.flow_control().release_capacity(data.len());
            text.extend_from_slice(&data);
        }
        let text = String::from_utf8_lossy(&text);
        match parts.status.as_u16() {
            503 => {
                let ct = parts.headers.get("content-type").expect("a content type");
                assert_eq!(ct, "application/problem+json");
                assert!(text.contains("--max-request-bytes-per-connection"), "{text}");
                exhausted += 1;
            }
            status => assert_eq!(status, 408, "{text}"),
        }
    }
    assert!(exhausted > 0, "no stream was refused for want of room");
    let _ = stalled.stop.send(true);
    health(&d).await;
}
