//! TensorFlow's `tensorflow.data.DispatcherService` over gRPC on the dispatcher's port, driven
//! by a Rust tonic client against the real `shardwise dispatcher` binary.

use std::time::Duration;

use serde_json::json;
use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_tests::{Dispatcher, TempDir, http};
use tf::dispatcher_service_client::DispatcherServiceClient;
use tonic::transport::Channel;

type Client = DispatcherServiceClient<Channel>;

/// A gRPC client of the dispatcher at `url` (`http://HOST:PORT`), with no message size
/// limits (as TensorFlow's).
async fn client(url: &str) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .expect("a URL")
        .connect()
        .await
        .expect("connected");
    DispatcherServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

/// A request with `authorization: Bearer TOKEN` metadata.
fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
    r
}

fn heartbeat(address: &str, uid: i64) -> tf::WorkerHeartbeatRequest {
    tf::WorkerHeartbeatRequest {
        worker_address: address.into(),
        worker_uid: uid,
        transfer_servers: vec![tf::DataTransferServerInfo {
            protocol: "grpc".into(),
            address: address.into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Sends `msg` to the RPC at `path` whatever its request type: lets a test send bytes that do
/// not decode as the RPC's request.
async fn raw_call<M: prost::Message + Default + 'static>(
    url: &str,
    path: &'static str,
    msg: M,
) -> Result<tf::GetVersionResponse, tonic::Status> {
    let channel =
        tonic::transport::Endpoint::from_shared(url.to_owned()).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<M, tf::GetVersionResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(tonic::Request::new(msg), path, codec).await.map(tonic::Response::into_inner)
}

/// One dispatcher answers REST and gRPC on the same port: a REST call and gRPC calls to one
/// process; the version TensorFlow 2.21 expects, the deployment mode of the flag, and the
/// snapshot RPCs refused as unsupported.
#[tokio::test]
async fn rest_and_grpc_share_the_dispatchers_port() {
    let d = Dispatcher::start(&["--deployment-mode", "remote"]);
    let v = http("GET", &d.url, "/v1/version", None).unwrap();
    assert_eq!(v.status, 200, "{}", v.body);
    let mut c = client(&d.url).await;
    let version = c.get_version(tf::GetVersionRequest {}).await.unwrap().into_inner();
    assert_eq!(version.version, 9);
    let config =
        c.get_data_service_config(tf::GetDataServiceConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(config.config.unwrap().deployment_mode, tf::DeploymentMode::Remote as i32);
    let unsupported = [
        c.snapshot(tf::SnapshotRequest::default()).await.map(|_| ()).unwrap_err(),
        c.get_snapshot_split(tf::GetSnapshotSplitRequest::default()).await.map(|_| ()).unwrap_err(),
        c.get_snapshot_streams(tf::GetSnapshotStreamsRequest::default())
            .await
            .map(|_| ())
            .unwrap_err(),
    ];
    for s in unsupported {
        assert_eq!(s.code(), tonic::Code::Unimplemented, "{s:?}");
        assert!(s.message().contains("distributed_save"), "{}", s.message());
    }
    // REST still answers on the same connection-level port after gRPC calls.
    assert_eq!(http("GET", &d.url, "/healthz", None).unwrap().status, 200);
    // Unset, the deployment mode is TensorFlow's default.
    let d = Dispatcher::start(&[]);
    let mut c = client(&d.url).await;
    let config =
        c.get_data_service_config(tf::GetDataServiceConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(config.config.unwrap().deployment_mode, tf::DeploymentMode::Unspecified as i32);
}

/// A TensorFlow worker registers over gRPC and is listed by GetWorkers and by REST.
#[tokio::test]
async fn a_grpc_worker_registers_and_is_listed_by_grpc_and_rest() {
    let d = Dispatcher::start(&[]);
    let mut c = client(&d.url).await;
    let reply = c.worker_heartbeat(heartbeat("localhost:7001", 77)).await.unwrap().into_inner();
    assert!(reply.new_tasks.is_empty() && reply.tasks_to_delete.is_empty(), "{reply:?}");
    let workers = c.get_workers(tf::GetWorkersRequest {}).await.unwrap().into_inner();
    let addresses: Vec<&str> = workers.workers.iter().map(|w| w.address.as_str()).collect();
    assert_eq!(addresses, ["localhost:7001"]);
    let rest = http("GET", &d.url, "/v1/workers", None).unwrap().json();
    assert_eq!(rest["workers"][0]["worker_address"], "localhost:7001", "{rest}");
}

/// Hostile inputs are typed statuses, never INTERNAL or a crash: negative ids, unknown enum
/// values, bytes that are not the RPC's message, an unusable address, a message over the
/// limit.
#[tokio::test]
async fn hostile_inputs_are_typed_statuses_and_the_dispatcher_keeps_serving() {
    let d = Dispatcher::start(&["--max-body-bytes", "4096"]);
    let mut c = client(&d.url).await;
    let expect = |r: Result<(), tonic::Status>, code: tonic::Code, text: &str| {
        let s = r.unwrap_err();
        assert_eq!(s.code(), code, "{s:?}");
        assert!(s.message().contains(text), "{text:?} not in {:?}", s.message());
    };
    let invalid = tonic::Code::InvalidArgument;
    let r = c
        .get_or_create_iteration(tf::GetOrCreateIterationRequest { job_id: -1, repetition: 0 })
        .await;
    expect(r.map(|_| ()), invalid, "job_id");
    let r = c
        .client_heartbeat(tf::ClientHeartbeatRequest {
            iteration_client_id: -5,
            ..Default::default()
        })
        .await;
    expect(r.map(|_| ()), invalid, "iteration_client_id");
    let mut hb = heartbeat("localhost:7001", 1);
    hb.current_tasks = vec![4000, -2];
    expect(c.worker_heartbeat(hb).await.map(|_| ()), invalid, "current_tasks");
    expect(
        c.worker_heartbeat(heartbeat("no port here", 1)).await.map(|_| ()),
        invalid,
        "no port here",
    );
    let job = |policy: i32, target: i32| tf::GetOrCreateJobRequest {
        dataset_id: "1000".into(),
        processing_mode_def: Some(tf::ProcessingModeDef { sharding_policy: policy }),
        target_workers: target,
        ..Default::default()
    };
    expect(c.get_or_create_job(job(42, 0)).await.map(|_| ()), invalid, "sharding_policy 42");
    expect(c.get_or_create_job(job(0, 9)).await.map(|_| ()), invalid, "target_workers 9");
    let r = c
        .maybe_remove_task(tf::MaybeRemoveTaskRequest {
            task_id: 4000,
            consumer_index: -1,
            round: 0,
        })
        .await;
    expect(r.map(|_| ()), invalid, "consumer_index");
    // Bytes that are not a WorkerHeartbeatRequest (field 1 is not UTF-8).
    let garbage = tf::DatasetDef { graph: vec![0xff, 0xfe, 0xfd].into() };
    let r = raw_call(&d.url, "/tensorflow.data.DispatcherService/WorkerHeartbeat", garbage).await;
    expect(r.map(|_| ()), invalid, "the request message is invalid");
    // A message over --max-body-bytes.
    let mut big = heartbeat("localhost:7002", 2);
    big.worker_tags = vec!["x".repeat(8192)];
    expect(c.worker_heartbeat(big).await.map(|_| ()), tonic::Code::ResourceExhausted, "4096");
    // An unknown method of the service.
    let r = raw_call(
        &d.url,
        "/tensorflow.data.DispatcherService/NoSuchMethod",
        tf::GetVersionRequest {},
    )
    .await;
    expect(r.map(|_| ()), tonic::Code::Unimplemented, "");
    // Still serving, both protocols.
    assert_eq!(c.get_version(tf::GetVersionRequest {}).await.unwrap().into_inner().version, 9);
    assert_eq!(http("GET", &d.url, "/healthz", None).unwrap().status, 200);
}

const ADMIN: &str = "admin-token-0123456789";
const WORKER: &str = "worker-token-0123456789";
const CLIENT: &str = "client-token-0123456789";
const MONITOR: &str = "monitor-token-0123456789";

/// `--auth-tokens` over gRPC: no token or a wrong one is UNAUTHENTICATED, a token of the wrong
/// role PERMISSION_DENIED; worker RPCs take the worker role, client RPCs the client role,
/// GetVersion any valid token, admin everything.
#[tokio::test]
async fn grpc_calls_need_a_token_of_the_rpcs_role() {
    let dir = TempDir::new("grpc-auth");
    let file = dir.0.join("tokens.json");
    std::fs::write(
        &file,
        json!({"tokens": [
            {"role": "admin", "token": ADMIN}, {"role": "worker", "token": WORKER},
            {"role": "client", "token": CLIENT}, {"role": "monitor", "token": MONITOR}
        ]})
        .to_string(),
    )
    .unwrap();
    let d = Dispatcher::start(&["--auth-tokens", file.to_str().unwrap()]);
    let mut c = client(&d.url).await;
    let s = c.get_version(tf::GetVersionRequest {}).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
    let s = c.get_version(with_token(tf::GetVersionRequest {}, "wrong-secret-token-98765")).await;
    let s = s.unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
    assert!(!s.message().contains("wrong-secret"), "the token is not echoed");
    for token in [ADMIN, WORKER, CLIENT, MONITOR] {
        let v = c.get_version(with_token(tf::GetVersionRequest {}, token)).await;
        assert_eq!(v.unwrap().into_inner().version, 9, "{token}");
    }
    for (token, ok) in [(WORKER, true), (ADMIN, true), (CLIENT, false), (MONITOR, false)] {
        let r = c.worker_heartbeat(with_token(heartbeat("localhost:7001", 1), token)).await;
        match r {
            Ok(_) => assert!(ok, "{token} may not heartbeat"),
            Err(s) => {
                assert!(!ok, "{token}: {s:?}");
                assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
                assert!(s.message().contains("WorkerHeartbeat"), "{}", s.message());
            }
        }
    }
    let r = c.get_workers(with_token(tf::GetWorkersRequest {}, WORKER)).await;
    assert_eq!(r.unwrap_err().code(), tonic::Code::PermissionDenied);
    let r = c.get_workers(with_token(tf::GetWorkersRequest {}, CLIENT)).await;
    assert_eq!(r.unwrap().into_inner().workers.len(), 1);
}

/// `--rate-limit` and `--max-in-flight` answer gRPC calls with statuses too.
#[tokio::test]
async fn the_rate_limit_answers_grpc_calls_resource_exhausted() {
    let d = Dispatcher::start(&["--rate-limit", "1", "--rate-limit-burst", "2"]);
    let mut c = client(&d.url).await;
    let mut refused = None;
    for _ in 0..10 {
        if let Err(s) = c.get_version(tf::GetVersionRequest {}).await {
            refused = Some(s);
            break;
        }
    }
    let s = refused.expect("refused within 10 calls at 1/s");
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    assert!(s.message().contains("too many requests"), "{}", s.message());
}

/// TensorFlow's own tests run the dispatcher with 20-200 ms timeouts and intervals.
#[test]
fn the_dispatcher_takes_tensorflows_millisecond_test_settings() {
    let d = Dispatcher::start(&[
        "--worker-timeout",
        "200ms",
        "--client-timeout",
        "100ms",
        "--job-gc-check-interval",
        "20ms",
        "--job-gc-timeout",
        "50ms",
    ]);
    assert_eq!(http("GET", &d.url, "/v1/version", None).unwrap().status, 200);
    // A worker that stops heartbeating is lost within a few of those intervals.
    let hb = json!({"worker_address": "localhost:7001"});
    assert_eq!(http("POST", &d.url, "/v1/workers/heartbeat", Some(&hb)).unwrap().status, 200);
    shardwise_tests::poll_until("the worker is lost", Duration::from_secs(10), || {
        let w = http("GET", &d.url, "/v1/workers", None).unwrap().json();
        if w["workers"][0]["alive"] == false { Ok(()) } else { Err(w) }
    });
}
