//! A real headless Chromium for the status page tests, driven by Debian's `chromedriver`
//! over the W3C WebDriver HTTP API (JSON over HTTP on 127.0.0.1, with the tests' own client,
//! [`crate::rawhttp`]: no WebDriver crate). `.ci/run` installs `chromium` and `chromium-driver`.
//!
//! [`Browser`] starts `chromedriver` on a free loopback port, opens one session with a fresh
//! profile directory, and on drop deletes the session (which quits Chromium) and kills the
//! driver.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::rawhttp::{Conn, Request};
use crate::{HttpResponse, Process, TempDir, poll_until};

/// The Chromium binary the session runs.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One browser session.
pub struct Browser {
    base: String,
    session: String,
    /// Killed (SIGKILL) on drop, after the session is deleted.
    driver: Process,
    _profile: TempDir,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("base", &self.base).field("session", &self.session).finish()
    }
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// Panics with how to install them when Chromium or chromedriver is missing.
pub fn require_chromium() {
    let missing: Vec<&str> = [
        (!std::path::Path::new(CHROMIUM).is_file()).then_some(CHROMIUM),
        (!on_path("chromedriver")).then_some("chromedriver"),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(
        missing.is_empty(),
        "the status page tests need Chromium and chromedriver ({} not found): install them with \
         `apt-get install chromium chromium-driver` (as .ci/run does)",
        missing.join(", ")
    );
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session (window 1400x1000).
    pub fn start() -> Browser {
        require_chromium();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("its address").port()
        };
        let driver = Process::spawn(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .arg("--log-level=WARNING"),
        );
        let base = format!("http://127.0.0.1:{port}");
        poll_until("chromedriver answers /status", Duration::from_secs(20), || {
            match http("GET", &base, "/status", None) {
                Ok(r) if r.status == 200 && r.json()["value"]["ready"] == true => Ok(()),
                Ok(r) => Err(format!("{} {}", r.status, r.body)),
                Err(e) => Err(e.to_string()),
            }
        });
        let profile = TempDir::new("chromium-profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.path()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let r = http("POST", &base, "/session", Some(&caps)).expect("chromedriver answers");
        assert_eq!(r.status, 200, "new session: {}", r.body);
        let session = r.json()["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {}", r.body))
            .to_owned();
        Browser { base, session, driver, _profile: profile }
    }

    /// A WebDriver command of this session: its `value`, or `Err` with the WebDriver error.
    pub fn try_cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let path = format!("/session/{}{path}", self.session);
        let r = http(method, &self.base, &path, body.as_ref()).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&r.body)
            .map_err(|e| format!("{method} {path}: not JSON ({e}): {}", r.body))?;
        if r.status == 200 {
            Ok(v["value"].clone())
        } else {
            Err(format!("{method} {path}: {} {}", r.status, v["value"]))
        }
    }

    /// [`Browser::try_cmd`], panicking on an error.
    pub fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_cmd(method, path, body).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Navigates to `url` (waits for the page's load event).
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns what it returns.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.cmd("POST", "/execute/sync", Some(json!({"script": script, "args": args})))
    }

    /// The text of the first element matching `css` (`None` when there is none).
    pub fn text(&self, css: &str) -> Option<String> {
        let v = self.execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            json!([css]),
        );
        v.as_str().map(str::to_owned)
    }

    /// The browser console entries logged since the last call (`level`, `message`).
    pub fn console(&self) -> Vec<Value> {
        let v = self.cmd("POST", "/se/log", Some(json!({"type": "browser"})));
        v.as_array().cloned().unwrap_or_default()
    }

    /// The first element matching `css`.
    pub fn find(&self, css: &str) -> String {
        let v = self.cmd("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        v[ELEMENT].as_str().unwrap_or_else(|| panic!("no element id for {css}: {v}")).to_owned()
    }

    /// Types `text` into the element matching `css`, as a user would.
    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/clear"), Some(json!({})));
        self.cmd("POST", &format!("/element/{e}/value"), Some(json!({"text": text})));
    }

    /// Clicks the element matching `css`.
    pub fn click(&self, css: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})));
    }

    /// A PNG screenshot of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let v = self.cmd("GET", "/screenshot", None);
        base64_decode(v.as_str().expect("a base64 screenshot"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Quits Chromium; the driver is killed when `driver` drops.
        let _ = http("DELETE", &self.base, &format!("/session/{}", self.session), None);
        let _ = self.driver.child.kill();
        let _ = self.driver.child.wait();
    }
}

/// One HTTP/1.1 request to chromedriver on a keep-alive [`Conn`]: the answer is read by its
/// `Content-Length` (chromedriver answers `Connection: close` but keeps the connection open, so
/// reading to the end of the stream would wait for ever).
fn http(
    method: &str,
    base: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<HttpResponse> {
    Conn::open(base, Duration::from_secs(60))?.request(&Request::new(method, path).json(body))
}

/// Standard base64 (with padding), as WebDriver sends screenshots.
pub fn base64_decode(text: &str) -> Vec<u8> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter_map(value) {
        acc = (acc << 6) | c;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(super::base64_decode("aGVsbG8="), b"hello");
        assert_eq!(super::base64_decode("aGVsbG8h"), b"hello!");
        assert_eq!(super::base64_decode("aA=="), b"h");
    }
}
