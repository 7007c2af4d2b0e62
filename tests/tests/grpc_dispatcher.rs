//! TensorFlow's `tensorflow.data.DispatcherService` over gRPC on the dispatcher's port, driven
//! by a Rust tonic client against the real `shardwise dispatcher` binary.

use std::time::Duration;

use serde_json::json;
use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_tests::tf_fake::{FakeWorker, dispatcher_client as client, heartbeat};
use shardwise_tests::{Dispatcher, TempDir, http};

/// A request with `authorization: Bearer TOKEN` metadata.
fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
    r
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
    // A Shardwise worker beside it: REST lists both kinds; an address keeps its kind.
    let hb = json!({"worker_address": "localhost:7002"});
    assert_eq!(http("POST", &d.url, "/v1/workers/heartbeat", Some(&hb)).unwrap().status, 200);
    let rest = http("GET", &d.url, "/v1/workers", None).unwrap().json();
    assert_eq!(rest["workers"].as_array().unwrap().len(), 2, "{rest}");
    let s = c.worker_heartbeat(heartbeat("localhost:7002", 78)).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s:?}");
    // A declarative dataset has no graph to give a TensorFlow worker.
    let ds = json!({"dataset": {"source": {"range": {"stop": 3}}}});
    let r = http("POST", &d.url, "/v1/datasets", Some(&ds)).unwrap();
    let id = r.json()["dataset_id"].as_str().unwrap().to_owned();
    let s = c.get_dataset_def(tf::GetDatasetDefRequest { dataset_id: id }).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s:?}");
    assert!(s.message().contains("not a TensorFlow one"), "{}", s.message());
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

// ---- TensorFlow datasets, tasks and splits -----------------------------------------------

use shardwise_gateway::tf::proto::tensorflow::{
    AttrValue, DataType, GraphDef, NodeDef, TensorProto, attr_value,
};
use shardwise_tests::graphs::{encode, node, range_graph, scalar, weights};

/// The serialized graph of a dataset read from files (no split provider in Shardwise).
fn tfrecord_graph() -> Vec<u8> {
    let nodes = vec![
        scalar("files", 0),
        node("records", "TFRecordDataset", &["files"]),
        node("dataset", "_Retval", &["records"]),
    ];
    encode(nodes)
}

fn register(graph: Vec<u8>, compression: i32) -> tf::GetOrRegisterDatasetRequest {
    tf::GetOrRegisterDatasetRequest {
        dataset: Some(tf::DatasetDef { graph: graph.into() }),
        metadata: Some(tf::DataServiceMetadata {
            optional_element_spec: Some(
                tf::data_service_metadata::OptionalElementSpec::ElementSpec(vec![1, 2, 3]),
            ),
            compression,
            cardinality: 3,
        }),
        optional_dataset_id: None,
    }
}

fn job(
    dataset_id: &str,
    policy: tf::processing_mode_def::ShardingPolicy,
) -> tf::GetOrCreateJobRequest {
    tf::GetOrCreateJobRequest {
        dataset_id: dataset_id.into(),
        processing_mode_def: Some(tf::ProcessingModeDef { sharding_policy: policy as i32 }),
        ..Default::default()
    }
}

/// The int64 value of a split tensor (`tensor_content` little-endian, or `int64_val`).
fn split_value(t: &TensorProto) -> i64 {
    assert_eq!(t.dtype, DataType::DtInt64 as i32, "{t:?}");
    assert!(t.tensor_shape.as_ref().is_none_or(|s| s.dim.is_empty()), "a scalar: {t:?}");
    if t.tensor_content.len() == 8 {
        i64::from_le_bytes(t.tensor_content[..].try_into().unwrap())
    } else {
        assert_eq!(t.int64_val.len(), 1, "{t:?}");
        t.int64_val[0]
    }
}

/// A 10 MiB graph (a constant off the output's path) is registered and read back byte for
/// byte: over 4 MiB in both directions. The metadata comes back as sent; registering the same
/// dataset again answers the same id.
#[tokio::test]
async fn a_10_mib_graph_is_registered_and_read_back_byte_identical() {
    let d = Dispatcher::start(&["--max-body-bytes", "33554432"]);
    let mut c = client(&d.url).await;
    let big = weights("weights", 10 << 20);
    let graph = range_graph(0, 10, 1, vec![big]);
    assert!(graph.len() > 10 << 20);
    let id = c.get_or_register_dataset(register(graph.clone(), 1)).await.unwrap().into_inner();
    let again = c.get_or_register_dataset(register(graph.clone(), 1)).await.unwrap().into_inner();
    assert_eq!(again.dataset_id, id.dataset_id, "the same dataset, the same id");
    let def = c
        .get_dataset_def(tf::GetDatasetDefRequest { dataset_id: id.dataset_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert!(def.dataset_def.unwrap().graph == graph, "the graph comes back byte for byte");
    let meta = c
        .get_data_service_metadata(tf::GetDataServiceMetadataRequest {
            dataset_id: id.dataset_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(meta.metadata, register(Vec::new(), 1).metadata, "the metadata as sent");
    // REST shows a summary, without the bytes.
    let rest = http("GET", &d.url, &format!("/v1/datasets/{}", id.dataset_id), None).unwrap();
    assert_eq!(rest.status, 200, "{}", rest.body);
    assert!(rest.body.len() < 10_000, "no graph bytes on REST: {} bytes", rest.body.len());
    // Unknown datasets are NOT_FOUND.
    let r = c.get_dataset_def(tf::GetDatasetDefRequest { dataset_id: "nope".into() }).await;
    assert_eq!(r.unwrap_err().code(), tonic::Code::NotFound);
}

/// The whole TensorFlow-shaped flow with a fake TensorFlow worker: heartbeat, register a
/// dataset, a DYNAMIC job and iteration, the task pushed to the worker's `ProcessTask`, the
/// client's heartbeat listing the task with the worker's transfer servers, the splits of
/// `range(5, 20, 5)` and `end_of_splits`, run-time compression decided once.
#[tokio::test]
async fn a_tensorflow_flow_pushes_the_task_and_hands_out_its_splits() {
    use tf::processing_mode_def::ShardingPolicy::Dynamic;
    let d = Dispatcher::start(&["--deployment-mode", "colocated"]);
    let mut c = client(&d.url).await;
    let fake = FakeWorker::default();
    let address = fake.start().await;
    let hb = c.worker_heartbeat(heartbeat(&address, 77)).await.unwrap().into_inner();
    assert!(hb.new_tasks.is_empty(), "{hb:?}");
    let graph = range_graph(5, 20, 5, Vec::new());
    let dataset = c.get_or_register_dataset(register(graph.clone(), 2)).await.unwrap().into_inner();
    let job = c.get_or_create_job(job(&dataset.dataset_id, Dynamic)).await.unwrap().into_inner();
    let it = c
        .get_or_create_iteration(tf::GetOrCreateIterationRequest {
            job_id: job.job_id,
            repetition: 0,
        })
        .await
        .unwrap()
        .into_inner();
    // The task reaches the worker at once, without waiting for its heartbeat.
    let pushed = fake.wait_for_tasks().await;
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    let task = &pushed[0];
    assert_eq!(task.worker_address, address);
    assert_eq!(task.dataset_id, dataset.dataset_id);
    assert_eq!(task.num_split_providers, 1);
    assert_eq!(
        task.processing_mode_def,
        Some(tf::ProcessingModeDef { sharding_policy: Dynamic as i32 })
    );
    match &task.dataset {
        Some(tf::task_def::Dataset::DatasetDef(def)) => assert!(def.graph == graph),
        other => panic!("the graph inline, not {other:?}"),
    }
    // Its heartbeat gives the worker the same TaskDef (should it have missed the push).
    let hb = c.worker_heartbeat(heartbeat(&address, 77)).await.unwrap().into_inner();
    assert_eq!(hb.new_tasks, pushed, "the heartbeat's task is the pushed one");
    // The client sees the task, with the worker's transfer servers and uid.
    let beat = c
        .client_heartbeat(tf::ClientHeartbeatRequest {
            iteration_client_id: it.iteration_client_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(beat.deployment_mode, tf::DeploymentMode::Colocated as i32);
    assert_eq!(beat.task_info.len(), 1, "{beat:?}");
    let info = &beat.task_info[0];
    assert_eq!(info.task_id, task.task_id);
    assert_eq!(info.iteration_id, task.iteration_id);
    assert_eq!(info.worker_address, address);
    assert_eq!(info.worker_uid, 77);
    assert_eq!(info.transfer_servers.len(), 1);
    assert_eq!(info.transfer_servers[0].protocol, "grpc");
    assert_eq!(info.transfer_servers[0].address, address);
    // The splits of range(5, 20, 5) are its elements, then end_of_splits.
    let mut values = Vec::new();
    loop {
        let s = c
            .get_split(tf::GetSplitRequest {
                iteration_id: task.iteration_id,
                repetition: 0,
                split_provider_index: 0,
            })
            .await
            .unwrap()
            .into_inner();
        if s.end_of_splits {
            break;
        }
        values.push(split_value(&s.split.expect("a split")));
        assert!(values.len() <= 3, "{values:?}");
    }
    assert_eq!(values, [5, 10, 15]);
    let r = c
        .get_split(tf::GetSplitRequest {
            iteration_id: task.iteration_id,
            repetition: 0,
            split_provider_index: 7,
        })
        .await;
    assert_eq!(r.unwrap_err().code(), tonic::Code::InvalidArgument);
    // Compression: the first proposal decides (SNAPPY here), later ones get the decision,
    // and the metadata says OFF from then on.
    use tf::disable_compression_at_runtime_response::Decision;
    for (ask, want) in [(true, true), (false, true)] {
        let r = c
            .disable_compression_at_runtime(tf::DisableCompressionAtRuntimeRequest {
                dataset_id: dataset.dataset_id.clone(),
                disable_compression_at_runtime: ask,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.decision, Some(Decision::CompressionDisabledAtRuntime(want)));
    }
    let meta = c
        .get_data_service_metadata(tf::GetDataServiceMetadataRequest {
            dataset_id: dataset.dataset_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        meta.metadata.unwrap().compression,
        2,
        "the metadata as sent (SNAPPY), as TensorFlow answers it, also once disabled"
    );
    let plain = c.get_or_register_dataset(register(range_graph(0, 3, 1, Vec::new()), 1)).await;
    let r = c
        .disable_compression_at_runtime(tf::DisableCompressionAtRuntimeRequest {
            dataset_id: plain.unwrap().into_inner().dataset_id,
            disable_compression_at_runtime: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.decision, Some(Decision::NoCompressionToDisable(true)));
    // The worker finishes its task: the iteration is finished for the client.
    c.worker_update(tf::WorkerUpdateRequest {
        worker_address: address.clone(),
        updates: vec![tf::TaskProgress { task_id: task.task_id, completed: true }],
    })
    .await
    .unwrap();
    let beat = c
        .client_heartbeat(tf::ClientHeartbeatRequest {
            iteration_client_id: it.iteration_client_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(beat.iteration_finished, "{beat:?}");
}

/// An iteration created over REST of a job over a TensorFlow dataset pushes its tasks to the
/// TensorFlow workers too.
#[tokio::test]
async fn a_rest_iteration_of_a_tensorflow_dataset_pushes_its_tasks() {
    let d = Dispatcher::start(&[]);
    let mut c = client(&d.url).await;
    let fake = FakeWorker::default();
    let address = fake.start().await;
    c.worker_heartbeat(heartbeat(&address, 5)).await.unwrap();
    let dataset = c
        .get_or_register_dataset(register(range_graph(0, 3, 1, Vec::new()), 1))
        .await
        .unwrap()
        .into_inner();
    let job = json!({"dataset_id": dataset.dataset_id, "processing_mode": "parallel_epochs"});
    let r = http("POST", &d.url, "/v1/jobs", Some(&job)).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let job_id = r.json()["job_id"].as_str().unwrap().to_owned();
    let r = http("POST", &d.url, &format!("/v1/jobs/{job_id}/iterations"), Some(&json!({})));
    let r = r.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json().get("pushed_tasks").is_none(), "REST JSON unchanged: {}", r.body);
    let pushed = fake.wait_for_tasks().await;
    assert_eq!(pushed[0].worker_address, address);
    assert_eq!(pushed[0].num_split_providers, 0, "OFF");
}

/// DYNAMIC over a graph without a split provider here is refused, naming the op, and the
/// dispatcher keeps serving; a graph that does not parse is stored as sent and refused only
/// for DYNAMIC.
#[tokio::test]
async fn dynamic_over_an_unsupported_graph_is_refused_naming_the_op() {
    use tf::processing_mode_def::ShardingPolicy::{Dynamic, Off};
    let d = Dispatcher::start(&[]);
    let mut c = client(&d.url).await;
    let address = "localhost:7001";
    c.worker_heartbeat(heartbeat(address, 9)).await.unwrap();
    for (graph, text) in
        [(tfrecord_graph(), "TFRecordDataset"), (vec![0xff, 0xff, 0xff], "not a GraphDef")]
    {
        let dataset = c.get_or_register_dataset(register(graph.clone(), 1)).await;
        let dataset = dataset.unwrap().into_inner().dataset_id;
        let def = c
            .get_dataset_def(tf::GetDatasetDefRequest { dataset_id: dataset.clone() })
            .await
            .unwrap()
            .into_inner();
        assert!(def.dataset_def.unwrap().graph == graph, "stored as sent");
        let refused = match c.get_or_create_job(job(&dataset, Dynamic)).await {
            Err(s) => s,
            Ok(j) => c
                .get_or_create_iteration(tf::GetOrCreateIterationRequest {
                    job_id: j.into_inner().job_id,
                    repetition: 0,
                })
                .await
                .unwrap_err(),
        };
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
        assert!(refused.message().contains(text), "{text:?} not in {:?}", refused.message());
        // OFF reads it whole: no split provider needed.
        let off = c.get_or_create_job(job(&dataset, Off)).await.unwrap().into_inner();
        c.get_or_create_iteration(tf::GetOrCreateIterationRequest {
            job_id: off.job_id,
            repetition: 0,
        })
        .await
        .unwrap();
    }
    assert_eq!(c.get_version(tf::GetVersionRequest {}).await.unwrap().into_inner().version, 9);
}

/// `range(0, 10)` with the `RangeDataset` node's attributes written in `order` (TensorFlow
/// writes protobuf maps in hash order: two processes write one dataset in two ways).
fn range_graph_with_attrs_in_order(order: &[&str]) -> Vec<u8> {
    use prost::Message as _;
    fn field(number: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    }
    let mut range = node("range", "RangeDataset", &["start", "stop", "step"]).encode_to_vec();
    for name in order {
        let mut one = NodeDef::default();
        one.attr.insert(
            (*name).to_owned(),
            AttrValue { value: Some(attr_value::Value::I(name.len() as i64)) },
        );
        range.extend(one.encode_to_vec());
    }
    let nodes = [
        scalar("start", 0).encode_to_vec(),
        scalar("stop", 10).encode_to_vec(),
        scalar("step", 1).encode_to_vec(),
        range,
        node("dataset", "_Retval", &["range"]).encode_to_vec(),
    ];
    nodes.iter().flat_map(|n| field(1, n)).collect()
}

/// Two serializations of one dataset (its maps in different orders, as two TensorFlow
/// processes write it) are one dataset: the same id, so clients of both share a job by name.
#[tokio::test]
async fn two_serializations_of_one_dataset_are_one_dataset() {
    use tf::processing_mode_def::ShardingPolicy::Off;
    let d = Dispatcher::start(&[]);
    let mut c = client(&d.url).await;
    let a = range_graph_with_attrs_in_order(&["metadata", "output_types", "output_shapes"]);
    let b = range_graph_with_attrs_in_order(&["output_shapes", "metadata", "output_types"]);
    assert_ne!(a, b);
    let other = range_graph_with_attrs_in_order(&["metadata", "output_types"]);
    let id_a = c.get_or_register_dataset(register(a.clone(), 1)).await.unwrap().into_inner();
    let id_b = c.get_or_register_dataset(register(b, 1)).await.unwrap().into_inner();
    let id_other = c.get_or_register_dataset(register(other, 1)).await.unwrap().into_inner();
    assert_eq!(id_a.dataset_id, id_b.dataset_id);
    assert_ne!(id_a.dataset_id, id_other.dataset_id);
    // Other metadata: another dataset.
    let id_snappy = c.get_or_register_dataset(register(a.clone(), 2)).await.unwrap().into_inner();
    assert_ne!(id_a.dataset_id, id_snappy.dataset_id);
    // The first serialization is kept, as sent.
    let def = c
        .get_dataset_def(tf::GetDatasetDefRequest { dataset_id: id_a.dataset_id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert!(def.dataset_def.unwrap().graph == a);
    // A job named by both clients is one job.
    let named = |id: &str| tf::GetOrCreateJobRequest {
        optional_job_name: Some(tf::get_or_create_job_request::OptionalJobName::JobName(
            "j".into(),
        )),
        ..job(id, Off)
    };
    let j1 = c.get_or_create_job(named(&id_a.dataset_id)).await.unwrap().into_inner();
    let j2 = c.get_or_create_job(named(&id_b.dataset_id)).await.unwrap().into_inner();
    assert_eq!(j1.job_id, j2.job_id);
    // An explicit id is kept.
    let mut explicit = register(a, 1);
    explicit.optional_dataset_id =
        Some(tf::get_or_register_dataset_request::OptionalDatasetId::DatasetId("mine".into()));
    let r = c.get_or_register_dataset(explicit).await.unwrap().into_inner();
    assert_eq!(r.dataset_id, "mine");
}

// ---- The graph as the dispatcher prepares it, and the REST view of a TensorFlow dataset ----

/// Whether `value` conforms to `schema` of the OpenAPI document `doc`: the JSON Schema keywords
/// the document uses for datasets (`$ref`, `oneOf`, `type`, `required`, `properties`,
/// `additionalProperties: false`, `items`, `minimum`).
fn conforms(
    doc: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
) -> Result<(), String> {
    use serde_json::Value;
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.strip_prefix("#/components/schemas/").ok_or_else(|| format!("ref {r}"))?;
        let target = &doc["components"]["schemas"][name];
        if target.is_null() {
            return Err(format!("no schema {name}"));
        }
        conforms(doc, target, value).map_err(|e| format!("{name}: {e}"))?;
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let matching = options.iter().filter(|o| conforms(doc, o, value).is_ok()).count();
        if matching != 1 {
            return Err(format!("{matching} schemas of a oneOf match {value}"));
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty()
        && !types.iter().any(|t| match *t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            _ => false,
        })
    {
        return Err(format!("{value} is not of type {types:?}"));
    }
    if let (Some(min), Some(v)) = (schema["minimum"].as_f64(), value.as_f64())
        && v < min
    {
        return Err(format!("{value} < {min}"));
    }
    if let Some(object) = value.as_object() {
        for key in schema["required"].as_array().into_iter().flatten() {
            let key = key.as_str().unwrap_or_default();
            if !object.contains_key(key) {
                return Err(format!("{key} missing in {value}"));
            }
        }
        for (key, v) in object {
            match schema["properties"].get(key) {
                Some(s) => conforms(doc, s, v).map_err(|e| format!("{key}: {e}"))?,
                None if schema["additionalProperties"] == false => {
                    return Err(format!("{key} is not allowed in {value}"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for v in array {
            conforms(doc, items, v)?;
        }
    }
    Ok(())
}

/// A TensorFlow dataset registered over gRPC: the graph is stored as TensorFlow's dispatcher
/// prepares it (the lookup table's op gets `use_node_name_sharing = true`, devices are
/// cleared, everything else as sent), and `GET /v1/datasets/{id}` answers the typed summary the
/// checked-in OpenAPI document describes (as it does a declarative dataset).
#[tokio::test]
async fn a_tensorflow_dataset_is_stored_prepared_and_rest_answers_its_documented_shape() {
    use prost::Message as _;
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(shardwise_tests::repo_root().join("openapi/openapi.json"))
            .expect("openapi/openapi.json"),
    )
    .expect("the document is JSON");
    let info_schema = json!({"$ref": "#/components/schemas/DatasetInfo"});
    let d = Dispatcher::start(&[]);
    let mut c = client(&d.url).await;

    let mut table = node("table", "HashTableV2", &[]);
    table.device = "/job:localhost/replica:0/task:0/device:CPU:0".into();
    let mut lookup = node("lookup", "LookupTableFindV2", &["table"]);
    lookup.device = "/device:CPU:0".into();
    let sent = range_graph(0, 10, 1, vec![table, lookup]);
    let id = c.get_or_register_dataset(register(sent.clone(), 2)).await.unwrap().into_inner();
    let def = c
        .get_dataset_def(tf::GetDatasetDefRequest { dataset_id: id.dataset_id.clone() })
        .await
        .unwrap()
        .into_inner();
    let stored = def.dataset_def.unwrap().graph;
    assert_ne!(stored, sent, "prepared");
    let (sent_graph, stored_graph) =
        (GraphDef::decode(&sent[..]).unwrap(), GraphDef::decode(&stored[..]).unwrap());
    assert_eq!(stored_graph.node.len(), sent_graph.node.len());
    for (before, after) in sent_graph.node.iter().zip(&stored_graph.node) {
        let mut expected = before.clone();
        expected.device.clear();
        if before.op == "HashTableV2" {
            expected.attr.insert(
                "use_node_name_sharing".into(),
                AttrValue { value: Some(attr_value::Value::B(true)) },
            );
        }
        assert_eq!(after, &expected);
    }
    // Registering the same graph again is the same dataset (prepared the same way).
    let again = c.get_or_register_dataset(register(sent, 2)).await.unwrap().into_inner();
    assert_eq!(again.dataset_id, id.dataset_id);

    let unsupported =
        c.get_or_register_dataset(register(tfrecord_graph(), 1)).await.unwrap().into_inner();
    let undecodable =
        c.get_or_register_dataset(register(vec![0xff, 0xff, 0xff], 0)).await.unwrap().into_inner();
    let get = |id: &str| {
        let r = http("GET", &d.url, &format!("/v1/datasets/{id}"), None).unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let body = r.json();
        conforms(&doc, &info_schema, &body).unwrap_or_else(|e| panic!("{e}: {body}"));
        body
    };
    let rest = get(&id.dataset_id);
    assert_eq!(
        rest,
        json!({"dataset_id": id.dataset_id, "metadata": null, "dataset": {"tensorflow": {
            "graph_bytes": stored.len(), "element_spec_bytes": 3, "cardinality": 3,
            "compression": "SNAPPY",
            "split_providers": [{"range": {"start": 0, "step": 1, "len": 10}}]}}})
    );
    let rest = get(&unsupported.dataset_id);
    let why = rest["dataset"]["tensorflow"]["split_providers"]["unsupported"].as_str().unwrap();
    assert!(why.contains("TFRecordDataset"), "{rest}");
    assert_eq!(rest["dataset"]["tensorflow"]["compression"], "OFF");
    let rest = get(&undecodable.dataset_id);
    assert_eq!(rest["dataset"]["tensorflow"]["graph_bytes"], 3, "kept as sent");
    assert_eq!(rest["dataset"]["tensorflow"]["compression"], "UNSPECIFIED");
    assert!(rest["dataset"]["tensorflow"]["split_providers"]["unsupported"].is_string());
    // A declarative dataset's answer conforms to the same schema (the other branch).
    let r = http(
        "POST",
        &d.url,
        "/v1/datasets",
        Some(&json!({"dataset": {"source": {"range": {"stop": 3}}}})),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let decl = get(r.json()["dataset_id"].as_str().unwrap());
    assert_eq!(decl["dataset"]["source"]["range"]["stop"], 3);
    // The checker is not vacuous: neither branch (another key beside `tensorflow`, a
    // summary without a field, a malformed provider) is refused.
    let mut neither = get(&id.dataset_id);
    neither["dataset"]["other"] = json!(1);
    assert!(conforms(&doc, &info_schema, &neither).is_err());
    let mut partial = get(&id.dataset_id);
    partial["dataset"]["tensorflow"].as_object_mut().unwrap().remove("compression");
    assert!(conforms(&doc, &info_schema, &partial).is_err());
    let mut wrong = get(&id.dataset_id);
    wrong["dataset"]["tensorflow"]["split_providers"] = json!([{"range": {"start": 0}}]);
    assert!(conforms(&doc, &info_schema, &wrong).is_err());
}
