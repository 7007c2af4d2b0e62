//! The OpenAPI schemas of dataset definitions (feature `openapi`): `DatasetDef` is an object
//! with a `source` (`oneOf` the four named source schemas) and `transforms` (each `oneOf` the
//! six named transform schemas). Each source and transform is an object with exactly one key
//! naming it and `additionalProperties: false`, as [`DatasetDef::from_json`] decodes them, so
//! the `oneOf` alternatives never overlap and a generated SDK gets one type per kind.
//!
//! What JSON Schema does not say here, the descriptions do: a range's `step` of 0 is refused,
//! list elements and split items nest at most [`MAX_NESTING`] levels deep.

use utoipa::openapi::schema::{
    ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{KnownFormat, Ref, RefOr, SchemaFormat};

use super::columnar::{
    DType, MAX_COLUMN_NAME_BYTES, MAX_COLUMNS, MAX_TENSOR_DIMS, MAX_TENSOR_VALUES,
};
use super::def::{DatasetDef, FileFormat};
use super::{MAX_BATCH_TRANSFORMS, MAX_BUFFER_ELEMENTS, MAX_TRANSFORMS};
use crate::json::MAX_NESTING;

/// The schema names of the sources, in the order of `DatasetSource`'s `oneOf`.
const SOURCE_SCHEMAS: &[&str] = &["RangeSource", "ListSource", "FilesSource", "SplitsSource"];

/// The schema names of the transforms, in the order of `DatasetTransform`'s `oneOf`.
const TRANSFORM_SCHEMAS: &[&str] = &[
    "RepeatTransform",
    "TakeTransform",
    "SkipTransform",
    "ShuffleTransform",
    "BatchTransform",
    "ShardHintTransform",
];

fn reference(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

/// A closed object (unknown keys are refused, as the server does).
fn closed(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
        .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::FreeForm(false)))
}

/// `{key: <schema>}`, the form of every source and transform.
fn single_key(key: &str, value: impl Into<RefOr<Schema>>, description: &str) -> RefOr<Schema> {
    closed(description).property(key, value).required(key).into()
}

fn int64(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(i64::MIN))
        .maximum(Some(i64::MAX))
        .description(Some(description))
}

/// A JSON integer in `0..=u64::MAX` (no `format`: `int64` would stop at `i64::MAX`).
fn uint(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(u64::MAX))
        .description(Some(description))
}

fn any_values(description: &str) -> ArrayBuilder {
    ArrayBuilder::new().items(ObjectBuilder::new().schema_type(SchemaType::AnyValue)).description(
        Some(format!(
            "{description} Any JSON values, each nested at most {MAX_NESTING} arrays and objects \
             deep."
        )),
    )
}

/// Every named schema a dataset definition refers to (not `DatasetDef` itself).
fn components() -> Vec<(String, RefOr<Schema>)> {
    let source_one_of = SOURCE_SCHEMAS
        .iter()
        .fold(OneOfBuilder::new(), |b, name| b.item(reference(name)))
        .description(Some("Where a dataset's elements come from: exactly one of the four kinds."));
    let transform_one_of = TRANSFORM_SCHEMAS
        .iter()
        .fold(OneOfBuilder::new(), |b, name| b.item(reference(name)))
        .description(Some("One transform: an object whose single key names it."));
    let schemas: Vec<(&str, RefOr<Schema>)> = vec![
        ("DatasetSource", Schema::OneOf(source_one_of.build()).into()),
        (
            "RangeSource",
            single_key(
                "range",
                reference("RangeArgs"),
                "`{\"range\": {\"start\"?, \"stop\", \"step\"?}}`: integers like Python's `range`.",
            ),
        ),
        (
            "RangeArgs",
            closed(
                "`start, start + step, ...` up to but excluding `stop` (counting down for a \
                 negative `step`), as bare JSON integers.",
            )
            .property("start", int64("The first element (default 0).").default(Some(0.into())))
            .property("stop", int64("The exclusive bound."))
            .required("stop")
            .property(
                "step",
                int64("The distance between elements (default 1); 0 is refused.")
                    .default(Some(1.into())),
            )
            .into(),
        ),
        (
            "ListSource",
            single_key(
                "list",
                reference("ListArgs"),
                "`{\"list\": {\"elements\": [...]}}`: the given JSON values in order.",
            ),
        ),
        (
            "ListArgs",
            closed("The elements of a `list` source.")
                .property("elements", any_values("The elements, in order."))
                .required("elements")
                .into(),
        ),
        (
            "FilesSource",
            single_key(
                "files",
                reference("FilesArgs"),
                "`{\"files\": {\"paths\": [...], \"format\": ...}}`: the decoded contents of \
                 files (a worker reads files only under its `--data-root` directories).",
            ),
        ),
        (
            "FilesArgs",
            closed(
                "The files of a `files` source and how they are decoded. `columns`, `tensors`, \
                 `split` and `rows` apply to the columnar formats (`parquet`, `arrow`, \
                 `tfrecord`), whose rows are served as JSON objects or, with `Accept: \
                 application/vnd.apache.arrow.stream`, as Arrow record batches.",
            )
            .property(
                "paths",
                ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String)).description(
                    Some("The files, in order (one split each under DYNAMIC sharding, unless split by rows)."),
                ),
            )
            .required("paths")
            .property("format", reference("FileFormat"))
            .required("format")
            .property(
                "columns",
                ArrayBuilder::new()
                    .items(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(MAX_COLUMN_NAME_BYTES)))
                    .max_items(Some(MAX_COLUMNS))
                    .unique_items(true)
                    .description(Some(
                        "The columns to read, in this order (default: all of the file's). A file \
                         without one of them fails its task, naming the column.",
                    )),
            )
            .property(
                "tensors",
                ArrayBuilder::new().items(reference("TensorDecl")).max_items(Some(MAX_COLUMNS)).description(Some(
                    "Declared tensor columns, checked against every file (a file whose column \
                     disagrees fails its task, naming the column). For `tfrecord` files, the \
                     `tf.train.Example` features decoded into columns (without them, a record \
                     is one `binary` column `record`).",
                )),
            )
            .property("split", reference("FileSplit"))
            .property(
                "rows",
                ArrayBuilder::new().items(uint("Rows of the file.")).description(Some(
                    "With `split: rows`: the row count of every file, in path order. Filled in \
                     by the dispatcher; a worker refuses a file whose count differs (it changed \
                     since).",
                )),
            )
            .into(),
        ),
        (
            "TensorDecl",
            closed(
                "A tensor column: every row holds one tensor of `dtype` and `shape`. A scalar \
                 (`shape` `[]`) is a plain column of that type; any other shape is served as an \
                 Arrow fixed-size list of `product(shape)` values with the canonical \
                 `arrow.fixed_shape_tensor` extension type (read without a copy by NumPy, \
                 PyTorch and JAX). A file may hold it as a fixed-size list or as a list whose \
                 every row has `product(shape)` values.",
            )
            .property("name", ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(MAX_COLUMN_NAME_BYTES)).description(Some("The column (or feature) name.")))
            .required("name")
            .property("dtype", reference("DType"))
            .required("dtype")
            .property(
                "shape",
                ArrayBuilder::new()
                    .items(uint("A dimension (at least 1).").minimum(Some(1)))
                    .max_items(Some(MAX_TENSOR_DIMS))
                    .description(Some(format!(
                        "The dimensions (default `[]`, a scalar); at most {MAX_TENSOR_VALUES} \
                         values per row."
                    ))),
            )
            .into(),
        ),
        ("FileSplit", ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["files", "rows"]))
                    .default(Some("files".into()))
                    .description(Some(
                        "How DYNAMIC sharding cuts the source: `files` (a split is a file), or \
                         for `parquet` `rows`: splits are ranges of the job's `split_size` rows \
                         (default 1024) counted across the files in path order, so that a few \
                         large files are shared by many workers, and read positions count rows. \
                         The dispatcher reads every file's row count from its footer when the \
                         dataset is registered (it needs a `--data-root` holding the files) and \
                         records them as `rows`.",
                    )).into()),
        ("DType", ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(DType::NAMES))
                    .description(Some(
                        "The values' type. `string` and `binary` only as scalars; `tfrecord` \
                         features decode to `float32` (float_list), `int64` (int64_list), \
                         `string` or `binary` (bytes_list).",
                    )).into()),
        (
            "FileFormat",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(FileFormat::NAMES))
                .description(Some(
                    "How a file's bytes become elements. `lines`: one string per line, without \
                     the line break; `jsonl`: one JSON value per non-blank line; `bytes`: the \
                     whole file as one base64 string (RFC 4648 standard alphabet, padded), for \
                     text and binary files alike. Columnar, one row per element: `parquet` \
                     (read a row group at a time; snappy, gzip, lz4 and zstd pages), `arrow` \
                     (an Arrow IPC file), `tfrecord` (records with their CRC-32C checked).",
                ))
                .into(),
        ),
        (
            "SplitsSource",
            single_key(
                "splits",
                reference("SplitsArgs"),
                "`{\"splits\": {\"items\": [...]}}`: arbitrary JSON splits (e.g. shard URIs); \
                 read without dynamic sharding, the items are the elements.",
            ),
        ),
        (
            "SplitsArgs",
            closed("The items of a `splits` source.")
                .property("items", any_values("The splits, in order."))
                .required("items")
                .into(),
        ),
        ("DatasetTransform", Schema::OneOf(transform_one_of.build()).into()),
        (
            "RepeatTransform",
            single_key(
                "repeat",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
                    .minimum(Some(0))
                    .maximum(Some(u64::MAX))
                    .description(Some("How many times; `null` repeats forever.")),
                "`{\"repeat\": n}` re-enters its input `n` times; `{\"repeat\": null}` forever.",
            ),
        ),
        (
            "TakeTransform",
            single_key(
                "take",
                uint("How many."),
                "`{\"take\": n}`: at most the first `n` elements.",
            ),
        ),
        (
            "SkipTransform",
            single_key(
                "skip",
                uint("How many."),
                "`{\"skip\": n}`: all but the first `n` elements.",
            ),
        ),
        (
            "ShuffleTransform",
            single_key(
                "shuffle",
                reference("ShuffleArgs"),
                "`{\"shuffle\": {\"buffer\": n, \"seed\": s}}`: a seeded buffer shuffle.",
            ),
        ),
        (
            "ShuffleArgs",
            closed("The parameters of a `shuffle` transform.")
                .property(
                    "buffer",
                    uint("How many elements are buffered (1 keeps the order).")
                        .minimum(Some(1))
                        .maximum(Some(MAX_BUFFER_ELEMENTS)),
                )
                .required("buffer")
                .property(
                    "seed",
                    uint(
                        "The seed; pass `k` of an enclosing `repeat` shuffles with a generator \
                         seeded from `(seed, k)`.",
                    ),
                )
                .required("seed")
                .into(),
        ),
        (
            "BatchTransform",
            single_key(
                "batch",
                reference("BatchArgs"),
                "`{\"batch\": {\"size\": n, \"drop_remainder\"?: false}}`: JSON arrays of `size` \
                 elements.",
            ),
        ),
        (
            "BatchArgs",
            closed("The parameters of a `batch` transform.")
                .property(
                    "size",
                    uint("Elements per batch.").minimum(Some(1)).maximum(Some(MAX_BUFFER_ELEMENTS)),
                )
                .required("size")
                .property(
                    "drop_remainder",
                    ObjectBuilder::new()
                        .schema_type(Type::Boolean)
                        .default(Some(false.into()))
                        .description(Some(
                            "Whether a final batch shorter than `size` is dropped (default \
                             false).",
                        )),
                )
                .into(),
        ),
        (
            "ShardHintTransform",
            single_key(
                "shard_hint",
                reference("ShardHintArgs"),
                "`{\"shard_hint\": {}}`: where the HINT policy applies the worker's static shard.",
            ),
        ),
        ("ShardHintArgs", closed("No parameters: always `{}`.").into()),
    ];
    schemas.into_iter().map(|(name, schema)| (name.to_owned(), schema)).collect()
}

impl utoipa::PartialSchema for DatasetDef {
    fn schema() -> RefOr<Schema> {
        closed(&format!(
            "A declarative dataset: a source and the transforms applied to its elements in \
             order. Unknown keys are errors. Bounds (400 `INVALID_ARGUMENT` at registration): \
             at most {MAX_TRANSFORMS} transforms, of which at most {MAX_BATCH_TRANSFORMS} \
             `batch`es; a shuffle `buffer` and a batch `size` of at most {MAX_BUFFER_ELEMENTS} \
             elements. A task whose shuffle and batch buffers would hold more bytes than its \
             worker allows (`--max-buffer-bytes`) fails with `RESOURCE_EXHAUSTED`."
        ))
        .property("source", reference("DatasetSource"))
        .required("source")
        .property(
            "transforms",
            ArrayBuilder::new()
                .items(reference("DatasetTransform"))
                .max_items(Some(MAX_TRANSFORMS))
                .description(Some("Applied in order (default none).")),
        )
        .examples([serde_json::json!({
            "source": {"range": {"stop": 10}},
            "transforms": [{"batch": {"size": 4}}]
        })])
        .into()
    }
}

impl utoipa::ToSchema for DatasetDef {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.extend(components());
    }
}
