//! The protocol types encode as TensorFlow's: field numbers checked against hand-encoded
//! bytes, every message the dispatcher relies on round-trips, and fields this subset leaves
//! out are skipped.

use prost::Message;

use super::proto::tensorflow::data::*;
use super::proto::tensorflow::{
    AttrValue, DataType, FunctionDef, FunctionDefLibrary, GraphDef, NodeDef, OpDef, TensorProto,
    TensorShapeProto, attr_value, tensor_shape_proto,
};

/// A varint field.
fn varint(field: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(field, prost::encoding::WireType::Varint, &mut out);
    prost::encoding::encode_varint(value, &mut out);
    out
}

/// A length-delimited field.
fn bytes(field: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(value.len() as u64, &mut out);
    out.extend_from_slice(value);
    out
}

/// Fields no message here declares (numbers above TensorFlow's), of each wire type.
fn unknown_fields() -> Vec<u8> {
    let mut out = varint(90, 7);
    out.extend(bytes(91, b"unknown"));
    prost::encoding::encode_key(92, prost::encoding::WireType::SixtyFourBit, &mut out);
    out.extend(1.5f64.to_le_bytes());
    prost::encoding::encode_key(93, prost::encoding::WireType::ThirtyTwoBit, &mut out);
    out.extend(7u32.to_le_bytes());
    out
}

/// `message` decodes from its own encoding and from its encoding with unknown fields before
/// and after.
fn round_trips<M: Message + Default + PartialEq + std::fmt::Debug>(message: M) {
    let encoded = message.encode_to_vec();
    assert_eq!(M::decode(&encoded[..]).expect("decode"), message);
    let mut padded = unknown_fields();
    padded.extend(&encoded);
    padded.extend(unknown_fields());
    assert_eq!(M::decode(&padded[..]).expect("decode with unknown fields"), message);
}

fn graph_bytes() -> prost::bytes::Bytes {
    GraphDef {
        node: vec![NodeDef {
            name: "dataset".into(),
            op: "_Retval".into(),
            input: vec!["RangeDataset:0".into()],
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

fn task_def() -> TaskDef {
    TaskDef {
        dataset: Some(task_def::Dataset::DatasetDef(DatasetDef { graph: graph_bytes() })),
        dataset_id: "1000".into(),
        task_id: 3,
        iteration_id: 4,
        num_split_providers: 2,
        worker_address: "127.0.0.1:4000".into(),
        processing_mode_def: Some(ProcessingModeDef {
            sharding_policy: processing_mode_def::ShardingPolicy::FileOrData as i32,
        }),
        optional_num_consumers: Some(task_def::OptionalNumConsumers::NumConsumers(2)),
        num_workers: 2,
        worker_index: 1,
        use_cross_trainer_cache: true,
    }
}

fn transfer_server() -> DataTransferServerInfo {
    DataTransferServerInfo {
        protocol: "grpc".into(),
        address: "127.0.0.1:4000".into(),
        compatibility_info: b"{}".to_vec(),
        fall_back_to_grpc_at_client_creation_time: true,
        fall_back_to_grpc_at_get_element_time: true,
    }
}

#[test]
fn field_numbers_are_tensorflows() {
    // GetSplitRequest: iteration_id = 1, repetition = 2, split_provider_index = 3.
    let request = GetSplitRequest { iteration_id: 5, repetition: 6, split_provider_index: 7 };
    assert_eq!(request.encode_to_vec(), [varint(1, 5), varint(2, 6), varint(3, 7)].concat());
    assert_eq!(GetVersionResponse { version: 9 }.encode_to_vec(), varint(1, 9));
    // GetOrRegisterDatasetRequest: dataset = 1 (DatasetDef: graph = 1), metadata = 3,
    // dataset_id = 4.
    let graph = graph_bytes();
    let request = GetOrRegisterDatasetRequest {
        dataset: Some(DatasetDef { graph: graph.clone() }),
        metadata: Some(DataServiceMetadata {
            optional_element_spec: Some(data_service_metadata::OptionalElementSpec::ElementSpec(
                b"spec".to_vec(),
            )),
            compression: data_service_metadata::Compression::Snappy as i32,
            cardinality: -2,
        }),
        optional_dataset_id: Some(get_or_register_dataset_request::OptionalDatasetId::DatasetId(
            "d".into(),
        )),
    };
    let metadata = [bytes(1, b"spec"), varint(2, 2), varint(3, -2i64 as u64)].concat();
    assert_eq!(
        request.encode_to_vec(),
        [bytes(1, &bytes(1, &graph)), bytes(3, &metadata), bytes(4, b"d")].concat()
    );
    // ClientHeartbeatResponse: task_info = 1, iteration_finished = 2, block_round = 3,
    // deployment_mode = 4.
    let response = ClientHeartbeatResponse {
        task_info: vec![],
        optional_block_round: Some(client_heartbeat_response::OptionalBlockRound::BlockRound(4)),
        iteration_finished: true,
        deployment_mode: DeploymentMode::Remote as i32,
    };
    assert_eq!(
        ClientHeartbeatResponse::decode(&[varint(2, 1), varint(3, 4), varint(4, 2)].concat()[..])
            .expect("decode"),
        response
    );
    // TaskDef's fields, by number.
    let encoded = task_def().encode_to_vec();
    let expected = [
        bytes(1, &bytes(1, &graph)),
        bytes(3, b"1000"),
        varint(4, 3),
        varint(5, 4),
        varint(7, 2),
        bytes(8, b"127.0.0.1:4000"),
        varint(9, 2),
        bytes(10, &varint(1, 4)),
        varint(11, 2),
        varint(12, 1),
        varint(13, 1),
    ];
    // prost writes fields in field-number order, as TensorFlow's C++ does.
    assert_eq!(encoded, expected.concat());
    assert_eq!(TaskDef::decode(&expected.concat()[..]).expect("decode"), task_def());
}

#[test]
fn dispatcher_messages_round_trip() {
    let tensor = TensorProto {
        dtype: DataType::DtInt64 as i32,
        tensor_shape: Some(TensorShapeProto::default()),
        tensor_content: 15i64.to_le_bytes().to_vec(),
        ..Default::default()
    };
    round_trips(WorkerHeartbeatRequest {
        worker_address: "127.0.0.1:4000".into(),
        transfer_servers: vec![transfer_server()],
        worker_tags: vec!["a".into()],
        worker_uid: 77,
        current_tasks: vec![1, 2],
        active_tasks: vec![ActiveTask { task_id: 1, processing_time_nsec: 2.5 }],
    });
    round_trips(WorkerHeartbeatResponse { new_tasks: vec![task_def()], tasks_to_delete: vec![9] });
    round_trips(WorkerUpdateRequest {
        worker_address: "127.0.0.1:4000".into(),
        updates: vec![TaskProgress { task_id: 3, completed: true }],
    });
    round_trips(GetDatasetDefResponse { dataset_def: Some(DatasetDef { graph: graph_bytes() }) });
    round_trips(GetSplitRequest { iteration_id: 1, repetition: 2, split_provider_index: 1 });
    round_trips(GetSplitResponse { split: Some(tensor), end_of_splits: false });
    round_trips(GetSplitResponse { split: None, end_of_splits: true });
    round_trips(GetOrCreateJobRequest {
        dataset_id: "1000".into(),
        processing_mode_def: Some(ProcessingModeDef {
            sharding_policy: processing_mode_def::ShardingPolicy::Dynamic as i32,
        }),
        optional_job_name: Some(get_or_create_job_request::OptionalJobName::JobName("j".into())),
        optional_num_consumers: Some(
            get_or_create_job_request::OptionalNumConsumers::NumConsumers(2),
        ),
        use_cross_trainer_cache: false,
        target_workers: TargetWorkers::Local as i32,
    });
    round_trips(GetOrCreateIterationRequest { job_id: 1, repetition: 0 });
    round_trips(GetOrCreateIterationResponse { iteration_client_id: 8 });
    round_trips(MaybeRemoveTaskRequest { task_id: 3, consumer_index: 1, round: 4 });
    round_trips(MaybeRemoveTaskResponse { removed: true });
    round_trips(ClientHeartbeatRequest {
        iteration_client_id: 8,
        optional_current_round: Some(client_heartbeat_request::OptionalCurrentRound::CurrentRound(
            3,
        )),
        optional_blocked_round: Some(client_heartbeat_request::OptionalBlockedRound::BlockedRound(
            4,
        )),
        target_processing_time_nsec: 1e6,
    });
    round_trips(ClientHeartbeatResponse {
        task_info: vec![TaskInfo {
            worker_address: "127.0.0.1:4000".into(),
            transfer_servers: vec![transfer_server()],
            worker_tags: vec!["a".into()],
            task_id: 3,
            iteration_id: 4,
            worker_uid: 77,
            starting_round: 2,
        }],
        optional_block_round: None,
        iteration_finished: false,
        deployment_mode: DeploymentMode::Colocated as i32,
    });
    round_trips(GetWorkersResponse { workers: vec![WorkerInfo { address: "w:1".into() }] });
    round_trips(GetDataServiceConfigResponse {
        config: Some(DataServiceConfig { deployment_mode: DeploymentMode::Hybrid as i32 }),
    });
    round_trips(DisableCompressionAtRuntimeRequest {
        dataset_id: "1000".into(),
        disable_compression_at_runtime: true,
    });
    round_trips(DisableCompressionAtRuntimeResponse {
        decision: Some(disable_compression_at_runtime_response::Decision::NoCompressionToDisable(
            true,
        )),
    });
    round_trips(GetSnapshotSplitRequest {
        worker_address: "w:1".into(),
        base_path: "/p".into(),
        stream_index: 1,
        source_index: 2,
        repetition_index: 3,
    });
    round_trips(ProcessTaskRequest { task: Some(task_def()) });
}

#[test]
fn graph_messages_round_trip() {
    let value = AttrValue {
        value: Some(attr_value::Value::Tensor(TensorProto {
            dtype: DataType::DtInt32 as i32,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![tensor_shape_proto::Dim { size: 3, name: String::new() }],
                unknown_rank: false,
            }),
            int_val: vec![7, 8, 9],
            ..Default::default()
        })),
    };
    round_trips(GraphDef {
        node: vec![NodeDef {
            name: "Const".into(),
            op: "Const".into(),
            input: vec![],
            device: "/cpu:0".into(),
            attr: [("value".to_owned(), value)].into(),
        }],
        library: Some(FunctionDefLibrary {
            function: vec![FunctionDef {
                signature: Some(OpDef { name: "f".into() }),
                node_def: vec![NodeDef {
                    name: "r".into(),
                    op: "RangeDataset".into(),
                    ..Default::default()
                }],
            }],
        }),
    });
}

/// A graph with fields this subset does not declare (versions, debug info) is
/// forwarded byte for byte: `DatasetDef.graph` is bytes.
#[test]
fn a_dataset_graph_is_kept_as_sent() {
    let mut graph = GraphDef {
        node: vec![NodeDef { name: "n".into(), op: "NoOp".into(), ..Default::default() }],
        ..Default::default()
    }
    .encode_to_vec();
    graph.extend(varint(3, 21)); // GraphDef.version (deprecated)
    graph.extend(bytes(4, &varint(1, 2175))); // GraphDef.versions.producer
    graph.extend(bytes(5, &bytes(1, b"file.py"))); // GraphDef.debug_info
    let request = [bytes(1, &bytes(1, &graph)), bytes(3, &[])].concat();
    let decoded = GetOrRegisterDatasetRequest::decode(&request[..]).expect("decode");
    let dataset = decoded.dataset.expect("dataset");
    assert_eq!(&dataset.graph[..], &graph[..]);
    let task =
        TaskDef { dataset: Some(task_def::Dataset::DatasetDef(dataset)), ..Default::default() };
    assert_eq!(task.encode_to_vec(), bytes(1, &bytes(1, &graph)));
    // And the graph still reads as a GraphDef.
    let read = GraphDef::decode(&graph[..]).expect("graph");
    assert_eq!(read.node[0].op, "NoOp");
}

/// A split encodes byte for byte as TensorFlow 2.21's dispatcher answers `GetSplit` for
/// `range(5, 20, 5)` (bytes captured from it): dtype 9, an empty (scalar) shape, the value in
/// `tensor_content`; and `end_of_splits` alone after the last.
#[test]
fn get_split_responses_are_tensorflows_bytes() {
    let split = crate::tensorflow::graph::SplitProvider::Range { start: 5, stop: 20, step: 5 };
    let hex = |m: GetSplitResponse| {
        m.encode_to_vec().iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let response =
        |i| GetSplitResponse { split: split.split(i), end_of_splits: split.split(i).is_none() };
    assert_eq!(hex(response(0)), "0a0e0809120022080500000000000000");
    assert_eq!(hex(response(1)), "0a0e0809120022080a00000000000000");
    assert_eq!(hex(response(2)), "0a0e0809120022080f00000000000000");
    assert_eq!(hex(response(3)), "1001");
}
