//! JSON over HTTP to a dispatcher or a worker: what the worker runtime and the Rust client
//! share. Every non-2xx answer is decoded as a [`Problem`]; what may be retried is decided in
//! one place, [`CallError::is_retryable`]: `UNAVAILABLE` answers and transport failures, the
//! status classes gRPC clients retry.

use std::time::Duration;

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
}

impl CallError {
    /// `UNAVAILABLE` problems and transport failures (a refused or dropped connection is
    /// gRPC's `UNAVAILABLE` too): the only errors a caller retries, with backoff.
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::Problem(p) => p.code == Code::Unavailable,
            CallError::Transport(_) => true,
            CallError::Decode(_) => false,
        }
    }

    /// The problem's status class, `UNAVAILABLE` for transport failures, `INTERNAL` for
    /// undecodable answers.
    pub fn code(&self) -> Code {
        match self {
            CallError::Problem(p) => p.code,
            CallError::Transport(_) => Code::Unavailable,
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

/// An address that is not a plain-HTTP base URL (quoted as `{:?}` quotes it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseUrlError {
    /// Nothing but whitespace and slashes.
    #[error("the address is empty")]
    Empty,
    /// An `https://` URL (the address after the scheme).
    #[error(
        "https://{0}: this build speaks plain HTTP only (put a TLS-terminating proxy in front, \
         or use http://)"
    )]
    Https(String),
    /// Another scheme.
    #[error("{0:?} is not an http:// URL")]
    Scheme(String),
    /// A path, whitespace or no host after `http://`.
    #[error("{0:?} is not an http://host:port URL")]
    NotHostPort(String),
}

/// `http://host:port` from `host:port`, `http://host:port` or `http://host:port/`.
pub fn base_url(address: &str) -> Result<String, BaseUrlError> {
    let a = address.trim().trim_end_matches('/');
    if a.is_empty() {
        return Err(BaseUrlError::Empty);
    }
    let url = if a.contains("://") { a.to_owned() } else { format!("http://{a}") };
    if let Some(rest) = url.strip_prefix("https://") {
        return Err(BaseUrlError::Https(rest.to_owned()));
    }
    let Some(hostport) = url.strip_prefix("http://") else {
        return Err(BaseUrlError::Scheme(a.to_owned()));
    };
    if hostport.is_empty() || hostport.contains('/') || hostport.contains(char::is_whitespace) {
        return Err(BaseUrlError::NotHostPort(a.to_owned()));
    }
    Ok(url)
}

/// The HTTP client every call shares: keep-alive, bounded connect and request time.
pub fn http_client(request_timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
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

    async fn send<T: DeserializeOwned>(
        &self,
        mut req: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.map_err(|e| CallError::Transport(error_chain(&e)))?;
        let status = res.status();
        let bytes = res.bytes().await.map_err(|e| CallError::Transport(error_chain(&e)))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| CallError::Decode(e.to_string()));
        }
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
        assert!(base_url("https://h:1").unwrap_err().to_string().contains("plain HTTP"));
        assert_eq!(base_url("ftp://h"), Err(BaseUrlError::Scheme("ftp://h".into())));
        assert_eq!(base_url("http://h:1/x"), Err(BaseUrlError::NotHostPort("http://h:1/x".into())));
        assert_eq!(
            base_url("ftp://h").unwrap_err().to_string(),
            "\"ftp://h\" is not an http:// URL"
        );
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
