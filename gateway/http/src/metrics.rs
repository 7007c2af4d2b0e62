//! Prometheus metrics: lock-free histograms, per-route request counts and latencies.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds (Prometheus `le`, plus `+Inf`).
const BUCKETS_MICROS: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
    5_000_000,
];

/// A latency histogram with fixed buckets (cumulative only when rendered).
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_MICROS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_MICROS.iter().position(|&b| micros <= b).unwrap_or(BUCKETS_MICROS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The sum of the observations, in microseconds.
    pub fn sum_micros(&self) -> u64 {
        self.sum_micros.load(Ordering::Relaxed)
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Appends `NAME_bucket`, `NAME_sum` and `NAME_count` lines with `labels` (`a="b",...`
    /// or empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            cumulative += b.load(Ordering::Relaxed);
            let le = match BUCKETS_MICROS.get(i) {
                Some(&micros) => format!("{}", micros as f64 / 1e6),
                None => "+Inf".to_owned(),
            };
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}");
        }
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// One route's counters.
#[derive(Debug, Default)]
pub struct RouteStats {
    /// Answers by status class: 1xx..5xx at indices 0..4.
    by_class: [AtomicU64; 5],
    latency: Histogram,
}

/// Every API route's counters, by route template, then method.
#[derive(Debug, Default)]
pub struct RouteMetrics {
    routes: HashMap<String, Vec<(String, RouteStats)>>,
}

impl RouteMetrics {
    /// Counters for the routes of an OpenAPI document (`(method, path)` pairs).
    pub fn for_document(doc: &utoipa::openapi::OpenApi) -> RouteMetrics {
        let mut routes: HashMap<String, Vec<(String, RouteStats)>> = HashMap::new();
        let value = serde_json::to_value(doc).unwrap_or_default();
        if let Some(paths) = value.get("paths").and_then(|p| p.as_object()) {
            for (path, item) in paths {
                for method in item.as_object().into_iter().flat_map(|m| m.keys()) {
                    routes
                        .entry(path.clone())
                        .or_default()
                        .push((method.to_ascii_uppercase(), RouteStats::default()));
                }
            }
        }
        RouteMetrics { routes }
    }

    /// Counts one answer of a route (a route not in the table is not counted).
    pub(crate) fn record(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        // Routes are fixed at start; a lookup never allocates.
        let Some(stats) = self
            .routes
            .get(route)
            .and_then(|methods| methods.iter().find(|(m, _)| m == method))
            .map(|(_, s)| s)
        else {
            return;
        };
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        stats.by_class[class].fetch_add(1, Ordering::Relaxed);
        stats.latency.observe(elapsed);
    }

    /// `(method, route, answers, 4xx and 5xx answers)` of every route, by route then method.
    pub fn counts(&self) -> Vec<(String, String, u64, u64)> {
        let mut out: Vec<(String, String, u64, u64)> = self
            .routes
            .iter()
            .flat_map(|(p, ms)| {
                ms.iter().map(move |(m, s)| {
                    let n = |i: usize| s.by_class[i].load(Ordering::Relaxed);
                    (m.clone(), p.clone(), (0..5).map(n).sum(), n(3) + n(4))
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
        out
    }

    /// Appends the request counters and latency histograms, routes in a stable order.
    pub fn render(&self, out: &mut String) {
        let mut routes: Vec<((&str, &str), &RouteStats)> = self
            .routes
            .iter()
            .flat_map(|(p, ms)| ms.iter().map(move |(m, s)| ((m.as_str(), p.as_str()), s)))
            .collect();
        routes.sort_by(|a, b| (a.0.1, a.0.0).cmp(&(b.0.1, b.0.0)));
        out.push_str(
            "# HELP shardwise_http_requests_total HTTP requests answered, by route and status \
             class.\n# TYPE shardwise_http_requests_total counter\n",
        );
        for ((method, path), s) in &routes {
            for (i, c) in s.by_class.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 || i == 1 {
                    let _ = writeln!(
                        out,
                        "shardwise_http_requests_total{{method=\"{method}\",route=\"{path}\",\
                         status=\"{}xx\"}} {n}",
                        i + 1
                    );
                }
            }
        }
        out.push_str(
            "# HELP shardwise_http_request_duration_seconds Time from routing to the answer, by \
             route.\n# TYPE shardwise_http_request_duration_seconds histogram\n",
        );
        for ((method, path), s) in &routes {
            if s.latency.count() == 0 {
                continue;
            }
            s.latency.render(
                out,
                "shardwise_http_request_duration_seconds",
                &format!("method=\"{method}\",route=\"{path}\""),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(40));
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_secs(10));
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.00005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.0005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"5\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_sum{a=\"b\"} 10.00034\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"), "{out}");
    }
}
