//! Hostile data files against real processes (issue 30): what a small file can make a worker
//! or a dispatcher allocate, and how long it can keep them busy.
//!
//! - Parquet pages whose GZIP or LZ4 body inflates far past the size the page declares are
//!   refused at that size, naming the file, row group and column: the worker's peak memory
//!   stays small (before: +1 GB and more per page).
//! - A read's reply is bounded by what it writes (`--max-reply-bytes`), not by what its rows
//!   hold: a 279 KB Arrow file of 4,000 rows referencing one 256 KiB dictionary string, read as
//!   JSON 1,000 rows at a time, answers as many rows as fit and the rest on the next reads,
//!   every row exactly once (before: a 262 MB reply).
//! - Parquet footers read by a dispatcher to count rows (a source split by rows) are bounded
//!   (`--max-footer-bytes`, `--max-footer-files`, `--max-footer-reads`), walked rather than
//!   decoded, remembered by the file's identity, and no longer read once their caller is
//!   gone: four registrations of a file of 1,000,000 row groups (a 31 MB footer) at once
//!   (before: +506 MB each, 2.25 GB kept). A worker reads footers within the same flag, and
//!   decodes one only when its metadata fits the task's `--max-buffer-bytes`.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_gateway::client::{ClientError, DistributeOptions, distribute};
use shardwise_tests::parquet_bytes::{self, codec};
use shardwise_tests::{Dispatcher, TempDir, Worker, http, ok, peak_rss_mib, rss_mib};

fn options() -> DistributeOptions {
    DistributeOptions {
        unknown_task_timeout: Duration::from_secs(20),
        unavailable_timeout: Duration::from_secs(30),
        ..shardwise_tests::fast_options()
    }
}

/// Reads a whole epoch through the Rust client; `None` if it took more than `limit`.
fn read_within(url: &str, ds: Value, limit: Duration) -> Option<Result<Vec<Value>, ClientError>> {
    let def = DatasetDef::from_json(&ds).expect("a valid dataset");
    shardwise_tests::runtime().block_on(async {
        let read = distribute(url, def, options()).try_collect::<Vec<Value>>();
        tokio::time::timeout(limit, read).await.ok()
    })
}

/// Reads a whole epoch through the Rust client (bounded to 60 s).
fn read_all(url: &str, ds: Value) -> Result<Vec<Value>, ClientError> {
    read_within(url, ds, Duration::from_secs(60)).expect("the epoch ends in time")
}

fn parquet(path: &str) -> Value {
    json!({"source": {"files": {"paths": [path], "format": "parquet"}}})
}

/// Issue 30, defect 2: a 1 MB Parquet file whose GZIP page declares 24 bytes inflated to 1 GB
/// before any size check (the worker, with a 16 MiB buffer budget, peaked at 2.08 GB), and a
/// legacy LZ4 page did the same through its LZ4-frame fallback. Every codec now stops at the
/// declared size.
#[test]
fn parquet_pages_that_inflate_past_their_declared_size_are_refused_with_small_memory() {
    let dir = TempDir::new("bombs");
    let files = [
        ("gzip.parquet", parquet_bytes::one_page(codec::GZIP, &parquet_bytes::gzip_bomb(1024), 3)),
        (
            "lz4.parquet",
            parquet_bytes::one_page(codec::LZ4, &parquet_bytes::lz4_frame_bomb(512), 3),
        ),
    ];
    for (name, bytes) in &files {
        println!("{name}: {} bytes", bytes.len());
        std::fs::write(dir.0.join(name), bytes).unwrap();
    }
    // The pages are what they say: a valid file of the same layout reads.
    let valid: Vec<u8> = [1i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let valid = parquet_bytes::one_page(codec::UNCOMPRESSED, &valid, 3);
    std::fs::write(dir.0.join("valid.parquet"), valid).unwrap();

    // One cluster per file, so that each peak is that file's.
    let mut errors = Vec::new();
    let mut peaks = Vec::new();
    for (name, _) in &files {
        let d = Dispatcher::start(&[]);
        let mut w = Worker::start(
            &d.url,
            &[
                "--data-root",
                dir.path(),
                "--max-buffer-bytes",
                "16777216",
                "--heartbeat-interval",
                "200ms",
            ],
        );
        let pid = w.child.id();
        let got = read_all(&d.url, parquet(&format!("{}/valid.parquet", dir.path()))).unwrap();
        assert_eq!(got, [json!({"x": 1}), json!({"x": 2}), json!({"x": 3})]);
        let before = peak_rss_mib(pid);
        let t = Instant::now();
        let limit = Duration::from_secs(60);
        let read = read_within(&d.url, parquet(&format!("{}/{name}", dir.path())), limit);
        let (took, peak, now) = (t.elapsed(), peak_rss_mib(pid), rss_mib(pid));
        println!(
            "{name}: {:.1} s{}, worker peak RSS {peak} MiB ({before} MiB before), RSS after {now} \
             MiB",
            took.as_secs_f64(),
            if read.is_none() { " (not answered yet)" } else { "" },
        );
        peaks.push((name, peak));
        errors.push((name, read));
        w.kill();
    }
    for (name, peak) in peaks {
        assert!(peak < 200, "{name}: the worker's peak RSS reached {peak} MiB");
    }
    let errors = errors.into_iter().map(|(name, read)| {
        let read = read.expect("the read is answered within a minute");
        (name, read.expect_err("a page that lies about its size"))
    });
    for (name, err) in errors {
        let text = err.to_string();
        println!("{name}: {text}");
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{text}");
        for part in [*name, "row group 0", "column \"x\" page 0", "inflates past the 24 bytes"] {
            assert!(text.contains(part), "{name}: {part:?} not in {text}");
        }
    }
}

/// Creates a job and an iteration over raw HTTP; returns the tasks as (task id, worker url).
fn raw_iteration(d: &Dispatcher, ds: Value) -> Vec<(String, String)> {
    let id = ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))))["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mode = json!("parallel_epochs");
    let job =
        ok(&d.call("POST", "/v1/jobs", Some(json!({"dataset_id": id, "processing_mode": mode}))));
    let lease = ok(&d.call(
        "POST",
        &format!("/v1/jobs/{}/iterations", job["job_id"].as_str().unwrap()),
        Some(json!({})),
    ));
    let client = lease["client_id"].as_str().unwrap();
    let hb = ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))));
    hb["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap().to_owned(),
                format!("http://{}", t["worker_address"].as_str().unwrap()),
            )
        })
        .collect()
}

/// `id` 0..4000 and `s`, one string in every row: `text` as a dictionary of one entry.
fn repeated_string(text: &str) -> (arrow_schema::SchemaRef, Vec<arrow_array::ArrayRef>) {
    use arrow_array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..4000));
    let keys = Int32Array::from(vec![0; 4000]);
    let values = Arc::new(StringArray::from(vec![text]));
    let dict: ArrayRef = Arc::new(DictionaryArray::try_new(keys, values).unwrap());
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", dict.data_type().clone(), false),
    ]);
    (Arc::new(schema), vec![ids, dict])
}

/// `len` letters.
fn letters(len: usize) -> String {
    (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect()
}

/// An Arrow IPC file: 4,000 rows whose `s` is a dictionary of the one string `text` (with 256
/// KiB of letters: 311 KB, the 279 KB file give or take its ids).
fn dictionary_arrow_file(text: &str) -> Vec<u8> {
    let (schema, columns) = repeated_string(text);
    let batch = arrow_array::RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::FileWriter::try_new(&mut out, &schema).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

/// A Parquet file (zstd): 4,000 rows whose `s` is one string of `len` letters, stored as
/// `string_view` (dictionary-encoded: one entry, which the reader's views all point into).
fn string_view_parquet_file(len: usize) -> Vec<u8> {
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let text = letters(len);
    let ids: arrow_array::ArrayRef = Arc::new(arrow_array::Int64Array::from_iter_values(0..4000));
    let views: arrow_array::ArrayRef =
        Arc::new(arrow_array::StringViewArray::from_iter_values((0..4000).map(|_| text.as_str())));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Utf8View, false),
    ]));
    let batch = arrow_array::RecordBatch::try_new(schema.clone(), vec![ids, views]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    out
}

/// One JSON read of a task over raw HTTP (`max` elements; the worker's 404 retried while it
/// fetches the task): the `id` of every row, the reply's size and whether the task ended.
fn read_ids(worker: &str, task: &str, max: u32) -> (Vec<i64>, usize, bool) {
    for _ in 0..5_000 {
        let r = http("GET", worker, &format!("/v1/tasks/{task}/elements?max={max}"), None)
            .expect("the worker answers");
        if r.status == 404 {
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.body.chars().take(500).collect::<String>());
        let v: Value = serde_json::from_str(&r.body).expect("JSON");
        let ids = v["elements"].as_array().unwrap().iter().map(|e| e["id"].as_i64().unwrap());
        return (ids.collect(), r.body.len(), v["end_of_sequence"] == true);
    }
    panic!("task {task} never came");
}

/// A JSON read of `dataset` with `--max-buffer-bytes` (and so `--max-reply-bytes`) of 16 MiB,
/// `max=1000` a read, for at most `reads` reads: the ids read, the largest reply, the reads.
fn read_json(d: &Dispatcher, dataset: Value, reads: usize) -> (Vec<i64>, usize, usize) {
    let tasks = raw_iteration(d, dataset);
    let (task, worker) = &tasks[0];
    let (mut ids, mut largest) = (Vec::new(), 0);
    for n in 1..=reads {
        let (got, size, end) = read_ids(worker, task, 1000);
        ids.extend(got);
        largest = largest.max(size);
        if end {
            return (ids, largest, n);
        }
    }
    (ids, largest, reads)
}

/// Issue 30, defect 3: row weight is measured on the compact Arrow encoding, but JSON writes
/// every row out: a 279 KB Arrow file (a dictionary of one 256 KiB string, 4,000 rows) gave a
/// 262 MB reply to one `?max=1000` read and 786 MB peak RSS; a 12.7 KB Parquet `string_view`
/// file gave 50 MB replies. A reply now stops at `--max-reply-bytes` (here the default, the
/// 16 MiB of `--max-buffer-bytes`), and the next read goes on from there: every row once.
#[test]
fn json_replies_stop_at_their_byte_budget_and_every_row_comes_once() {
    let dir = TempDir::new("replies");
    let arrow = dictionary_arrow_file(&letters(256 << 10));
    let parquet = string_view_parquet_file(32 << 10);
    println!("dict.arrow: {} bytes; views.parquet: {} bytes", arrow.len(), parquet.len());
    std::fs::write(dir.0.join("dict.arrow"), &arrow).unwrap();
    std::fs::write(dir.0.join("views.parquet"), &parquet).unwrap();
    let budget = 16 << 20;
    let d = Dispatcher::start(&[]);
    let w = Worker::start(
        &d.url,
        &[
            "--data-root",
            dir.path(),
            "--max-buffer-bytes",
            "16777216",
            "--heartbeat-interval",
            "200ms",
        ],
    );
    let pid = w.child.id();
    let file = |name: &str, format: &str| {
        let path = format!("{}/{name}", dir.path());
        json!({"source": {"files": {"paths": [path], "format": format}}})
    };
    // The file: two reads (each writes 16 MiB of JSON; all 4,000 rows would be 1 GB).
    let t = Instant::now();
    let (dict_ids, dict_largest, _) = read_json(&d, file("dict.arrow", "arrow"), 2);
    println!(
        "dict.arrow: 2 reads of max=1000 in {:.1} s gave {} rows, the largest reply {dict_largest} \
         bytes; worker peak RSS {} MiB",
        t.elapsed().as_secs_f64(),
        dict_ids.len(),
        peak_rss_mib(pid)
    );
    // The string_view file, to its end.
    let t = Instant::now();
    let (view_ids, view_largest, reads) = read_json(&d, file("views.parquet", "parquet"), 100);
    let peak = peak_rss_mib(pid);
    println!(
        "views.parquet: {reads} reads of max=1000 in {:.1} s, the largest reply {view_largest} \
         bytes; worker peak RSS {peak} MiB",
        t.elapsed().as_secs_f64(),
    );
    for (name, largest) in [("dict.arrow", dict_largest), ("views.parquet", view_largest)] {
        assert!(largest <= budget, "{name}: a reply of {largest} bytes, more than {budget}");
    }
    assert!(peak < 200, "the worker's peak RSS reached {peak} MiB");
    // What did not fit came with the next read: nothing skipped, nothing twice.
    assert!(dict_ids.len() > 2 && dict_ids.len() < 1000, "{}", dict_ids.len());
    assert_eq!(dict_ids, (0..dict_ids.len() as i64).collect::<Vec<_>>());
    assert_eq!(view_ids, (0..4000).collect::<Vec<_>>(), "every row once, in order");
}

/// A row that does not fit alone in a reply is refused, naming it, and stays unread: the
/// same read answers the same, and an Arrow read (where the string is not escaped, and its
/// dictionary is written once) takes it and the rows after it.
#[test]
fn a_row_larger_than_the_reply_budget_is_refused_naming_it_and_stays_unread() {
    let dir = TempDir::new("one-row");
    // 64 KiB of a control character: 384 KiB as JSON (`\u0001` each), 64 KiB in Arrow.
    let text = "\u{1}".repeat(64 << 10);
    std::fs::write(dir.0.join("dict.arrow"), dictionary_arrow_file(&text)).unwrap();
    let d = Dispatcher::start(&[]);
    let w = Worker::start(
        &d.url,
        &[
            "--data-root",
            dir.path(),
            "--max-reply-bytes",
            "200000",
            "--heartbeat-interval",
            "200ms",
        ],
    );
    let path = format!("{}/dict.arrow", dir.path());
    let ds = json!({"source": {"files": {"paths": [&path], "format": "arrow"}}});
    let tasks = raw_iteration(&d, ds);
    let (task, _) = &tasks[0];
    let read = format!("/v1/tasks/{task}/elements?max=1000");
    let first = (0..1000).map(|_| w.call("GET", &read)).find(|r| r.status != 404).unwrap();
    let short = |body: &str| body.chars().take(500).collect::<String>();
    assert_eq!(first.status, 429, "{}", short(&first.body));
    let p = first.json();
    assert_eq!(p["code"], "RESOURCE_EXHAUSTED", "{p}");
    let detail = p["detail"].as_str().unwrap();
    for part in
        ["row 0 of file", "dict.arrow", "more than 200000 bytes as JSON", "--max-reply-bytes"]
    {
        assert!(detail.contains(part), "{part:?} not in {detail}");
    }
    let again = w.call("GET", &read);
    assert_eq!(again.json()["detail"], p["detail"], "the row is still first");
    // As Arrow: the rows come, from row 0.
    let mut conn = shardwise_tests::rawhttp::Conn::open(&w.url, Duration::from_secs(30)).unwrap();
    let request = shardwise_tests::rawhttp::Request::new("GET", &read)
        .header("accept", "application/vnd.apache.arrow.stream");
    conn.send(&request).unwrap();
    let head = conn.read_head().unwrap();
    let body = conn.read_body(&head).unwrap();
    assert_eq!(head.status, 200);
    assert!(body.len() <= 200_000, "{}", body.len());
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let ids = arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int64Type>(
        batches[0].column(0).as_ref(),
    );
    assert_eq!(ids.value(0), 0);
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1000);
}

/// A registration of a Parquet source split by rows over `paths`.
fn split_by_rows(paths: &[String]) -> Value {
    json!({"dataset": {"source": {"files": {"paths": paths, "format": "parquet", "split": "rows"}}}})
}

/// Registers `body` from `n` threads at once: each answer's status and body.
fn register_at_once(url: &str, body: &Value, n: usize) -> Vec<(u16, Value, Duration)> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (url, body) = (url.to_owned(), body.clone());
            std::thread::spawn(move || {
                let t = Instant::now();
                let r = http("POST", &url, "/v1/datasets", Some(&body)).expect("an answer");
                (r.status, r.json(), t.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Issue 30, defect 4: a dispatcher read the footer of every file of a Parquet source split by
/// rows, for every registration, whole and decoded: a 31 MB footer (1,000,000 row groups) cost
/// +506 MB a registration, four at once reached 2.25 GB and stayed there. A footer over
/// `--max-footer-bytes` (16 MiB by default) is now refused before it is read; one within it is
/// walked for its row counts (never decoded), at most `--max-footer-reads` at once, and
/// remembered by the file's identity.
#[test]
fn dispatcher_footer_reads_are_bounded_walked_and_remembered() {
    let dir = TempDir::new("footers");
    let t = Instant::now();
    let big = parquet_bytes::many_row_groups(1_000_000);
    let footer = u32::from_le_bytes(big[big.len() - 8..big.len() - 4].try_into().unwrap());
    println!(
        "big.parquet: {} bytes, a footer of {footer} bytes, made in {:?}",
        big.len(),
        t.elapsed()
    );
    std::fs::write(dir.0.join("big.parquet"), &big).unwrap();
    let body = split_by_rows(&[format!("{}/big.parquet", dir.path())]);

    // The defaults: refused at once, naming the bound, without reading the footer.
    let d = Dispatcher::start(&["--data-root", dir.path()]);
    let pid = d.child.id();
    let before = peak_rss_mib(pid);
    let answers = register_at_once(&d.url, &body, 4);
    let (peak, after) = (peak_rss_mib(pid), rss_mib(pid));
    println!(
        "defaults: answers {:?}; dispatcher peak RSS {before} -> {peak} MiB, {after} MiB after",
        answers.iter().map(|(s, _, t)| (*s, t.as_millis())).collect::<Vec<_>>()
    );
    assert!(peak - before < 100, "the dispatcher's peak RSS grew by {} MiB", peak - before);
    for (status, p, _) in &answers {
        assert_eq!(*status, 429, "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.contains("--max-footer-bytes"), "{detail}");
    }
    drop(d);

    // Allowed: walked two at a time (the others wait their turn), counted once, then
    // remembered; nothing is decoded.
    let d = Dispatcher::start(&["--data-root", dir.path(), "--max-footer-bytes", "67108864"]);
    let pid = d.child.id();
    let before = peak_rss_mib(pid);
    let t = Instant::now();
    let answers = register_at_once(&d.url, &body, 4);
    let (peak, after) = (peak_rss_mib(pid), rss_mib(pid));
    println!(
        "--max-footer-bytes 64 MiB: 4 registrations in {:.1} s; dispatcher peak RSS {before} -> \
         {peak} MiB, {after} MiB after",
        t.elapsed().as_secs_f64()
    );
    assert!(peak - before < 150, "the dispatcher's peak RSS grew by {} MiB", peak - before);
    for (status, p, _) in &answers {
        assert_eq!(*status, 200, "{p}");
        assert_eq!(p["dataset_id"], answers[0].1["dataset_id"]);
    }
    let id = answers[0].1["dataset_id"].as_str().unwrap();
    let info = ok(&d.call("GET", &format!("/v1/datasets/{id}"), None));
    assert_eq!(info["dataset"]["source"]["files"]["rows"], json!([1_000_000]), "{info}");
}

/// At most `--max-footer-files` files a registration (10,000 by default): a registration
/// naming a tiny file 10,001 times was read 10,001 times.
#[test]
fn a_registration_names_at_most_max_footer_files_files() {
    let dir = TempDir::new("footer-files");
    let small: Vec<u8> = 7i64.to_le_bytes().to_vec();
    std::fs::write(
        dir.0.join("one.parquet"),
        parquet_bytes::one_page(codec::UNCOMPRESSED, &small, 1),
    )
    .unwrap();
    let d = Dispatcher::start(&["--data-root", dir.path()]);
    let path = format!("{}/one.parquet", dir.path());
    let r = d.call("POST", "/v1/datasets", Some(split_by_rows(&vec![path.clone(); 10_001])));
    assert_eq!(r.status, 429, "{}", r.body.chars().take(300).collect::<String>());
    assert!(r.json()["detail"].as_str().unwrap().contains("at most 10000 (--max-footer-files)"));
    let r = d.call("POST", "/v1/datasets", Some(split_by_rows(&vec![path; 10_000])));
    assert_eq!(r.status, 200, "{}", r.body.chars().take(300).collect::<String>());
}

/// A registration whose caller went away stops reading footers at its next file: before, it
/// read every one to the end.
#[test]
fn footer_reads_stop_when_their_caller_goes_away() {
    let dir = TempDir::new("footer-cancel");
    // 30 distinct files (a file's count is remembered by its identity) of 3 MB footers:
    // seconds of walking in a debug build.
    let file = parquet_bytes::many_row_groups(100_000);
    let paths: Vec<String> = (0..30)
        .map(|i| {
            let name = format!("f{i}.parquet");
            std::fs::write(dir.0.join(&name), &file).unwrap();
            format!("{}/{name}", dir.path())
        })
        .collect();
    let d = Dispatcher::start(&["--data-root", dir.path()]);
    let pid = d.child.id();
    let body = split_by_rows(&paths);
    let stream = shardwise_tests::http_send("POST", &d.url, "/v1/datasets", Some(&body)).unwrap();
    // Let the reads begin, then go away.
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    let (t, cpu) = (Instant::now(), cpu_seconds(pid));
    let stopped = shardwise_tests::try_poll_until(Duration::from_secs(20), || {
        let out = d.output();
        if out.contains("footer reads stopped: their caller went away") { Ok(()) } else { Err(()) }
    });
    let waited = t.elapsed();
    // Then it is idle: no CPU time goes to reading footers for nobody.
    std::thread::sleep(Duration::from_millis(500));
    let (after, idle) = (cpu_seconds(pid), cpu_seconds(pid));
    std::thread::sleep(Duration::from_millis(500));
    let idle = cpu_seconds(pid) - idle;
    println!(
        "stopped {} {:.1} s after the caller went away; {:.2} CPU s spent after it; {idle:.2} \
         CPU s in the next 0.5 s",
        if stopped.is_ok() { "(logged)" } else { "(never logged)" },
        waited.as_secs_f64(),
        after - cpu
    );
    assert!(stopped.is_ok(), "the dispatcher went on reading: {}", d.output());
}

/// The CPU time a process used so far (user and system), in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').unwrap().1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Issue 30, defect 4 on the worker: a worker decoded the footer of every Parquet file it
/// opened, whole, outside `--max-buffer-bytes` (about 500 MB for 1,000,000 row groups). The
/// footer is now read within `--max-footer-bytes` and decoded only when its metadata fits the
/// task's `--max-buffer-bytes`.
#[test]
fn worker_footers_are_bounded_by_their_flag_and_the_task_budget() {
    let dir = TempDir::new("worker-footers");
    std::fs::write(dir.0.join("big.parquet"), parquet_bytes::many_row_groups(1_000_000)).unwrap();
    let ds = parquet(&format!("{}/big.parquet", dir.path()));
    for (flags, want) in [
        (&[][..], "footers of at most 16777216 bytes are read (--max-footer-bytes)"),
        (
            &["--max-footer-bytes", "67108864"][..],
            "its footer (1000000 row groups of 1000000 column chunks in all, decoded)",
        ),
    ] {
        let d = Dispatcher::start(&[]);
        let mut args = vec!["--data-root", dir.path(), "--max-buffer-bytes", "16777216"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--heartbeat-interval", "200ms"]);
        let w = Worker::start(&d.url, &args);
        let pid = w.child.id();
        let before = peak_rss_mib(pid);
        let t = Instant::now();
        let read = read_within(&d.url, ds.clone(), Duration::from_secs(60));
        let peak = peak_rss_mib(pid);
        println!(
            "{flags:?}: {:.1} s, worker peak RSS {before} -> {peak} MiB",
            t.elapsed().as_secs_f64()
        );
        assert!(
            peak - before < 100,
            "{flags:?}: the worker's peak RSS grew by {} MiB",
            peak - before
        );
        let err = read.expect("an answer within a minute").expect_err("a refusal");
        assert_eq!(err.code(), "RESOURCE_EXHAUSTED", "{err}");
        assert!(err.to_string().contains(want), "{want:?} not in {err}");
    }
}

/// Arrow replies are measured as written too: rows of three files, each with its own 256 KiB
/// dictionary, fit two files' rows in one stream only if both dictionaries fit, which a 400 KB
/// budget does not allow: each reply stays within it (fewer rows), and every row comes once.
#[test]
fn arrow_replies_stop_at_their_byte_budget_and_every_row_comes_once() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let dir = TempDir::new("arrow-replies");
    let mut paths = Vec::new();
    for k in 0..3u8 {
        // 300 rows (ids 300 k..300 k + 300) over one 256 KiB string of its own.
        let text = String::from(char::from(b'a' + k)).repeat(256 << 10);
        let (schema, columns) = repeated_string(&text);
        let batch = arrow_array::RecordBatch::try_new(schema.clone(), columns).unwrap();
        let ids =
            arrow_array::Int64Array::from_iter_values(300 * i64::from(k)..300 * i64::from(k) + 300);
        let batch = batch.slice(0, 300);
        let batch = arrow_array::RecordBatch::try_new(
            schema.clone(),
            vec![std::sync::Arc::new(ids), batch.column(1).clone()],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::FileWriter::try_new(&mut out, &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        let name = format!("f{k}.arrow");
        std::fs::write(dir.0.join(&name), out).unwrap();
        paths.push(format!("{}/{name}", dir.path()));
    }
    let budget = 400_000;
    let d = Dispatcher::start(&[]);
    let w = Worker::start(
        &d.url,
        &[
            "--data-root",
            dir.path(),
            "--max-reply-bytes",
            "400000",
            "--heartbeat-interval",
            "200ms",
        ],
    );
    let tasks =
        raw_iteration(&d, json!({"source": {"files": {"paths": paths, "format": "arrow"}}}));
    let (task, _) = &tasks[0];
    let (mut ids, mut sizes) = (Vec::new(), Vec::new());
    for _ in 0..2_000 {
        let mut conn =
            shardwise_tests::rawhttp::Conn::open(&w.url, Duration::from_secs(30)).unwrap();
        let request = shardwise_tests::rawhttp::Request::new(
            "GET",
            &format!("/v1/tasks/{task}/elements?max=1000"),
        )
        .header("accept", "application/vnd.apache.arrow.stream");
        conn.send(&request).unwrap();
        let head = conn.read_head().unwrap();
        let body = conn.read_body(&head).unwrap();
        if head.status == 404 {
            continue;
        }
        assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(500)]));
        sizes.push(body.len());
        let reader =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).unwrap();
        for b in reader {
            ids.extend(b.unwrap().column(0).as_primitive::<Int64Type>().values().iter().copied());
        }
        if head.header("shardwise-end-of-sequence") == Some("true") {
            break;
        }
    }
    println!("{} reads, replies of {sizes:?} bytes", sizes.len());
    assert!(sizes.iter().all(|s| *s <= budget), "{sizes:?}");
    assert_eq!(ids, (0..900).collect::<Vec<_>>(), "every row once, in order");
}
