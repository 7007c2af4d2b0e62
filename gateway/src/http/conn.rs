//! Serving connections with bounded read times (`--read-timeout`), for the dispatcher and the
//! worker alike.
//!
//! * **Headers.** Each HTTP/1 connection is served by hyper with a header read timeout: from
//!   the moment it waits for a request (a new connection, or a kept-alive one after its last
//!   answer) to the end of the request's headers. A client that sends half its headers, or
//!   nothing, is disconnected when it passes (there is no request to answer yet).
//! * **Bodies.** The route layer of `front` reads a request's whole body before the
//!   route's handler runs, within the same bound; a body that does not arrive in time is answered `408` (a problem,
//!   with `Connection: close`). A request without a body (a long poll such as
//!   `GET /v1/cluster?wait=30s`) has nothing to wait for and is not bounded by it.
//!
//! Everything else `serve` does is what `axum::serve` did: `TCP_NODELAY`, the peer's address
//! as `ConnectInfo<SocketAddr>` (the rate limiter's key), and a graceful shutdown that stops
//! accepting, lets in-flight requests finish and closes idle connections.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt as _;

/// The default of `--read-timeout`.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` resolves, then stops gracefully: no new
/// connections, in-flight requests finish, idle connections are closed. Each connection's
/// headers must arrive within `read_timeout`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
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
        let service = app.clone().map_request(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            req.map(Body::new)
        });
        let mut closing = closing_rx.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(read_timeout);
            let conn =
                builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
            let mut conn = std::pin::pin!(conn);
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
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    while connections.join_next().await.is_some() {}
}
