//! A hostile worker against the Python reader (`shardwise.distribute`, which runs the Rust
//! client): a fake worker, registered with a real dispatcher at its own address, answers every
//! read with a zstd Arrow stream of 100,000,000 rows (a few KB on the wire), with batches
//! compressed though the read asked for none, with a stream whose buffers decompress past the
//! reader's `max_read_bytes`, with more JSON elements than asked for, with a body longer than
//! the reader allows, or one byte every 100 ms. Each read fails with a `ShardwiseError` naming
//! why, in bounded time, and the reader's peak memory stays within a few MiB of where it was.
//!
//! The fake worker runs in this test process; the reader under test is a Python process
//! (`python/tests/scenarios/hostile_worker.py`), with the package installed as users install it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, FixedSizeBinaryArray, Int8Array, RecordBatch};
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};
use shardwise_tests::pyenv::{python, scenario_path};
use shardwise_tests::{Dispatcher, ok, poll_until, run_bounded};

const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// What the fake worker answers every read with.
#[derive(Clone)]
enum Answer {
    /// A whole answer: content type and body.
    Body(&'static str, Arc<Vec<u8>>),
    /// An Arrow answer's head (a 100 MB body), then one byte every 100 ms.
    Trickle,
}

/// One Arrow IPC stream of `batch`, its buffers compressed with `codec`.
fn stream(column: ArrayRef, codec: Option<CompressionType>) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("x", column.data_type().clone(), false)]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap();
    let options = IpcWriteOptions::default().try_with_compression(codec).unwrap();
    let mut w = StreamWriter::try_new_with_options(Vec::new(), &schema, options).unwrap();
    w.write(&batch).unwrap();
    w.into_inner().unwrap()
}

/// Serves `answer` to every request on one connection until it closes.
fn serve(conn: TcpStream, answer: &Answer) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    // Bounded: the test ends well within it (a stuck reader fails its own deadline).
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        // The request's head (GETs have no body).
        let mut line = String::new();
        loop {
            line.clear();
            match reader.by_ref().take(8192).read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => {}
            }
        }
        match answer {
            Answer::Body(content_type, body) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n\
                     shardwise-end-of-sequence: false\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                if out.write_all(head.as_bytes()).and_then(|()| out.write_all(body)).is_err() {
                    return;
                }
            }
            Answer::Trickle => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {ARROW_STREAM}\r\n\
                     shardwise-end-of-sequence: false\r\ncontent-length: 100000000\r\n\r\n"
                );
                if out.write_all(head.as_bytes()).is_err() {
                    return;
                }
                while Instant::now() < until {
                    if out.write_all(&[0xFF]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                return;
            }
        }
    }
}

/// A dispatcher with the fake worker answering `answer` registered at its address.
fn fake_cluster(answer: Answer) -> Dispatcher {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || serve(conn, &answer));
        }
    });
    let d = Dispatcher::start(&[]);
    ok(&d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": address}))));
    poll_until("the fake worker registered", Duration::from_secs(20), || {
        let workers = ok(&d.call("GET", "/v1/workers", None));
        if workers["workers"].as_array().is_some_and(|w| w.len() == 1) {
            Ok(())
        } else {
            Err(workers.to_string())
        }
    });
    d
}

/// Reads through the fake worker with the scenario's `mode`: what it printed (the error,
/// seconds taken, peak RSS before and after).
fn read_through(answer: Answer, mode: &str) -> Value {
    let d = fake_cluster(answer);
    let script = scenario_path("hostile_worker.py");
    let run = run_bounded(&mut python(&[&script, &d.url, mode]), Duration::from_secs(90));
    assert_eq!(run.code, 0, "{mode}: {}\n{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(run.stdout.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{mode}: not a report ({e}): {}\n{}", run.stdout, run.stderr));
    println!("{mode}: {report}");
    report
}

/// The read failed with `code`, saying `why`, within `seconds` and 32 MiB of its memory
/// before.
fn assert_refused(report: &Value, code: &str, why: &str, seconds: f64) {
    assert_eq!(report["code"], code, "{report}");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains(why), "{why:?} in {error}");
    let took = report["seconds"].as_f64().unwrap();
    assert!(took < seconds, "failed in {took} s, not within {seconds} s");
    let grew = report["peak_rss_mib_after"].as_i64().unwrap()
        - report["peak_rss_mib_before"].as_i64().unwrap();
    assert!(grew < 32, "the reader's peak memory grew by {grew} MiB: {report}");
}

#[test]
fn a_zstd_stream_of_a_hundred_million_rows_is_refused_before_decoding() {
    let zeros: ArrayRef = Arc::new(Int8Array::from(vec![0i8; 100_000_000]));
    let bomb = stream(zeros, Some(CompressionType::ZSTD));
    assert!(bomb.len() < 64 << 10, "{} bytes on the wire", bomb.len());
    let report = read_through(Answer::Body(ARROW_STREAM, Arc::new(bomb)), "arrow-zstd");
    assert_refused(&report, "INTERNAL", "holds at least 100000000 rows", 30.0);
}

#[test]
fn buffers_that_decompress_past_max_read_bytes_are_refused_before_decompressing() {
    // 512 rows of 64 KiB: 32 MiB of zeros, a few KB compressed; the reader allows 16 MiB.
    let values = vec![0u8; 64 << 10];
    let rows = std::iter::repeat_n(Some(values.as_slice()), 512);
    let column: ArrayRef =
        Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(rows, 64 << 10).unwrap());
    assert_eq!(column.data_type(), &DataType::FixedSizeBinary(64 << 10));
    let bomb = stream(column, Some(CompressionType::ZSTD));
    let report = read_through(Answer::Body(ARROW_STREAM, Arc::new(bomb)), "arrow-zstd-16mib");
    assert_refused(&report, "INTERNAL", "at most 16777216 are allowed", 30.0);
}

#[test]
fn batches_compressed_with_a_codec_the_read_did_not_ask_for_are_refused() {
    let small: ArrayRef = Arc::new(Int8Array::from(vec![1i8; 10]));
    let lz4 = stream(small, Some(CompressionType::LZ4_FRAME));
    let report = read_through(Answer::Body(ARROW_STREAM, Arc::new(lz4)), "arrow");
    assert_refused(&report, "INTERNAL", "compressed with lz4, which the read did not ask", 30.0);
}

#[test]
fn json_answers_of_more_elements_or_bytes_than_asked_for_are_refused() {
    let many = json!({"elements": vec![0; 2_000], "end_of_sequence": false}).to_string();
    let report = read_through(Answer::Body("application/json", Arc::new(many.into())), "json");
    assert_refused(&report, "INTERNAL", "holds 2000 elements; at most 1000 were asked", 30.0);
    // 5 MiB of one string: past the reader's 4 MiB.
    let big = json!({"elements": ["x".repeat(5 << 20)], "end_of_sequence": false}).to_string();
    let report = read_through(Answer::Body("application/json", Arc::new(big.into())), "json-4mib");
    assert_refused(&report, "INTERNAL", "larger than 4194304 bytes", 30.0);
}

#[test]
fn a_worker_trickling_its_answer_fails_the_read_within_its_timeouts() {
    // The reader's calls time out after 1 s and are retried for 2 s.
    let report = read_through(Answer::Trickle, "trickle");
    assert_refused(&report, "UNAVAILABLE", "timed out", 20.0);
}
