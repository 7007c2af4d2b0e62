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

use super::def::DatasetDef;
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
            closed("The files of a `files` source and how they are decoded.")
                .property(
                    "paths",
                    ArrayBuilder::new()
                        .items(ObjectBuilder::new().schema_type(Type::String))
                        .description(Some(
                            "The files, in order (one split each under DYNAMIC sharding).",
                        )),
                )
                .required("paths")
                .property("format", reference("FileFormat"))
                .required("format")
                .into(),
        ),
        (
            "FileFormat",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["lines", "jsonl", "bytes"]))
                .description(Some(
                    "How a file's bytes become elements. `lines`: one string per line, without \
                     the line break; `jsonl`: one JSON value per non-blank line; `bytes`: the \
                     whole file as one base64 string (RFC 4648 standard alphabet, padded), for \
                     text and binary files alike.",
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
