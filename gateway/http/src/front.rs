//! The per-request work every Shardwise server does around its handlers, in two hand-written
//! tower services instead of a stack of layers (each `from_fn` layer boxed
//! a future and cloned a boxed service per request, and every layer armed its own timer).
//!
//! * `FrontLayer`, around the whole router (every route, the fallback, wrong methods; a server
//!   puts it there with [`common_layers`](crate::common_layers)):
//!   the request id (kept from `x-request-id` or generated, echoed on every answer), the
//!   request span (only when `info` logging is on), the request [`limits`](super::limit)
//!   (declared body size, rate, requests in flight), the body limit the extractors apply,
//!   a 30 s timeout, caught panics as `INTERNAL` problems, and a problem body for answers
//!   that have none.
//! * [`RouteLayer`], around each documented route (after routing, so it knows the route
//!   template): the per-route metrics, the bearer-token check, and reading the whole body
//!   within `--read-timeout` before the handler runs (see [`super::conn`]).
//!
//! Timers are armed lazily: a request (or a body read) that completes on its first poll, as an
//! in-memory call or a body that came with its headers does, arms none. Only one that has to
//! wait gets a deadline, counted from the call (the request timeout) or from the first wait
//! (the body read).

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;
use tower::{Layer, Service};
use tracing::Instrument as _;

use super::budget::{Growing, RequestBudget, Short, Waiting};
use super::linger::{Discard, answer_then_discard, expects_continue};
use super::problem::{Code, Problem, code_of_status};
use super::{auth, limit, metrics};

/// The request id header.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest a request may take, from routing to its answer (then `503`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// Awaits `fut`, bounded by `deadline` (computed only if needed): a future that is ready on
/// its first poll arms no timer.
pub async fn within<F: Future>(fut: F, deadline: impl FnOnce() -> Instant) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    if let Poll::Ready(v) = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        return Some(v);
    }
    tokio::time::timeout_at(deadline().into(), fut).await.ok()
}

// ---------------------------------------------------------------------------------------
// Around the router.

/// Request ids for requests that bring none: `<process start, hex>-<counter, hex>`, unique
/// per process and cheaper than a random UUID (no `getrandom` call per request).
#[derive(Debug)]
struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl RequestIds {
    fn make(&self) -> HeaderValue {
        use std::fmt::Write as _;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut s = String::with_capacity(self.prefix.len() + 17);
        s.push_str(&self.prefix);
        let _ = write!(s, "-{n:x}");
        // Hex digits and `-` only: always a valid header value.
        HeaderValue::from_maybe_shared(Bytes::from(s))
            .unwrap_or_else(|_| HeaderValue::from_static("-"))
    }
}

#[derive(Debug)]
struct Shared {
    who: &'static str,
    limits: limit::Limits,
    body_limit: DefaultBodyLimit,
    ids: RequestIds,
    timeout: Duration,
    /// What is read of a body refused for its declared size.
    discard: Discard,
}

/// The layer around a whole router: see the [module](self) docs.
#[derive(Debug, Clone)]
pub(crate) struct FrontLayer(Arc<Shared>);

impl FrontLayer {
    /// For the server named `who` (in panic messages) with these limits.
    pub(crate) fn new(who: &'static str, limits: limit::LimitConfig) -> FrontLayer {
        Self::with_timeout(who, limits, REQUEST_TIMEOUT)
    }

    /// Like [`FrontLayer::new`], with another request timeout (tests).
    pub(crate) fn with_timeout(
        who: &'static str,
        limits: limit::LimitConfig,
        timeout: Duration,
    ) -> FrontLayer {
        FrontLayer(Arc::new(Shared {
            who,
            body_limit: DefaultBodyLimit::max(limits.max_body_bytes),
            limits: limit::Limits::new(limits),
            ids: RequestIds { prefix: super::incarnation(), next: AtomicU64::new(0) },
            timeout,
            discard: Discard::new(limits.max_body_bytes, limits.read_timeout),
        }))
    }
}

impl<S> Layer<S> for FrontLayer {
    type Service = Front<S>;
    fn layer(&self, inner: S) -> Front<S> {
        Front { inner, shared: self.0.clone() }
    }
}

/// The service of [`FrontLayer`].
#[derive(Debug, Clone)]
pub(crate) struct Front<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Service<Request> for Front<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> BoxFuture {
        let started = Instant::now();
        let shared = &self.shared;
        let id = match req.headers().get(&X_REQUEST_ID) {
            Some(v) => v.clone(),
            None => {
                let v = shared.ids.make();
                req.headers_mut().insert(X_REQUEST_ID, v.clone());
                v
            }
        };
        let span = request_span(&req, &id);
        let permit = match shared.limits.admit(&req) {
            Ok(permit) => permit,
            Err(refused) => {
                log_answer(refused.status(), started.elapsed());
                let mut res = answer(refused, id);
                if res.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    // A declared body over the limit, not read: answered so that the client
                    // reads the answer while it is still sending.
                    let (version, expects) = (req.version(), expects_continue(req.headers()));
                    res =
                        answer_then_discard(res, req.into_body(), version, expects, shared.discard);
                }
                return Box::pin(std::future::ready(Ok(res)));
            }
        };
        shared.body_limit.apply(&mut req);
        let who = shared.who;
        let timeout = shared.timeout;
        // A panic while building the handler's future, or while polling it, is a bug answered
        // as a problem; the process keeps serving.
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.call(req)));
        Box::pin(
            async move {
                let _permit = permit;
                tracing::debug!("started processing request");
                let res = match call {
                    Err(_) => panicked(who),
                    Ok(fut) => {
                        match within(AssertUnwindSafe(fut).catch_unwind(), || started + timeout)
                            .await
                        {
                            None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                            Some(Err(_)) => panicked(who),
                            Some(Ok(Ok(res))) => {
                                log_answer(res.status(), started.elapsed());
                                res
                            }
                            Some(Ok(Err(never))) => match never {},
                        }
                    }
                };
                Ok(answer(res, id))
            }
            .instrument(span),
        )
    }
}

/// The request's span: filled only when request logging (`debug`) is on, so a server at the
/// default level says nothing per request.
fn request_span(req: &Request, id: &HeaderValue) -> tracing::Span {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return tracing::Span::none();
    }
    let id = id.to_str().unwrap_or("-");
    tracing::debug_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
}

/// `INTERNAL`: the handler panicked.
fn panicked(who: &str) -> Response {
    Problem::new(
        Code::Internal,
        format!("the {who} hit a bug handling this request (a panic was caught)"),
    )
    .into_response()
}

/// A 503 is an answer the callers retry by design (not ready yet, overloaded, a journal that
/// stopped, which is logged on its own): a warning. Any other server error is an error.
fn log_answer(status: StatusCode, latency: Duration) {
    tracing::debug!(
        latency_ms = latency.as_millis(),
        status = status.as_u16(),
        "finished processing request"
    );
    if !status.is_server_error() {
        return;
    }
    let ms = latency.as_millis();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        tracing::warn!(latency_ms = ms, "answered 503 Service Unavailable");
    } else {
        tracing::error!(status = %status, latency_ms = ms, "request failed");
    }
}

/// Every answer: a problem body if it is an error without one, and the request id.
fn answer(res: Response, id: HeaderValue) -> Response {
    let mut res = problem_for_empty_errors(res);
    res.headers_mut().entry(X_REQUEST_ID).or_insert(id);
    res
}

/// Middleware answers (timeouts, limits, axum's rejections) may carry no problem body: give
/// them one.
pub(crate) fn problem_for_empty_errors(res: Response) -> Response {
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let is_problem = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if is_problem {
        return res;
    }
    let code = code_of_status(status.as_u16());
    let mut p = Problem::new(code, status.canonical_reason().unwrap_or("error").to_owned());
    p.status = status.as_u16();
    p.into_response()
}

// ---------------------------------------------------------------------------------------
// Around each route.

#[derive(Debug)]
struct RouteShared {
    metrics: Option<Arc<metrics::RouteMetrics>>,
    tokens: Option<auth::Tokens>,
    read_timeout: Duration,
    max_body_bytes: usize,
}

/// The layer around each documented route: see the [module](self) docs.
#[derive(Debug, Clone)]
pub struct RouteLayer(Arc<RouteShared>);

impl RouteLayer {
    /// Counts into `metrics` (if any), checks `tokens` (if any), reads bodies within the
    /// limits.
    pub fn new(
        metrics: Option<Arc<metrics::RouteMetrics>>,
        tokens: Option<auth::Tokens>,
        limits: &limit::LimitConfig,
    ) -> RouteLayer {
        RouteLayer(Arc::new(RouteShared {
            metrics,
            tokens,
            read_timeout: limits.read_timeout,
            max_body_bytes: limits.max_body_bytes,
        }))
    }
}

impl<S> Layer<S> for RouteLayer {
    type Service = Routed<S>;
    fn layer(&self, inner: S) -> Routed<S> {
        Routed { inner, shared: self.0.clone() }
    }
}

/// The service of [`RouteLayer`].
#[derive(Debug, Clone)]
pub struct Routed<S> {
    inner: S,
    shared: Arc<RouteShared>,
}

impl<S> Service<Request> for Routed<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> BoxFuture {
        let started = Instant::now();
        let shared = self.shared.clone();
        let route = req.extensions().get::<MatchedPath>().cloned();
        let method = req.method().clone();
        if let Some(tokens) = &shared.tokens {
            let path = route.as_ref().map_or(req.uri().path(), MatchedPath::as_str);
            match auth::authorize(tokens, path, &req) {
                Ok(Some(role)) => {
                    req.extensions_mut().insert(auth::Caller(role));
                }
                Ok(None) => {}
                Err(refused) => {
                    record(&shared, &method, route.as_ref(), refused.status(), started);
                    return Box::pin(std::future::ready(Ok(refused)));
                }
            }
        }
        // The body is read here, off the handler; the inner service is called after it.
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let res = match read_body(&shared, req).await {
                Ok((req, held)) => {
                    // The body's bytes stay reserved until the handler is done with them.
                    let res = match inner.call(req).await {
                        Ok(res) => res,
                        Err(never) => match never {},
                    };
                    drop(held);
                    res
                }
                Err(refused) => refused,
            };
            record(&shared, &method, route.as_ref(), res.status(), started);
            Ok(res)
        })
    }
}

fn record(
    shared: &RouteShared,
    method: &axum::http::Method,
    route: Option<&MatchedPath>,
    status: StatusCode,
    started: Instant,
) {
    if let (Some(m), Some(route)) = (&shared.metrics, route) {
        m.record(method.as_str(), route.as_str(), status.as_u16(), started.elapsed());
    }
}

/// Reads the whole request body within the read timeout before the handler runs: `408` when
/// it does not arrive in time, `413` when it is larger than the limit (a chunked body, whose
/// length was not declared; the rest of it is then read and discarded, within bounds, so that
/// the client reads the answer: [`answer_then_discard`]). Requests without a body pass
/// untouched; a body that is already
/// here (it came with the headers) arms no timer. The body's bytes are reserved as they arrive
/// from its connection's budget when it has one ([`RequestBudget`]); the reservation is
/// returned, to hold until the request is done. A body still waiting for room at the read
/// timeout is `503`, naming the budget's flag.
async fn read_body(
    shared: &RouteShared,
    req: Request,
) -> Result<(Request, Option<Growing>), Response> {
    if req.body().is_end_stream() {
        return Ok((req, None));
    }
    let budget = req.extensions().get::<RequestBudget>().map(|b| b.0.clone());
    let mut held = budget.as_ref().map(|b| b.growing());
    let waiting = Waiting::default();
    let (parts, mut body) = req.into_parts();
    let max = shared.max_body_bytes;
    let held_ref = &mut held;
    let waiting_ref = &waiting;
    // Borrowed, so that a body refused part way is still there to answer while it arrives.
    let body_ref = &mut body;
    let read = async move {
        let mut body = std::pin::Pin::new(body_ref);
        // One chunk (the usual case) is kept as it is; more are copied into one buffer.
        let mut first: Option<Bytes> = None;
        let mut rest: Vec<u8> = Vec::new();
        let mut len = 0usize;
        while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            let frame = frame.map_err(|e| {
                Problem::new(Code::InvalidArgument, format!("cannot read the request body: {e}"))
            })?;
            let Ok(chunk) = frame.into_data() else { continue };
            if len + chunk.len() > max {
                let mut p = Problem::new(
                    Code::ResourceExhausted,
                    format!("the request body is too large (the limit is {max} bytes)"),
                );
                p.status = 413;
                p.title = "Payload too large".into();
                return Err(p);
            }
            len += chunk.len();
            if let Some(held) = held_ref.as_mut() {
                held.cover(len, waiting_ref).await;
            }
            match &first {
                None => first = Some(chunk),
                Some(f) => {
                    if rest.is_empty() {
                        rest.extend_from_slice(f);
                    }
                    rest.extend_from_slice(&chunk);
                }
            }
        }
        Ok(if rest.is_empty() { first.unwrap_or_default() } else { Bytes::from(rest) })
    };
    let timeout = shared.read_timeout;
    match within(read, || Instant::now() + timeout).await {
        Some(Ok(bytes)) => Ok((Request::from_parts(parts, Body::from(bytes)), held)),
        Some(Err(p)) if p.status == 413 => {
            // Larger than the limit: answered so that the client reads the answer while it
            // is still sending.
            let discard = Discard::new(max, timeout);
            let expects = expects_continue(&parts.headers);
            Err(answer_then_discard(p.into_response(), body, parts.version, expects, discard))
        }
        Some(Err(p)) => Err(closing(p.into_response())),
        None if waiting.short().is_some() => {
            let flag = request_budget_flag(waiting.short());
            let p = Problem::new(
                Code::ResourceExhausted,
                format!(
                    "the server holds as many request bytes as it may ({flag}); the body found \
                     no room within {} ms (--read-timeout); retry later",
                    timeout.as_millis()
                ),
            )
            .with_status(503, "Service unavailable");
            Err(closing(p.into_response()))
        }
        None => {
            let mut p = Problem::new(
                Code::Unavailable,
                format!(
                    "the request body did not arrive within {} ms (--read-timeout)",
                    timeout.as_millis()
                ),
            );
            p.status = 408;
            p.title = "Request timeout".into();
            Err(closing(p.into_response()))
        }
    }
}

/// The flag of the request budget that had no room.
pub fn request_budget_flag(short: Option<Short>) -> &'static str {
    match short {
        Some(Short::Total) => "--max-request-bytes",
        _ => "--max-request-bytes-per-connection",
    }
}

/// The connection cannot be reused after a body that was not read to its end.
fn closing(mut res: Response) -> Response {
    res.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::{get, post};
    use futures::StreamExt as _;
    use tower::ServiceExt as _;

    fn limits(max_body_bytes: usize, read_timeout: Duration) -> limit::LimitConfig {
        limit::LimitConfig { max_body_bytes, read_timeout, ..limit::LimitConfig::default() }
    }

    /// A router as the servers build theirs: routes behind [`RouteLayer`], the whole behind
    /// [`FrontLayer`] (through `common_layers`, with the given request timeout).
    fn app(timeout: Duration, metrics: Option<Arc<metrics::RouteMetrics>>) -> Router {
        let limits = limits(64, Duration::from_millis(100));
        let routes = Router::new()
            .route("/ready", get(|| async { "ready" }))
            .route("/pending", get(std::future::pending::<&'static str>))
            .route("/panic", get(|| async { panicking() }))
            .route("/echo", post(|body: Bytes| async move { body }))
            .route_layer(RouteLayer::new(metrics, None, &limits));
        routes
            .method_not_allowed_fallback(|| async { StatusCode::METHOD_NOT_ALLOWED })
            .layer(FrontLayer::with_timeout("tester", limits, timeout))
    }

    fn panicking() -> &'static str {
        panic!("a handler bug")
    }

    async fn call(app: &Router, req: Request) -> (StatusCode, axum::http::HeaderMap, String) {
        let res = app.clone().oneshot(req).await.expect("infallible");
        let (parts, body) = res.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.expect("a body");
        (parts.status, parts.headers, String::from_utf8_lossy(&body).into_owned())
    }

    fn get_(path: &str) -> Request {
        Request::get(path).body(Body::empty()).expect("a request")
    }

    fn problem_code(headers: &axum::http::HeaderMap, body: &str) -> Code {
        assert_eq!(headers[header::CONTENT_TYPE], crate::problem::PROBLEM_JSON, "{body}");
        let v: serde_json::Value = serde_json::from_str(body).expect("problem JSON");
        v["code"].as_str().expect("a code").parse().expect("a status class")
    }

    #[tokio::test]
    async fn request_ids_are_kept_or_made_unique_and_echoed_on_every_answer() {
        let app = app(REQUEST_TIMEOUT, None);
        let (s, h, _) = call(&app, get_("/ready")).await;
        assert_eq!(s, StatusCode::OK);
        let first = h[&X_REQUEST_ID].clone();
        let (_, h, _) = call(&app, get_("/ready")).await;
        assert_ne!(h[&X_REQUEST_ID], first, "ids are unique");
        let mut req = get_("/ready");
        req.headers_mut().insert(X_REQUEST_ID, HeaderValue::from_static("mine-1"));
        let (_, h, _) = call(&app, req).await;
        assert_eq!(h[&X_REQUEST_ID], "mine-1", "a caller's id is kept");
        // Refused by the limits, a caught panic, an unknown route: the id is there too.
        let too_big = Request::post("/echo")
            .header(header::CONTENT_LENGTH, "65")
            .body(Body::from(vec![b'x'; 65]))
            .expect("a request");
        for req in [too_big, get_("/panic"), get_("/nowhere")] {
            let (_, h, _) = call(&app, req).await;
            assert!(h.contains_key(&X_REQUEST_ID), "{h:?}");
        }
    }

    #[tokio::test]
    async fn a_panic_is_an_internal_problem_and_the_server_keeps_serving() {
        let app = app(REQUEST_TIMEOUT, None);
        let (s, h, body) = call(&app, get_("/panic")).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(problem_code(&h, &body), "INTERNAL");
        assert!(body.contains("the tester hit a bug"), "{body}");
        assert_eq!(call(&app, get_("/ready")).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn the_timeout_answers_a_waiting_request_and_spares_a_ready_one() {
        // A zero timeout: a handler ready on its first poll arms no timer and is answered; one
        // that waits is answered 503 when the deadline passes.
        let app = app(Duration::ZERO, None);
        assert_eq!(call(&app, get_("/ready")).await.0, StatusCode::OK);
        let app = self::app(Duration::from_millis(50), None);
        let (s, h, body) = call(&app, get_("/pending")).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(problem_code(&h, &body), "UNAVAILABLE");
    }

    #[tokio::test]
    async fn empty_error_answers_get_a_problem_body() {
        let app = app(REQUEST_TIMEOUT, None);
        let (s, h, body) = call(&app, Request::delete("/ready").body(Body::empty()).unwrap()).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(problem_code(&h, &body), "INVALID_ARGUMENT");
    }

    #[tokio::test]
    async fn bodies_are_read_whole_bounded_in_size_and_in_time() {
        let app = app(REQUEST_TIMEOUT, None);
        // Several chunks, no declared length: read whole.
        let chunks = futures::stream::iter(
            ["ab", "cd", "ef"].map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes()))),
        );
        let req = Request::post("/echo").body(Body::from_stream(chunks)).unwrap();
        assert_eq!(call(&app, req).await.2, "abcdef");
        // Over the limit without a declared length: 413 once it is read past the limit.
        let big = futures::stream::iter(
            (0..10).map(|_| Ok::<_, std::io::Error>(Bytes::from_static(&[b'x'; 10]))),
        );
        let req = Request::post("/echo").body(Body::from_stream(big)).unwrap();
        let (s, h, body) = call(&app, req).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(problem_code(&h, &body), "RESOURCE_EXHAUSTED");
        assert_eq!(h[header::CONNECTION], "close");
        // A body that stops arriving: 408 after the read timeout, and the connection closes.
        let stalled = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{"))])
            .chain(futures::stream::pending());
        let req = Request::post("/echo").body(Body::from_stream(stalled)).unwrap();
        let (s, h, body) = call(&app, req).await;
        assert_eq!(s, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(problem_code(&h, &body), "UNAVAILABLE");
        assert!(body.contains("--read-timeout"), "{body}");
        assert_eq!(h[header::CONNECTION], "close");
    }

    #[tokio::test]
    async fn routes_are_counted_by_template_and_status_class() {
        let doc: utoipa::openapi::OpenApi = serde_json::from_value(serde_json::json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "paths": {"/ready": {"get": {"responses": {}}}, "/panic": {"get": {"responses": {}}}}
        }))
        .expect("a document");
        let m = Arc::new(metrics::RouteMetrics::for_document(&doc));
        let app = app(REQUEST_TIMEOUT, Some(m.clone()));
        for path in ["/ready", "/ready", "/panic"] {
            call(&app, get_(path)).await;
        }
        let mut out = String::new();
        m.render(&mut out);
        assert!(
            out.contains(
                "shardwise_http_requests_total{method=\"GET\",route=\"/ready\",status=\"2xx\"} 2\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "shardwise_http_request_duration_seconds_count{method=\"GET\",route=\"/ready\"} 2\n"
            ),
            "{out}"
        );
    }
}
