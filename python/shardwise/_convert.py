"""Arrow record batches as NumPy: zero-copy where Arrow's layout allows it."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List

import numpy as np
import pyarrow as pa

__all__ = ["record_batch_columns", "rows_of"]


def _column(array: pa.Array) -> Any:
    """One column as NumPy: fixed-shape tensors as ``(rows, *shape)`` arrays, fixed-size lists
    as ``(rows, size)`` arrays and fixed-width columns as 1-d arrays, all views of the Arrow
    buffer when the column has no nulls; anything else as a list of Python values."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.fixed_shape_tensor":
        if array.null_count == 0:
            return array.to_numpy_ndarray()
        array = array.storage
        kind = array.type
    if isinstance(kind, pa.BaseExtensionType):
        array = array.storage
        kind = array.type
    if pa.types.is_fixed_size_list(kind) and array.null_count == 0:
        values = array.flatten()
        if values.null_count == 0 and (
            pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
        ):
            return values.to_numpy(zero_copy_only=False).reshape(len(array), kind.list_size)
    if (
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    ) and array.null_count == 0:
        return array.to_numpy(zero_copy_only=False)
    return array.to_pylist()


def record_batch_columns(batch: pa.RecordBatch) -> Dict[str, Any]:
    """The columns of ``batch`` by name, each as :func:`_column` makes it."""
    return {name: _column(batch.column(i)) for i, name in enumerate(batch.schema.names)}


def rows_of(columns: Dict[str, Any], num_rows: int) -> Iterator[Dict[str, Any]]:
    """The rows of ``columns`` one by one, each a dict of its values (NumPy scalars or
    sub-arrays, views of the columns)."""
    names: List[str] = list(columns)
    for i in range(num_rows):
        yield {name: columns[name][i] for name in names}
