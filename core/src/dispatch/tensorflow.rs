//! What TensorFlow's clients and workers bring to the dispatcher, as plain data: datasets
//! stored opaquely (a serialized `GraphDef` and the client's metadata, exactly as the front
//! passes them: the graph as sent but for the edits TensorFlow's dispatcher also makes), the
//! DYNAMIC split providers a front computed from the graph, TensorFlow workers' transfer
//! servers, and the requests only TensorFlow speaks (run-time compression, one-split
//! get-split). The dispatcher never parses a graph: the gRPC front does, once, at registration
//! (with the `tensorflow` module of this crate).
//!
//! In records (journal, snapshot) bytes are base64 strings (RFC 4648 standard alphabet, padded).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dataset::DatasetDef;

/// `DataServiceMetadata.COMPRESSION_UNSPECIFIED`.
pub const COMPRESSION_UNSPECIFIED: i32 = 0;
/// `DataServiceMetadata.COMPRESSION_OFF`.
pub const COMPRESSION_OFF: i32 = 1;
/// `DataServiceMetadata.COMPRESSION_SNAPPY`: the only kind a worker may disable at run time.
pub const COMPRESSION_SNAPPY: i32 = 2;
/// `DataServiceMetadata.COMPRESSION_FORCED_SNAPPY`.
pub const COMPRESSION_FORCED_SNAPPY: i32 = 3;

/// The name of a `DataServiceMetadata.Compression` value (`"SNAPPY"`, ...; unknown values as
/// their number).
pub fn compression_name(compression: i32) -> String {
    match compression {
        COMPRESSION_UNSPECIFIED => "UNSPECIFIED".into(),
        COMPRESSION_OFF => "OFF".into(),
        COMPRESSION_SNAPPY => "SNAPPY".into(),
        COMPRESSION_FORCED_SNAPPY => "FORCED_SNAPPY".into(),
        n => n.to_string(),
    }
}

/// A TensorFlow dataset, stored exactly as the client sent it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TfDataset {
    /// The serialized `GraphDef` (`DatasetDef.graph`), as sent (but for the edits TensorFlow's
    /// dispatcher also makes, by the gRPC front: table ops shared by name, devices cleared).
    #[serde(with = "b64")]
    pub graph: Vec<u8>,
    /// `DataServiceMetadata.element_spec` (absent is not empty).
    #[serde(default, with = "b64_opt", skip_serializing_if = "Option::is_none")]
    pub element_spec: Option<Vec<u8>>,
    /// `DataServiceMetadata.compression`, as sent.
    pub compression: i32,
    /// `DataServiceMetadata.cardinality`.
    pub cardinality: i64,
    /// The DYNAMIC split providers, in TensorFlow's provider order, computed by the front from
    /// the graph; `Err` holds why there are none (it names the op without a split provider),
    /// the refusal text of a DYNAMIC iteration of this dataset.
    pub split_providers: Result<Vec<SplitProviderDef>, String>,
    /// The dataset's identity, computed by the front from what the workers run (the graph's
    /// structure, TensorFlow's `HashGraph` equalities, and the metadata): two registrations
    /// without an explicit id share a dataset only when their fingerprints are equal, whatever
    /// ids exist. `None` in records written before fingerprints were kept: such a dataset is
    /// found again only by an explicit id or identical bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl fmt::Debug for TfDataset {
    /// Byte fields by length: a graph may be megabytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TfDataset")
            .field("graph_bytes", &self.graph.len())
            .field("element_spec_bytes", &self.element_spec.as_ref().map(Vec::len))
            .field("compression", &self.compression)
            .field("cardinality", &self.cardinality)
            .field("split_providers", &self.split_providers)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl TfDataset {
    /// Whether `other` is the same dataset: the same graph and metadata (the split providers
    /// are derived from the graph, so they are not compared).
    pub fn same_content(&self, other: &TfDataset) -> bool {
        self.graph == other.graph
            && self.element_spec == other.element_spec
            && self.compression == other.compression
            && self.cardinality == other.cardinality
    }

    /// Whether a registration of `other` without an id gets this dataset: the same
    /// fingerprint when both have one (two builds of one pipeline, whatever their node names),
    /// else the same content.
    pub fn same_dataset(&self, other: &TfDataset) -> bool {
        match (&self.fingerprint, &other.fingerprint) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.same_content(other),
            _ => false,
        }
    }

    /// The bytes it holds, as `max_dataset_bytes` counts them: the graph and the element spec.
    pub fn bytes(&self) -> u64 {
        (self.graph.len() + self.element_spec.as_ref().map_or(0, Vec::len)) as u64
    }

    /// The number of DYNAMIC split providers (0 when there are none).
    pub fn num_split_providers(&self) -> usize {
        self.split_providers.as_ref().map_or(0, Vec::len)
    }

    /// What `GET /v1/datasets/{id}` shows of it: no bytes, only their size.
    pub fn summary(&self) -> TfDatasetSummary {
        TfDatasetSummary {
            graph_bytes: self.graph.len() as u64,
            element_spec_bytes: self.element_spec.as_ref().map(|s| s.len() as u64),
            cardinality: self.cardinality,
            compression: compression_name(self.compression),
            split_providers: match &self.split_providers {
                Ok(p) => TfSplitProviders::Supported(p.clone()),
                Err(e) => TfSplitProviders::Unsupported { unsupported: e.clone() },
            },
        }
    }
}

/// A TensorFlow dataset as `GET /v1/datasets/{dataset_id}` shows it (the `tensorflow` member of
/// `dataset`): the sizes of its bytes, not the bytes (a graph may be megabytes; TensorFlow
/// workers read it over gRPC), and the client's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TfDatasetSummary {
    /// The size in bytes of the serialized `GraphDef` as stored (as sent, after the edits
    /// TensorFlow's dispatcher also makes: lookup tables shared by node name, devices cleared).
    pub graph_bytes: u64,
    /// The size in bytes of the client's `DataServiceMetadata.element_spec`; `null` when it sent
    /// none (absent is not empty).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub element_spec_bytes: Option<u64>,
    /// The client's `DataServiceMetadata.cardinality`, as sent: the number of elements, or
    /// TensorFlow's -1 (infinite) or -2 (unknown).
    pub cardinality: i64,
    /// The client's `DataServiceMetadata.compression`, by name (`UNSPECIFIED`, `OFF`, `SNAPPY`,
    /// `FORCED_SNAPPY`; a value TensorFlow 2.21 does not define as its decimal number, e.g.
    /// `"7"`). As registered:
    /// a worker's run-time decision to disable compression does not change it.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^(UNSPECIFIED|OFF|SNAPPY|FORCED_SNAPPY|-?[0-9]+)$", example = "SNAPPY")
    )]
    pub compression: String,
    /// The split providers of a DYNAMIC (`distributed_epoch`) iteration, computed from the
    /// graph, or why there are none.
    pub split_providers: TfSplitProviders,
}

/// The DYNAMIC split providers of a TensorFlow dataset as REST shows them: the list, or
/// `{"unsupported": why}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum TfSplitProviders {
    /// The providers, in TensorFlow's provider order (the order of `GetSplit`'s
    /// `split_provider_index`).
    Supported(Vec<SplitProviderDef>),
    /// The graph has no split provider here: a DYNAMIC iteration of it is refused with
    /// `FAILED_PRECONDITION` and this text (other modes work).
    Unsupported {
        /// Why: names the op without a split provider (or says the graph does not decode).
        unsupported: String,
    },
}

/// One DYNAMIC split provider of a TensorFlow dataset, as TensorFlow's provider gives splits.
///
/// Its REST form is `{"range": {"start", "step", "len"}}` or `{"slices": {"len"}}`; its schema
/// names the two payloads (`RangeSplitProvider`, `SlicesSplitProvider`), which SDK generators
/// need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitProviderDef {
    /// `Dataset.range(start, stop, step)`: the split of index `i` is the element value
    /// `start + i * step`, for `i` in `0..len`.
    Range {
        /// First value.
        start: i64,
        /// Step (not 0).
        step: i64,
        /// Number of elements.
        len: u64,
    },
    /// An index provider: the split of index `i` is `i`, for `i` in `0..len`
    /// (`from_tensor_slices`: the slices, file names included; `from_tensors`: one;
    /// `Dataset.random`: 2^63 - 1, which it never reads).
    Slices {
        /// Number of slices.
        len: u64,
    },
}

impl SplitProviderDef {
    /// Splits per repetition.
    pub fn len(&self) -> u64 {
        match *self {
            SplitProviderDef::Range { len, .. } | SplitProviderDef::Slices { len } => len,
        }
    }

    /// Whether the provider has no split.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The split of index `i` (an int64 scalar's value); `None` past the end (or where a
    /// wrongly computed provider would overflow: never a panic).
    pub fn split(&self, i: u64) -> Option<i64> {
        if i >= self.len() {
            return None;
        }
        match *self {
            SplitProviderDef::Range { start, step, .. } => {
                i64::try_from(i).ok()?.checked_mul(step)?.checked_add(start)
            }
            SplitProviderDef::Slices { .. } => i64::try_from(i).ok(),
        }
    }
}

/// A `range` split provider (the schema of `SplitProviderDef::Range`): the splits of
/// `Dataset.range(start, stop, step)` are its element values.
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct RangeSplitProvider {
    /// The first split: `Dataset.range`'s start.
    start: i64,
    /// `Dataset.range`'s step (not 0): the split of index `i` is `start + i * step`.
    step: i64,
    /// The number of splits (of elements).
    len: u64,
}

/// A `slices` split provider (the schema of `SplitProviderDef::Slices`): index splits, as
/// `from_tensor_slices` (the slice indices), `from_tensors` and `Dataset.random` give them.
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct SlicesSplitProvider {
    /// The number of slices: the split of index `i` is `i`.
    len: u64,
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SplitProviderDef {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::Ref;
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Type};
        let variant = |key: &str, schema: &str, description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some(description))
                .property(key, Ref::from_schema_name(schema))
                .required(key)
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        };
        OneOfBuilder::new()
            .description(Some(
                "One DYNAMIC split provider of a TensorFlow dataset, as TensorFlow's provider \
                 gives splits (int64 scalars).",
            ))
            .item(variant(
                "range",
                "RangeSplitProvider",
                "`Dataset.range(start, stop, step)`: the split of index `i` is the element value \
                 `start + i * step`, for `i` in `0..len`.",
            ))
            .item(variant(
                "slices",
                "SlicesSplitProvider",
                "An index provider (`from_tensor_slices`, file names included; `from_tensors`: \
                 one; `Dataset.random`: 2^63 - 1, never read): the split of index `i` is `i`, \
                 for `i` in `0..len`.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SplitProviderDef {
    fn schemas(
        schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>,
    ) {
        use utoipa::PartialSchema as _;
        schemas.push((RangeSplitProvider::name().into(), RangeSplitProvider::schema()));
        schemas.push((SlicesSplitProvider::name().into(), SlicesSplitProvider::schema()));
    }
}

/// A data transfer server of a TensorFlow worker (`DataTransferServerInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferServer {
    /// E.g. `grpc`.
    pub protocol: String,
    /// Where clients reach it.
    pub address: String,
    /// Opaque, passed to clients.
    #[serde(default, with = "b64", skip_serializing_if = "Vec::is_empty")]
    pub compatibility_info: Vec<u8>,
    /// Passed to clients.
    #[serde(default)]
    pub fall_back_to_grpc_at_client_creation_time: bool,
    /// Passed to clients.
    #[serde(default)]
    pub fall_back_to_grpc_at_get_element_time: bool,
}

/// What a TensorFlow worker's heartbeat carries beside a Shardwise worker's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TfWorkerInfo {
    /// Its transfer servers (clients need the `grpc` one).
    #[serde(default)]
    pub transfer_servers: Vec<TransferServer>,
}

/// A dataset of either kind: declarative (run by Shardwise workers) or TensorFlow (run by
/// TensorFlow workers).
///
/// Serialized (REST), a declarative dataset is its [`DatasetDef`] exactly as before; a
/// TensorFlow dataset is `{"tensorflow": summary}` ([`TfDataset::summary`], no graph bytes).
/// Decoding reads only the declarative form (REST never sends a TensorFlow dataset; records
/// store datasets in their own form, see [`super::state::Dataset`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatasetSpec {
    /// A Shardwise dataset.
    Declarative(DatasetDef),
    /// A TensorFlow dataset.
    TensorFlow(Box<TfDataset>),
}

impl DatasetSpec {
    /// The declarative definition, if it is one.
    pub fn declarative(&self) -> Option<&DatasetDef> {
        match self {
            DatasetSpec::Declarative(d) => Some(d),
            DatasetSpec::TensorFlow(_) => None,
        }
    }
    /// The TensorFlow dataset, if it is one.
    pub fn tensorflow(&self) -> Option<&TfDataset> {
        match self {
            DatasetSpec::Declarative(_) => None,
            DatasetSpec::TensorFlow(t) => Some(t),
        }
    }
    /// Whether it is a TensorFlow dataset.
    pub fn is_tensorflow(&self) -> bool {
        matches!(self, DatasetSpec::TensorFlow(_))
    }
}

impl PartialEq<DatasetDef> for DatasetSpec {
    fn eq(&self, other: &DatasetDef) -> bool {
        self.declarative() == Some(other)
    }
}

impl From<DatasetDef> for DatasetSpec {
    fn from(d: DatasetDef) -> Self {
        DatasetSpec::Declarative(d)
    }
}

impl Serialize for DatasetSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            DatasetSpec::Declarative(d) => d.serialize(s),
            DatasetSpec::TensorFlow(t) => TfDatasetView { tensorflow: t.summary() }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for DatasetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DatasetDef::deserialize(d).map(DatasetSpec::Declarative)
    }
}

/// A TensorFlow dataset's REST form: `{"tensorflow": summary}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TfDatasetView {
    /// The summary.
    pub tensorflow: TfDatasetSummary,
}

/// The schema of a dataset's REST form: `oneOf` a `DatasetDef` and `{"tensorflow":
/// TfDatasetSummary}` (a `DatasetDef` needs `source`, the other only has `tensorflow`, so
/// exactly one matches).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for DatasetSpec {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::Ref;
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Type};
        let tensorflow = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "A TensorFlow dataset (registered by a TensorFlow client over gRPC): a summary, \
                 without its bytes.",
            ))
            .property("tensorflow", Ref::from_schema_name("TfDatasetSummary"))
            .required("tensorflow")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)));
        OneOfBuilder::new()
            .description(Some(
                "The dataset: a declarative `DatasetDef` (registered over REST), or \
                 `{\"tensorflow\": TfDatasetSummary}`.",
            ))
            .item(Ref::from_schema_name("DatasetDef"))
            .item(tensorflow)
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for DatasetSpec {
    fn schemas(
        schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>,
    ) {
        use utoipa::PartialSchema as _;
        schemas.push((DatasetDef::name().into(), DatasetDef::schema()));
        <DatasetDef as utoipa::ToSchema>::schemas(schemas);
        schemas.push((TfDatasetSummary::name().into(), TfDatasetSummary::schema()));
        <TfDatasetSummary as utoipa::ToSchema>::schemas(schemas);
    }
}

/// Get-or-register a TensorFlow dataset (TensorFlow's `GetOrRegisterDataset`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterTfDataset {
    /// The client's explicit id: when it exists it is the answer (TensorFlow's
    /// get-or-register, which compares the metadata only). Without one, the dataset of the same
    /// [`TfDataset::fingerprint`] is the answer, or a new dataset gets `tf-<fingerprint>` (or
    /// the next decimal id when another dataset holds that name).
    pub dataset_id: Option<String>,
    /// The dataset.
    pub dataset: TfDataset,
}

/// TensorFlow's `DisableCompressionAtRuntime`: a worker proposes whether to disable the
/// dataset's compression; the first proposal decides for every worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisableCompression {
    /// The dataset.
    pub dataset_id: String,
    /// The proposal.
    pub disable: bool,
}

/// Reply to [`DisableCompression`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressionDecision {
    /// The decision; `None` when the dataset is not SNAPPY-compressed (TensorFlow's
    /// `no_compression_to_disable`).
    pub compression_disabled: Option<bool>,
}

/// TensorFlow's `GetSplit`: one split of one provider, for a TensorFlow DYNAMIC iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TfGetSplit {
    /// The worker's repetition of the provider.
    pub repetition: u64,
    /// Which provider.
    pub split_provider_index: u64,
}

/// Reply to [`TfGetSplit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TfSplit {
    /// The split (an int64 scalar's value); `None`: `end_of_splits`.
    pub split: Option<i64>,
}

/// Bytes as a base64 string.
pub(crate) mod b64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        STANDARD.decode(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// Optional bytes as an optional base64 string.
pub(crate) mod b64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        bytes: &Option<Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::b64::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super::b64")] Vec<u8>);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_rest_summary_is_typed_and_keeps_its_json() {
        let t = TfDataset {
            graph: vec![0; 7],
            element_spec: None,
            compression: 7,
            cardinality: -1,
            split_providers: Err("op Foo has no split provider".into()),
            fingerprint: None,
        };
        let rest = serde_json::to_value(DatasetSpec::TensorFlow(Box::new(t.clone()))).unwrap();
        assert_eq!(
            rest,
            json!({"tensorflow": {"graph_bytes": 7, "element_spec_bytes": null,
                "cardinality": -1, "compression": "7",
                "split_providers": {"unsupported": "op Foo has no split provider"}}})
        );
        let back: TfDatasetView = serde_json::from_value(rest).unwrap();
        assert_eq!(back.tensorflow, t.summary());
        let both = TfDataset {
            element_spec: Some(vec![1, 2]),
            compression: COMPRESSION_FORCED_SNAPPY,
            split_providers: Ok(vec![
                SplitProviderDef::Slices { len: 3 },
                SplitProviderDef::Range { start: -1, step: 2, len: 0 },
            ]),
            ..t
        };
        let rest = serde_json::to_value(DatasetSpec::TensorFlow(Box::new(both.clone()))).unwrap();
        assert_eq!(
            rest,
            json!({"tensorflow": {"graph_bytes": 7, "element_spec_bytes": 2,
                "cardinality": -1, "compression": "FORCED_SNAPPY",
                "split_providers": [{"slices": {"len": 3}},
                                    {"range": {"start": -1, "step": 2, "len": 0}}]}})
        );
        let back: TfDatasetView = serde_json::from_value(rest).unwrap();
        assert_eq!(back.tensorflow, both.summary());
    }

    #[test]
    fn range_and_slice_providers_give_tensorflows_splits() {
        let r = SplitProviderDef::Range { start: 5, step: 5, len: 3 };
        assert_eq!(
            (0..4).map(|i| r.split(i)).collect::<Vec<_>>(),
            [Some(5), Some(10), Some(15), None]
        );
        let s = SplitProviderDef::Slices { len: 3 };
        assert_eq!(
            (0..4).map(|i| s.split(i)).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), None]
        );
        // A provider computed wrongly overflows to "no split", never a panic.
        let bad = SplitProviderDef::Range { start: i64::MAX, step: 1, len: 3 };
        assert_eq!(bad.split(1), None);
        assert_eq!(SplitProviderDef::Slices { len: u64::MAX }.split(u64::MAX - 1), None);
    }

    #[test]
    fn bytes_are_base64_in_records_and_absent_element_spec_is_not_empty() {
        let t = TfDataset {
            graph: vec![0, 1, 2, 255],
            element_spec: Some(Vec::new()),
            compression: COMPRESSION_SNAPPY,
            cardinality: -2,
            split_providers: Err("op Foo has no split provider".into()),
            fingerprint: None,
        };
        let text = serde_json::to_string(&t).unwrap();
        assert!(text.contains("\"graph\":\"AAEC/w==\""), "{text}");
        assert!(text.contains("\"element_spec\":\"\""), "{text}");
        let back: TfDataset = serde_json::from_str(&text).unwrap();
        assert_eq!(back, t);
        let none = TfDataset { element_spec: None, ..t };
        let back: TfDataset = serde_json::from_str(&serde_json::to_string(&none).unwrap()).unwrap();
        assert_eq!(back.element_spec, None);
        assert!(
            serde_json::from_str::<TfDataset>(
                r#"{"graph":"!!","compression":0,"cardinality":0,"split_providers":{"Ok":[]}}"#
            )
            .is_err()
        );
        // Records from before fingerprints were kept read as `None`; a fingerprint is kept.
        let old: TfDataset = serde_json::from_str(
            r#"{"graph":"AA==","compression":0,"cardinality":0,"split_providers":{"Ok":[]}}"#,
        )
        .unwrap();
        assert_eq!(old.fingerprint, None);
        let kept = TfDataset { fingerprint: Some("ab12".into()), ..old };
        let text = serde_json::to_string(&kept).unwrap();
        assert!(text.contains("\"fingerprint\":\"ab12\""), "{text}");
        assert_eq!(serde_json::from_str::<TfDataset>(&text).unwrap(), kept);
    }
}
