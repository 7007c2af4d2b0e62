//! Dataset definitions: the typed form of `{"source": S, "transforms": [T, ...]}`.
//!
//! Decoding goes through [`DatasetDef::from_json`] (also used by the `Deserialize` impls), which
//! refuses unknown fields like serde's `deny_unknown_fields` but names the offending path in its
//! message. Encoding ([`DatasetDef::to_json`], also used by the `Serialize` impls) writes the
//! canonical form: every optional field explicit, `transforms` always present, so two
//! equivalent definitions encode to the same JSON.

use std::num::{NonZeroI64, NonZeroU64};
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};

use super::columnar::{FileSplit, TensorDef};
use super::error::{DatasetError, invalid};
use super::{MAX_BATCH_TRANSFORMS, MAX_BUFFER_ELEMENTS, MAX_TRANSFORMS, parse};

/// A declarative dataset: one source followed by a chain of transforms.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub struct DatasetDef {
    /// Where the elements come from.
    pub source: SourceDef,
    /// Applied in order to the source's elements (at most [`MAX_TRANSFORMS`]).
    pub transforms: Vec<TransformDef>,
}

/// The source of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub enum SourceDef {
    /// `{"range": {"start"?: 0, "stop": n, "step"?: 1}}`: integers like Python's `range`.
    Range(RangeDef),
    /// `{"list": {"elements": [...]}}`: the given JSON values in order.
    List(ListDef),
    /// `{"files": {"paths": [...], "format": ...}}`: the decoded contents of files.
    Files(Box<FilesDef>),
    /// `{"splits": {"items": [...]}}`: arbitrary JSON splits (e.g. shard URIs); read without
    /// dynamic sharding, the items are the elements.
    Splits(SplitsDef),
}

/// A `range` source: `start, start + step, ...` up to but excluding `stop` (counting down for
/// a negative `step`), as bare JSON integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RangeDef {
    /// The first element (default 0).
    pub start: i64,
    /// The exclusive bound.
    pub stop: i64,
    /// The distance between elements (default 1, never 0).
    pub step: NonZeroI64,
}

/// A `list` source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListDef {
    /// The elements, in order.
    pub elements: Vec<Value>,
}

/// A `files` source. Core never reads files: a pipeline asks for each file's bytes with
/// [`Step::NeedFile`](super::Step::NeedFile), or for the rows of a columnar file with
/// [`Step::NeedRows`](super::Step::NeedRows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesDef {
    /// The files, in order (one split each under dynamic sharding, unless split by rows).
    pub paths: Vec<String>,
    /// How a file's bytes become elements.
    pub format: FileFormat,
    /// (Columnar formats) The columns to read, in this order; all when `None`.
    pub columns: Option<Vec<String>>,
    /// (Columnar formats) Declared tensor columns, checked against every file; for
    /// `tfrecord`, the `tf.train.Example` features to decode (without them a record is one
    /// `binary` column named `record`).
    pub tensors: Vec<TensorDef>,
    /// How DYNAMIC sharding cuts the source (`rows`: Parquet only).
    pub split: FileSplit,
    /// (Split by rows) The row count of every file, in path order: filled in by the
    /// dispatcher from the files' footers when the dataset is registered.
    pub rows: Option<Vec<u64>>,
}

impl FilesDef {
    /// Files read in `format`, with no column options.
    pub fn new(paths: Vec<String>, format: FileFormat) -> FilesDef {
        FilesDef {
            paths,
            format,
            columns: None,
            tensors: Vec::new(),
            split: FileSplit::Files,
            rows: None,
        }
    }

    /// Whether the source's positions are rows (split by rows, with the row counts known).
    pub fn row_positions(&self) -> Option<&[u64]> {
        match self.split {
            FileSplit::Rows => self.rows.as_deref(),
            FileSplit::Files => None,
        }
    }
}

/// How the bytes of a file are decoded into elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileFormat {
    /// One JSON string per line, without the line break (`\n` or `\r\n`); a final line without
    /// a line break counts; an empty file has no lines.
    Lines,
    /// One JSON value per non-blank line; a line that is not JSON is an error naming the file
    /// and the line number.
    Jsonl,
    /// The whole file as one element: its bytes as a base64 string (RFC 4648 standard
    /// alphabet, padded), whether or not they are UTF-8 text.
    Bytes,
    /// Apache Parquet: one row per row of the file, read a row group at a time.
    Parquet,
    /// An Apache Arrow IPC file (the random-access format, `ARROW1`): one row per row.
    Arrow,
    /// TFRecord: one row per record (length and data CRC-checked), as a `binary` column
    /// `record`, or as the declared `tf.train.Example` features.
    TfRecord,
}

/// A `splits` source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitsDef {
    /// The splits, each any JSON value.
    pub items: Vec<Value>,
}

/// One transform of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub enum TransformDef {
    /// `{"repeat": n}` re-enters its input `n` times; `{"repeat": null}` forever.
    Repeat(Option<u64>),
    /// `{"take": n}`: at most the first `n` elements.
    Take(u64),
    /// `{"skip": n}`: all but the first `n` elements.
    Skip(u64),
    /// `{"shuffle": {"buffer": n, "seed": s}}`: a seeded buffer shuffle.
    Shuffle(ShuffleDef),
    /// `{"batch": {"size": n, "drop_remainder"?: false}}`: JSON arrays of `size` elements.
    Batch(BatchDef),
    /// `{"shard_hint": {}}`: where the HINT policy applies the worker's static shard.
    ShardHint,
}

/// The parameters of a `shuffle` transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShuffleDef {
    /// How many elements are buffered (at least 1; 1 keeps the order).
    pub buffer: NonZeroU64,
    /// The seed; pass `k` of an enclosing `repeat` shuffles with a generator seeded from
    /// `(seed, k)`.
    pub seed: u64,
}

/// The parameters of a `batch` transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchDef {
    /// Elements per batch (at least 1).
    pub size: NonZeroU64,
    /// Whether a final batch shorter than `size` is dropped.
    pub drop_remainder: bool,
}

impl DatasetDef {
    /// Whether read positions of a DYNAMIC read of this dataset are exact (see
    /// [`crate::position`]): every element must come from one split, and a split's output
    /// must not depend on what was read before it. Only `shard_hint` qualifies; the error
    /// names the first transform that does not, and why.
    pub fn check_resumable(&self) -> Result<(), String> {
        for t in &self.transforms {
            let why = match t {
                TransformDef::ShardHint => continue,
                TransformDef::Shuffle(_) => "`shuffle` buffers elements across splits",
                TransformDef::Batch(_) => "`batch` makes elements out of several splits",
                TransformDef::Take(_) | TransformDef::Skip(_) => {
                    "`take` and `skip` count elements across splits"
                }
                TransformDef::Repeat(_) => "`repeat` makes passes over the source that overlap",
            };
            return Err(format!(
                "read positions are exact only for a source without transforms (shard_hint \
                 aside): {why}; shuffle or batch in the trainer instead"
            ));
        }
        Ok(())
    }

    /// A dataset with no transforms.
    pub fn new(source: SourceDef) -> Self {
        DatasetDef { source, transforms: Vec::new() }
    }

    /// Decodes and validates a definition. Every refusal is an
    /// [`DatasetError::InvalidArgument`] naming the path, e.g.
    /// `transforms[2].batch.size must be at least 1`.
    pub fn from_json(value: &Value) -> Result<Self, DatasetError> {
        parse::dataset(value)
    }

    /// The canonical JSON form (every optional field explicit).
    pub fn to_json(&self) -> Value {
        let transforms: Vec<Value> = self.transforms.iter().map(TransformDef::to_json).collect();
        json!({"source": self.source.to_json(), "transforms": transforms})
    }

    /// Checks what the types do not, so that no definition can make a worker allocate
    /// without bound: at most [`MAX_TRANSFORMS`] transforms, of which at most
    /// [`MAX_BATCH_TRANSFORMS`] `batch`es, and `shuffle` buffers and `batch` sizes of at most
    /// [`MAX_BUFFER_ELEMENTS`].
    ///
    /// [`DatasetDef::from_json`] does not apply these bounds (a journal written before them
    /// must still replay): the dispatcher checks them when a dataset is registered, and a
    /// pipeline when it is built.
    pub fn validate(&self) -> Result<(), DatasetError> {
        if self.transforms.len() > MAX_TRANSFORMS {
            return Err(invalid(format!(
                "transforms has {} entries; at most {MAX_TRANSFORMS} are allowed",
                self.transforms.len()
            )));
        }
        let batches =
            self.transforms.iter().filter(|t| matches!(t, TransformDef::Batch(_))).count();
        if batches > MAX_BATCH_TRANSFORMS {
            return Err(invalid(format!(
                "transforms has {batches} batch transforms; at most {MAX_BATCH_TRANSFORMS} are \
                 allowed (each nests the elements one array deeper)"
            )));
        }
        if let SourceDef::Files(f) = &self.source
            && f.format.is_columnar()
            && batches > 1
        {
            return Err(invalid(format!(
                "transforms has {batches} batch transforms; a source of {} files allows one \
                 (a batch of rows is a record batch, which is not batched again)",
                f.format.as_str()
            )));
        }
        for (i, transform) in self.transforms.iter().enumerate() {
            let (field, n) = match transform {
                TransformDef::Shuffle(s) => ("shuffle.buffer", s.buffer.get()),
                TransformDef::Batch(b) => ("batch.size", b.size.get()),
                _ => continue,
            };
            if n > MAX_BUFFER_ELEMENTS {
                return Err(invalid(format!(
                    "transforms[{i}].{field} is {n}; at most {MAX_BUFFER_ELEMENTS} elements are \
                     allowed"
                )));
            }
        }
        Ok(())
    }
}

impl FromStr for DatasetDef {
    type Err = DatasetError;

    /// Parses JSON text strictly (a repeated key in any object is refused), then decodes it
    /// with [`DatasetDef::from_json`].
    fn from_str(text: &str) -> Result<Self, DatasetError> {
        let value: Value = crate::json::from_str_strict(text)
            .map_err(|e| invalid(format!("dataset definition is not valid JSON: {e}")))?;
        DatasetDef::from_json(&value)
    }
}

impl TryFrom<Value> for DatasetDef {
    type Error = DatasetError;

    fn try_from(value: Value) -> Result<Self, DatasetError> {
        DatasetDef::from_json(&value)
    }
}

impl Serialize for DatasetDef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl SourceDef {
    /// Decodes and validates a source on its own (paths in messages start at `source`).
    pub fn from_json(value: &Value) -> Result<Self, DatasetError> {
        parse::source(value, "source")
    }

    /// The canonical JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            SourceDef::Range(r) => {
                json!({"range": {"start": r.start, "stop": r.stop, "step": r.step.get()}})
            }
            SourceDef::List(l) => json!({"list": {"elements": l.elements}}),
            SourceDef::Files(f) => json!({"files": f.to_json()}),
            SourceDef::Splits(s) => json!({"splits": {"items": s.items}}),
        }
    }

    /// The source's key: `range`, `list`, `files` or `splits`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceDef::Range(_) => "range",
            SourceDef::List(_) => "list",
            SourceDef::Files(_) => "files",
            SourceDef::Splits(_) => "splits",
        }
    }
}

impl TryFrom<Value> for SourceDef {
    type Error = DatasetError;

    fn try_from(value: Value) -> Result<Self, DatasetError> {
        SourceDef::from_json(&value)
    }
}

impl Serialize for SourceDef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl RangeDef {
    /// `range(start, stop, step)`.
    pub fn new(start: i64, stop: i64, step: NonZeroI64) -> Self {
        RangeDef { start, stop, step }
    }

    /// How many elements the range has (up to `u64::MAX` for `i64::MIN..i64::MAX`).
    pub fn len(&self) -> u64 {
        let (start, stop, step) =
            (i128::from(self.start), i128::from(self.stop), i128::from(self.step.get()));
        let span = if step > 0 { stop - start } else { start - stop };
        if span <= 0 {
            return 0;
        }
        let count = (span - 1) / step.abs() + 1;
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// Whether the range has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at `position` (0-based), if the range has one there.
    pub fn get(&self, position: u64) -> Option<i64> {
        if position >= self.len() {
            return None;
        }
        let offset = i128::from(position).checked_mul(i128::from(self.step.get()))?;
        let value = i128::from(self.start).checked_add(offset)?;
        i64::try_from(value).ok()
    }
}

impl FilesDef {
    /// The canonical JSON form of the source's arguments: the column options only when they
    /// are set, so a text source encodes as it always did.
    pub fn to_json(&self) -> Value {
        let mut obj = serde_json::Map::new();
        obj.insert("paths".into(), json!(self.paths));
        obj.insert("format".into(), json!(self.format.as_str()));
        if let Some(columns) = &self.columns {
            obj.insert("columns".into(), json!(columns));
        }
        if !self.tensors.is_empty() {
            let tensors: Vec<Value> = self
                .tensors
                .iter()
                .map(|t| json!({"name": t.name, "dtype": t.dtype.as_str(), "shape": t.shape}))
                .collect();
            obj.insert("tensors".into(), Value::Array(tensors));
        }
        if self.split != FileSplit::Files {
            obj.insert("split".into(), json!(self.split.as_str()));
        }
        if let Some(rows) = &self.rows {
            obj.insert("rows".into(), json!(rows));
        }
        Value::Object(obj)
    }
}

impl FileFormat {
    /// Every format, in the order of [`FileFormat::NAMES`].
    pub const ALL: [FileFormat; 6] = [
        FileFormat::Lines,
        FileFormat::Jsonl,
        FileFormat::Bytes,
        FileFormat::Parquet,
        FileFormat::Arrow,
        FileFormat::TfRecord,
    ];

    /// The formats' JSON names.
    pub const NAMES: [&'static str; 6] =
        ["lines", "jsonl", "bytes", "parquet", "arrow", "tfrecord"];

    /// The format's JSON name, e.g. `jsonl` or `parquet`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileFormat::Lines => "lines",
            FileFormat::Jsonl => "jsonl",
            FileFormat::Bytes => "bytes",
            FileFormat::Parquet => "parquet",
            FileFormat::Arrow => "arrow",
            FileFormat::TfRecord => "tfrecord",
        }
    }

    /// The format named `name`.
    pub fn from_name(name: &str) -> Option<FileFormat> {
        let i = FileFormat::NAMES.iter().position(|n| *n == name)?;
        FileFormat::ALL.get(i).copied()
    }

    /// Whether files of this format are read as rows of columns (`parquet`, `arrow`,
    /// `tfrecord`) rather than handed over whole.
    pub fn is_columnar(self) -> bool {
        matches!(self, FileFormat::Parquet | FileFormat::Arrow | FileFormat::TfRecord)
    }
}

impl TransformDef {
    /// Decodes and validates one transform on its own (paths in messages start at
    /// `transform`).
    pub fn from_json(value: &Value) -> Result<Self, DatasetError> {
        parse::transform(value, "transform")
    }

    /// The canonical JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            TransformDef::Repeat(count) => json!({"repeat": count}),
            TransformDef::Take(n) => json!({"take": n}),
            TransformDef::Skip(n) => json!({"skip": n}),
            TransformDef::Shuffle(s) => {
                json!({"shuffle": {"buffer": s.buffer.get(), "seed": s.seed}})
            }
            TransformDef::Batch(b) => {
                json!({"batch": {"size": b.size.get(), "drop_remainder": b.drop_remainder}})
            }
            TransformDef::ShardHint => json!({"shard_hint": {}}),
        }
    }

    /// The transform's key, e.g. `batch`.
    pub fn kind(&self) -> &'static str {
        match self {
            TransformDef::Repeat(_) => "repeat",
            TransformDef::Take(_) => "take",
            TransformDef::Skip(_) => "skip",
            TransformDef::Shuffle(_) => "shuffle",
            TransformDef::Batch(_) => "batch",
            TransformDef::ShardHint => "shard_hint",
        }
    }
}

impl TryFrom<Value> for TransformDef {
    type Error = DatasetError;

    fn try_from(value: Value) -> Result<Self, DatasetError> {
        TransformDef::from_json(&value)
    }
}

impl Serialize for TransformDef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}
