//! Request limits every Shardwise server applies before a handler runs: a declared body
//! larger than the limit (413, without reading it), a per-peer-IP token bucket (429 with
//! `Retry-After`) and a global cap on requests in flight (503 with `Retry-After`). Each answer
//! is a problem+json body; the rate and in-flight limits are off unless configured.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::problem::{Code, Problem};

/// Buckets kept before full (idle) ones are dropped.
const MAX_BUCKETS: usize = 65_536;

/// What a server limits.
#[derive(Debug, Clone, Copy)]
pub struct LimitConfig {
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// The time a request's headers, and then its body, may take to arrive.
    pub read_timeout: std::time::Duration,
    /// Requests per second per peer IP address (0: no rate limit).
    pub rate_per_sec: u32,
    /// Requests a peer may send at once before the rate applies (0: one second's worth).
    pub burst: u32,
    /// Requests handled at once, over all peers (0: no limit).
    pub max_in_flight: usize,
}

impl Default for LimitConfig {
    /// No body, no rate or in-flight limit, the default read timeout.
    fn default() -> Self {
        LimitConfig {
            max_body_bytes: 0,
            read_timeout: super::conn::DEFAULT_READ_TIMEOUT,
            rate_per_sec: 0,
            burst: 0,
            max_in_flight: 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The limits' shared state.
#[derive(Debug, Clone)]
pub struct Limits {
    config: LimitConfig,
    buckets: Arc<Mutex<HashMap<IpAddr, Bucket>>>,
    in_flight: Option<Arc<tokio::sync::Semaphore>>,
}

impl Limits {
    /// The state for `config`.
    pub fn new(config: LimitConfig) -> Limits {
        Limits {
            config,
            buckets: Arc::default(),
            in_flight: (config.max_in_flight > 0)
                .then(|| Arc::new(tokio::sync::Semaphore::new(config.max_in_flight))),
        }
    }

    fn burst(&self) -> f64 {
        f64::from(if self.config.burst == 0 { self.config.rate_per_sec } else { self.config.burst })
    }

    /// Takes a token of `ip`'s bucket at `now`; `Err(seconds to wait)` when it is empty.
    fn take(&self, ip: IpAddr, now: Instant) -> Result<(), u64> {
        let rate = f64::from(self.config.rate_per_sec);
        let burst = self.burst();
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&ip) {
            // A full bucket is the same as none: forget the peers that are idle.
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.last).as_secs_f64() * rate < burst
            });
        }
        let b = buckets.entry(ip).or_insert(Bucket { tokens: burst, last: now });
        let refill = now.saturating_duration_since(b.last).as_secs_f64() * rate;
        b.tokens = (b.tokens + refill).min(burst);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            // Whole seconds until one token is back, at least 1.
            Err((((1.0 - b.tokens) / rate).ceil() as u64).max(1))
        }
    }
}

/// Why a request was refused before its handler ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `RESOURCE_EXHAUSTED` (too large, too many from this address) or `UNAVAILABLE` (too
    /// many in flight).
    pub code: Code,
    /// The HTTP status within the class (413, 429, 503).
    pub status: u16,
    /// What to tell the caller.
    pub detail: String,
    /// Seconds to wait before retrying, if it is worth retrying.
    pub retry_after: Option<u64>,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let mut p = Problem::new(self.code, self.detail);
        if self.status == 413 {
            p.status = 413;
            p.title = "Payload too large".into();
        }
        let mut res = p.into_response();
        if let Some(seconds) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
        {
            res.headers_mut().insert(header::RETRY_AFTER, v);
        }
        res
    }
}

impl Limits {
    /// Checks a request against the limits: the permit to hold while it is handled (when
    /// requests in flight are limited), or the answer that refuses it.
    pub fn admit(
        &self,
        req: &Request,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Response> {
        self.check(req).map_err(IntoResponse::into_response)
    }

    /// Like [`Limits::admit`], with the refusal as a value (for fronts that answer in
    /// another protocol, e.g. gRPC statuses).
    pub fn check(
        &self,
        req: &Request,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Refused> {
        // Without the peer's address (a server not started with connect info) every request
        // shares one bucket.
        let ip = || {
            req.extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
        };
        admit(self, req.headers(), ip)
    }

    /// Like [`Limits::check`], for a request of any body type from `peer` (the gRPC front,
    /// which has the peer's address at hand).
    pub fn check_from(
        &self,
        headers: &axum::http::HeaderMap,
        peer: IpAddr,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Refused> {
        admit(self, headers, || peer)
    }
}

fn admit(
    limits: &Limits,
    headers: &axum::http::HeaderMap,
    ip: impl FnOnce() -> IpAddr,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Refused> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.config.max_body_bytes as u64) {
        return Err(Refused {
            code: Code::ResourceExhausted,
            status: 413,
            detail: format!(
                "the request body is too large (the limit is {} bytes)",
                limits.config.max_body_bytes
            ),
            retry_after: None,
        });
    }
    if limits.config.rate_per_sec > 0
        && let Err(wait) = limits.take(ip(), Instant::now())
    {
        return Err(Refused {
            code: Code::ResourceExhausted,
            status: 429,
            detail: format!(
                "too many requests from this address (limit {}/s, burst {}): retry after \
                 {wait} s",
                limits.config.rate_per_sec,
                limits.burst()
            ),
            retry_after: Some(wait),
        });
    }
    match &limits.in_flight {
        None => Ok(None),
        Some(sem) => match Arc::clone(sem).try_acquire_owned() {
            Ok(p) => Ok(Some(p)),
            Err(_) => Err(Refused {
                code: Code::Unavailable,
                status: 503,
                detail: format!(
                    "overloaded: {} requests are in flight already; retry shortly",
                    limits.config.max_in_flight
                ),
                retry_after: Some(1),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn token_bucket_refills_at_the_rate() {
        let l = Limits::new(LimitConfig {
            max_body_bytes: 1,
            rate_per_sec: 2,
            burst: 3,
            max_in_flight: 0,
            ..LimitConfig::default()
        });
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.take(a, t0), Ok(()));
        }
        assert_eq!(l.take(a, t0), Err(1));
        // Another peer has its own bucket.
        assert_eq!(l.take(b, t0), Ok(()));
        // Half a second brings one token back (2/s), not two.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(l.take(a, t1), Ok(()));
        assert!(l.take(a, t1).is_err());
        // A long pause refills to the burst, no more.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(l.take(a, t2), Ok(()));
        }
        assert!(l.take(a, t2).is_err());
    }

    #[test]
    fn slow_rates_wait_whole_seconds() {
        let l = Limits::new(LimitConfig { rate_per_sec: 1, ..LimitConfig::default() });
        let a = IpAddr::from([10, 0, 0, 1]);
        let t0 = Instant::now();
        assert_eq!(l.take(a, t0), Ok(()));
        assert_eq!(l.take(a, t0), Err(1));
    }

    #[test]
    fn idle_buckets_are_forgotten() {
        let l = Limits::new(LimitConfig { rate_per_sec: 1000, ..LimitConfig::default() });
        let t0 = Instant::now();
        for i in 0..MAX_BUCKETS as u32 {
            assert!(l.take(IpAddr::from(i.to_be_bytes()), t0).is_ok());
        }
        let later = t0 + Duration::from_secs(10);
        assert!(l.take(IpAddr::from([255, 0, 0, 1]), later).is_ok());
        assert_eq!(l.buckets.lock().unwrap().len(), 1);
    }
}
