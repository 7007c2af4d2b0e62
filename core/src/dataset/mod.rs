//! Declarative datasets: definitions, DYNAMIC-sharding splits and worker-side pipelines.
//!
//! A dataset is JSON, not a TensorFlow graph:
//!
//! ```text
//! {"source": S, "transforms": [T, ...]}
//! S: {"range": {"start"?: 0, "stop": n, "step"?: 1}} | {"list": {"elements": [...]}}
//!  | {"files": {"paths": [...], "format": "lines" | "jsonl" | "bytes"}} | {"splits": {"items": [...]}}
//!  | {"files": {"paths": [...], "format": "parquet" | "arrow" | "tfrecord", "columns"?: [...],
//!             "tensors"?: [{"name", "dtype", "shape"?}], "split"?: "files" | "rows", "rows"?: [...]}}
//! T: {"repeat": n | null} | {"take": n} | {"skip": n} | {"shuffle": {"buffer": n, "seed": s}}
//!  | {"batch": {"size": n, "drop_remainder"?: false}} | {"shard_hint": {}}
//! ```
//!
//! [`DatasetDef`] is the typed form ([`DatasetDef::from_json`], `str::parse` with duplicate
//! keys refused, [`DatasetDef::to_json`]). Elements are [`Element`]s: JSON values (`range`
//! yields bare integers, `batch` arrays), or for the columnar formats rows the core moves
//! without looking inside them (see [`columnar`](self::Chunk) and `docs/columnar.md`).
//!
//! **Dispatcher side** (DYNAMIC sharding): [`num_splits`] and [`split_at`] describe one pass
//! over the source as numbered splits, in O(1), so the dispatcher only keeps counters. A split
//! of a `range` or `list` is a chunk `{"start": a, "stop": b}` of element positions
//! ([`DEFAULT_SPLIT_SIZE`] long unless the job says otherwise), a split of `files` is a path,
//! a split of `splits` is the item.
//!
//! **Worker side**: [`elements_of_split`] checks a split and says what it stands for;
//! [`Pipeline`] runs a dataset for one task under a [`Sharding`] policy as a pull-based state
//! machine that asks its caller for splits and file contents ([`Step`]) and never does IO.
//! The semantics are TensorFlow's (OFF, DYNAMIC, FILE, DATA, FILE_OR_DATA, HINT; `repeat`
//! re-enters the source, so under DYNAMIC sharding `range(20)` + `repeat(5)` yields every
//! element exactly five times across all workers).
//!
//! Scenarios of the reference that this dataset model cannot express (no zip, interleave,
//! flat_map, filter, enumerate, sampling, snapshot or nested tf.data service datasets): DY-05
//! to DY-08, DY-10, the interleave halves of DY-01 and DY-11, the explicit `shard(n, i)`
//! variants of AS-03, and HINT at the file level before a reader (AS-05, AS-06), since a
//! `files` source reads its files itself. Concatenation (DY-09) is tested with an equivalent
//! `list`.

mod columnar;
mod def;
mod error;
mod files;
mod limits;
mod ops;
mod outputs;
mod parse;
mod pipeline;
mod rng;
#[cfg(feature = "openapi")]
mod schema;
mod source;
mod split;
#[cfg(test)]
mod tests;

pub use columnar::{
    Chunk, DType, Element, FileSplit, MAX_COLUMN_NAME_BYTES, MAX_COLUMNS, MAX_TENSOR_DIMS,
    MAX_TENSOR_VALUES, Row, RowsRequest, TensorDef, column,
};
pub use def::{
    BatchDef, DatasetDef, FileFormat, FilesDef, ListDef, RangeDef, ShuffleDef, SourceDef,
    SplitsDef, TransformDef,
};
pub use error::DatasetError;
pub use limits::{DEFAULT_MAX_BUFFERED_BYTES, Limits, approx_bytes};
pub use outputs::{Outputs, OutputsRequest};
pub use pipeline::{MAX_PULLS_PER_STEP, Pipeline, Sharding, Step, validate_sharding};
pub use split::{
    SplitElements, chunk_at, element_at, elements_of_split, num_splits, split_at, total_rows,
    validate_split_size,
};

/// The default `split_size` of a job: element positions per split of a `range` or `list`.
pub const DEFAULT_SPLIT_SIZE: u64 = 1024;

/// The most transforms a dataset may have.
pub const MAX_TRANSFORMS: usize = 10_000;

/// The largest `shuffle` buffer and `batch` size a definition may ask for (elements).
///
/// A million elements is ten times the largest shuffle buffers and batches seen in practice,
/// and a million of even the smallest elements (bare integers) already take tens of MiB of a
/// worker's memory. Larger counts are refused by [`DatasetDef::validate`]; what the elements
/// weigh is bounded at run time by [`Limits::max_buffered_bytes`].
pub const MAX_BUFFER_ELEMENTS: u64 = 1_000_000;

/// The most `batch` transforms a dataset may have.
///
/// Each `batch` nests its input one array deeper. With list elements at most
/// [`crate::json::MAX_NESTING`] (64) levels deep, 32 batches keep every element within the
/// 128 levels that `serde_json` (and so the Rust client) decodes; deeper elements could be
/// produced but never read.
pub const MAX_BATCH_TRANSFORMS: usize = 32;
