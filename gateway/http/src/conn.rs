//! Serving connections with bounded read times (`--read-timeout`), for the dispatcher and the
//! worker alike, in HTTP/1.1 and in HTTP/2 over cleartext (prior knowledge, as gRPC clients
//! speak it) on the same port; or all of it over TLS (`--tls-cert`, [`super::tls`]).
//!
//! * **TLS.** With a server config, every connection is TLS: the handshake (ALPN `h2` or
//!   `http/1.1`) and then the first bytes must arrive within the read timeout, else the
//!   connection is closed (a client that connects and sends nothing, or stalls mid-handshake,
//!   holds nothing for longer). A plain-HTTP request to a TLS port fails the handshake and is
//!   closed. Inside TLS the protocol is decided as below (an `h2` client sends the preface).
//!
//! * **Protocol.** A connection whose first bytes are HTTP/2's connection preface
//!   (`PRI * HTTP/2.0...`) is served as HTTP/2, any other as HTTP/1.1. The first bytes must
//!   arrive within the read timeout (else the connection is closed); an HTTP/1 request differs
//!   from the preface at its first or second byte, so it is decided at its first read.
//! * **Headers.** Each HTTP/1 connection is served by hyper with a header read timeout: from
//!   the moment it waits for a request (a new connection, or a kept-alive one after its last
//!   answer) to the end of the request's headers. A client that sends half its headers, or
//!   nothing, is disconnected when it passes (there is no request to answer yet). An HTTP/2
//!   connection has its preface bounded the same way, a bounded header list per stream
//!   ([`H2_MAX_HEADER_LIST_BYTES`]), at most [`H2_MAX_CONCURRENT_STREAMS`] streams at once,
//!   at most [`H2_MAX_SEND_BUF_BYTES`] of each stream's answer queued unwritten, and keepalive
//!   pings that close it when the peer stops answering.
//! * **Bodies.** The route layer of `front` reads a request's whole body before the
//!   route's handler runs, within the same bound; a body that does not arrive in time is answered `408` (a problem,
//!   with `Connection: close`). The bytes of bodies being read are bounded per connection and
//!   in total when `serve` is given budgets ([`super::budget`]: the dispatcher's
//!   `--max-request-bytes-per-connection` and `--max-request-bytes`): a body that finds no room
//!   is not read further (HTTP/2 flow control stops its sender) and is refused at the read
//!   timeout (`503`). A body larger than `--max-body-bytes` is answered `413` at once and the
//!   rest of it read and discarded, within bounds, so that the client reads the answer
//!   ([`super::linger`]). A request without a body (a long poll such as
//!   `GET /v1/cluster?wait=30s`) has nothing to wait for and is not bounded by it.
//! * **gRPC.** A request with `content-type: application/grpc...` goes to the server's
//!   [`GrpcService`] when it has one (the dispatcher's `tensorflow.data.DispatcherService`),
//!   as hyper gave it (no router, no boxed body, no connect-info extension: it gets the peer's
//!   address as an argument), which reads its message within the read timeout too; every other
//!   request goes to the REST app. Each connection gets its own copy of the gRPC service
//!   ([`GrpcService::for_connection`]: the dispatcher bounds per connection the bytes of
//!   replies its peer has not read).
//!
//! Everything else `serve` does is what `axum::serve` did: `TCP_NODELAY`, the peer's address
//! as `ConnectInfo<SocketAddr>` (the rate limiter's key), and a graceful shutdown that stops
//! accepting, lets in-flight requests finish and closes idle connections.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::header;
use futures::FutureExt as _;
use futures::future::Either;
use futures::stream::{FuturesUnordered, StreamExt as _};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tower::ServiceExt as _;

use super::budget::{ReplyBudgets, RequestBudget};

/// The default of `--read-timeout`.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2: streams one connection may have open at once.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 256;
/// HTTP/2: the largest header list of one request (names and values, decoded).
pub const H2_MAX_HEADER_LIST_BYTES: u32 = 64 << 10;
/// HTTP/2: the bytes of one stream's answer queued for the connection and not yet written
/// (hyper asks the answer's body for more only below this; the default is 400 KiB). With
/// [`H2_MAX_CONCURRENT_STREAMS`], about 32 MiB per connection that does not read.
pub const H2_MAX_SEND_BUF_BYTES: usize = 128 << 10;
/// HTTP/2: a ping is sent after this long without frames from the peer...
pub const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// ...and the connection is closed when its answer does not come within this.
pub const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// HTTP/2's connection preface (RFC 9113, section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a request is a gRPC call (`content-type: application/grpc`, `+proto`, ...).
pub fn is_grpc<B>(req: &axum::http::Request<B>) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// What serves a server's gRPC requests: each request as hyper gave it, with the peer's
/// address; the answer, whatever happened (a refusal is a gRPC status).
pub trait GrpcService: Clone + Send + Sync + 'static {
    /// The service of one new connection (what it keeps per connection starts afresh, e.g. the
    /// dispatcher's budget of reply bytes not yet written).
    fn for_connection(&self) -> Self {
        self.clone()
    }

    /// Answers `req`, which came from `peer`.
    fn serve(
        &self,
        req: axum::http::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = axum::response::Response> + Send + use<Self>;
}

/// A router serves gRPC requests like any other (tests; servers without gRPC).
impl GrpcService for Router {
    fn serve(
        &self,
        mut req: axum::http::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = axum::response::Response> + Send + use<> {
        req.extensions_mut().insert(ConnectInfo(peer));
        let call = self.clone().oneshot(req.map(Body::new));
        async move {
            match call.await {
                Ok(res) => res,
                Err(never) => match never {},
            }
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops gracefully: no new
/// connections, in-flight requests finish, idle connections are closed. Each connection's
/// headers must arrive within `read_timeout`. gRPC requests go to `grpc` when given. With
/// `tls`, every connection is TLS (its handshake within `read_timeout` too). With `requests`,
/// each connection gets its budget of request bodies from it, on each of its requests as a
/// [`RequestBudget`] extension (which the body readers take their bytes from).
pub async fn serve<G: GrpcService>(
    listener: tokio::net::TcpListener,
    app: Router,
    grpc: Option<G>,
    requests: Option<ReplyBudgets>,
    tls: Option<Arc<rustls::ServerConfig>>,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut shutdown = std::pin::pin!(shutdown);
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        enum Next {
            Conn(std::io::Result<(tokio::net::TcpStream, SocketAddr)>),
            Reaped,
            Stop,
        }
        let next = tokio::select! {
            () = &mut shutdown => Next::Stop,
            accepted = listener.accept() => Next::Conn(accepted),
            Some(_) = connections.join_next(), if !connections.is_empty() => Next::Reaped,
        };
        let (tcp, peer) = match next {
            Next::Stop => break,
            Next::Reaped => continue,
            Next::Conn(Ok(accepted)) => accepted,
            Next::Conn(Err(e)) => {
                // A connection that failed before it was accepted concerns that peer only;
                // anything else (out of file descriptors) is the whole server's: wait a
                // little, as `axum::serve` does, rather than spin.
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionRefused
                ) {
                    tracing::error!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                continue;
            }
        };
        // TCP_NODELAY: a client that pipelines gets its replies as they are written, not held
        // back by Nagle's algorithm until the previous one is acknowledged (a delayed ACK,
        // ~40 ms).
        let _ = tcp.set_nodelay(true);
        let (app, grpc) = (app.clone(), grpc.as_ref().map(GrpcService::for_connection));
        let budget = requests.as_ref().map(|b| RequestBudget(b.connection()));
        let service = tower::service_fn(move |mut req: Request<Incoming>| {
            if let Some(budget) = &budget {
                req.extensions_mut().insert(budget.clone());
            }
            match &grpc {
                Some(grpc) if is_grpc(&req) => Either::Left(grpc.serve(req, peer).map(Ok)),
                _ => {
                    req.extensions_mut().insert(ConnectInfo(peer));
                    Either::Right(app.clone().oneshot(req.map(Body::new)))
                }
            }
        });
        let service = TowerToHyperService::new(service);
        let mut closing = closing_rx.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            // The TLS handshake, then the first bytes, all within the read timeout.
            let opened = async move {
                let io = match tls {
                    None => Io::Tcp(tcp),
                    Some(acceptor) => Io::Tls(Box::new(acceptor.accept(tcp).await?)),
                };
                sniff(io).await
            };
            let sniffed = tokio::select! {
                s = tokio::time::timeout(read_timeout, opened) => s,
                _ = closing.wait_for(|c| *c) => return,
            };
            let (io, h2) = match sniffed {
                Ok(Ok(sniffed)) => sniffed,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "connection ended before a request");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "no request within the read timeout; closing");
                    return;
                }
            };
            let io = TokioIo::new(io);
            // The same steps for either protocol: serve until the connection ends, or until
            // the server closes (then finish in-flight requests and close).
            macro_rules! drive {
                ($conn:expr) => {{
                    let mut conn = std::pin::pin!($conn);
                    tokio::select! {
                        r = conn.as_mut() => {
                            if let Err(e) = r {
                                tracing::debug!(%peer, error = %e, "connection ended");
                            }
                            return;
                        }
                        _ = closing.wait_for(|c| *c) => {}
                    }
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }};
            }
            if h2 {
                let streams = Inline::default();
                let mut builder = hyper::server::conn::http2::Builder::new(streams.clone());
                builder
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
                    .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
                    .max_send_buf_size(H2_MAX_SEND_BUF_BYTES)
                    .keep_alive_interval(H2_KEEPALIVE_INTERVAL)
                    .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT);
                let conn = builder.serve_connection(io, service);
                let closed = streams
                    .drive(conn, closing.wait_for(|c| *c), |conn| conn.graceful_shutdown())
                    .await;
                if let Err(e) = closed {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
            } else {
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.timer(TokioTimer::new()).header_read_timeout(read_timeout);
                drive!(builder.serve_connection(io, service));
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    while connections.join_next().await.is_some() {}
}

/// A stream of an HTTP/2 connection, as hyper hands it to its executor.
type Stream = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor of an HTTP/2 connection: its streams (one per request) run inside the
/// connection's own task ([`Inline::drive`]) rather than in a task each. A request then costs
/// no task spawn, and its answer is written in the same poll that read it, by the same thread,
/// without waking another. Streams still run concurrently (a stream that waits does not hold
/// up the others); what they give up is running in parallel on several threads, which the
/// dispatcher's calls (microseconds under one core lock) do not need.
#[derive(Clone, Default)]
struct Inline(Arc<Mutex<Vec<Stream>>>);

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Inline {
    fn execute(&self, stream: F) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(Box::pin(stream));
    }
}

impl Inline {
    /// Drives `conn` and the streams it starts until the connection ends; when `closing`
    /// resolves first, `shutdown` starts the connection's graceful shutdown. Streams still
    /// running when the connection ends are driven to their end too (as spawned tasks were).
    async fn drive<C: Future<Output = hyper::Result<()>>>(
        self,
        conn: C,
        closing: impl Future,
        shutdown: impl FnOnce(Pin<&mut C>),
    ) -> hyper::Result<()> {
        let mut conn = std::pin::pin!(conn);
        let mut closing = std::pin::pin!(closing);
        let mut shutdown = Some(shutdown);
        let mut running = FuturesUnordered::new();
        let relay = Arc::new(Relay::default());
        let waker = Waker::from(relay.clone());
        let closed = std::future::poll_fn(|cx| {
            if shutdown.is_some()
                && closing.as_mut().poll(cx).is_ready()
                && let Some(shutdown) = shutdown.take()
            {
                shutdown(conn.as_mut());
            }
            relay.start(cx.waker());
            let mut inner = Context::from_waker(&waker);
            for _ in 0..RELAY_ROUNDS {
                let closed = conn.as_mut().poll(&mut inner);
                running.extend(std::mem::take(
                    &mut *self.0.lock().unwrap_or_else(PoisonError::into_inner),
                ));
                while let Poll::Ready(Some(())) = running.poll_next_unpin(&mut inner) {}
                if closed.is_ready() {
                    relay.stop();
                    return closed;
                }
                // Woken meanwhile (a stream queued its answer: the connection writes it now;
                // or new frames came): another round.
                if relay.finish() {
                    return Poll::Pending;
                }
            }
            // Still woken after many rounds (tokio's cooperative budget, say): yield.
            relay.stop();
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
        while running.next().await.is_some() {}
        closed
    }
}

/// Rounds of one poll of an HTTP/2 connection and its streams before it yields.
const RELAY_ROUNDS: usize = 16;

/// The waker an HTTP/2 connection and its streams are polled with ([`Inline::drive`]). A wake
/// while they are being polled (a stream that answered wakes its connection to write the
/// answer) only asks for another round of the same poll; a wake at any other time wakes the
/// connection's task. A task that woke itself would be queued again, and tokio wakes an idle
/// worker thread for it: one more thread switch per request.
#[derive(Default)]
struct Relay {
    /// [`IDLE`], [`POLLING`] or [`WOKEN`].
    state: AtomicU8,
    /// The task's waker, as of its last poll.
    task: Mutex<Option<Waker>>,
}

/// Not being polled: a wake wakes the task.
const IDLE: u8 = 0;
/// Being polled: a wake asks for another round.
const POLLING: u8 = 1;
/// Being polled, and woken meanwhile.
const WOKEN: u8 = 2;

impl Relay {
    /// A poll begins, with the task's `waker`.
    fn start(&self, waker: &Waker) {
        {
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            if !task.as_ref().is_some_and(|t| t.will_wake(waker)) {
                *task = Some(waker.clone());
            }
        }
        self.state.store(POLLING, Ordering::SeqCst);
    }

    /// A round ends: `true` when the poll may end (nothing woke it meanwhile); else another
    /// round begins.
    fn finish(&self) -> bool {
        match self.state.compare_exchange(POLLING, IDLE, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => true,
            Err(_) => {
                self.state.store(POLLING, Ordering::SeqCst);
                false
            }
        }
    }

    /// The poll ends whatever woke it.
    fn stop(&self) {
        self.state.store(IDLE, Ordering::SeqCst);
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let polling =
            self.state.compare_exchange(POLLING, WOKEN, Ordering::SeqCst, Ordering::SeqCst);
        if matches!(polling, Ok(_) | Err(WOKEN)) {
            return;
        }
        if let Some(task) = &*self.task.lock().unwrap_or_else(PoisonError::into_inner) {
            task.wake_by_ref();
        }
    }
}

/// A connection: plain TCP, or TLS over it.
#[derive(Debug)]
enum Io {
    Tcp(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
}

/// Delegates a poll to the stream inside.
macro_rules! io_poll {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Io::Tcp($s) => $e,
            Io::Tls($s) => $e,
        }
    };
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        io_poll!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        io_poll!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        io_poll!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Tcp(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        io_poll!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        io_poll!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// Reads a connection's first bytes until they are, or cannot be, HTTP/2's preface: the
/// connection with those bytes put back in front, and whether it speaks HTTP/2. An error when
/// the peer closes first. (Over TLS the same: a client that negotiated ALPN `h2` sends the
/// preface first, one with `http/1.1` or no ALPN a request.)
async fn sniff(mut tcp: Io) -> std::io::Result<(Prefixed, bool)> {
    let mut head = [0u8; H2_PREFACE.len()];
    let mut len = 0;
    let h2 = loop {
        let n = tcp.read(&mut head[len..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        len += n;
        if head[..len] != H2_PREFACE[..len] {
            break false;
        }
        if len == H2_PREFACE.len() {
            break true;
        }
    };
    Ok((Prefixed { head: head[..len].to_vec(), at: 0, tcp }, h2))
}

/// A connection whose first bytes were read already: they are read again first.
#[derive(Debug)]
struct Prefixed {
    head: Vec<u8>,
    at: usize,
    tcp: Io,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.at);
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use hyper_util::rt::TokioExecutor;
    use tokio::io::AsyncWriteExt as _;

    async fn server(grpc: Option<Router>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/who", get(|| async { "rest" }));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(
            listener,
            app,
            grpc,
            None,
            None,
            Duration::from_millis(300),
            async move {
                let _ = rx.await;
            },
        ));
        (addr, tx)
    }

    /// HTTP/1.1 and HTTP/2 with prior knowledge on one port; gRPC content types go to the
    /// gRPC router, everything else to the REST app, in either protocol.
    #[tokio::test]
    async fn one_port_serves_http1_and_http2_and_routes_grpc_by_content_type() {
        let grpc = Router::new().route("/who", axum::routing::post(|| async { "grpc" }));
        let (addr, _stop) = server(Some(grpc)).await;
        let url = format!("http://{addr}/who");
        let h1 = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::system_client_config())
            .http1_only()
            .build()
            .unwrap();
        let r = h1.get(&url).send().await.unwrap();
        assert_eq!(r.version(), reqwest::Version::HTTP_11);
        assert_eq!(r.text().await.unwrap(), "rest");

        // HTTP/2 prior knowledge, by hand (reqwest is built without its http2 feature).
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        for (content_type, method, want) in [
            ("application/json", "GET", "rest"),
            ("application/grpc", "POST", "grpc"),
            ("application/grpc+proto", "POST", "grpc"),
        ] {
            let req = axum::http::Request::builder()
                .method(method)
                .uri(&url)
                .header(header::CONTENT_TYPE, content_type)
                .body(http_body_util::Empty::<axum::body::Bytes>::new())
                .unwrap();
            let res = send.send_request(req).await.unwrap();
            assert_eq!(res.version(), axum::http::Version::HTTP_2);
            let body = http_body_util::BodyExt::collect(res.into_body()).await.unwrap();
            assert_eq!(body.to_bytes(), want.as_bytes(), "{content_type}");
        }
    }

    /// A connection that sends nothing, or only the start of the HTTP/2 preface, is closed
    /// after the read timeout.
    #[tokio::test]
    async fn a_silent_or_half_preface_connection_is_closed_after_the_read_timeout() {
        let (addr, _stop) = server(None).await;
        for sent in [&b""[..], &H2_PREFACE[..10]] {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(sent).await.unwrap();
            let started = std::time::Instant::now();
            let mut buf = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut buf));
            let n = read.await.expect("closed in time").unwrap_or(0);
            assert_eq!(n, 0, "{sent:?}");
            assert!(started.elapsed() < Duration::from_secs(5), "{sent:?}");
        }
    }

    /// An HTTP/2 request to `path` on `send`, its body as text.
    async fn h2_get(
        send: &mut hyper::client::conn::http2::SendRequest<
            http_body_util::Empty<axum::body::Bytes>,
        >,
        addr: SocketAddr,
        path: &str,
    ) -> String {
        let req = axum::http::Request::builder()
            .uri(format!("http://{addr}{path}"))
            .body(http_body_util::Empty::<axum::body::Bytes>::new())
            .unwrap();
        let res = send.send_request(req).await.unwrap();
        let body = http_body_util::BodyExt::collect(res.into_body()).await.unwrap();
        String::from_utf8(body.to_bytes().to_vec()).unwrap()
    }

    /// The streams of one HTTP/2 connection run in its task, yet concurrently: a request that
    /// waits does not hold up the next one on the same connection (which here is what it waits
    /// for).
    #[tokio::test]
    async fn a_waiting_http2_request_does_not_hold_up_the_next_on_its_connection() {
        let go = Arc::new(tokio::sync::Notify::new());
        let (wait, fire) = (go.clone(), go.clone());
        let app = Router::new()
            .route(
                "/wait",
                get(move || async move {
                    wait.notified().await;
                    "waited"
                }),
            )
            .route(
                "/go",
                get(move || async move {
                    fire.notify_one();
                    "went"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(
            listener,
            app,
            None::<Router>,
            None,
            None,
            Duration::from_secs(5),
            async move {
                let _ = rx.await;
            },
        ));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        let mut first = send.clone();
        let waiting = tokio::spawn(async move { h2_get(&mut first, addr, "/wait").await });
        // Let the first request reach its handler before the second is sent.
        tokio::task::yield_now().await;
        let mut second = send.clone();
        let both = async { (h2_get(&mut second, addr, "/go").await, waiting.await.unwrap()) };
        let (went, waited) = tokio::time::timeout(Duration::from_secs(10), both).await.unwrap();
        assert_eq!((went.as_str(), waited.as_str()), ("went", "waited"));
    }

    /// A server that closes lets an HTTP/2 request in flight finish and answers it.
    #[tokio::test]
    async fn an_http2_request_in_flight_is_answered_when_the_server_closes() {
        let entered = Arc::new(tokio::sync::Notify::new());
        let inside = entered.clone();
        let app = Router::new().route(
            "/slow",
            get(move || async move {
                inside.notify_one();
                tokio::time::sleep(Duration::from_millis(200)).await;
                "done"
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            app,
            None::<Router>,
            None,
            None,
            Duration::from_secs(5),
            async move {
                let _ = rx.await;
            },
        ));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        let call = tokio::spawn(async move { h2_get(&mut send, addr, "/slow").await });
        entered.notified().await;
        stop.send(()).unwrap();
        let answered = tokio::time::timeout(Duration::from_secs(10), call).await.unwrap().unwrap();
        assert_eq!(answered, "done");
        tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap();
    }
}
