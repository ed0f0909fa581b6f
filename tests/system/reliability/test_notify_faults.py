"""deploy/local/notify_faults.py: frame splitting, rates, and each fault on a real loopback link."""

from __future__ import annotations

import functools
import struct

import pytest
import trio

from deploy.local.notify_faults import FrameSplitter, NotifyFaultRates, serve

pytestmark = pytest.mark.timeout(30)


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_splitter_returns_whole_frames_across_arbitrary_cuts():
    stream = frame(b"abc") + frame(b"") + frame(b"x" * 70_000)
    for cut in (1, 3, 4, 5, 9, 1000):
        splitter = FrameSplitter()
        out = []
        for i in range(0, len(stream), cut):
            out += splitter.feed(stream[i:i + cut])
        assert out == [frame(b"abc"), frame(b""), frame(b"x" * 70_000)]


def test_splitter_refuses_a_huge_length():
    with pytest.raises(ValueError, match="frame length 4294967295"):
        FrameSplitter().feed(b"\xff\xff\xff\xff")


@pytest.mark.parametrize("rates", [dict(rate_drop_request=0.6, rate_drop_response=0.6), dict(rate_delay=-0.1),
                                   dict(delay_s=-1.0)])
def test_rates_are_validated(rates):
    with pytest.raises(ValueError):
        NotifyFaultRates(**rates)


async def run_link(rates: NotifyFaultRates, requests: list[bytes]) -> tuple[list[bytes], bytes]:
    received: list[bytes] = []

    async def agent(stream: trio.SocketStream) -> None:
        splitter = FrameSplitter()
        async with stream:
            async for data in stream:
                for f in splitter.feed(data):
                    received.append(f)
                    await stream.send_all(frame(b"re:" + f[4:]))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, agent, 0, host="127.0.0.1"))
        upstream = listeners[0].socket.getsockname()[:2]
        (listen,) = await nursery.start(serve, [(("127.0.0.1", 0), upstream)], rates, 1)
        client = await trio.open_tcp_stream(*listen)
        got = bytearray()
        try:
            for body in requests:
                await client.send_all(frame(body))
            await client.send_eof()  # the injector passes the EOF on; the agent then closes
            async for data in client:
                got += data
        except trio.BrokenResourceError:
            got += b"<reset>"
        await client.aclose()
        nursery.cancel_scope.cancel()
    return received, bytes(got)


def test_pass_forwards_both_ways():
    received, got = trio.run(run_link, NotifyFaultRates(), [b"one", b"two"])
    assert received == [frame(b"one"), frame(b"two")]
    assert got == frame(b"re:one") + frame(b"re:two")


def test_drop_request_never_reaches_the_agent():
    received, got = trio.run(run_link, NotifyFaultRates(rate_drop_request=1.0), [b"one", b"two"])
    assert (received, got) == ([], b"")


def test_drop_response_reaches_the_agent_but_not_the_client():
    received, got = trio.run(run_link, NotifyFaultRates(rate_drop_response=1.0), [b"one", b"two"])
    assert (received, got) == ([frame(b"one"), frame(b"two")], b"")


def test_delay_passes_the_request_late():
    received, got = trio.run(run_link, NotifyFaultRates(rate_delay=1.0, delay_s=0.05), [b"one"])
    assert (received, got) == ([frame(b"one")], frame(b"re:one"))


def test_reset_cuts_the_connection_before_the_agent_sees_anything():
    received, got = trio.run(run_link, NotifyFaultRates(rate_reset=1.0), [b"one"])
    assert received == [] and got in (b"", b"<reset>")
