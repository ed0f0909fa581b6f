"""Produce answers that arrive by callback (the WAL path's `on_results`): request order kept,
a failure while answering closes only that connection (the response queue itself:
tests/unit/proxy/test_response_queue.py)."""

from __future__ import annotations

import pytest
import trio
from kafka.protocol.producer import ProduceResponse

from core.produce import PartitionResult
from kafka_upstream.config import UpstreamConfig
from proxy.config import ProxyConfig
from proxy.startup import run_proxy
from tests.integration.proxy.kafka_wire import Wire, assert_serves, produce_request, record_batch


class CallbackCompletion:
    """A completion that only calls back, answered when the test says so."""

    def __init__(self, items) -> None:
        self.items = items
        self.consumer = None

    def on_results(self, consumer) -> bool:
        self.consumer = consumer
        return True

    async def __call__(self):
        raise AssertionError("a completion that calls back is never awaited")

    def answer(self, base_offset) -> None:
        self.consumer({(it.topic, it.partition): PartitionResult(0, base_offset) for it in self.items})


class CallbackBackend:
    def __init__(self, expected: int) -> None:
        self.completions: list[CallbackCompletion] = []
        self.all_submitted = trio.Event()
        self.expected = expected

    async def submit(self, items, ctx):
        completion = CallbackCompletion(items)
        self.completions.append(completion)
        if len(self.completions) == self.expected:
            self.all_submitted.set()
        return completion


async def start_proxy(nursery, tansu, backend) -> int:
    async def factory(_cluster, _metadata):
        return backend

    _server, port = await nursery.start(run_proxy, ProxyConfig(listen_port=0),
                                        UpstreamConfig(bootstrap_servers=(tansu.bootstrap,)), factory)
    return port


def offsets(response) -> list[int]:
    return [p.base_offset for t in response.responses for p in t.partition_responses]


async def submitted(nursery, tansu, requests: int) -> tuple[CallbackBackend, Wire, int]:
    """A proxy on a CallbackBackend, `requests` Produce requests sent on one connection and
    submitted, none answered yet; returns (backend, connection, port)."""
    backend = CallbackBackend(expected=requests)
    port = await start_proxy(nursery, tansu, backend)
    wire = await Wire.connect(port)
    await wire.send(b"".join(produce_request(i, 9, -1, {("t", 0): record_batch([b"v"])})
                             for i in range(1, requests + 1)))
    with trio.fail_after(10):
        await backend.all_submitted.wait()
    return backend, wire, port


@pytest.mark.integration
@pytest.mark.trio
async def test_answers_by_callback_keep_request_order(nursery, tansu):
    backend, wire, _port = await submitted(nursery, tansu, 3)
    backend.completions[2].answer(30)  # the last request is answered first
    backend.completions[0].answer(10)  # the one the writer waits for: written through
    backend.completions[1].answer(20)
    answers = [await wire.read_response(ProduceResponse, 9) for _ in range(3)]
    assert [(correlation_id, offsets(r)) for correlation_id, r in answers] == [(1, [10]), (2, [20]), (3, [30])]
    await wire.aclose()


@pytest.mark.integration
@pytest.mark.trio
async def test_a_failure_while_answering_closes_only_that_connection(nursery, tansu):
    backend, wire, port = await submitted(nursery, tansu, 1)
    backend.completions[0].answer("not an offset")  # the answer cannot be encoded: our bug
    await wire.expect_closed()
    await assert_serves(port)
