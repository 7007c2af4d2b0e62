//! The dispatcher core embedded without tokio (`examples/embedded`): a plain thread loop over
//! `std::net` and a file journal. A session registers a dataset, a worker, a job and an
//! iteration and takes splits; a restart from the journal serves the same state, and the split
//! provider carries on where it was.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

use serde_json::{Value, json};
use shardwise_examples::embedded::Server;

struct Conn {
    out: TcpStream,
    lines: std::io::Lines<BufReader<TcpStream>>,
}

impl Conn {
    fn open(server: &Server) -> Conn {
        let out = TcpStream::connect(server.addr()).expect("connect");
        let lines = BufReader::new(out.try_clone().expect("clone")).lines();
        Conn { out, lines }
    }
    /// Sends one request line; the answer's `ok` value (panics on an error answer).
    fn ok(&mut self, request: Value) -> Value {
        let answer = self.ask(request.clone());
        answer.get("ok").cloned().unwrap_or_else(|| panic!("{request} -> {answer}"))
    }
    fn ask(&mut self, request: Value) -> Value {
        writeln!(self.out, "{request}").expect("send");
        let line = self.lines.next().expect("an answer").expect("read");
        serde_json::from_str(&line).expect("an answer is JSON")
    }
}

fn start(dir: &std::path::Path) -> Server {
    Server::start(TcpListener::bind("127.0.0.1:0").expect("bind"), dir).expect("starts")
}

#[test]
fn an_embedded_dispatcher_serves_and_recovers_from_its_journal() {
    let dir = std::env::temp_dir().join(format!("shardwise-embedded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = start(&dir);
    assert_eq!(server.replayed, 0);
    let mut c = Conn::open(&server);
    let w = json!({"worker_address": "w0:5000", "worker_uid": "u0"});
    c.ok(json!({"op": "worker_heartbeat", "body": w}));
    let ds = c.ok(json!({"op": "register_dataset",
        "body": {"dataset": {"source": {"range": {"stop": 10}}}}}))["dataset_id"]
        .clone();
    let job = c.ok(json!({"op": "create_job",
        "body": {"dataset_id": ds, "processing_mode": "distributed_epoch", "split_size": 2}}))
        ["job_id"]
        .clone();
    let it =
        c.ok(json!({"op": "create_iteration", "job_id": job, "body": {}}))["iteration_id"].clone();
    let splits = |c: &mut Conn| {
        let body = json!({"worker_address": "w0:5000", "worker_uid": "u0", "repetition": 0});
        c.ok(json!({"op": "get_splits", "iteration_id": it, "body": body}))["splits"].clone()
    };
    assert_eq!(splits(&mut c), json!([{"start": 0, "stop": 2}]));
    assert_eq!(splits(&mut c), json!([{"start": 2, "stop": 4}]));
    // Errors are typed, not a dropped connection.
    let e = c.ask(json!({"op": "job", "job_id": "1"}));
    assert_eq!(e["error"]["code"], "NOT_FOUND", "{e}");
    let e = c.ask(json!({"op": "nonsense"}));
    assert_eq!(e["error"]["code"], "INVALID_ARGUMENT", "{e}");
    let before = c.ok(json!({"op": "job", "job_id": job}));
    let incarnation = c.ok(json!({"op": "version"}))["incarnation"].clone();
    drop(c);
    server.stop();

    // A new process on the same work dir replays the journal.
    let server = start(&dir);
    assert!(server.replayed > 5, "replayed {}", server.replayed);
    let mut c = Conn::open(&server);
    assert_eq!(c.ok(json!({"op": "version"}))["incarnation"], incarnation);
    assert_eq!(c.ok(json!({"op": "job", "job_id": job})), before);
    let workers = c.ok(json!({"op": "workers"}));
    assert_eq!(workers["workers"][0]["worker_address"], "w0:5000", "{workers}");
    let dataset = c.ok(json!({"op": "dataset", "dataset_id": ds}));
    assert_eq!(dataset["dataset"]["source"]["range"]["stop"], 10, "{dataset}");
    // The split provider carries on after the splits handed out before the restart.
    assert_eq!(splits(&mut c), json!([{"start": 4, "stop": 6}]));
    drop(c);
    server.stop();
    std::fs::remove_dir_all(&dir).expect("clean up");
}
