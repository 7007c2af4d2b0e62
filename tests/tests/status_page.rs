//! The status page in a real headless Chromium (chromedriver's WebDriver API): it loads
//! without console errors, shows the registered workers, and shows a DYNAMIC iteration's
//! acknowledged splits growing while a client reads; with `--auth-tokens` it asks for a token
//! and keeps it in the tab only; a worker's page shows its task. Needs `chromium` and
//! `chromium-driver` (as `.ci/run` installs them). A screenshot is kept at
//! `target/status-page.png`.

use std::time::Duration;

use serde_json::{Value, json};
use shardwise_tests::browser::Browser;
use shardwise_tests::{Dispatcher, TempDir, Worker, http, ok, poll_until, target_dir};

const DEADLINE: Duration = Duration::from_secs(30);
const WORKER_ARGS: &[&str] = &["--heartbeat-interval", "200ms"];
/// Markup in a worker tag: it must reach the page as text.
const HOSTILE: &str = "<img src=x onerror=\"window.pwned=1\">";

/// Console entries at level SEVERE (errors), as `level message` lines.
fn severe(browser: &Browser) -> Vec<String> {
    browser
        .console()
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| format!("{} {}", e["level"], e["message"]))
        .collect()
}

/// The console check is not vacuous: an error logged on purpose is reported.
fn console_reports_errors(browser: &Browser) {
    browser.execute("console.error('deliberate error for the console check');", json!([]));
    let got = severe(browser);
    assert!(
        got.iter().any(|l| l.contains("deliberate error for the console check")),
        "the browser log did not report a console.error: {got:?}"
    );
}

/// A DYNAMIC job and iteration over `range(stop)`; the client's tasks as (task id, worker url).
fn dynamic_iteration(d: &Dispatcher, stop: u64) -> (String, Vec<(String, String)>) {
    let ds = json!({"source": {"range": {"stop": stop}}});
    let id = ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))))["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = ok(&d.call(
        "POST",
        "/v1/jobs",
        Some(json!({"dataset_id": id, "processing_mode": "distributed_epoch", "split_size": 10})),
    ));
    let lease = ok(&d.call(
        "POST",
        &format!("/v1/jobs/{}/iterations", job["job_id"].as_str().unwrap()),
        Some(json!({})),
    ));
    let iteration = lease["iteration_id"].as_str().unwrap().to_owned();
    let client = lease["client_id"].as_str().unwrap();
    let tasks = poll_until("the client sees a task per worker", DEADLINE, || {
        let hb = ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))));
        let tasks: Vec<(String, String)> = hb["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let task = t["task_id"].as_str().unwrap().to_owned();
                (task, format!("http://{}", t["worker_address"].as_str().unwrap()))
            })
            .collect();
        if tasks.len() == 2 { Ok(tasks) } else { Err(hb.to_string()) }
    });
    (iteration, tasks)
}

/// Reads up to `max` elements of each task once (a task the worker does not know yet reads
/// nothing).
fn read_some(tasks: &[(String, String)], max: u32) -> usize {
    let mut n = 0;
    for (task, url) in tasks {
        let r = http("GET", url, &format!("/v1/tasks/{task}/elements?max={max}"), None)
            .expect("the worker answers");
        if r.status == 200 {
            n += r.json()["elements"].as_array().map_or(0, Vec::len);
        }
    }
    n
}

/// The acknowledged splits the page shows for `iteration` (`None` before it shows them).
fn shown_acknowledged(browser: &Browser, iteration: &str) -> Option<u64> {
    let css = format!("tr[data-iteration=\"{iteration}\"] .figures .acknowledged");
    browser.text(&css).and_then(|t| t.replace(',', "").parse().ok())
}

fn save_screenshot(browser: &Browser, name: &str) -> std::path::PathBuf {
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let path = target_dir().join(name);
    std::fs::write(&path, png).expect("the screenshot is written");
    path
}

#[test]
fn status_page_shows_workers_and_a_dynamic_iteration_moving() {
    let browser = Browser::start();
    let d = Dispatcher::start(&[]);
    // A tag is any text a worker sends: the page shows it as text, never as markup.
    let w1 = Worker::start(
        &d.url,
        &[&["--tags", &format!("COLOCATED,{HOSTILE}")], WORKER_ARGS].concat(),
    );
    let w2 = Worker::start(&d.url, WORKER_ARGS);
    let (iteration, tasks) = dynamic_iteration(&d, 1_000_000);

    // The assets are served with a strict CSP; the page needs no token.
    let page = http("GET", &d.url, "/", None).unwrap();
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").expect("a CSP");
    assert!(csp.starts_with("default-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");

    browser.goto(&format!("{}/", d.url));
    for w in [&w1, &w2] {
        let css = format!("tr[data-worker=\"{}\"] td.address", w.address());
        poll_until("the page shows the worker", DEADLINE, || {
            browser.text(&css).filter(|t| t == w.address()).ok_or_else(|| format!("no {css}"))
        });
    }
    assert_eq!(browser.text("#role").as_deref(), Some("leader"));
    let tags = browser.text(&format!("tr[data-worker=\"{}\"]", w1.address())).unwrap();
    assert!(tags.contains(HOSTILE), "the tag is shown as text: {tags}");
    assert_eq!(
        browser.execute("return document.querySelectorAll('main img').length;", json!([])),
        0
    );
    assert_eq!(browser.execute("return window.pwned === undefined;", json!([])), true);
    assert_eq!(browser.text("#journal-mode").as_deref(), Some("memory"));

    // Read slowly while the page polls: the acknowledged splits it shows grow.
    let first = poll_until("the page shows the iteration's split progress", DEADLINE, || {
        read_some(&tasks, 50);
        shown_acknowledged(&browser, &iteration).ok_or("no figures yet")
    });
    let later = poll_until("the acknowledged splits shown grow", DEADLINE, || {
        read_some(&tasks, 200);
        match shown_acknowledged(&browser, &iteration) {
            Some(n) if n > first => Ok(n),
            other => Err(format!("{other:?} (first {first})")),
        }
    });
    assert!(later > first);
    // The plots drew lines once there were two samples.
    poll_until("the split and request-rate plots have lines", DEADLINE, || {
        let lines = browser.execute(
            "return document.querySelectorAll('#split-svg polyline, #rate-svg polyline').length;",
            json!([]),
        );
        if lines.as_u64().unwrap_or(0) >= 2 { Ok(()) } else { Err(lines.to_string()) }
    });
    let path = save_screenshot(&browser, "status-page.png");
    eprintln!("screenshot: {}", path.display());

    let errors = severe(&browser);
    assert!(errors.is_empty(), "console errors: {errors:?}");
    console_reports_errors(&browser);
}

#[test]
fn status_page_asks_for_a_token_and_keeps_it_in_the_tab_only() {
    const ADMIN: &str = "admin-token-0123456789";
    const MONITOR: &str = "monitor-token-0123456789";
    const CLIENT: &str = "client-token-0123456789";
    let dir = TempDir::new("status-auth");
    let tokens = dir.0.join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [
            {"role": "admin", "token": ADMIN},
            {"role": "monitor", "token": MONITOR},
            {"role": "client", "token": CLIENT},
        ]})
        .to_string(),
    )
    .unwrap();
    let d = Dispatcher::start(&["--auth-tokens", tokens.to_str().unwrap()]);
    // The page and its assets need no token; the data does.
    for path in ["/", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"] {
        assert_eq!(http("GET", &d.url, path, None).unwrap().status, 200, "{path}");
    }
    assert_eq!(http("GET", &d.url, "/v1/status", None).unwrap().status, 401);

    let browser = Browser::start();
    browser.goto(&format!("{}/", d.url));
    let visible = |b: &Browser| {
        b.execute("return !document.getElementById('auth').hidden;", json!([])) == true
    };
    let message = |b: &Browser| b.text("#auth-message").unwrap_or_default();
    poll_until("the page asks for a token", DEADLINE, || {
        let m = message(&browser);
        if visible(&browser) && m.contains("Authorization: Bearer") { Ok(()) } else { Err(m) }
    });
    // A wrong token: the refusal's detail, and the question again.
    browser.type_into("#token", "wrong-token-0123456789");
    browser.click("#token-save");
    poll_until("the page shows the refusal", DEADLINE, || {
        let m = message(&browser);
        if visible(&browser) && m.contains("the bearer token is not valid") {
            Ok(())
        } else {
            Err(m)
        }
    });
    // A valid token whose role may not read the status: refused too, saying which roles may.
    browser.type_into("#token", CLIENT);
    browser.click("#token-save");
    poll_until("the page shows the role refusal", DEADLINE, || {
        let m = message(&browser);
        if visible(&browser) && m.contains("monitor") { Ok(()) } else { Err(m) }
    });
    // The monitor token shows the data.
    browser.type_into("#token", MONITOR);
    browser.click("#token-save");
    poll_until("the page shows the data", DEADLINE, || {
        let role = browser.text("#role");
        if !visible(&browser) && role.as_deref() == Some("leader") {
            Ok(())
        } else {
            Err(format!("{role:?}"))
        }
    });
    assert!(browser.text("#workers").is_some_and(|t| t.contains("No worker registered.")));
    let storage = browser.execute(
        "return [localStorage.length, sessionStorage.getItem('shardwise.token'), document.cookie];",
        json!([]),
    );
    assert_eq!(storage, json!([0, MONITOR, ""]), "the token is in this tab's sessionStorage only");
    // Only the refused status polls were errors (Chromium logs every 4xx fetch).
    let errors: Vec<String> =
        severe(&browser).into_iter().filter(|e| !e.contains("/v1/status")).collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

#[test]
fn a_workers_status_page_shows_its_task() {
    let browser = Browser::start();
    let d = Dispatcher::start(&[]);
    let w1 = Worker::start(&d.url, WORKER_ARGS);
    let w2 = Worker::start(&d.url, WORKER_ARGS);
    let (_, tasks) = dynamic_iteration(&d, 1_000);
    let (task, url) = tasks.iter().find(|(_, u)| *u == w1.url).expect("a task on w1").clone();
    drop(w2);
    // The worker's status route (documented as served by workers) lists the task once the
    // worker has it.
    let status: Value = poll_until("the worker has its task", DEADLINE, || {
        let s = ok(&http("GET", &url, "/v1/worker/status", None).unwrap());
        if s["tasks"][0]["task_id"] == task.as_str() { Ok(s) } else { Err(s.to_string()) }
    });
    assert_eq!(status["worker_address"], w1.address());
    assert_eq!(status["tasks"][0]["state"], "waiting", "no client read it yet");

    browser.goto(&format!("{url}/"));
    poll_until("the worker page shows its task", DEADLINE, || {
        let row = browser.text(&format!("tr[data-task=\"{task}\"]"));
        let addr = browser.text("#worker-address");
        match (row, addr) {
            (Some(_), Some(a)) if a == w1.address() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(browser.text("#title").as_deref(), Some("Shardwise worker"));
    // The tasks table fits its card in the 1400-pixel window: nothing to scroll sideways.
    let fit = browser.execute(
        "const s = document.getElementById('tasks'); \
         return [s.scrollWidth, s.clientWidth, window.innerWidth];",
        json!([]),
    );
    let (scroll, client) = (fit[0].as_i64().unwrap_or(-1), fit[1].as_i64().unwrap_or(0));
    assert!(scroll <= client, "the tasks table overflows its card: {fit}");
    let errors = severe(&browser);
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

/// Not a check: the screenshot in the README (`docs/status-page.png`), taken from a dispatcher
/// with three workers and a client reading at a steady pace for about 20 seconds, so the
/// plots have a history. Run it with `cargo nextest run --workspace --run-ignored only -E
/// 'test(/readme_screenshot/)'`; it writes `target/status-page-readme.png`.
#[test]
#[ignore = "makes the README's screenshot; not a check"]
fn readme_screenshot() {
    let browser = Browser::start();
    let d = Dispatcher::start(&[]);
    let _w1 = Worker::start(&d.url, &[&["--tags", "COLOCATED"], WORKER_ARGS].concat());
    let _w2 = Worker::start(&d.url, WORKER_ARGS);
    let (_, tasks) = dynamic_iteration(&d, 5_000_000);
    let _w3 = Worker::start(&d.url, WORKER_ARGS);
    browser.goto(&format!("{}/", d.url));
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        read_some(&tasks, 100);
        // Pacing, not waiting for a state: a slow reader draws a gentle slope.
        std::thread::sleep(Duration::from_millis(20));
    }
    let path = save_screenshot(&browser, "status-page-readme.png");
    eprintln!("screenshot: {}", path.display());
}

/// `GET /v1/status` without a browser: the journal of a work dir, the live cluster of
/// `--cluster-config` (following a new pod), and the per-route request counters.
#[test]
fn the_status_route_reports_the_journal_the_cluster_and_request_counts() {
    use shardwise_tests::fake_k8s::{FakeKube, PodSpec};
    let work = TempDir::new("status-route-work");
    let dir = TempDir::new("status-route");
    let kube = FakeKube::start();
    let (kubeconfig, cluster, _) = kube.tf_worker_cluster(&dir.0, &["10.0.0.1", "10.0.0.2"]);
    let d = Dispatcher::try_start_env(
        &[
            "--work-dir",
            work.path(),
            "--fault-tolerant",
            "--cluster-config",
            cluster.to_str().unwrap(),
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    )
    .unwrap_or_else(|e| panic!("dispatcher: {e}"));
    ok(&d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 5}}}})),
    ));
    let s = ok(&d.call("GET", "/v1/status", None));
    let j = &s["journal"];
    assert_eq!((j["mode"].as_str(), j["fault_tolerant"].as_bool()), (Some("work_dir"), Some(true)));
    assert!(j["segment_bytes"].as_u64().unwrap() > 0, "{j}");
    assert!(j["commits"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["last_commit_micros"].is_u64() && j["mean_commit_micros"].is_u64(), "{j}");
    assert_eq!(s["replica"]["role"], "leader");
    assert_eq!(s["state"]["totals"]["datasets"], 1);
    assert_eq!(s["state"]["datasets"][0]["summary"], "range(0, 5)");
    let datasets_posts = s["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == "POST" && r["route"] == "/v1/datasets")
        .expect("the route is counted")["requests"]
        .as_u64();
    assert_eq!(datasets_posts, Some(1));
    let c = &s["cluster"];
    assert_eq!((c["live"].as_bool(), c["stale"].as_bool()), (Some(true), Some(false)), "{c}");
    assert_eq!(c["total_members"], 2);
    assert_eq!(c["members"][0]["job"], "worker");
    assert!(c["members"][0]["address"].as_str().unwrap().starts_with("10.0.0.1"), "{c}");
    // A new pod: the status follows the watch.
    kube.add_pod(PodSpec::new("ml", "w-2").label("job-name", "tf").ip("10.0.0.3").port(8470));
    poll_until("the status shows the new member", DEADLINE, || {
        let s = ok(&d.call("GET", "/v1/status", None));
        if s["cluster"]["total_members"] == 3 { Ok(()) } else { Err(s["cluster"].to_string()) }
    });
}
