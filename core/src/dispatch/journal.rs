//! Journal records: [`Update`]s framed into segments (see [`super::framing`]) and back.
//!
//! A record's payload is the update's JSON: compact enough (a get-split batch is one record),
//! self-describing for `shardwise journal dump`, and versioned by the segment header.

use super::framing::{FramingError, Tail, decode_segment, encode_record};
use super::state::Update;

/// Why a segment could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The framing is damaged (see [`FramingError`]).
    #[error("{0}")]
    Framing(#[from] FramingError),
    /// A record's checksum holds but its payload is not an update this version knows.
    #[error("Failed to parse journal record at offset {offset}: {reason}")]
    BadRecord {
        /// Byte offset of the record in its segment.
        offset: u64,
        /// What the decoder said.
        reason: String,
    },
    /// An update could not be encoded (it never is in practice: updates are plain data).
    #[error("Failed to serialize update: {0}")]
    Encode(String),
}

/// Appends `update` as one framed record to `out`.
pub fn encode_update(update: &Update, out: &mut Vec<u8>) -> Result<(), JournalError> {
    let payload = serde_json::to_vec(update).map_err(|e| JournalError::Encode(e.to_string()))?;
    encode_record(&payload, out)?;
    Ok(())
}

/// The updates of one segment and how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    /// The updates, in order.
    pub updates: Vec<Update>,
    /// `Clean`, or `Torn` (truncate the file to `offset` and warn).
    pub tail: Tail,
}

/// Decodes a whole segment.
pub fn decode_updates(segment: &[u8]) -> Result<Replayed, JournalError> {
    let decoded = decode_segment(segment)?;
    let mut updates = Vec::with_capacity(decoded.records.len());
    for r in &decoded.records {
        let u = serde_json::from_slice::<Update>(r.payload)
            .map_err(|e| JournalError::BadRecord { offset: r.offset, reason: e.to_string() })?;
        updates.push(u);
    }
    Ok(Replayed { updates, tail: decoded.tail })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::framing::segment_header;
    use crate::dispatch::tensorflow::{SplitProviderDef, TfDataset, TfWorkerInfo, TransferServer};
    use crate::dispatch::types::{Millis, TaskId};
    use crate::dispatch::{ClientId, IterationId, JobId};

    /// A plan with a run of chunks and a file-like skip: 5..8 and 9..10 of `range(10)`.
    fn resumed() -> crate::position::ResumePlan {
        let source =
            crate::dataset::SourceDef::from_json(&serde_json::json!({"range": {"stop": 10}}))
                .unwrap();
        let position: crate::position::ReadPosition = serde_json::from_value(serde_json::json!({
            "dataset_id": "d", "repetition": 1, "done": [{"start": 0, "stop": 5}],
            "partial": [{"split": {"start": 8, "stop": 10}, "consumed": 1}]
        }))
        .unwrap();
        crate::position::ResumePlan::new(&position, &source, 3).unwrap()
    }

    fn sample() -> Vec<Update> {
        vec![
            Update::CreateIteration {
                iteration_id: IterationId(8),
                job_id: JobId(3),
                repetition: 5,
                total_splits: None,
                tf_split_providers: None,
                resume: None,
            },
            Update::CreateIteration {
                iteration_id: IterationId(10),
                job_id: JobId(4),
                repetition: 1,
                total_splits: Some(2),
                tf_split_providers: None,
                resume: Some(resumed()),
            },
            Update::RegisterWorker {
                address: "w:1".into(),
                tags: vec!["COLOCATED".into()],
                uid: None,
                tensorflow: None,
            },
            Update::FinishTask { task_id: TaskId(8) },
            Update::ReleaseClient { client_id: ClientId(3000), at: Millis(100) },
            Update::RegisterTfDataset {
                dataset_id: "1000".into(),
                dataset: Box::new(TfDataset {
                    graph: vec![8, 0, 255],
                    element_spec: None,
                    compression: 2,
                    cardinality: -2,
                    split_providers: Ok(vec![
                        SplitProviderDef::Range { start: 5, step: 5, len: 3 },
                        SplitProviderDef::Slices { len: 2 },
                    ]),
                    fingerprint: Some("00ff".into()),
                }),
            },
            Update::RegisterWorker {
                address: "tf:1".into(),
                tags: vec![],
                uid: Some("77".into()),
                tensorflow: Some(TfWorkerInfo {
                    transfer_servers: vec![TransferServer {
                        protocol: "grpc".into(),
                        address: "tf:1".into(),
                        compatibility_info: vec![1, 2],
                        fall_back_to_grpc_at_client_creation_time: true,
                        fall_back_to_grpc_at_get_element_time: false,
                    }],
                }),
            },
            Update::DecideCompression { dataset_id: "1000".into(), disabled: true },
            Update::CreateIteration {
                iteration_id: IterationId(9),
                job_id: JobId(3),
                repetition: 0,
                total_splits: None,
                tf_split_providers: Some(2),
                resume: None,
            },
            Update::TfSplitHandedOut {
                iteration_id: IterationId(9),
                split_provider_index: 1,
                repetition: 0,
                index: 1,
            },
        ]
    }

    /// Records written before TensorFlow datasets and workers existed still decode.
    #[test]
    fn records_of_earlier_versions_decode() {
        let old = [
            r#"{"register_worker":{"address":"w:1","tags":[]}}"#,
            r#"{"create_iteration":{"iteration_id":"8","job_id":"3","repetition":5,"total_splits":4}}"#,
            r#"{"consumer_round":{"iteration_id":"8","consumer_index":1,"rejected_new_target":null,"accepted":true}}"#,
            r#"{"register_dataset":{"dataset_id":"1000","def":{"source":{"range":{"start":0,"stop":3,"step":1}},"transforms":[]},"metadata":null}}"#,
        ];
        for text in old {
            let u: Update = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            // Declarative records encode as before (no new fields appear).
            assert_eq!(
                serde_json::to_value(&u).unwrap(),
                serde_json::from_str::<serde_json::Value>(text).unwrap()
            );
        }
    }

    /// JR-01: a round trip gives the same updates, in order, byte-identical re-encoded.
    #[test]
    fn jr_01_round_trip() {
        let mut seg = segment_header().to_vec();
        for u in sample() {
            encode_update(&u, &mut seg).unwrap();
        }
        let back = decode_updates(&seg).unwrap();
        assert_eq!(back.updates, sample());
        assert_eq!(back.tail, Tail::Clean);
        let mut again = segment_header().to_vec();
        for u in &back.updates {
            encode_update(u, &mut again).unwrap();
        }
        assert_eq!(again, seg);
    }

    /// JR-04: garbage bytes are refused, never replayed.
    #[test]
    fn jr_04_garbage() {
        let e = decode_updates(b"not record data, definitely not").unwrap_err();
        assert!(matches!(e, JournalError::Framing(FramingError::BadHeader { .. })), "{e}");
    }

    /// JR-05: valid framing, invalid payload.
    #[test]
    fn jr_05_valid_framing_invalid_payload() {
        let mut seg = segment_header().to_vec();
        encode_record(b"not serialized update", &mut seg).unwrap();
        let e = decode_updates(&seg).unwrap_err();
        assert!(e.to_string().starts_with("Failed to parse journal record at offset 16"), "{e}");
    }

    /// `depth` levels of arrays around a number.
    fn nested(depth: usize) -> serde_json::Value {
        (0..depth).fold(serde_json::json!(1), |v, _| serde_json::json!([v]))
    }

    /// Found by the journal fuzz target (`fuzz_journal_decoder`): a dataset whose elements
    /// (or metadata) nested about 125 levels deep was accepted and journaled, but the record
    /// around it passed the decoder's 128-level limit, so the acknowledged registration could
    /// not be replayed and the dispatcher refused to restart. Values are now capped at
    /// `MAX_NESTING` levels, and values at the cap replay, in their records and in a snapshot.
    #[test]
    fn deeply_nested_dataset_values_replay_or_are_refused() {
        use crate::dispatch::{Dispatcher, DispatcherConfig, Driver, RegisterDataset, VecSink};
        use crate::json::MAX_NESTING;
        let request = |elements: serde_json::Value, metadata: serde_json::Value| {
            serde_json::from_value::<RegisterDataset>(serde_json::json!({
                "dataset": {"source": {"list": {"elements": [elements]}}},
                "metadata": metadata,
            }))
        };
        let d = Dispatcher::new(DispatcherConfig::default(), "t".into(), Millis(0)).unwrap();
        let mut d = Driver::new(d, VecSink::default());
        let deepest = request(nested(MAX_NESTING), nested(MAX_NESTING)).unwrap();
        d.call(Millis(0), deepest).unwrap();
        let splits = serde_json::json!({"dataset": {"source": {"splits": {"items": [nested(MAX_NESTING)]}}}});
        d.call(Millis(0), serde_json::from_value::<RegisterDataset>(splits).unwrap()).unwrap();
        let mut updates: Vec<Update> = d.sink().records.clone();
        updates.push(d.dispatcher().snapshot());
        let mut seg = segment_header().to_vec();
        for u in &updates {
            encode_update(u, &mut seg).unwrap();
        }
        assert_eq!(decode_updates(&seg).unwrap().updates, updates);

        let too_deep = request(nested(MAX_NESTING + 1), serde_json::Value::Null).unwrap_err();
        assert!(too_deep.to_string().contains("more than 64 levels deep"), "{too_deep}");
        let e =
            d.call(Millis(0), request(nested(1), nested(MAX_NESTING + 1)).unwrap()).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
    }

    /// A torn final record is reported, earlier records kept.
    #[test]
    fn torn_tail_keeps_the_prefix() {
        let mut seg = segment_header().to_vec();
        for u in sample() {
            encode_update(&u, &mut seg).unwrap();
        }
        seg.truncate(seg.len() - 3);
        let back = decode_updates(&seg).unwrap();
        assert_eq!(back.updates, sample()[..sample().len() - 1]);
        assert!(matches!(back.tail, Tail::Torn { .. }));
    }
}
