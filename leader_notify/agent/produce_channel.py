"""ProduceRequests written straight onto aiokafka's connection to a leader.

Why: per ProduceRequest, `client.send` -> `conn.send` cost the agent about as much CPU as
all its own bookkeeping: a `ready()` coroutine, the request built as aiokafka Structs
(`prepare`, a generic header encode), the message copied twice more (`header + body`,
`size + message`) and an `async_timeout` scope per request. With several agents per zone
each request carries few batches, so this fixed cost is paid more often per MiB.

What stays aiokafka's: connecting, TLS, SASL (MSK IAM included), the ApiVersions
negotiation, the reader task that matches answers to requests in order, and closing a
broken connection (its pending futures then fail with KafkaConnectionError). What this
module does instead of `conn.send`: it frames the request in one join
(kafka_protocol.produce.encode_produce_request), writes it, and puts (correlation id, answer reader,
future) in the connection's queue of requests exactly as `conn.send` does, so aiokafka's
reader resolves the future with `ProduceAnswer` (kafka_protocol.produce.decode_produce_response_body).

Private aiokafka names used (checked against 0.12-0.14): `AIOKafkaClient._conns`,
`AIOKafkaConnection._writer`, `._requests`, `._versions`, `._client_id`,
`._next_correlation_id()`, and the reader's use of `parse_response_header` and
`RESPONSE_TYPE.decode` on the queued entry. `channel_supported` checks them on each new
connection; where one is missing the appender sends through `client.send` as before.
tests/integration/leader_notify/test_appender.py runs this path against Tansu.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, RequestTimedOutError

from kafka_protocol.produce import API_PRODUCE as PRODUCE_API_KEY
from kafka_protocol.produce import (
    ProduceAnswer,
    TopicBatches,
    decode_produce_response_body,
    decode_response_header,
    encode_produce_request,
    produce_request,
)

# The highest ProduceRequest written here: its answer has response header v0 (v0-v8), as
# _QueuedProduce reads it; v7 is what the agent has always negotiated (no behaviour change).
MAX_RESPONSE_VERSION = 7

_CONNECTION_NAMES = ("_writer", "_requests", "_versions", "_client_id", "_next_correlation_id")


class _ResponseHeader(NamedTuple):
    correlation_id: int


class _AnswerDecoder:
    """What aiokafka's reader calls `RESPONSE_TYPE.decode` on: a ProduceResponse of `version`."""

    __slots__ = ("version",)

    def __init__(self, version: int) -> None:
        self.version = version

    def decode(self, data: Any) -> ProduceAnswer:  # a BytesIO after the response header
        return decode_produce_response_body(data.read(), self.version)


class _QueuedProduce:
    """Stands where `conn.send` queues the request struct: the reader asks it for the
    response header (v0 for every non-flexible version) and the response type."""

    __slots__ = ("RESPONSE_TYPE",)

    def __init__(self, version: int) -> None:
        self.RESPONSE_TYPE = _AnswerDecoder(version)

    @staticmethod
    def parse_response_header(data: Any) -> _ResponseHeader:
        return _ResponseHeader(decode_response_header(data.read(4)))


_QUEUED = {version: _QueuedProduce(version) for version in range(MAX_RESPONSE_VERSION + 1)}


async def leader_connection(client: AIOKafkaClient, node: int) -> AIOKafkaConnection:
    """aiokafka's connection to `node`, connecting if needed. Raises NodeNotReadyError."""
    if not await client.ready(node):
        raise NodeNotReadyError(f"node {node} is not ready")
    conn = client._conns.get((node, ConnectionGroup.DEFAULT))  # noqa: SLF001 - see the module doc
    if conn is None:
        raise NodeNotReadyError(f"node {node} has no connection")
    return conn


def channel_version(conn: AIOKafkaConnection) -> int | None:
    """The ProduceRequest version to write on `conn` (the highest both sides have, up to the
    last one decoded here), or None: send through client.send instead (aiokafka changed, or
    the broker's versions are unknown or all newer)."""
    if not all(hasattr(conn, name) for name in _CONNECTION_NAMES):
        return None
    versions = conn._versions  # noqa: SLF001
    if PRODUCE_API_KEY not in versions:
        return None
    low, high = versions[PRODUCE_API_KEY]
    version = min(high, MAX_RESPONSE_VERSION)
    return version if version >= low else None


def send_produce(conn: AIOKafkaConnection, version: int, required_acks: int, timeout_ms: int,
                 topics: TopicBatches) -> asyncio.Future[ProduceAnswer]:
    """Write one ProduceRequest on `conn`; the future resolves to its ProduceAnswer, or fails
    with KafkaConnectionError when the connection closes first. Raises KafkaConnectionError
    if the connection is closed or the write fails, and what encode_produce_request raises."""
    writer = conn._writer  # noqa: SLF001
    if writer is None:
        raise KafkaConnectionError(f"no connection to broker at {conn.host}:{conn.port}")
    correlation_id = conn._next_correlation_id()  # noqa: SLF001
    frame = encode_produce_request(produce_request(required_acks, timeout_ms, topics), version, correlation_id,
                                   conn._client_id)  # noqa: SLF001
    try:
        writer.write(frame)
    except OSError as exc:
        conn.close(reason=CloseReason.CONNECTION_BROKEN)
        raise KafkaConnectionError(f"connection to {conn.host}:{conn.port} broken: {exc}") from exc
    future: asyncio.Future[ProduceAnswer] = asyncio.get_running_loop().create_future()
    conn._requests.append((correlation_id, _QUEUED[version], future))  # noqa: SLF001
    return future


class AnswerDeadlines:
    """Bounds the wait for each channel request's answer without a timer per request.

    A timer handle per request (or aiokafka's async_timeout scope, which makes one) pushed
    and cancelled on the loop's heap thousands of times a second cost the agent ~8 % of its
    CPU per MiB in bench_agent_cpu.py at 2 partitions (4 alternating runs, under load). Here one timer, armed only while an
    answer is awaited, looks every `check_interval_s` for requests past their deadline:
    a request times out between `timeout_s` and `timeout_s + check_interval_s` after it was
    sent. A node has one to five requests in flight, so the scan covers a few entries.
    """

    def __init__(self, check_interval_s: float) -> None:
        self._check_interval_s = check_interval_s
        self._watched: dict[asyncio.Future[ProduceAnswer], tuple[AIOKafkaConnection, float]] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def answer(self, conn: AIOKafkaConnection, future: asyncio.Future[ProduceAnswer],
                     timeout_s: float) -> ProduceAnswer:
        """The request's answer. Raises RequestTimedOutError once `timeout_s` has passed
        (closing the connection, as aiokafka's client.send does, so the next request gets
        a new one), or KafkaConnectionError if the connection closed."""
        self.watch(conn, future, timeout_s)
        try:
            return await future
        finally:
            self._watched.pop(future, None)

    def watch(self, conn: AIOKafkaConnection, future: asyncio.Future[ProduceAnswer], timeout_s: float) -> None:
        """Start `future`'s deadline now (a request sent ahead of the answers before it is
        watched from its send, not from when its answer is awaited); a second call keeps
        the first deadline."""
        loop = asyncio.get_running_loop()
        self._watched.setdefault(future, (conn, loop.time() + timeout_s))
        if self._timer is None:
            self._timer = loop.call_later(self._check_interval_s, self._check)

    def forget(self, future: asyncio.Future[ProduceAnswer]) -> None:
        """Stop watching a request whose answer nobody will await (its sender stopped)."""
        self._watched.pop(future, None)

    @property
    def watched(self) -> int:
        return len(self._watched)

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for future, (conn, deadline) in list(self._watched.items()):
            if deadline <= now and not future.done():
                future.set_exception(RequestTimedOutError())
                conn.close(reason=CloseReason.CONNECTION_TIMEOUT)
        if any(not future.done() for future in self._watched):
            self._timer = loop.call_later(self._check_interval_s, self._check)
