"""The agent's aiokafka adapter: RawProduceRequest builds the struct aiokafka negotiates, its
encode() writes aiokafka's own bytes through kafka_protocol.produce, and its RESPONSE_TYPE
reads aiokafka's answer bytes into a ProduceAnswer, for every version aiokafka has."""

from __future__ import annotations

import io

import pytest
from aiokafka.protocol.produce import ProduceRequest

from kafka_protocol.produce import PartitionAnswer, ProduceAnswer
from leader_notify.agent.produce_request import RawProduceRequest

# Two topics, the first with two partitions (one batch a memoryview slice), the second an empty batch.
TOPICS = [("t", [(0, b"abc"), (3, memoryview(b"-xyz")[1:])]), ("uu", [(1, b"")])]
AS_BYTES = [(t, [(q, bytes(b)) for q, b in parts]) for t, parts in TOPICS]


@pytest.mark.parametrize("struct_class", ProduceRequest._CLASSES, ids=lambda c: c.__name__)
def test_same_bytes_as_aiokafka(struct_class):
    ours = RawProduceRequest(None, -1, 1000, TOPICS).build(struct_class)
    theirs = ProduceRequest(None, -1, 1000, AS_BYTES).build(struct_class)
    assert isinstance(ours, struct_class)
    assert ours.encode() == theirs.encode()
    header = ours.build_request_header(correlation_id=7, client_id="c").encode()
    assert header == theirs.build_request_header(correlation_id=7, client_id="c").encode()


@pytest.mark.parametrize("struct_class", ProduceRequest._CLASSES, ids=lambda c: c.__name__)
def test_answer_as_aiokafka_encodes_it(struct_class):
    version = struct_class.API_VERSION
    # "t": p0 no error at offset 5, p3 NOT_LEADER_OR_FOLLOWER (6); "uu": p1 at offset 9; append time -1, log start 7.
    extra = (-1,) * (version >= 2) + (7,) * (version >= 5)
    topics = [("t", [(0, 0, 5, *extra), (3, 6, -1, *extra)]), ("uu", [(1, 0, 9, *extra)])]
    encoded = struct_class.RESPONSE_TYPE(topics, 100).encode() if version else struct_class.RESPONSE_TYPE(topics).encode()
    built = RawProduceRequest(None, -1, 1000, TOPICS).build(struct_class)
    start = 7 if version >= 5 else -1
    assert type(built).RESPONSE_TYPE.decode(io.BytesIO(encoded)) == ProduceAnswer((  # as the connection calls it
        PartitionAnswer("t", 0, 0, 5, -1, start), PartitionAnswer("t", 3, 6, -1, -1, start),
        PartitionAnswer("uu", 1, 0, 9, -1, start)), 100 if version else 0)
