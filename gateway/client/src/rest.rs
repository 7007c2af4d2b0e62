//! JSON over HTTP to a dispatcher or a worker: what the worker runtime and the Rust client
//! share. Every non-2xx answer is decoded as a [`Problem`]; what may be retried is decided in
//! one place, [`CallError::is_retryable`]: `UNAVAILABLE` answers and transport failures, the
//! status classes gRPC clients retry.
//!
//! **Several dispatcher replicas.** [`DispatcherUrls`] is the list an operator configured
//! (`shardwise worker --dispatcher URL[,URL...]`, the Rust client's `distribute`), and
//! [`Failover`] calls through it: every call goes to the replica that answered last; on a
//! transport failure (refused, reset, timed out), an `UNAVAILABLE` answer (a follower that
//! knows no leader answers 503) or a redirect, it moves on, each configured URL at most once
//! per call. A redirect (307 or 308, what a follower answers) is followed only to a URL of the
//! list ([`DispatcherUrls::redirect`]: same scheme, host and port), and then at once; any
//! other `Location` is never called (a bearer token must not go to an address the operator
//! did not allow: it is logged once as a warning) and the next configured URL is tried. When
//! every URL failed, the call returns the last retryable error, and the caller's own backoff
//! applies as with one dispatcher. HTTP redirects are never followed by the HTTP client itself
//! ([`http_client`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::problem::{Code, Problem, code_of_status};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The server answered with a problem (any non-2xx status).
    Problem(Problem),
    /// No answer: the connection failed, was refused or reset, or timed out.
    Transport(String),
    /// A 2xx answer that is not the expected JSON.
    Decode(String),
    /// The TLS handshake failed (an `https://` URL): the server's certificate is not trusted
    /// (not signed by the system's roots or the CA file) or not for that host, or the server
    /// does not speak TLS. rustls' reason.
    Tls(String),
    /// A redirect (307 or 308) that was not followed: the URL that answered it and its
    /// `Location` as sent (`None` when missing, not UTF-8 or longer than 2 KiB).
    Redirect {
        /// The request's URL.
        from: String,
        /// The `Location` header.
        location: Option<String>,
    },
}

impl CallError {
    /// `UNAVAILABLE` problems and transport failures (a refused or dropped connection is
    /// gRPC's `UNAVAILABLE` too): the only errors a caller retries, with backoff.
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::Problem(p) => p.code == Code::Unavailable,
            // A follower's redirect: the service is there, its leader may be reachable
            // through another configured URL later.
            CallError::Transport(_) | CallError::Redirect { .. } => true,
            // A certificate refused now is refused on every try.
            CallError::Decode(_) | CallError::Tls(_) => false,
        }
    }

    /// The problem's status class, `UNAVAILABLE` for transport failures, `INTERNAL` for
    /// undecodable answers.
    pub fn code(&self) -> Code {
        match self {
            CallError::Problem(p) => p.code,
            CallError::Transport(_) | CallError::Redirect { .. } | CallError::Tls(_) => {
                Code::Unavailable
            }
            CallError::Decode(_) => Code::Internal,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Problem(p) => write!(f, "{} ({}): {}", p.code, p.status, p.detail),
            CallError::Transport(e) => write!(f, "UNAVAILABLE: {e}"),
            CallError::Decode(e) => write!(f, "unexpected answer: {e}"),
            CallError::Tls(e) => write!(f, "UNAVAILABLE: TLS handshake failed: {e}"),
            CallError::Redirect { from, location: Some(l) } => {
                write!(f, "UNAVAILABLE: {from} redirected to {l:?} (not followed)")
            }
            CallError::Redirect { from, location: None } => {
                write!(f, "UNAVAILABLE: {from} redirected without a usable Location")
            }
        }
    }
}

/// A base URL, an HTTP client and an optional bearer token.
#[derive(Debug, Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// An address that is not an http(s) base URL (quoted as `{:?}` quotes it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseUrlError {
    /// Nothing but whitespace and slashes.
    #[error("the address is empty")]
    Empty,
    /// Another scheme.
    #[error("{0:?} is not an http:// or https:// URL")]
    Scheme(String),
    /// A path, whitespace or no host after `http://` or `https://`.
    #[error("{0:?} is not an http(s)://host:port URL")]
    NotHostPort(String),
}

/// `http://host:port` from `host:port`, `http://host:port` or `http://host:port/`;
/// `https://host:port` from `https://host:port` (TLS, trusted as [`super::tls`] says).
pub fn base_url(address: &str) -> Result<String, BaseUrlError> {
    let a = address.trim().trim_end_matches('/');
    if a.is_empty() {
        return Err(BaseUrlError::Empty);
    }
    // The scheme is case-insensitive (RFC 3986); the URL carries it in lower case.
    let (scheme, hostport) = match a.find("://") {
        Some(i) => (a[..i].to_ascii_lowercase(), &a[i + 3..]),
        None => ("http".to_owned(), a),
    };
    if scheme != "http" && scheme != "https" {
        return Err(BaseUrlError::Scheme(a.to_owned()));
    }
    if !is_host_port(hostport) {
        return Err(BaseUrlError::NotHostPort(a.to_owned()));
    }
    Ok(format!("{scheme}://{hostport}"))
}

/// `host`, `host:port` or `[v6]:port`: a host without a path, whitespace or user part, and a
/// port (when given) of 1 to 65535.
fn is_host_port(hostport: &str) -> bool {
    let bad = |c: char| c == '/' || c == '@' || c == '?' || c == '#' || c.is_whitespace();
    if hostport.is_empty() || hostport.contains(bad) {
        return false;
    }
    let (host, port) = match hostport.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match hostport.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        },
    };
    !host.is_empty()
        && port.is_none_or(|p| {
            p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok_and(|n| n > 0)
        })
}

/// The HTTP client every call shares: keep-alive, bounded connect and request time, and no
/// redirect followed by itself (a redirect comes back as [`CallError::Redirect`]; only
/// [`Failover`] follows one, within its list).
///
/// `https://` URLs trust the system's roots only ([`http_client_with`] adds a CA file).
pub fn http_client(request_timeout: Duration) -> reqwest::Client {
    http_client_with(request_timeout, super::tls::system_client_config())
}

/// [`http_client`] whose `https://` calls use `tls` ([`super::tls::client_config`]).
pub fn http_client_with(request_timeout: Duration, tls: rustls::ClientConfig) -> reqwest::Client {
    // The fallback below builds without `tls`: it needs the process's default provider.
    super::tls::ensure_provider();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(request_timeout)
        // Below the servers' default `--read-timeout` (10 s), which closes a kept-alive
        // connection that sends no request: the client lets go of an idle connection first,
        // rather than race the server's close with its next request.
        .pool_idle_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

impl Rest {
    /// Calls to `base` (an `http://host:port` URL, see [`base_url`]).
    pub fn new(http: reqwest::Client, base: String, token: Option<String>) -> Rest {
        Rest { http, base, token }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The same client and token against another base URL.
    pub fn with_base(&self, base: String) -> Rest {
        Rest { http: self.http.clone(), base, token: self.token.clone() }
    }

    /// `POST path` with a JSON body.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, CallError> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body)).await
    }

    /// `GET path` with query parameters.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, CallError> {
        self.send(self.http.get(format!("{}{path}", self.base)).query(query)).await
    }

    /// `DELETE path`.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.send(self.http.delete(format!("{}{path}", self.base))).await
    }

    /// Any call: `method path?query`, with a JSON body when given; its JSON answer.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T, CallError> {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).query(query);
        if let Some(body) = body {
            req = req.json(body);
        }
        self.send(req).await
    }

    /// `GET path` with query parameters and request headers, for an answer that is not JSON:
    /// a 2xx answer's headers and body (refused as [`CallError::Decode`] past `max_body`
    /// bytes, before more is read) go to `decode`; any other answer is a problem, as for every
    /// call.
    pub async fn get_with<T>(
        &self,
        path: &str,
        query: &[(&str, String)],
        headers: &[(&str, &str)],
        max_body: usize,
        decode: impl FnOnce(&HeaderMap, &[u8]) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let mut req = self.http.get(format!("{}{path}", self.base)).query(query);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let res = self.respond(req).await?;
        let headers = res.headers().clone();
        let body = read_body(res, max_body).await?;
        decode(&headers, &body)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let res = self.respond(req).await?;
        let bytes = read_body(res, MAX_JSON_ANSWER).await?;
        serde_json::from_slice(&bytes).map_err(|e| CallError::Decode(e.to_string()))
    }

    /// Sends `req`: its 2xx answer (the body not read yet), or why the call failed (a
    /// non-2xx answer is read as a problem).
    async fn respond(
        &self,
        mut req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.map_err(|e| match super::tls::tls_failure(&e) {
            Some(why) => CallError::Tls(why),
            None => CallError::Transport(error_chain(&e)),
        })?;
        let status = res.status();
        if matches!(status.as_u16(), 307 | 308) {
            let location = res
                .headers()
                .get(reqwest::header::LOCATION)
                .filter(|l| l.len() <= MAX_LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_owned);
            return Err(CallError::Redirect { from: res.url().to_string(), location });
        }
        if status.is_success() {
            return Ok(res);
        }
        let bytes = res.bytes().await.map_err(|e| CallError::Transport(error_chain(&e)))?;
        let problem = serde_json::from_slice::<Problem>(&bytes).unwrap_or_else(|_| {
            let code = code_of_status(status.as_u16());
            let mut p = Problem::new(
                code,
                String::from_utf8_lossy(&bytes).chars().take(500).collect::<String>(),
            );
            p.status = status.as_u16();
            p
        });
        Err(CallError::Problem(problem))
    }
}

/// An error with its sources (reqwest's own message is terse: "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The longest `Location` header a redirect is read from.
const MAX_LOCATION: usize = 2048;

/// The most bytes of a JSON answer to a call other than a read (whose bound its caller gives).
const MAX_JSON_ANSWER: usize = 256 << 20;

/// A 2xx answer's body, refused as [`CallError::Decode`] past `max_body` bytes before more is
/// read.
async fn read_body(mut res: reqwest::Response, max_body: usize) -> Result<Vec<u8>, CallError> {
    let too_large = || CallError::Decode(format!("the answer is larger than {max_body} bytes"));
    if res.content_length().is_some_and(|n| n > max_body as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(|e| CallError::Transport(error_chain(&e)))? {
        if chunk.len() > max_body.saturating_sub(body.len()) {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A list of addresses that is not a list of plain-HTTP base URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlListError {
    /// No address at all.
    Empty,
    /// One address is not a base URL: which one (from 1) of how many, and why.
    Entry {
        /// Its place in the list, from 1.
        position: usize,
        /// How many addresses the list has.
        count: usize,
        /// Why it is refused (the error names the address).
        error: BaseUrlError,
    },
}

impl std::fmt::Display for UrlListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlListError::Empty => write!(f, "no address given"),
            UrlListError::Entry { count: 1, error, .. } => write!(f, "{error}"),
            UrlListError::Entry { position, count, error } => {
                write!(f, "{error} (address {position} of {count})")
            }
        }
    }
}

impl std::error::Error for UrlListError {}

/// The configured dispatcher base URLs, in order: validated ([`base_url`]), each a URL with a
/// host, without duplicates (by origin: scheme, host and port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatcherUrls {
    bases: Vec<String>,
    /// Each base's origin, serialized (`http://host:port`, the default port left out).
    origins: Vec<String>,
}

/// Where a redirect leads, by [`DispatcherUrls::redirect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectTarget {
    /// The configured URL at this index has the `Location`'s origin: follow it there.
    Configured(usize),
    /// An http(s) URL whose origin was not configured (the origin): never called.
    Outside(String),
    /// No `Location`, or not an http(s) URL (why): nowhere to go.
    Unusable(String),
}

impl DispatcherUrls {
    /// The addresses of a comma-separated list (`--dispatcher a:1,http://b:2`).
    pub fn parse(list: &str) -> Result<DispatcherUrls, UrlListError> {
        if list.trim().is_empty() {
            return Err(UrlListError::Empty);
        }
        DispatcherUrls::new(list.split(','))
    }

    /// The addresses given one by one (`host:port` or `http://host:port`).
    pub fn new<I, S>(addresses: I) -> Result<DispatcherUrls, UrlListError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let addresses: Vec<S> = addresses.into_iter().collect();
        let count = addresses.len();
        let mut out = DispatcherUrls { bases: Vec::new(), origins: Vec::new() };
        for (i, a) in addresses.iter().enumerate() {
            let entry = |error| UrlListError::Entry { position: i + 1, count, error };
            let base = base_url(a.as_ref()).map_err(entry)?;
            let origin = match reqwest::Url::parse(&base) {
                Ok(url) if url.has_host() => url.origin().ascii_serialization(),
                _ => {
                    let shown = a.as_ref().trim().trim_end_matches('/').to_owned();
                    return Err(entry(BaseUrlError::NotHostPort(shown)));
                }
            };
            if !out.origins.contains(&origin) {
                out.bases.push(base);
                out.origins.push(origin);
            }
        }
        if out.bases.is_empty() {
            return Err(UrlListError::Empty);
        }
        Ok(out)
    }

    /// The base URLs, in order.
    pub fn bases(&self) -> &[String] {
        &self.bases
    }

    /// The redirect rule: the `Location` a replica answered to a request for `sent_to` (a
    /// relative one resolves against `sent_to`) is followed only when its scheme, host and
    /// port are those of a configured URL.
    pub fn redirect(&self, sent_to: &str, location: Option<&str>) -> RedirectTarget {
        let Some(location) = location.map(str::trim).filter(|l| !l.is_empty()) else {
            return RedirectTarget::Unusable("no Location".into());
        };
        if location.len() > MAX_LOCATION {
            return RedirectTarget::Unusable(format!("a Location of {} bytes", location.len()));
        }
        let target = match reqwest::Url::parse(sent_to).and_then(|base| base.join(location)) {
            Ok(t) => t,
            Err(e) => return RedirectTarget::Unusable(format!("Location {location:?}: {e}")),
        };
        if !matches!(target.scheme(), "http" | "https") || !target.has_host() {
            return RedirectTarget::Unusable(format!("Location {location:?} is not an http URL"));
        }
        let origin = target.origin().ascii_serialization();
        match self.origins.iter().position(|o| *o == origin) {
            Some(i) => RedirectTarget::Configured(i),
            None => RedirectTarget::Outside(origin),
        }
    }
}

/// Calls to a list of dispatcher replicas with failover and the redirect rule (see the module
/// docs). Cheap to clone: clones share which replica is current.
#[derive(Debug, Clone)]
pub struct Failover {
    urls: Arc<DispatcherUrls>,
    rests: Arc<[Rest]>,
    current: Arc<AtomicUsize>,
    warned_outside: Arc<AtomicBool>,
}

impl Failover {
    /// Calls to `urls` with one HTTP client (see [`http_client`]) and an optional token.
    pub fn new(http: reqwest::Client, urls: DispatcherUrls, token: Option<String>) -> Failover {
        let rests = urls
            .bases()
            .iter()
            .map(|b| Rest::new(http.clone(), b.clone(), token.clone()))
            .collect();
        Failover {
            urls: Arc::new(urls),
            rests,
            current: Arc::new(AtomicUsize::new(0)),
            warned_outside: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The configured URLs.
    pub fn urls(&self) -> &DispatcherUrls {
        &self.urls
    }

    /// The base URL calls go to first: the replica that answered last.
    pub fn current(&self) -> &str {
        self.rests[self.current_index()].base()
    }

    fn current_index(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.rests.len()
    }

    /// The same HTTP client and token against another base URL (e.g. a worker's).
    pub fn with_base(&self, base: String) -> Rest {
        self.rests[0].with_base(base)
    }

    /// `POST path` with a JSON body.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, CallError> {
        self.call(|r| r.post(path, body)).await
    }

    /// `GET path` with query parameters.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, CallError> {
        self.call(|r| r.get(path, query)).await
    }

    /// `DELETE path`.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.call(|r| r.delete(path)).await
    }

    /// Any call ([`Rest::request`]), failing over as every call does.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T, CallError> {
        self.call(|r| r.request(method.clone(), path, query, body)).await
    }

    /// One call: the current replica first, then on to the others (a configured redirect
    /// target at once), each at most once; the last retryable error when none answered.
    async fn call<'a, T, F, Fut>(&'a self, f: F) -> Result<T, CallError>
    where
        F: Fn(&'a Rest) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let n = self.rests.len();
        let first = self.current_index();
        let mut tried = vec![false; n];
        let mut i = first;
        loop {
            tried[i] = true;
            let mut next = None;
            let error = match f(&self.rests[i]).await {
                Ok(v) => {
                    self.settle(first, i);
                    return Ok(v);
                }
                Err(e) if !e.is_retryable() => {
                    // An answer (a refusal is one): this replica is up.
                    self.settle(first, i);
                    return Err(e);
                }
                Err(e) => e,
            };
            if let CallError::Redirect { from, location } = &error {
                match self.urls.redirect(from, location.as_deref()) {
                    RedirectTarget::Configured(j) if !tried[j] => next = Some(j),
                    RedirectTarget::Configured(_) => {}
                    RedirectTarget::Outside(origin) => {
                        if self.warned_outside.swap(true, Ordering::Relaxed) {
                            tracing::debug!(%from, %origin, "redirect outside --dispatcher not followed");
                        } else {
                            tracing::warn!(
                                %from,
                                %origin,
                                "a dispatcher redirected to an address that is not configured: not followed (add it to the dispatcher list to allow it)"
                            );
                        }
                    }
                    RedirectTarget::Unusable(why) => {
                        tracing::debug!(%from, %why, "unusable redirect");
                    }
                }
            }
            let next = next.or_else(|| (1..n).map(|k| (i + k) % n).find(|&j| !tried[j]));
            match next {
                Some(j) => {
                    tracing::debug!(from = self.rests[i].base(), to = self.rests[j].base(), error = %error, "dispatcher failed; trying the next");
                    i = j;
                }
                None => return Err(error),
            }
        }
    }

    /// `i` answered: later calls start there.
    fn settle(&self, first: usize, i: usize) {
        if i != first {
            self.current.store(i, Ordering::Relaxed);
            tracing::info!(dispatcher = self.rests[i].base(), "now calling this dispatcher");
        }
    }
}

/// Capped exponential backoff: `initial`, doubled per failure, at most `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    next: Duration,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `initial`.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { next: initial, initial, max }
    }
    /// The delay to wait now; the next one doubles.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
    /// Back to `initial` after a success.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(base_url("127.0.0.1:5050").unwrap(), "http://127.0.0.1:5050");
        assert_eq!(base_url("http://h:1/").unwrap(), "http://h:1");
        assert_eq!(base_url(""), Err(BaseUrlError::Empty));
        assert_eq!(base_url("https://h:1/").unwrap(), "https://h:1");
        assert_eq!(base_url("ftp://h"), Err(BaseUrlError::Scheme("ftp://h".into())));
        assert_eq!(base_url("http://h:1/x"), Err(BaseUrlError::NotHostPort("http://h:1/x".into())));
        assert_eq!(
            base_url("ftp://h").unwrap_err().to_string(),
            "\"ftp://h\" is not an http:// or https:// URL"
        );
        assert_eq!(base_url(" HTTPS://h:1").unwrap(), "https://h:1", "schemes ignore case");
        assert_eq!(base_url("[::1]:5050").unwrap(), "http://[::1]:5050");
        assert_eq!(base_url("h").unwrap(), "http://h");
        for bad in
            ["h:99999", "h:x", "h:0", "h:", ":1", "a b:1", "u@h:1", "[::1", "[::1]x", "::1:5"]
        {
            assert!(matches!(base_url(bad), Err(BaseUrlError::NotHostPort(_))), "{bad}");
        }
    }

    #[test]
    fn dispatcher_url_lists() {
        let l = DispatcherUrls::parse("127.0.0.1:1, http://b.example:2/").unwrap();
        assert_eq!(l.bases(), ["http://127.0.0.1:1", "http://b.example:2"]);
        // Duplicates by origin (the host's case, the default port) are dropped.
        let l = DispatcherUrls::parse("a:1,http://A:1,c:80,http://c").unwrap();
        assert_eq!(l.bases(), ["http://a:1", "http://c:80"]);
        assert_eq!(DispatcherUrls::parse(" "), Err(UrlListError::Empty));
        assert_eq!(DispatcherUrls::new(Vec::<String>::new()), Err(UrlListError::Empty));
        let e = DispatcherUrls::parse("a:1,,b:2").unwrap_err();
        assert_eq!(
            e,
            UrlListError::Entry { position: 2, count: 3, error: BaseUrlError::Empty },
            "{e}"
        );
        assert_eq!(e.to_string(), "the address is empty (address 2 of 3)");
        let l = DispatcherUrls::parse("a:1,https://b:2").unwrap();
        assert_eq!(l.bases(), ["http://a:1", "https://b:2"]);
        let e = DispatcherUrls::parse("a:1,ftp://b:2").unwrap_err();
        assert!(e.to_string().ends_with("(address 2 of 2)"), "{e}");
        // One address: its error alone, as before lists.
        let e = DispatcherUrls::parse("ftp://h").unwrap_err();
        assert_eq!(e.to_string(), "\"ftp://h\" is not an http:// or https:// URL");
        // What `base_url` lets through but is no URL: a bad port, a comma in a slice's item.
        for bad in ["a:99999", "a:x", "http://a:1,b:2"] {
            let e = DispatcherUrls::new([bad]).unwrap_err();
            assert!(
                matches!(e, UrlListError::Entry { error: BaseUrlError::NotHostPort(_), .. }),
                "{bad}: {e:?}"
            );
        }
    }

    #[test]
    fn redirects_are_followed_only_within_the_list() {
        let l = DispatcherUrls::parse("127.0.0.1:1,http://leader.example:2,c:80").unwrap();
        let from = "http://127.0.0.1:1/v1/workers/heartbeat";
        let to = |loc: &str| l.redirect(from, Some(loc));
        use RedirectTarget::{Configured, Outside, Unusable};
        assert_eq!(to("http://leader.example:2/v1/workers/heartbeat?x=1"), Configured(1));
        assert_eq!(to("HTTP://LEADER.example:2/v1"), Configured(1));
        assert_eq!(to("http://c/v1"), Configured(2), "the default port");
        assert_eq!(to("http://user:pw@leader.example:2/"), Configured(1));
        // Another host, scheme or port: the origin, not followed.
        assert_eq!(to("http://evil.example:2/v1"), Outside("http://evil.example:2".into()));
        assert_eq!(to("https://leader.example:2/v1"), Outside("https://leader.example:2".into()));
        assert_eq!(to("http://leader.example:3/"), Outside("http://leader.example:3".into()));
        assert_eq!(to("http://leader.example:2@evil:1/"), Outside("http://evil:1".into()));
        assert_eq!(to("//evil:9/v1"), Outside("http://evil:9".into()), "scheme-relative");
        // Relative: against the replica that answered.
        assert_eq!(to("/v1/jobs"), Configured(0));
        assert_eq!(to("jobs?x=1"), Configured(0));
        assert_eq!(
            l.redirect("http://leader.example:2/v1/x", Some("/v1/x")),
            Configured(1),
            "relative to the sender"
        );
        // Garbage: nowhere to go, no panic.
        assert!(matches!(l.redirect(from, None), Unusable(_)));
        let huge = format!("http://leader.example:2/{}", "x".repeat(100_000));
        for garbage in [
            "",
            "  ",
            "http://[::1",
            "http://",
            "javascript:alert(1)",
            "mailto:a@b",
            "data:,x",
            &huge,
        ] {
            assert!(matches!(to(garbage), Unusable(_)), "{garbage:.40}: {:?}", to(garbage));
        }
        assert!(matches!(l.redirect("not a url", Some("/v1")), Unusable(_)));
    }

    /// An in-process HTTP server answering every request with `answer(path)`; counts requests
    /// and keeps the last `Authorization` header.
    async fn fake(
        answer: impl Fn(&str) -> axum::response::Response + Clone + Send + Sync + 'static,
    ) -> (String, Arc<AtomicUsize>, Arc<std::sync::Mutex<Option<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let auth = Arc::new(std::sync::Mutex::new(None));
        let (c, a) = (Arc::clone(&count), Arc::clone(&auth));
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            c.fetch_add(1, Ordering::SeqCst);
            *a.lock().unwrap() =
                req.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let r = answer(req.uri().path());
            async move { r }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, count, auth)
    }

    fn redirect_to(location: String) -> axum::response::Response {
        axum::response::Response::builder()
            .status(307)
            .header("location", location)
            .header("content-type", "application/problem+json")
            .body(axum::body::Body::from("{}"))
            .unwrap()
    }

    /// `p` as a server answers it (status and problem+json; the servers' own answer is the
    /// `axum` feature's, which these tests do not turn on).
    fn problem_answer(p: &Problem) -> axum::response::Response {
        axum::response::Response::builder()
            .status(p.status)
            .header("content-type", crate::problem::PROBLEM_JSON)
            .body(axum::body::Body::from(serde_json::to_vec(p).unwrap()))
            .unwrap()
    }

    /// A port nothing listens on (bound, then closed).
    fn dead() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    }

    #[tokio::test]
    async fn failover_moves_on_and_follows_redirects_only_within_the_list() {
        use axum::response::IntoResponse;
        let (leader, leader_n, leader_auth) =
            fake(|path| axum::Json(serde_json::json!({"path": path})).into_response()).await;
        let to_leader = leader.clone();
        let (follower, follower_n, _) =
            fake(move |path| redirect_to(format!("{to_leader}{path}"))).await;
        let (outside, outside_n, _) =
            fake(|_| axum::Json(serde_json::json!({})).into_response()).await;
        let to_outside = outside.clone();
        let (rogue, rogue_n, _) =
            fake(move |path| redirect_to(format!("{to_outside}{path}"))).await;
        let (leaderless, leaderless_n, _) = fake(|_| {
            let mut r = problem_answer(&Problem::new(Code::Unavailable, "no leader"));
            r.headers_mut().insert("retry-after", axum::http::HeaderValue::from_static("1"));
            r
        })
        .await;
        let http = http_client(Duration::from_secs(5));
        let token = Some("secret".to_owned());

        // dead, leaderless, a follower: on to the follower, whose redirect (to the leader, in
        // the list, after it) is followed at once.
        let urls = DispatcherUrls::new([&dead(), &leaderless, &follower, &rogue, &leader]).unwrap();
        let f = Failover::new(http.clone(), urls, token.clone());
        let v: serde_json::Value = f.post("/v1/x?y=1", &serde_json::json!({})).await.unwrap();
        assert_eq!(v["path"], "/v1/x");
        assert_eq!(f.current(), leader);
        assert_eq!(leader_auth.lock().unwrap().as_deref(), Some("Bearer secret"));
        assert_eq!(
            [leaderless_n.load(Ordering::SeqCst), follower_n.load(Ordering::SeqCst)],
            [1, 1]
        );
        assert_eq!(rogue_n.load(Ordering::SeqCst), 0, "skipped by the redirect");
        // Later calls start at the leader.
        let _: serde_json::Value = f.get("/v1/y", &[]).await.unwrap();
        assert_eq!(leader_n.load(Ordering::SeqCst), 2);
        assert_eq!(follower_n.load(Ordering::SeqCst), 1);

        // A redirect outside the list is never called: the next configured URL is.
        let urls = DispatcherUrls::new([&rogue, &leader]).unwrap();
        let f = Failover::new(http.clone(), urls, token.clone());
        let _: serde_json::Value = f.delete("/v1/z").await.unwrap();
        assert_eq!(rogue_n.load(Ordering::SeqCst), 1);
        assert_eq!(outside_n.load(Ordering::SeqCst), 0);

        // Nowhere to go: the last retryable error, once per URL.
        let urls = DispatcherUrls::new([&rogue, &follower]).unwrap();
        let f = Failover::new(http.clone(), urls, token.clone());
        let before = leader_n.load(Ordering::SeqCst);
        let e = f.get::<serde_json::Value>("/v1/z", &[]).await.unwrap_err();
        assert!(matches!(&e, CallError::Redirect { .. }), "{e}");
        assert!(e.is_retryable());
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(outside_n.load(Ordering::SeqCst), 0);
        assert_eq!(leader_n.load(Ordering::SeqCst), before, "the leader is not in this list");
        let urls = DispatcherUrls::new([dead()]).unwrap();
        let e = Failover::new(http.clone(), urls, None)
            .get::<serde_json::Value>("/v1/z", &[])
            .await
            .unwrap_err();
        assert!(matches!(e, CallError::Transport(_)), "{e}");

        // A refusal is an answer: returned as is, the next URL not tried.
        let (refusing, _, _) =
            fake(|_| problem_answer(&Problem::new(Code::NotFound, "no such job"))).await;
        let urls = DispatcherUrls::new([&refusing, &leader]).unwrap();
        let before = leader_n.load(Ordering::SeqCst);
        let e = Failover::new(http, urls, None)
            .get::<serde_json::Value>("/v1/z", &[])
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e}");
        assert_eq!(leader_n.load(Ordering::SeqCst), before);
    }

    #[tokio::test]
    async fn raw_answers_are_bounded_and_refusals_stay_problems() {
        use axum::response::IntoResponse;
        let (base, _, _) = fake(|path| match path {
            "/big" => "0123456789".repeat(10).into_response(),
            _ => problem_answer(&Problem::new(Code::NotFound, "no such task")),
        })
        .await;
        let rest = Rest::new(http_client(Duration::from_secs(5)), base, None);
        let len = |_: &HeaderMap, body: &[u8]| Ok(body.len());
        assert_eq!(rest.get_with("/big", &[], &[("accept", "x/y")], 100, len).await, Ok(100));
        let e = rest.get_with("/big", &[], &[], 99, len).await.unwrap_err();
        assert!(matches!(&e, CallError::Decode(d) if d.contains("larger than 99")), "{e}");
        let e = rest.get_with("/other", &[], &[], 99, len).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e}");
    }

    #[test]
    fn retryable_is_unavailable_only() {
        assert!(CallError::Transport("refused".into()).is_retryable());
        assert!(CallError::Problem(Problem::new(Code::Unavailable, "x")).is_retryable());
        for code in
            [Code::NotFound, Code::InvalidArgument, Code::FailedPrecondition, Code::Internal]
        {
            assert!(!CallError::Problem(Problem::new(code, "x")).is_retryable(), "{code}");
        }
        assert!(!CallError::Decode("x".into()).is_retryable());
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(35));
        let d: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(d, [10, 20, 35, 35]);
        b.reset();
        assert_eq!(b.next_delay().as_millis(), 10);
    }
}
