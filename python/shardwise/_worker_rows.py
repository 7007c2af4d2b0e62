"""What a Python worker's ``fn`` yields, as the worker buffers and serves it
(:mod:`shardwise.worker`).

An output is one of two kinds, fixed per task by the first one ``fn`` yields:

* **values**: any JSON value (dicts, lists, strings, numbers, booleans, ``None``; NumPy
  scalars and arrays become numbers and nested lists, ``bytes`` base64 text, NaN and the
  infinities the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``). Each is one element,
  encoded to JSON once, when it is yielded, so that a value without a JSON form fails the task
  at once, naming its type. Served on the JSON route only: an Arrow read is a 406.
* **rows**: a ``pyarrow.RecordBatch``, a ``pyarrow.Table``, or a ``dict`` whose every value is
  a NumPy array with at least one dimension (the columns, rows along the first axis: a
  ``(n, 224, 224, 3)`` array is a column of ``n`` fixed-shape tensors). Each row is one
  element. Served as Arrow record batches (tensors with the canonical
  ``arrow.fixed_shape_tensor`` type, as ``shardwise worker`` serves declared tensors), or as
  JSON objects of their columns on the JSON route, in the forms ``docs/columnar.md`` gives.
  Every batch of a task has the same columns.

The buffer holds *items*: ``(payload, rows, weight)``, a payload being the JSON text of one
value (``bytes``) or a record batch; a read takes whole items and slices the last batch it
needs (zero-copy).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

#: How deep a yielded value may nest (lists and dicts).
MAX_DEPTH = 256

#: The schema metadata key of a stream's origin runs (``docs/columnar.md``).
ORIGIN_KEY = b"shardwise.origin"

_COMPACT = (",", ":")


class OutputError(Exception):
    """What ``fn`` yielded cannot be served: ``code`` and a text for the task's error."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


# -- values ------------------------------------------------------------------------------


def _numpy() -> Any:
    import numpy

    return numpy


def _default(value: Any) -> Any:
    """``json.dumps``'s hook for what it does not know: NumPy scalars and arrays, bytes."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":
        return value.tolist()
    raise TypeError(f"a value of type {type(value).__name__}, which has no JSON form")


def json_float(value: float) -> Any:
    """A float as the workers' JSON writes it: NaN and the infinities by name (JSON has none),
    any other float as it is."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` with every float JSON lacks as its name (the slow path of :func:`encode`)."""
    if depth > MAX_DEPTH:
        raise OutputError("INVALID_ARGUMENT", f"a value nests more than {MAX_DEPTH} levels deep")
    if isinstance(value, float):
        return json_float(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Mapping):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    try:
        converted = _default(value)
    except TypeError as e:
        raise OutputError("INVALID_ARGUMENT", str(e)) from None
    return _plain(converted, depth + 1)


#: The encoder of every value (one object: ``json.dumps`` with options makes one per call).
_ENCODER = json.JSONEncoder(
    default=_default, allow_nan=False, separators=_COMPACT, ensure_ascii=False
)


def encode(value: Any) -> bytes:
    """One JSON value as compact JSON text (UTF-8). :class:`OutputError` when it has none."""
    try:
        return _ENCODER.encode(value).encode()
    except (ValueError, RecursionError):
        pass  # NaN or an infinity somewhere, a cycle, or a deep value: the careful path
    except TypeError as e:
        raise OutputError("INVALID_ARGUMENT", f"fn yielded {e}") from None
    try:
        plain = _plain(value)
        return json.dumps(plain, allow_nan=False, separators=_COMPACT, ensure_ascii=False).encode()
    except OutputError as e:
        raise OutputError(e.code, f"fn yielded {e.detail}") from None
    except (ValueError, TypeError, RecursionError) as e:
        raise OutputError(
            "INVALID_ARGUMENT", f"fn yielded a value without a JSON form: {e}"
        ) from None


# -- rows ----------------------------------------------------------------------------------


def _columns_batch(columns: Mapping[Any, Any]) -> Any:
    """A dict of NumPy arrays (rows along the first axis) as a record batch."""
    import pyarrow as pa

    np = _numpy()
    names: list[str] = []
    arrays: list[Any] = []
    length: int | None = None
    for name, column in columns.items():
        if not isinstance(name, str):
            raise OutputError(
                "INVALID_ARGUMENT", f"a column name must be a string, not {name!r:.80}"
            )
        if column.ndim == 0:
            raise OutputError(
                "INVALID_ARGUMENT",
                f"column {name!r:.80} is a 0-dimensional array: the columns of a batch of rows "
                "have the rows along their first axis",
            )
        if length is None:
            length = len(column)
        elif len(column) != length:
            raise OutputError(
                "INVALID_ARGUMENT",
                f"the columns of a batch of rows have different lengths: {names[0]!r:.80} has "
                f"{length} rows, {name!r:.80} {len(column)}",
            )
        try:
            if column.ndim == 1:
                arrays.append(pa.array(column))
            else:
                arrays.append(
                    pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(column))
                )
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise OutputError(
                "INVALID_ARGUMENT", f"column {name!r:.80} is not an Arrow column: {e}"
            ) from None
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _is_columns(value: Any) -> bool:
    """A dict of NumPy arrays of at least one dimension (a batch of rows), not a JSON value."""
    if not isinstance(value, dict) or not value:
        return False
    ndarray = getattr(_numpy_if_loaded(), "ndarray", None)
    return ndarray is not None and all(
        isinstance(v, ndarray) and v.ndim >= 1 for v in value.values()
    )


def _numpy_if_loaded() -> Any:
    return sys.modules.get("numpy")


def classify(output: Any) -> tuple[str, list[Any]]:
    """``("values", [json bytes])`` or ``("rows", [record batches])`` for one yielded
    output. :class:`OutputError` when it cannot be served."""
    pa = _pyarrow_if_loaded()
    if pa is not None:
        if isinstance(output, pa.RecordBatch):
            return "rows", [output]
        if isinstance(output, pa.Table):
            return "rows", output.combine_chunks().to_batches() or []
    if _is_columns(output):
        return "rows", [_columns_batch(output)]
    return "values", [encode(output)]


def _pyarrow_if_loaded() -> Any:
    """pyarrow, if something imported it (an output can only be a batch if so)."""
    return sys.modules.get("pyarrow")


def schema_difference(first: Any, schema: Any) -> str | None:
    """Why ``schema`` differs from a task's first schema (``None``: the same columns)."""
    if first.equals(schema, check_metadata=False):
        return None
    for a, b in zip(first, schema):
        if not a.equals(b):
            return f"column {b.name!r:.80} is {b.type} there, {a.type} in the task's first batch"
    return f"it has the columns {schema.names!r:.300}, the task's first batch {first.names!r:.300}"


def weight(payload: Any) -> int:
    """What an item weighs in the buffer, in bytes (about)."""
    if isinstance(payload, bytes):
        return len(payload) + 64
    return int(payload.nbytes) + 64


def slice_item(payload: Any, offset: int, length: int) -> Any:
    """Rows ``[offset, offset + length)`` of a batch (zero-copy)."""
    return payload.slice(offset, length)


# -- serving -------------------------------------------------------------------------------


def no_json_form(schema: Any) -> str | None:
    """Why rows of ``schema`` cannot be served as JSON (a column without a JSON form), or
    ``None``."""
    import pyarrow as pa

    def ok(t: Any, depth: int) -> bool:
        if depth > 64:
            return False
        if isinstance(t, pa.BaseExtensionType):
            return ok(t.storage_type, depth + 1)
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return ok(t.value_type, depth + 1)
        if pa.types.is_struct(t):
            return all(ok(t.field(i).type, depth + 1) for i in range(t.num_fields))
        if pa.types.is_dictionary(t):
            return ok(t.value_type, depth + 1)
        return (
            pa.types.is_null(t)
            or pa.types.is_boolean(t)
            or pa.types.is_integer(t)
            or pa.types.is_floating(t)
            or pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t)
            or pa.types.is_date(t)
            or pa.types.is_timestamp(t)
            or pa.types.is_time(t)
            or pa.types.is_decimal(t)
        )

    for field in schema:
        if not ok(field.type, 0):
            return (
                f"column {field.name!r:.80} of type {field.type} has no JSON form; read it as Arrow"
            )
    names = schema.names
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        return (
            f"column {twice!r:.80} appears twice; one JSON object cannot hold both: read it as "
            "Arrow"
        )
    return None


def _row_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        text = value.replace(tzinfo=None).isoformat()
        return text + "Z" if value.tzinfo is not None else text
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return _default(value)


def _short_floats(array: Any) -> list[Any]:
    """A float16 or float32 NumPy array's values as the shortest decimals that read back to
    them (not those of the values widened to float64), nested to its shape."""
    np = _numpy()
    texts = np.asarray(array).astype(str)
    flat = [float(t) for t in texts.ravel().tolist()]
    return np.array(flat, dtype=np.float64).reshape(texts.shape).tolist()


def _timestamps(column: Any) -> list[Any]:
    """A timestamp column as text: ``YYYY-MM-DDTHH:MM:SS`` and as many fraction digits as its
    unit has, ``Z`` with a time zone."""
    import pyarrow as pa

    unit = column.type.unit
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]
    zone = "Z" if column.type.tz is not None else ""
    epoch = datetime.datetime(1970, 1, 1)
    out: list[Any] = []
    for v in column.cast(pa.int64()).to_pylist():
        if v is None:
            out.append(None)
            continue
        seconds, fraction = divmod(v, per_second)
        try:
            text = (epoch + datetime.timedelta(seconds=seconds)).isoformat()
        except OverflowError:
            out.append(str(v))
            continue
        out.append(f"{text}.{fraction:0{digits}d}{zone}" if digits else f"{text}{zone}")
    return out


def _column_values(column: Any) -> list[Any]:
    import pyarrow as pa

    t = column.type
    if isinstance(t, pa.FixedShapeTensorType):
        if column.null_count:
            return [None if v is None else v for v in column.to_pylist()]
        values = column.to_numpy_ndarray()
        if values.dtype.kind == "f" and values.dtype.itemsize < 8:
            return _short_floats(values)
        return values.tolist()
    if pa.types.is_timestamp(t):
        return _timestamps(column)
    if (pa.types.is_float32(t) or pa.types.is_float16(t)) and not column.null_count:
        return _short_floats(column.to_numpy(zero_copy_only=False))
    return column.to_pylist()


def rows_json(batch: Any) -> list[bytes]:
    """Each row of ``batch`` as the JSON text of an object of its columns."""
    names = batch.schema.names
    columns = [_column_values(batch.column(i)) for i in range(batch.num_columns)]
    out: list[bytes] = []
    for values in zip(*columns) if columns else [() for _ in range(batch.num_rows)]:
        row = dict(zip(names, values))
        try:
            text = json.dumps(
                row, default=_row_default, allow_nan=False, separators=_COMPACT, ensure_ascii=False
            )
        except ValueError:
            text = json.dumps(
                _plain_row(row), default=_row_default, separators=_COMPACT, ensure_ascii=False
            )
        out.append(text.encode())
    return out


def _plain_row(value: Any) -> Any:
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, dict):
        return {k: _plain_row(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_row(v) for v in value]
    return value


def arrow_stream(
    schema: Any, batches: list[Any], origin: list[Any] | None, compression: str | None
) -> bytes:
    """One whole Arrow IPC stream (schema, batches, end-of-stream marker), the origin runs in
    the schema's metadata when given, the batches compressed with ``compression``."""
    import pyarrow as pa

    if schema is None:
        schema = pa.schema([])
    metadata = dict(schema.metadata or {})
    metadata.pop(ORIGIN_KEY, None)
    if origin is not None:
        metadata[ORIGIN_KEY] = json.dumps(origin, separators=_COMPACT).encode()
    schema = schema.with_metadata(metadata)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, schema, options=options) as writer:
        for b in batches:
            writer.write_batch(b)
    return sink.getvalue().to_pybytes()
