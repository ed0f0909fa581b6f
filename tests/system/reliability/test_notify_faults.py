"""deploy/local/notify_faults.py: frame splitting, rates, and each fault on a real loopback link."""

from __future__ import annotations

import functools
import json
import os
import signal
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


async def _timed_link(rates: NotifyFaultRates, rounds: list[list[bytes]], stats_path=None, between=None,
                      start_healthy: bool = False, wait_s: float = 5.0) -> list[tuple[list[bytes], float]]:
    """Send each round's frames back to back through the injector and wait for all their
    answers (at most `wait_s`); per round: the answers and the seconds from the first send to the
    last answer. `between(i)` runs before round i > 0 (e.g. a signal and a wait for it)."""
    out = []

    async def agent(stream: trio.SocketStream) -> None:
        splitter = FrameSplitter()
        async with stream:
            async for data in stream:
                for f in splitter.feed(data):
                    await stream.send_all(frame(b"re:" + f[4:]))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, agent, 0, host="127.0.0.1"))
        upstream = listeners[0].socket.getsockname()[:2]
        (listen,) = await nursery.start(functools.partial(serve, [(("127.0.0.1", 0), upstream)], rates, 1,
                                                          stats_path, start_healthy=start_healthy))
        client = await trio.open_tcp_stream(*listen)
        splitter = FrameSplitter()
        for i, bodies in enumerate(rounds):
            if i and between is not None:
                await between(i)
            started = trio.current_time()
            await client.send_all(b"".join(frame(b) for b in bodies))
            answers: list[bytes] = []
            with trio.move_on_after(wait_s):
                async for data in client:
                    answers += splitter.feed(data)
                    if len(answers) == len(bodies):
                        break
            out.append((answers, trio.current_time() - started))
        await client.aclose()
        nursery.cancel_scope.cancel()
    return out


def test_latency_holds_every_frame_each_way_without_queueing_them_behind_each_other():
    # 150 ms each way: a round trip takes 300 ms or more, and three frames sent back to back
    # are answered together (about 300 ms), not one after another (900 ms).
    ((answers, took),) = trio.run(_timed_link, NotifyFaultRates(latency_s=0.15), [[b"a", b"b", b"c"]])
    assert answers == [frame(b"re:a"), frame(b"re:b"), frame(b"re:c")]
    assert 0.3 <= took < 0.6, took


def test_a_link_degraded_by_sigusr1_and_restored_by_sigusr2(tmp_path):
    # Start healthy with every request dropped while degraded: the first round passes, the
    # second (after SIGUSR1) gets nothing, the third (after SIGUSR2) passes again.
    stats = tmp_path / "stats.json"

    async def between(i: int) -> None:
        os.kill(os.getpid(), signal.SIGUSR1 if i == 1 else signal.SIGUSR2)
        key = "degraded" if i == 1 else "restored"
        with trio.fail_after(5):
            while key not in (stats.read_text() if stats.exists() else ""):
                await trio.sleep(0.05)  # polling the injector's stats file (rewritten every second)

    rounds = trio.run(_timed_link, NotifyFaultRates(rate_drop_request=1.0), [[b"1"], [b"2"], [b"3"]], stats,
                      between, True, 1.0)  # an answer on loopback comes in ms: none within 1 s is none
    assert [answers for answers, _took in rounds] == [[frame(b"re:1")], [], [frame(b"re:3")]]
    assert json.loads(stats.read_text())["drop_request"] == 1
