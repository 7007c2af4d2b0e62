"""The benchmark's data: two Parquet datasets written as a user writes them, and the same rows
as TFRecord files of `tf.train.Example`s for TensorFlow's service.

* `images`: `image`, float32 tensors of shape 224x224x3 (pyarrow's FixedShapeTensor, 602,112
  bytes a row), and `label`, int64. Row groups of 64 rows (about 38.5 MB).
* `tokens`: `tokens`, int32 token ids, 2048 a row (a FixedShapeTensor of shape [2048], 8 KiB a
  row), and `doc_id`, int64. Row groups of 4096 rows (32 MiB).

Both are split over 4 files, with pyarrow's defaults otherwise: Snappy compression and
dictionary encoding. Tensor values are uniform random numbers (pixels after normalization; token
ids below 50,257): the pixels have too many distinct values for a dictionary (plain pages after
the first), the token ids fit one (16-bit indices: the files are half the raw size), and Snappy
saves nothing more on either. The second
column of each row is its index over the whole dataset, so a reader can check that every row
arrived exactly once (the sum of the column).

The TFRecord copy holds one `tf.train.Example` per row: the tensor's raw little-endian bytes as a
`bytes_list` feature under the tensor's name and the index as an `int64_list` feature. This is
what a TensorFlow user who keeps fixed-shape tensors in TFRecord files writes, and the reader
decodes it with `tf.io.parse_example` and `tf.io.decode_raw` (see `contenders.tf_dataset`).
"""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILES = 4
MANIFEST = "manifest.json"


class Spec:
    """A dataset's shape: its tensor column, its index column and its row groups."""

    def __init__(self, name, tensor, dtype, shape, key, group_rows, raw=False, base=None):
        self.name, self.tensor, self.dtype, self.shape = name, tensor, np.dtype(dtype), tuple(shape)
        self.key, self.group_rows = key, group_rows
        # `raw`: the tensor stored as its bytes (a fixed-size binary column) instead of a
        # fixed-shape tensor (a list column); `base`: the dataset whose options and TensorFlow
        # row it shares (TensorFlow's TFRecords hold raw bytes either way).
        self.raw, self.base = raw, base or name
        self.values = int(np.prod(self.shape))
        # What one row delivers: its tensor and its int64 index.
        self.row_bytes = self.values * self.dtype.itemsize + 8

    def rows_for(self, gb):
        return max(FILES, int(round(gb * 1e9 / self.row_bytes)))

    def declaration(self):
        """The `tensors` entry of a Shardwise dataset definition."""
        return {"name": self.tensor, "dtype": self.dtype.name, "shape": list(self.shape)}


IMAGES = Spec("images", "image", "float32", (224, 224, 3), "label", 64)
IMAGE_BYTES = Spec(
    "image bytes", "image", "float32", (224, 224, 3), "label", 64, raw=True, base="images"
)
TOKENS = Spec("tokens", "tokens", "int32", (2048,), "doc_id", 4096)
SPECS = {s.name: s for s in (IMAGES, IMAGE_BYTES, TOKENS)}
#: The datasets the per-dataset options count for.
BASES = ("images", "tokens")


def generate_values(spec, rng, n):
    if spec.dtype == np.float32:
        return rng.random((n,) + spec.shape, dtype=np.float32)
    return rng.integers(0, 50_257, size=(n,) + spec.shape, dtype=spec.dtype)


def write_parquet(spec, directory, rows, seed):
    """Writes `rows` rows of `spec` over FILES Parquet files; returns their paths."""
    rng = np.random.default_rng(seed)
    paths, first = [], 0
    for f in range(FILES):
        n_file = rows // FILES + (1 if f < rows % FILES else 0)
        path = os.path.join(directory, f"{spec.name.replace(' ', '-')}-{f}.parquet")
        writer = None
        done = 0
        while done < n_file:
            n = min(spec.group_rows, n_file - done)
            values = generate_values(spec, rng, n)
            if spec.raw:
                width = spec.values * spec.dtype.itemsize
                tensor = pa.FixedSizeBinaryArray.from_buffers(
                    pa.binary(width), n, [None, pa.py_buffer(values.tobytes())]
                )
            else:
                tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(values)
            keys = pa.array(np.arange(first + done, first + done + n, dtype=np.int64))
            table = pa.table({spec.tensor: tensor, spec.key: keys})
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)  # Snappy, pyarrow's default
            writer.write_table(table, row_group_size=spec.group_rows)
            done += n
        if writer is not None:
            writer.close()
        paths.append(path)
        first += n_file
    return paths


def prepare(directory, gb_images, gb_tokens):
    """The datasets under `directory`, written unless a manifest of the same sizes is there.
    Returns {name: {"paths": [...], "tfrecords": [...], "rows": n}}."""
    want = {
        "images": IMAGES.rows_for(gb_images),
        "image bytes": IMAGE_BYTES.rows_for(gb_images),
        "tokens": TOKENS.rows_for(gb_tokens),
    }
    manifest_path = os.path.join(directory, MANIFEST)
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if {k: v["rows"] for k, v in manifest.items()} == want and all(
            os.path.exists(p) for v in manifest.values() for p in v["paths"]
        ):
            return manifest
    # Only this module's own file names: stale TFRecords of other sizes go.
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    for name in want:
        for f in range(FILES):
            for ext in (".tfrecord", ".tfrecord.part"):
                stale = os.path.join(directory, f"{name}-{f}{ext}")
                if os.path.exists(stale):
                    os.remove(stale)
    manifest = {}
    for seed, (name, rows) in enumerate(want.items()):
        spec = SPECS[name]
        paths = write_parquet(spec, directory, rows, seed)
        tfrecords = [] if spec.raw else [p[: -len(".parquet")] + ".tfrecord" for p in paths]
        manifest[name] = {"paths": paths, "tfrecords": tfrecords, "rows": rows}
    return manifest


def save_manifest(directory, manifest):
    with open(os.path.join(directory, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)


def write_tfrecords(manifest_path):
    """Role `tf-write MANIFEST`: each Parquet file of the manifest as a TFRecord file of
    `tf.train.Example`s (run in its own process: only it and the TensorFlow roles import
    TensorFlow)."""
    import tensorflow as tf

    with open(manifest_path) as f:
        manifest = json.load(f)
    for name, entry in manifest.items():
        spec = SPECS[name]
        for src, dst in zip(entry["paths"], entry["tfrecords"]):
            if os.path.exists(dst):
                continue
            with tf.io.TFRecordWriter(dst + ".part") as writer:
                for batch in pq.ParquetFile(src).iter_batches(batch_size=spec.group_rows):
                    values = batch.column(spec.tensor).to_numpy_ndarray()
                    keys = batch.column(spec.key).to_numpy()
                    for value, key in zip(values, keys):
                        feature = {
                            spec.tensor: tf.train.Feature(
                                bytes_list=tf.train.BytesList(value=[value.tobytes()])
                            ),
                            spec.key: tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[int(key)])
                            ),
                        }
                        example = tf.train.Example(features=tf.train.Features(feature=feature))
                        writer.write(example.SerializeToString())
            os.replace(dst + ".part", dst)


def has_tfrecords(manifest):
    return all(os.path.exists(p) for v in manifest.values() for p in v["tfrecords"])
