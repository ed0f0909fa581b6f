"""Listener limits on real sockets: connection caps, slowloris and idle deadlines, the receive budget.

The proxy runs in-process (trio, port 0) in front of the session's Tansu broker with small
limits; clients are raw sockets (tests/integration/proxy/kafka_wire.py). Every test ends by checking
that a well-behaved client is still served. Counters are read from the proxy's own
prometheus registry.
"""

from __future__ import annotations

import logging
import socket
import struct

import pytest
import trio
from kafka.protocol.metadata import ApiVersionsResponse
from prometheus_client import REGISTRY

from core.addresses import is_loopback
from proxy import limits
from tests.integration.proxy.kafka_wire import Wire, api_versions_request, assert_serves, produce_request, record_batch
from tests.integration.proxy.test_wire import start_proxy

pytestmark = [pytest.mark.integration, pytest.mark.trio]

MiB = 1024 * 1024


def limited(reason: str) -> float:
    return REGISTRY.get_sample_value("azsidecar_proxy_connections_limited_total", {"reason": reason}) or 0.0


def gauge(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def served(port: int, host: str = "127.0.0.1") -> Wire:
    """A connection that has had one ApiVersions answered (so the proxy counts it as open)."""
    wire = await Wire.connect(port, host)
    await wire.send(api_versions_request(7))
    await wire.read_response(ApiVersionsResponse, 3)
    return wire


async def until(condition, timeout_s: float = 5.0) -> None:
    """Wait (bounded) for an observable condition of the proxy; checks after every scheduler pass."""
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.01)  # polling a counter the proxy moves, within the bound above


async def test_connections_beyond_max_connections_are_closed_at_once_counted_and_logged_once(
        nursery, tansu, caplog):
    port = await start_proxy(nursery, tansu, max_connections=3)
    before = limited(limits.MAX_CONNECTIONS)
    held = [await served(port) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="proxy.server"):
        for _ in range(5):
            extra = await Wire.connect(port)
            await extra.expect_closed()  # accepted, then closed without a byte
            await extra.aclose()
    assert limited(limits.MAX_CONNECTIONS) == before + 5
    lines = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert lines == ["refused a connection from 127.0.0.1: max_connections"]  # once per source per minute
    await held.pop().aclose()
    # The freed place is taken again once the proxy has seen the close.
    await until(lambda: gauge("azsidecar_proxy_open_connections") <= 2)
    await assert_serves(port)
    for wire in held:
        await wire.aclose()


def non_loopback_address() -> str | None:
    """An address of this host that is not loopback (the route to a documentation address), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if is_loopback(address) or address == "0.0.0.0" else address


async def test_per_source_limit_applies_to_non_loopback_sources_only(nursery, tansu):
    address = non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to connect from")
    port = await start_proxy(nursery, tansu, listen_host="0.0.0.0", advertised_host="127.0.0.1",
                             insecure_listener=True, max_connections=20, max_connections_per_source=2)
    before = limited(limits.MAX_CONNECTIONS_PER_SOURCE)
    remote = [await served(port, address) for _ in range(2)]
    third = await Wire.connect(port, address)
    await third.expect_closed()
    assert limited(limits.MAX_CONNECTIONS_PER_SOURCE) == before + 1
    local = [await served(port) for _ in range(4)]  # loopback: only the total limit applies
    for wire in [*remote, *local, third]:
        await wire.aclose()


async def test_a_request_that_does_not_arrive_in_time_closes_the_connection(nursery, tansu):
    port = await start_proxy(nursery, tansu, request_receive_timeout_s=0.5)
    before = limited(limits.REQUEST_TIMEOUT)
    request = api_versions_request(1)
    stalled = await Wire.connect(port)
    # Before the send: the proxy (on this event loop) may read the bytes and start its deadline
    # before send() returns (a CI run measured 0.485 s from after it).
    started = trio.current_time()
    await stalled.send(request[:3])  # the start of a request, then nothing
    await stalled.expect_closed()
    assert 0.5 <= trio.current_time() - started < 5.0
    # A slowloris client keeps sending, one byte at a time: the deadline counts from its first byte.
    trickle = await Wire.connect(port)
    closed = trio.Event()

    async def drip() -> None:
        for byte in request:
            if closed.is_set():
                return
            try:
                await trickle.send(bytes([byte]))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            await trio.sleep(0.2)  # the attacker's pace (1 byte per 0.2 s): workload, not synchronization

    async with trio.open_nursery() as attack:
        attack.start_soon(drip)
        started = trio.current_time()
        await trickle.expect_closed()
        closed.set()
    assert 0.5 <= trio.current_time() - started < 5.0
    assert limited(limits.REQUEST_TIMEOUT) == before + 2
    await assert_serves(port)
    await stalled.aclose()
    await trickle.aclose()


async def test_an_idle_connection_is_closed_after_the_idle_timeout(nursery, tansu):
    port = await start_proxy(nursery, tansu, idle_timeout_s=0.5, request_receive_timeout_s=5.0)
    before = limited(limits.IDLE_TIMEOUT)
    # Timed from before the request: the proxy (on this event loop) starts its idle clock when
    # it has answered, which can be before served() returns (a CI run measured 0.49 s after it).
    asked = trio.current_time()
    wire = await served(port)
    await wire.expect_closed()
    assert 0.5 <= trio.current_time() - asked < 5.0
    assert limited(limits.IDLE_TIMEOUT) == before + 1
    await assert_serves(port)
    await wire.aclose()


async def test_the_receive_budget_stops_reading_instead_of_growing_and_recovers(nursery, tansu):
    # Budget 2 MiB for frames of at most 1 MiB; five clients each send 900 KiB of a 1 MiB
    # Produce request and then stop: the proxy must hold at most the budget, one read per
    # connection (256 KiB) and one request on the overdraft, and stop reading (the waits
    # counter moves). When they close, the overdraft passes from one to the next, so each
    # sees its close and frees its bytes long before the 30 s request deadline.
    port = await start_proxy(nursery, tansu, max_frame_bytes=1 * MiB, max_batch_bytes=1 * MiB,
                             max_receive_buffer_bytes=2 * MiB, request_receive_timeout_s=30.0)
    timeouts_before = limited(limits.REQUEST_TIMEOUT)
    waits_before = gauge("azsidecar_proxy_receive_budget_waits_total")
    frame = struct.pack(">i", MiB - 4) + b"\x00" * (MiB - 4)  # announced 1 MiB; its content never matters
    hostile = [await Wire.connect(port) for _ in range(5)]
    sent = [0] * len(hostile)

    async def push(i: int) -> None:
        while sent[i] < 900 * 1024:
            await hostile[i].send(frame[sent[i]: sent[i] + 64 * 1024])  # blocks once the proxy stops reading
            sent[i] += 64 * 1024

    async with trio.open_nursery() as senders:
        for i in range(len(hostile)):
            senders.start_soon(push, i)
        await until(lambda: gauge("azsidecar_proxy_receive_budget_waits_total") > waits_before, timeout_s=10)
        held = gauge("azsidecar_proxy_receive_buffered_bytes")
        # The budget, one 256 KiB read per connection, and one request on the overdraft (1 MiB).
        assert 1.5 * MiB <= held <= 2 * MiB + len(hostile) * 256 * 1024 + MiB, held
        senders.cancel_scope.cancel()
    # The rest waits in the kernel's buffers (TCP backpressure). `held` is not compared with
    # the bytes sent: it counts the room a large frame's buffer has grown to, not only bytes
    # arrived (proxy/receive_budget.py), and a CI run held 2.25 MiB when 1.75 MiB had been sent.
    for wire in hostile:
        await wire.aclose()
    await until(lambda: gauge("azsidecar_proxy_receive_buffered_bytes") == 0, timeout_s=10)
    assert limited(limits.REQUEST_TIMEOUT) == timeouts_before  # freed by the overdraft, not the deadline
    # A real 1 MiB-class request is served once the room is back.
    wire = await Wire.connect(port)
    await wire.send(produce_request(5, 9, 0, {("budget-topic", 0): record_batch([b"x" * 1000] * 500)}))
    await assert_serves(port)
    await wire.aclose()
