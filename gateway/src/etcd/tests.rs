//! Unit tests of the etcd client: endpoints, builders, the checks of answers, and failover and
//! malformed answers against a fake member (a bare HTTP/2 server answering canned gRPC).
//! The tests against a real etcd cluster are in `tests/tests/etcd_client.rs`.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use hyper::body::{Bytes, Frame};
use prost::Message;

use super::proto::etcdserverpb::compare::{CompareTarget, TargetUnion};
use super::proto::etcdserverpb::request_op::Request;
use super::proto::etcdserverpb::response_op::Response;
use super::proto::etcdserverpb::{LeaseGrantResponse, PutResponse};
use super::*;

fn endpoint_error(endpoint: &str) -> String {
    match parse_endpoint(endpoint) {
        Err(Error::InvalidEndpoint { endpoint: e, reason }) => {
            assert_eq!(e, endpoint);
            reason
        }
        other => panic!("{endpoint:?}: {other:?}"),
    }
}

#[test]
fn endpoints_are_http_host_and_port() {
    assert_eq!(parse_endpoint("http://127.0.0.1:2379").unwrap(), "http://127.0.0.1:2379");
    assert_eq!(parse_endpoint("127.0.0.1:2379").unwrap(), "http://127.0.0.1:2379");
    assert_eq!(parse_endpoint(" HTTP://etcd-0.etcd:2379/ ").unwrap(), "http://etcd-0.etcd:2379");
    assert_eq!(parse_endpoint("[::1]:2379").unwrap(), "http://[::1]:2379");

    assert!(endpoint_error("https://127.0.0.1:2379").contains("https is not supported"));
    assert!(endpoint_error("ftp://127.0.0.1:2379").contains("unsupported scheme"));
    assert!(endpoint_error("").contains("empty"));
    assert!(endpoint_error("   ").contains("empty"));
    assert!(endpoint_error("127.0.0.1").contains("no port"));
    assert!(
        endpoint_error("http://").contains("not a URL")
            || endpoint_error("http://").contains("no host")
    );
    assert!(endpoint_error("not a url at all").contains("not a URL"));
    assert!(endpoint_error("http://127.0.0.1:2379/v3/kv").contains("path"));
    assert!(endpoint_error("http://127.0.0.1:2379/?x=1").contains("query"));
    assert!(endpoint_error("http://user@127.0.0.1:2379").contains("user"));
    assert!(endpoint_error("127.0.0.1:0").contains("not a number from 1 to 65535"));
    let too_large = endpoint_error("127.0.0.1:99999");
    assert!(too_large.contains("port"), "{too_large}");
}

#[test]
fn a_client_needs_valid_endpoints() {
    // Validation comes before any connection (and so needs no runtime).
    let none = Client::new(&[], Options::default()).unwrap_err();
    assert!(
        matches!(&none, Error::InvalidEndpoint { reason, .. } if reason.contains("no etcd endpoint"))
    );
    let endpoints = ["http://127.0.0.1:2379".to_owned(), "https://127.0.0.1:2380".to_owned()];
    let tls = Client::new(&endpoints, Options::default()).unwrap_err();
    assert!(
        matches!(&tls, Error::InvalidEndpoint { endpoint, .. } if endpoint == "https://127.0.0.1:2380")
    );
    assert!(tls.to_string().contains("https is not supported"), "{tls}");
}

#[test]
fn prefix_end_is_the_first_key_after_the_prefix() {
    assert_eq!(prefix_end(b"/shardwise/default/"), b"/shardwise/default0".to_vec());
    assert_eq!(prefix_end(b"a"), b"b".to_vec());
    assert_eq!(prefix_end(b"a\xff\xff"), b"b".to_vec());
    assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    assert_eq!(prefix_end(b""), vec![0]);
    assert!(in_range(b"a/x", b"a/", &prefix_end(b"a/")));
    assert!(!in_range(b"a0", b"a/", &prefix_end(b"a/")));
    assert!(in_range(b"zzz", b"a", &[0]));
    assert!(in_range(b"a", b"a", b""));
    assert!(!in_range(b"ab", b"a", b""));
}

#[test]
fn builders_fill_etcd_fields() {
    let c = Compare::create_revision("leader", CompareResult::Equal, 7);
    assert_eq!(
        (c.key.as_slice(), c.result(), c.target()),
        (&b"leader"[..], CompareResult::Equal, CompareTarget::Create)
    );
    assert_eq!(c.target_union, Some(TargetUnion::CreateRevision(7)));
    let c = Compare::mod_revision("k", CompareResult::Less, 3);
    assert_eq!(
        (c.target(), c.target_union),
        (CompareTarget::Mod, Some(TargetUnion::ModRevision(3)))
    );
    let c = Compare::lease("k", CompareResult::NotEqual, 9);
    assert_eq!((c.target(), c.target_union), (CompareTarget::Lease, Some(TargetUnion::Lease(9))));
    let c = Compare::value("k", CompareResult::Greater, "v");
    assert_eq!(
        (c.target(), c.target_union),
        (CompareTarget::Value, Some(TargetUnion::Value(b"v".to_vec())))
    );
    let c = Compare::version("k", CompareResult::Equal, 0);
    assert_eq!(
        (c.target(), c.target_union),
        (CompareTarget::Version, Some(TargetUnion::Version(0)))
    );

    let Some(Request::RequestPut(put)) = RequestOp::put("k", "v", 5).request else { panic!() };
    assert_eq!((put.key, put.value, put.lease), (b"k".to_vec(), b"v".to_vec(), 5));
    let Some(Request::RequestDeleteRange(d)) = RequestOp::delete_range("a", "b").request else {
        panic!()
    };
    assert_eq!((d.key, d.range_end), (b"a".to_vec(), b"b".to_vec()));
    let options = RangeOptions { limit: 2, revision: 4, ..RangeOptions::default() };
    let Some(Request::RequestRange(r)) = RequestOp::range("a", "b", options).request else {
        panic!()
    };
    assert_eq!((r.limit, r.revision, r.key, r.range_end), (2, 4, b"a".to_vec(), b"b".to_vec()));
}

fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader { cluster_id: 1, member_id: 2, revision, raft_term: 3 })
}

fn kv(key: &str, revision: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        create_revision: revision,
        mod_revision: revision,
        version: 1,
        value: b"v".to_vec(),
        lease: 0,
    }
}

#[test]
fn range_answers_are_checked_against_their_request() {
    let request = RangeOptions { limit: 2, ..RangeOptions::default() }
        .request(b"a/".to_vec(), prefix_end(b"a/"));
    let good = RangeResponse {
        header: header(5),
        kvs: vec![kv("a/1", 2), kv("a/2", 3)],
        more: true,
        count: 3,
    };
    assert_eq!(check_range(&request, &good), Ok(()));

    let no_header = RangeResponse { header: None, ..good.clone() };
    assert_eq!(check_range(&request, &no_header), Err("no header".to_owned()));
    let zero_revision = RangeResponse { header: header(0), ..good.clone() };
    assert!(check_range(&request, &zero_revision).is_err());
    let over_limit =
        RangeResponse { kvs: vec![kv("a/1", 2), kv("a/2", 3), kv("a/3", 4)], ..good.clone() };
    assert!(check_range(&request, &over_limit).unwrap_err().contains("limit"));
    let outside = RangeResponse { kvs: vec![kv("b", 2)], ..good.clone() };
    assert!(check_range(&request, &outside).unwrap_err().contains("outside"));
    let unordered = RangeResponse { kvs: vec![kv("a/2", 2), kv("a/1", 3)], ..good.clone() };
    assert!(check_range(&request, &unordered).unwrap_err().contains("order"));
    let bad_kv = RangeResponse { kvs: vec![kv("a/1", 0)], ..good.clone() };
    assert!(check_range(&request, &bad_kv).unwrap_err().contains("create revision"));
    let low_count = RangeResponse { count: 1, ..good.clone() };
    assert!(check_range(&request, &low_count).unwrap_err().contains("count"));
    let at = RangeOptions { revision: 9, ..RangeOptions::default() }.request(b"a".to_vec(), vec![]);
    let older_store = RangeResponse { header: header(8), kvs: vec![], more: false, count: 0 };
    assert!(check_range(&at, &older_store).unwrap_err().contains("older"));
}

#[test]
fn txn_answers_need_one_answer_of_the_right_kind_per_operation() {
    let request = TxnRequest {
        compare: vec![Compare::create_revision("leader", CompareResult::Equal, 7)],
        success: vec![
            RequestOp::put("a", "1", 0),
            RequestOp::range("a", "", RangeOptions::default()),
        ],
        failure: vec![],
    };
    let put = ResponseOp { response: Some(Response::ResponsePut(PutResponse::default())) };
    let range = ResponseOp {
        response: Some(Response::ResponseRange(RangeResponse {
            header: None,
            kvs: vec![kv("a", 8)],
            more: false,
            count: 1,
        })),
    };
    let good = TxnResponse {
        header: header(8),
        succeeded: true,
        responses: vec![put.clone(), range.clone()],
    };
    assert_eq!(check_txn(&request, &good), Ok(()));
    let failed = TxnResponse { header: header(8), succeeded: false, responses: vec![] };
    assert_eq!(check_txn(&request, &failed), Ok(()));

    let missing = TxnResponse { responses: vec![put.clone()], ..good.clone() };
    assert!(check_txn(&request, &missing).unwrap_err().contains("1 answers to the 2 operations"));
    let extra = TxnResponse { responses: vec![put.clone()], ..failed.clone() };
    assert!(check_txn(&request, &extra).unwrap_err().contains("failure"));
    let swapped = TxnResponse { responses: vec![range.clone(), put.clone()], ..good.clone() };
    assert!(check_txn(&request, &swapped).unwrap_err().contains("wrong kind"));
    let empty =
        TxnResponse { responses: vec![put.clone(), ResponseOp { response: None }], ..good.clone() };
    assert!(check_txn(&request, &empty).unwrap_err().contains("wrong kind"));
    let no_header = TxnResponse { header: None, ..good.clone() };
    assert!(check_txn(&request, &no_header).is_err());
}

#[test]
fn statuses_map_to_errors() {
    use tonic::{Code, Status};
    assert!(client::classify(&Status::unavailable("etcdserver: no leader")).is_ok());
    assert!(client::classify(&Status::deadline_exceeded("etcdserver: request timed out")).is_ok());
    assert!(matches!(
        client::classify(&Status::not_found("etcdserver: requested lease not found")),
        Err(Error::LeaseGone)
    ));
    assert!(matches!(
        client::classify(&Status::invalid_argument("etcdserver: request is too large")),
        Err(Error::Rejected { code: Code::InvalidArgument, message }) if message.contains("too large")
    ));
}

// A fake member: answers every gRPC call with a canned answer, by method.

/// One canned answer: a message, or a gRPC status (a trailers-only answer).
#[derive(Clone)]
enum Canned {
    Message(Vec<u8>),
    Status(tonic::Code, &'static str),
}

/// Serves `answer(path)` over HTTP/2 on 127.0.0.1 port 0: its URL.
async fn fake_member(answer: fn(&str) -> Canned) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let service = hyper::service::service_fn(
                move |request: hyper::Request<hyper::body::Incoming>| {
                    let canned = answer(request.uri().path());
                    async move {
                        let builder =
                            hyper::Response::builder().header("content-type", "application/grpc");
                        let frames: Vec<Result<Frame<Bytes>, Infallible>> = match canned {
                            Canned::Message(message) => {
                                let mut framed = vec![0u8];
                                framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
                                framed.extend_from_slice(&message);
                                let mut trailers = http::HeaderMap::new();
                                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                                vec![
                                    Ok(Frame::data(Bytes::from(framed))),
                                    Ok(Frame::trailers(trailers)),
                                ]
                            }
                            Canned::Status(code, message) => {
                                let mut trailers = http::HeaderMap::new();
                                trailers
                                    .insert("grpc-status", http::HeaderValue::from(code as i32));
                                trailers.insert(
                                    "grpc-message",
                                    http::HeaderValue::from_static(message),
                                );
                                vec![Ok(Frame::trailers(trailers))]
                            }
                        };
                        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
                        Ok::<_, Infallible>(builder.body(body).expect("response"))
                    }
                },
            );
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
            });
        }
    });
    url
}

fn quick() -> Options {
    Options { connect_timeout: Duration::from_millis(500), request_timeout: Duration::from_secs(1) }
}

#[tokio::test]
async fn malformed_answers_are_errors_not_panics() {
    let url = fake_member(|path| match path {
        "/etcdserverpb.KV/Range" => Canned::Message(RangeResponse::default().encode_to_vec()),
        "/etcdserverpb.KV/Txn" => Canned::Message(
            TxnResponse { header: header(4), succeeded: true, responses: vec![] }.encode_to_vec(),
        ),
        "/etcdserverpb.KV/Put" => Canned::Message(vec![0x0a, 0xff]),
        "/etcdserverpb.Lease/LeaseGrant" => Canned::Message(
            LeaseGrantResponse { header: header(4), id: 1, ttl: 5, error: "no space".into() }
                .encode_to_vec(),
        ),
        _ => Canned::Status(tonic::Code::Unimplemented, "not faked"),
    })
    .await;
    let client = Client::new(&[url], quick()).expect("client");

    let range = client.range("k", "", RangeOptions::default()).await.unwrap_err();
    assert!(
        matches!(&range, Error::Unavailable { detail } if detail.contains("malformed") && detail.contains("no header")),
        "{range}"
    );
    let request =
        TxnRequest { compare: vec![], success: vec![RequestOp::put("k", "v", 0)], failure: vec![] };
    let txn = client.txn(request).await.unwrap_err();
    assert!(
        matches!(&txn, Error::Unavailable { detail } if detail.contains("0 answers to the 1 operations")),
        "{txn}"
    );
    // Not protobuf at all: tonic's decode error, refused as etcd's answer.
    let put = client.put("k", "v", 0).await.unwrap_err();
    assert!(matches!(put, Error::Rejected { code: tonic::Code::Internal, .. }), "{put}");
    let grant = client.lease_grant(5).await.unwrap_err();
    assert!(matches!(&grant, Error::Rejected { message, .. } if message == "no space"), "{grant}");
    let revoke = client.lease_revoke(1).await.unwrap_err();
    assert!(matches!(revoke, Error::Rejected { code: tonic::Code::Unimplemented, .. }), "{revoke}");
}

#[tokio::test]
async fn calls_fail_over_to_the_member_that_answers_and_stay_there() {
    let down =
        fake_member(|_| Canned::Status(tonic::Code::Unavailable, "etcdserver: no leader")).await;
    let up = fake_member(|path| match path {
        "/etcdserverpb.KV/Put" => {
            Canned::Message(PutResponse { header: header(6), prev_kv: None }.encode_to_vec())
        }
        _ => Canned::Status(tonic::Code::Unimplemented, "not faked"),
    })
    .await;
    // A port nothing listens on: connection refused.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("address"))
    };
    let client =
        Client::new(&[refused.clone(), down.clone(), up.clone()], quick()).expect("client");
    let started = Instant::now();
    assert_eq!(client.put("k", "v", 0).await.expect("put on the third member").revision(), 6);
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    // The next call starts with the member that answered: an error of its own is final.
    let unimplemented = client.range("k", "", RangeOptions::default()).await.unwrap_err();
    assert!(matches!(unimplemented, Error::Rejected { code: tonic::Code::Unimplemented, .. }));

    // Nobody answers: Unavailable, naming every member once.
    let client = Client::new(&[refused.clone(), down.clone()], quick()).expect("client");
    let Error::Unavailable { detail } = client.put("k", "v", 0).await.unwrap_err() else {
        panic!()
    };
    assert!(
        detail.contains(&refused) && detail.contains(&down) && detail.contains("no leader"),
        "{detail}"
    );
    assert_eq!(detail.matches("http://").count(), 2, "{detail}");
}

#[tokio::test]
async fn a_member_that_never_answers_costs_one_request_timeout() {
    // Accepts connections, never answers (as a stopped process whose kernel still accepts).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let silent = format!("http://{}", listener.local_addr().expect("address"));
    let held = tokio::spawn(async move {
        let mut streams = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            streams.push(stream);
        }
    });
    let up = fake_member(|_| {
        Canned::Message(PutResponse { header: header(2), prev_kv: None }.encode_to_vec())
    })
    .await;
    let options = Options {
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(300),
    };
    let client = Client::new(&[silent, up], options).expect("client");
    let started = Instant::now();
    assert_eq!(client.put("k", "v", 0).await.expect("put").revision(), 2);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
    // The member that answered is tried first from now on.
    let started = Instant::now();
    client.put("k", "v", 0).await.expect("put");
    assert!(started.elapsed() < Duration::from_millis(300), "{:?}", started.elapsed());
    held.abort();
}

/// etcd at its space quota answers RESOURCE_EXHAUSTED "etcdserver: mvcc: database
/// space exceeded": an answer (not another member's business), recognised as the quota, whose
/// remedy is compaction, defragmentation and `etcdctl alarm disarm`, not a restart.
#[test]
fn the_space_quota_is_recognised_and_its_remedy_named() {
    let status = tonic::Status::resource_exhausted("etcdserver: mvcc: database space exceeded");
    let e = super::client::classify(&status).expect_err("an answer, not a retry elsewhere");
    assert!(e.is_space_exceeded(), "{e}");
    assert!(e.to_string().contains("database space exceeded"), "{e}");
    let other = tonic::Status::invalid_argument("etcdserver: request is too large");
    assert!(!super::client::classify(&other).expect_err("refused").is_space_exceeded());
    assert!(!super::Error::LeaseGone.is_space_exceeded());
    for needed in ["compact", "defrag", "etcdctl alarm disarm", "no restart"] {
        assert!(super::SPACE_EXCEEDED_REMEDY.contains(needed), "{needed}");
    }
}
