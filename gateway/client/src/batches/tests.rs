//! `distribute_batches` against an in-process fake: one HTTP server that answers as the
//! dispatcher (one task, the iteration finished from the start) and as the task's worker (a
//! script of answers, one per element read).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, Int64Array};
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::{DataType, Field, Schema};
use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::StreamExt;
use serde_json::json;
use shardwise_core::Code;
use shardwise_core::dispatch::wire::{NamedMode, PROTOCOL_VERSION, ProcessingMode};
use shardwise_core::position::{OriginRun, PartialSplit, SourceRange};

use super::*;
use crate::arrow_stream::{
    ARROW_STREAM, COMPRESSION_HEADER, END_OF_SEQUENCE_HEADER, IpcCompression, ORIGIN_KEY,
};
use crate::problem::{PROBLEM_JSON, Problem};

/// One answer of the worker to an element read.
enum Answer {
    /// An Arrow stream of record batches (each the ids `start..start + n`), compressed as the
    /// request asked.
    Arrow { batches: Vec<(i64, i64)>, origin: Option<Vec<OriginRun>>, end: bool },
    /// Anything else, as is.
    Raw(Response),
}

/// What the worker was asked: the query, `Accept`, and the compression header.
type Asked = (String, Option<String>, Option<String>);

#[derive(Default)]
struct Fake {
    script: VecDeque<Answer>,
    asked: Vec<Asked>,
    released: bool,
}

fn stream(batches: &[(i64, i64)], origin: Option<&[OriginRun]>, codec: Option<&str>) -> Vec<u8> {
    let mut metadata = std::collections::HashMap::new();
    if let Some(runs) = origin {
        metadata.insert(ORIGIN_KEY.to_owned(), serde_json::to_string(runs).unwrap());
    }
    let fields = vec![Field::new("id", DataType::Int64, false)];
    let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
    let codec = match codec {
        Some("lz4") => Some(CompressionType::LZ4_FRAME),
        Some("zstd") => Some(CompressionType::ZSTD),
        _ => None,
    };
    let options = IpcWriteOptions::default().try_with_compression(codec).unwrap();
    let mut w = StreamWriter::try_new_with_options(Vec::new(), &schema, options).unwrap();
    for &(start, n) in batches {
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
        w.write(&RecordBatch::try_new(Arc::clone(&schema), vec![ids]).unwrap()).unwrap();
    }
    w.into_inner().unwrap()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn answer(status: u16, content_type: &str, body: Vec<u8>) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap()
}

fn problem(code: Code) -> Answer {
    let p = Problem::new(code, "no such task yet");
    Answer::Raw(answer(p.status, PROBLEM_JSON, serde_json::to_vec(&p).unwrap()))
}

/// Serves the fake; its base URL and its state.
async fn serve(script: Vec<Answer>) -> (String, Arc<Mutex<Fake>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let state = Arc::new(Mutex::new(Fake { script: script.into(), ..Fake::default() }));
    let (fake, worker) = (Arc::clone(&state), address.clone());
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (method, path) = (req.method().as_str().to_owned(), req.uri().path().to_owned());
        let query = req.uri().query().unwrap_or_default().to_owned();
        let mut fake = fake.lock().unwrap();
        let json = |v: serde_json::Value| answer(200, "application/json", v.to_string().into());
        let response = match (method.as_str(), path.as_str()) {
            ("GET", "/v1/version") => json(json!({"version": PROTOCOL_VERSION})),
            ("POST", "/v1/datasets") => json(json!({"dataset_id": "ds"})),
            ("POST", "/v1/jobs") => json(json!({"job_id": "1"})),
            ("POST", "/v1/jobs/1/iterations") => {
                json(json!({"iteration_id": "2", "client_id": "3", "incarnation": "inc"}))
            }
            ("POST", "/v1/clients/3/heartbeat") => json(json!({
                "tasks": [{"task_id": "4", "worker_address": worker, "worker_tags": [],
                           "starting_round": 0, "finished": false, "worker_lost": false}],
                "tasks_version": 1,
                "iteration_finished": true,
                "block_round": null,
                "incarnation": "inc",
            })),
            ("DELETE", "/v1/clients/3") => {
                fake.released = true;
                json(json!({}))
            }
            ("GET", "/v1/tasks/4/elements") => {
                let codec = header(req.headers(), COMPRESSION_HEADER);
                let accept = header(req.headers(), "accept");
                fake.asked.push((query, accept, codec.clone()));
                // Past the script: the task is over.
                let next = fake.script.pop_front();
                let next =
                    next.unwrap_or(Answer::Arrow { batches: vec![], origin: None, end: true });
                match next {
                    Answer::Arrow { batches, origin, end } => {
                        let body = stream(&batches, origin.as_deref(), codec.as_deref());
                        let mut r = answer(200, ARROW_STREAM, body);
                        let end = if end { "true" } else { "false" };
                        r.headers_mut().insert(END_OF_SEQUENCE_HEADER, end.parse().unwrap());
                        r
                    }
                    Answer::Raw(r) => r,
                }
            }
            _ => answer(404, "text/plain", format!("{method} {path}").into()),
        };
        async move { response }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), state)
}

fn run(start: u64, stop: u64, offset: u64, count: u64, end: bool) -> OriginRun {
    OriginRun { split: SourceRange { start, stop }, offset, count, end }
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    let column = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    column.values().to_vec()
}

fn options() -> DistributeOptions {
    DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        dataset_id: Some("ds".into()),
        elements_per_request: 7,
        ..DistributeOptions::default()
    }
}

fn dataset() -> DatasetDef {
    r#"{"source": {"range": {"stop": 100}}}"#.parse().unwrap()
}

#[tokio::test]
async fn record_batches_come_in_order_with_positions_counting_rows() {
    let script = vec![
        // A worker that does not know the task yet: retried.
        problem(Code::NotFound),
        // A read of 5 rows in two batches; its runs do not follow the batches.
        Answer::Arrow {
            batches: vec![(0, 3), (10, 2)],
            origin: Some(vec![run(0, 4, 0, 4, true), run(10, 20, 0, 1, false)]),
            end: false,
        },
        // Nothing within the worker's wait.
        Answer::Arrow { batches: vec![], origin: None, end: false },
        Answer::Arrow {
            batches: vec![(11, 2)],
            origin: Some(vec![run(10, 20, 1, 2, false)]),
            end: false,
        },
        Answer::Arrow { batches: vec![], origin: None, end: true },
    ];
    let (base, fake) = serve(script).await;
    let options = DistributeOptions { arrow_compression: Some(IpcCompression::Zstd), ..options() };
    let mut s = distribute_batches(base.as_str(), dataset(), options);
    let partial =
        |consumed| vec![PartialSplit::prefix(SourceRange { start: 10, stop: 20 }, consumed)];

    assert!(s.position().unwrap().partial.is_empty(), "nothing handed out yet");
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(ids(&first), [0, 1, 2]);
    assert_eq!(first.schema().metadata().get(ORIGIN_KEY), None, "origins are not the data's");
    let p = s.position().unwrap();
    assert_eq!((p.done.len(), p.partial[0].consumed), (0, 3), "3 rows of the split 0..4");
    let second = s.next().await.unwrap().unwrap();
    assert_eq!(ids(&second), [10, 11]);
    let p = s.position().unwrap();
    assert_eq!((p.done, p.partial), (vec![SourceRange { start: 0, stop: 4 }], partial(1)));
    let third = s.next().await.unwrap().unwrap();
    assert_eq!(ids(&third), [11, 12]);
    assert_eq!(s.position().unwrap().partial, partial(3));
    assert!(s.next().await.is_none(), "the task's end is the read's");
    assert!(s.next().await.is_none());
    assert_eq!(s.position().unwrap().partial, partial(3));

    let fake = fake.lock().unwrap();
    assert!(fake.released, "the lease is released at the end");
    assert_eq!(fake.asked.len(), 5);
    for (query, accept, codec) in &fake.asked {
        assert_eq!(query, "max=7");
        assert_eq!(accept.as_deref(), Some(ARROW_STREAM));
        assert_eq!(codec.as_deref(), Some("zstd"));
    }
}

#[tokio::test]
async fn an_answer_that_is_not_an_arrow_stream_ends_the_read() {
    let elements = json!({"elements": [1, 2], "end_of_sequence": false}).to_string();
    let script = vec![Answer::Raw(answer(200, "application/json", elements.into()))];
    let (base, fake) = serve(script).await;
    let mut s = distribute_batches(base.as_str(), dataset(), options());
    let e = s.next().await.unwrap().unwrap_err();
    assert!(matches!(&e, ClientError::Protocol { .. }), "{e}");
    assert_eq!(e.code(), Code::Internal);
    assert!(e.to_string().contains("/v1/tasks/4/elements"), "{e}");
    assert!(e.to_string().contains("application/json"), "{e}");
    assert!(s.next().await.is_none());
    let fake = fake.lock().unwrap();
    assert_eq!(fake.asked.len(), 1, "not retried");
    assert_eq!(fake.asked[0].2, None, "no compression asked for by default");
    assert!(fake.released);
}

#[tokio::test]
async fn refusals_stay_problems_and_coordinated_reads_ask_by_round() {
    let script = vec![
        Answer::Arrow { batches: vec![(5, 1)], origin: None, end: false },
        problem(Code::InvalidArgument),
    ];
    let (base, fake) = serve(script).await;
    let options = DistributeOptions {
        job_name: Some("shared".into()),
        num_consumers: Some(1),
        consumer_index: Some(0),
        ..options()
    };
    let mut s = distribute_batches(base.as_str(), dataset(), options);
    assert_eq!(ids(&s.next().await.unwrap().unwrap()), [5]);
    let e = s.next().await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(matches!(e, ClientError::Problem { .. }));
    assert!(s.next().await.is_none());
    let why = s.position().unwrap_err();
    assert!(why.to_string().contains("coordinated"), "{why}");
    let fake = fake.lock().unwrap();
    let queries: Vec<&str> = fake.asked.iter().map(|(q, _, _)| q.as_str()).collect();
    assert_eq!(queries, ["consumer_index=0&round=0", "consumer_index=0&round=1"]);
}
