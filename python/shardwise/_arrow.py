"""Element reads as Arrow IPC streams (``docs/columnar.md``): the media type, the request
headers, and the decoding of an answer into record batches, its end-of-sequence flag and its
origin runs.

A worker answers ``Accept: application/vnd.apache.arrow.stream`` with one whole IPC stream per
read: the schema (whose metadata key ``shardwise.origin`` holds the rows' origin runs as JSON,
when the read has positions), the record batches, the end-of-stream marker; the response header
``shardwise-end-of-sequence`` says whether the task is over. Decoding is pyarrow's (C++). The
stream must be whole: every message complete and the end-of-stream marker last, with nothing
after it (the format makes the marker optional, but a worker always writes it: without it, a
body cut between two messages would pass for a shorter read).

pyarrow is imported on the first Arrow read, so that ``import shardwise`` stays light.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import ShardwiseError

#: The media type of an Arrow IPC stream.
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: The request header asking for compressed record batches (``lz4`` or ``zstd``).
COMPRESSION_HEADER = "shardwise-arrow-compression"
#: The response header saying whether the task is over (``true`` or ``false``).
END_OF_SEQUENCE_HEADER = "shardwise-end-of-sequence"
#: The schema metadata key of a stream's origin runs.
ORIGIN_KEY = b"shardwise.origin"
#: The most bytes an Arrow answer may have (4 GiB, as the Rust client).
MAX_ARROW_BODY = 4 << 30
#: The codecs a reader may ask for.
COMPRESSIONS = ("lz4", "zstd")

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_LEGACY_EOS = b"\x00\x00\x00\x00"
_MAX_QUOTED = 100


def request_headers(compression: str | None) -> Mapping[str, str]:
    """The headers of an Arrow read, compressed with ``compression`` if given."""
    headers = {"accept": ARROW_STREAM}
    if compression is not None:
        headers[COMPRESSION_HEADER] = compression
    return headers


def decode_read(
    headers: Mapping[str, str], body: bytes, context: str
) -> tuple[list[Any], int, bool, Any | None]:
    """An Arrow read's answer (``headers`` with lower-case names): its record batches with
    rows (their schema without the origin key), their rows, the task's end, and the origin
    runs' JSON (``None`` without). A protocol error when it is not a whole Arrow stream with
    its end-of-sequence header."""
    content_type = headers.get("content-type")
    media = (content_type or "").split(";")[0].strip().lower()
    if media != ARROW_STREAM:
        got = repr(content_type[:_MAX_QUOTED]) if content_type is not None else "none"
        raise ShardwiseError.protocol(
            f"expected an Arrow IPC stream ({ARROW_STREAM}), got the content type {got}",
            context=context,
        )
    end_text = headers.get(END_OF_SEQUENCE_HEADER)
    if end_text is None:
        raise ShardwiseError.protocol(f"no {END_OF_SEQUENCE_HEADER} header", context=context)
    end_value = end_text.strip().lower()
    if end_value not in ("true", "false"):
        raise ShardwiseError.protocol(
            f"the {END_OF_SEQUENCE_HEADER} header is {end_text[:_MAX_QUOTED]!r}, not true or false",
            context=context,
        )
    import pyarrow as pa

    try:
        _check_framing(pa, body)
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        schema = reader.schema
        batches = [b for b in reader if b.num_rows > 0]
    except ShardwiseError as e:
        raise e.with_context(context) from None
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ShardwiseError.protocol(
            f"not a valid Arrow IPC stream: {e}", context=context
        ) from None
    metadata = dict(schema.metadata or {})
    origin = None
    if ORIGIN_KEY in metadata:
        try:
            origin = json.loads(metadata.pop(ORIGIN_KEY))
        except (ValueError, RecursionError) as e:
            raise ShardwiseError.protocol(
                f"the stream's schema metadata {ORIGIN_KEY.decode()!r} is not JSON: {e}",
                context=context,
            ) from None
        batches = [b.replace_schema_metadata(metadata or None) for b in batches]
    rows = sum(b.num_rows for b in batches)
    return batches, rows, end_value == "true", origin


def _check_framing(pa: Any, body: bytes) -> None:
    """Every message of the stream whole, then its end-of-stream marker and nothing else."""
    source = pa.BufferReader(pa.py_buffer(body))
    messages = pa.ipc.MessageReader.open_stream(source)
    after_last = 0
    while True:
        try:
            message = messages.read_next_message()
        except StopIteration:
            break
        if message is None:
            break
        after_last = source.tell()
    rest = body[after_last:]
    if rest in (_EOS, _LEGACY_EOS):
        return
    if not rest:
        raise ShardwiseError.protocol("the stream ends without its end-of-stream marker")
    if rest.startswith(_EOS) or rest.startswith(_LEGACY_EOS):
        raise ShardwiseError.protocol("bytes follow the end-of-stream marker")
    raise ShardwiseError.protocol("not a valid Arrow IPC stream: a malformed message")
