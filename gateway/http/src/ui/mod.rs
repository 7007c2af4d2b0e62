//! The status page: `GET /` and its assets under `/ui/`, built into the binary
//! (`include_str!`: no CDN, no external fonts, no build step). The page holds no data and
//! needs no token; it polls the status route (`/v1/status` on the dispatcher,
//! `/v1/worker/status` on a worker) with the token the user gives it, kept in the tab's
//! `sessionStorage`. A strict Content-Security-Policy forbids inline script and any other
//! origin.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");
const FAVICON: &str = include_str!("favicon.svg");

/// The page's Content-Security-Policy: its own origin only, no inline script or style
/// sheet, no frames, no forms.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; object-src 'none'; base-uri 'none'; \
                       form-action 'none'; frame-ancestors 'none'";

/// Which server serves the page (it polls that server's status route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `shardwise dispatcher`: `/v1/status`.
    Dispatcher,
    /// `shardwise worker`: `/v1/worker/status`.
    Worker,
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        ],
        body,
    )
        .into_response()
}

/// `/`, `/ui/app.js`, `/ui/app.css` and `/ui/favicon.svg` (open: no token, no data).
pub fn router<S: Clone + Send + Sync + 'static>(kind: Kind) -> Router<S> {
    let index: &'static str = match kind {
        Kind::Dispatcher => INDEX,
        Kind::Worker => {
            let page = INDEX.replacen("data-kind=\"dispatcher\"", "data-kind=\"worker\"", 1);
            Box::leak(page.into_boxed_str())
        }
    };
    Router::new()
        .route("/", get(move || async move { asset("text/html; charset=utf-8", index) }))
        .route("/ui/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/ui/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .route("/ui/favicon.svg", get(|| async { asset("image/svg+xml", FAVICON) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_no_inline_script_and_names_its_assets() {
        assert!(INDEX.contains("<script src=\"/ui/app.js\" defer></script>"));
        assert_eq!(INDEX.matches("<script").count(), 1, "one script, from /ui/");
        assert!(!INDEX.contains("style="), "no inline style");
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"), "no other origin");
        assert!(!APP_JS.contains("innerHTML") && !APP_JS.contains("localStorage"));
        assert!(APP_JS.contains("sessionStorage"));
        assert!(CSP.starts_with("default-src 'self'") && !CSP.contains("unsafe"));
    }
}
