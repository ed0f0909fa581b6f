"""deploy/local/kafka_faults.py's own answers: a ProduceResponse aiokafka reads, refusing
every partition of the request; its refusal list parsed or refused with a clear message."""

from __future__ import annotations

import io

import pytest
from aiokafka.protocol.produce import ProduceResponse_v3, ProduceResponse_v7

from deploy.local.kafka_faults import parse_refusals, produce_topics, refusal_answer
from kafka_protocol.produce_codec import encode_produce_frame

NOT_ENOUGH_REPLICAS = 19


@pytest.mark.parametrize("version,response", [(3, ProduceResponse_v3), (7, ProduceResponse_v7)])
def test_the_refusal_answers_every_partition_with_the_code_and_the_requests_correlation_id(version, response):
    frame = encode_produce_frame(version, 4711, "agent", None, -1, 10_000,
                                 [("orders", [(0, b"batch-a"), (2, b"batch-b")]), ("audit", [(5, b"batch-c")])])
    body = frame[4:]  # the front reads frames without their size prefix
    assert produce_topics(body) == ["orders", "audit"]
    answer = refusal_answer(body, NOT_ENOUGH_REPLICAS)
    assert int.from_bytes(answer[:4], "big") == len(answer) - 4
    assert int.from_bytes(answer[4:8], "big") == 4711  # the correlation id
    decoded = response.decode(io.BytesIO(answer[8:]))
    assert [(topic, [(p[0], p[1], p[2]) for p in parts]) for topic, parts in decoded.topics] == [
        ("orders", [(0, NOT_ENOUGH_REPLICAS, -1), (2, NOT_ENOUGH_REPLICAS, -1)]),
        ("audit", [(5, NOT_ENOUGH_REPLICAS, -1)])]


def test_refusals_parse_and_bad_ones_say_what_is_wrong():
    assert parse_refusals("4:19, 9:10") == {4: 19, 9: 10}
    assert parse_refusals("") == {}
    for bad in ("4", "0:19", "x:19", "4:abc"):
        with pytest.raises(ValueError, match="is not N:CODE"):
            parse_refusals(bad)
