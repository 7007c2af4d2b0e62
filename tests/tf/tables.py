"""A dataset that looks values up in a lookup table, read through the tf.data service.

    python tables.py SERVICE    maps range(5) through a tf.lookup.StaticHashTable (keys 0..4 ->
                                values 10..14), reads it with
                                distribute(processing_mode="parallel_epochs", service=SERVICE)
                                and prints `elements <JSON list>`; then registers the same dataset
                                with register_dataset and prints `dataset_id <id>`; then
                                registers its graph with the table op's use_node_name_sharing
                                set to false (over raw gRPC), reads it with from_dataset_id and
                                prints `unshared_elements <JSON list>` or
                                `unshared_error <message>`

The table's `HashTableV2` op is a node of the dataset's graph: a worker keeps the table only when
its `use_node_name_sharing` is true. TensorFlow 2.21's client already sets it when it serializes
the dataset; TensorFlow's dispatcher sets it again for every client (the second read shows why).
TensorFlow logs to stderr.
"""

import json
import sys

import tensorflow as tf

service = tf.data.experimental.service


def dataset():
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant([0, 1, 2, 3, 4], dtype=tf.int64),
            tf.constant([10, 11, 12, 13, 14], dtype=tf.int64),
        ),
        default_value=-1,
    )
    return tf.data.Dataset.range(5).map(table.lookup)


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _read_varint(data, i):
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _string_field_1(message):
    """Field 1 of a message whose only fields are length-delimited."""
    i = 0
    while i < len(message):
        key, i = _read_varint(message, i)
        assert key & 7 == 2, "wire type %d" % (key & 7)
        length, i = _read_varint(message, i)
        if key >> 3 == 1:
            return message[i : i + length]
        i += length
    raise KeyError(1)


def _len_field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def register_unshared(target, ds):
    """Registers `ds` with its table ops' use_node_name_sharing false; returns the id."""
    import grpc
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    graph.ParseFromString(
        ds._as_serialized_graph(
            external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL
        ).numpy()
    )
    tables = [n for n in graph.node if n.op.startswith(("HashTable", "MutableHashTable"))]
    assert tables, "no table op in the graph"
    for n in tables:
        n.attr["use_node_name_sharing"].b = False
    # GetOrRegisterDatasetRequest { DatasetDef dataset = 1 { GraphDef graph = 1 };
    # DataServiceMetadata metadata = 3 { compression = 2: COMPRESSION_OFF (1);
    # cardinality = 3: -2 (unknown) } }
    metadata = b"\x10\x01" + b"\x18" + _varint((1 << 64) - 2)
    request = _len_field(1, _len_field(1, graph.SerializeToString())) + _len_field(3, metadata)
    channel = grpc.insecure_channel(target.split("://", 1)[1])
    call = channel.unary_unary("/tensorflow.data.DispatcherService/GetOrRegisterDataset")
    # GetOrRegisterDatasetResponse { string dataset_id = 1 }
    return _string_field_1(call(request, timeout=60)).decode()


def main():
    target = sys.argv[1]
    distributed = dataset().apply(
        service.distribute(processing_mode="parallel_epochs", service=target)
    )
    elements = [int(x) for x in distributed.as_numpy_iterator()]
    print("elements", json.dumps(elements), flush=True)
    dataset_id = service.register_dataset(target, dataset()).numpy()
    print("dataset_id", dataset_id.decode(), flush=True)
    ds = dataset()
    unshared_id = register_unshared(target, ds)
    print("unshared_id", unshared_id, flush=True)
    try:
        read = service.from_dataset_id(
            processing_mode="parallel_epochs",
            service=target,
            dataset_id=unshared_id,
            element_spec=ds.element_spec,
        )
        elements = [int(x) for x in read.as_numpy_iterator()]
        print("unshared_elements", json.dumps(elements), flush=True)
    except tf.errors.OpError as e:
        print("unshared_error", " ".join(str(e).split()), flush=True)


if __name__ == "__main__":
    main()
