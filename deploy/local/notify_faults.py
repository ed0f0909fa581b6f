"""A TCP proxy between proxies and agents that drops, delays or resets notifications.

The cross-zone link between a proxy's NotifySender and another zone's agent carries
length-prefixed frames (docs/notify-protocol.md: `u32 length | body`); the sender keeps one
request in flight per connection and the agent answers it with one response frame. This
proxy splits both directions into frames (it does not need the HMAC key: it never reads
inside a frame) and draws one fault per request frame:

- `drop_request`: swallow the request; the sender times out, closes the connection and
  re-sends on a new one (the agent never saw it);
- `drop_response`: pass the request on, swallow the agent's answer; the agent has appended,
  the sender times out and re-sends: the agent's applied map and the leaders' idempotence
  must turn the re-send into the same answer, never a second append;
- `delay`: hold the request `delay_s` before passing it on (longer than the sender's
  timeout: a late request that arrives after the sender gave up on that connection);
- `reset`: close both connections, the client's with an RST;
- otherwise pass it on.

A degraded link (`latency_s`): every frame, both ways, is passed on that long after it
arrived, in order (a slow inter-zone path rather than a failing one; frames do not queue
behind each other's wait). Faults and latency apply while the link is degraded: from the
start, or from SIGUSR1 with `--start-healthy`; SIGUSR2 restores it (nothing injected
from then on) and SIGUSR1 degrades it again, so a run can show the link going bad and
coming back (the kernel here has no netem).

Counts of every outcome go to `--stats` (JSON) once a second and at exit.

Run: `python -m deploy.local.notify_faults --route 127.0.0.1:7001=127.0.0.1:7101 [--route ...]
--rate-drop-request 0.05 --rate-drop-response 0.05 --rate-delay 0.05 --delay-s 3 --rate-reset 0.02
--stats faults.json`; it prints `listening=HOST:PORT` for each route once ready.
"""

from __future__ import annotations

import argparse
import functools
import random
import signal
import struct
import sys
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from deploy.local.fault_common import hostport, keep_writing_counts, until_sigint_or_sigterm
from deploy.local.s3_faults import rst_on_close

FAULTS = ("drop_request", "drop_response", "delay", "reset")
MAX_FRAME_BYTES = 64 * 1024 * 1024  # far above the protocol's own limit; beyond it the connection is cut
_LEN = struct.Struct(">I")


@dataclass(frozen=True)
class NotifyFaultRates:
    """Probability of each fault per request frame (their sum must be <= 1)."""

    rate_drop_request: float = 0.0
    rate_drop_response: float = 0.0
    rate_delay: float = 0.0
    rate_reset: float = 0.0
    delay_s: float = 3.0
    latency_s: float = 0.0  # added to every frame, each way (a slow link), while degraded

    def __post_init__(self) -> None:
        rates = self._rates()
        if any(r < 0 for r in rates) or sum(rates) > 1:
            raise ValueError(f"fault rates must be >= 0 and sum to <= 1, got {rates}")
        if self.delay_s < 0 or self.latency_s < 0:
            raise ValueError("delay_s and latency_s must be >= 0")

    def _rates(self) -> tuple[float, ...]:
        return (self.rate_drop_request, self.rate_drop_response, self.rate_delay, self.rate_reset)

    def draw(self, rng: random.Random) -> str:
        """One outcome: a name from FAULTS or "pass"."""
        x = rng.random()
        for name, rate in zip(FAULTS, self._rates(), strict=True):
            if x < rate:
                return name
            x -= rate
        return "pass"


class FrameSplitter:
    """Sans-IO: bytes in, whole frames (prefix included) out. Raises ValueError on a huge length."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        self._buf += data
        frames = []
        while len(self._buf) >= _LEN.size:
            (length,) = _LEN.unpack_from(self._buf)
            if length > MAX_FRAME_BYTES:
                raise ValueError(f"frame length {length} over {MAX_FRAME_BYTES}")
            end = _LEN.size + length
            if len(self._buf) < end:
                break
            frames.append(bytes(self._buf[:end]))
            del self._buf[:end]
        return frames


MAX_FRAMES_IN_FLIGHT = 1024  # per direction of a connection, waiting out the latency; beyond it reading waits


class _Injector:
    def __init__(self, rates: NotifyFaultRates, seed: int | None, degraded: bool = True) -> None:
        self.rates = rates
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.degraded = degraded  # faults and latency apply (SIGUSR1 on, SIGUSR2 off)

    def _draw(self) -> str:
        return self.rates.draw(self.rng) if self.degraded else "pass"

    async def _send_later(self, frames: trio.MemoryReceiveChannel[tuple[float, bytes]], dst: trio.SocketStream) -> None:
        """Pass each (due, frame) on at its due time, in order."""
        async for due, frame in frames:
            await trio.sleep_until(due)  # the link's latency
            await dst.send_all(frame)

    async def handle(self, client: trio.SocketStream, upstream: tuple[str, int]) -> None:
        try:
            server = await trio.open_tcp_stream(*upstream)
        except OSError:
            rst_on_close(client)
            await client.aclose()  # like an unreachable agent: the sender sees a reset
            return
        drop_answer: deque[bool] = deque()  # per request passed on, in order: swallow its response?
        try:
            async with server, client, trio.open_nursery() as nursery:
                nursery.start_soon(self._requests, client, server, drop_answer, nursery.cancel_scope)
                nursery.start_soon(self._responses, server, client, drop_answer)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError):
            pass  # either side went away or sent garbage: this connection ends, serving goes on

    def _due(self) -> float:
        return trio.current_time() + (self.rates.latency_s if self.degraded else 0.0)

    async def _pass_frames(self, src: trio.SocketStream, dst: trio.SocketStream,
                           keep: Callable[[bytes], Awaitable[bool]]) -> None:
        """Frames from src to dst, those `keep` lets through (it may stall), each passed on
        after the link's latency, in order; returns at src's end, once they are all sent."""
        splitter = FrameSplitter()
        later_in, later_out = trio.open_memory_channel[tuple[float, bytes]](MAX_FRAMES_IN_FLIGHT)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_later, later_out, dst)
            async with later_in:
                async for data in src:
                    for frame in splitter.feed(data):
                        if await keep(frame):
                            await later_in.send((self._due(), frame))

    async def _requests(self, src: trio.SocketStream, dst: trio.SocketStream, drop_answer: deque[bool],
                        scope: trio.CancelScope) -> None:
        async def keep(_frame: bytes) -> bool:
            fault = self._draw()
            self.counts[fault] += 1
            self.counts["requests"] += 1
            if fault == "reset":
                rst_on_close(src)
                scope.cancel()
                await trio.lowlevel.checkpoint()  # raises Cancelled: nothing more of this connection
            if fault == "drop_request":
                return False
            if fault == "delay":
                await trio.sleep(self.rates.delay_s)  # the injected stall itself
            drop_answer.append(fault == "drop_response")
            return True

        await self._pass_frames(src, dst, keep)
        await dst.send_eof()

    async def _responses(self, src: trio.SocketStream, dst: trio.SocketStream, drop_answer: deque[bool]) -> None:
        async def keep(_frame: bytes) -> bool:
            return not (drop_answer and drop_answer.popleft())

        await self._pass_frames(src, dst, keep)


async def serve(routes: list[tuple[tuple[str, int], tuple[str, int]]], rates: NotifyFaultRates,
                seed: int | None = None, stats_path: Path | None = None, *, start_healthy: bool = False,
                task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve every (listen, upstream) route until cancelled; task_status gets the addresses
    listened on. SIGUSR1 degrades the links (faults and latency), SIGUSR2 restores them."""
    injector = _Injector(rates, seed, degraded=not start_healthy)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_follow_signals, injector)
        bound = []
        for listen, upstream in routes:
            listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
            bound.append(listeners[0].socket.getsockname()[:2])

            async def handler(stream: trio.SocketStream, upstream: tuple[str, int] = upstream) -> None:
                await injector.handle(stream, upstream)

            nursery.start_soon(trio.serve_listeners, handler, listeners)
        task_status.started(bound)
        if stats_path is not None:
            await keep_writing_counts(injector.counts, stats_path)


async def _follow_signals(injector: _Injector) -> None:
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2) as signals:
        async for signum in signals:
            injector.degraded = signum == signal.SIGUSR1
            injector.counts["degraded" if injector.degraded else "restored"] += 1


def _route(text: str) -> tuple[tuple[str, int], tuple[str, int]]:
    listen, sep, upstream = text.partition("=")
    try:
        if not sep:
            raise ValueError("no '='")
        return hostport(listen), hostport(upstream)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LISTEN_HOST:PORT=AGENT_HOST:PORT") from exc


async def _main(args: argparse.Namespace) -> None:
    rates = NotifyFaultRates(rate_drop_request=args.rate_drop_request, rate_drop_response=args.rate_drop_response,
                             rate_delay=args.rate_delay, rate_reset=args.rate_reset, delay_s=args.delay_s,
                             latency_s=args.latency_ms / 1000)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(functools.partial(serve, args.route, rates, args.seed, args.stats,
                                                      start_healthy=args.start_healthy))
        for host, port in bound:
            print(f"listening={host}:{port}", flush=True)
        await until_sigint_or_sigterm(nursery)  # stop cleanly, stats written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", type=_route, action="append", required=True,
                        help="LISTEN_HOST:PORT=AGENT_HOST:PORT (repeatable)")
    parser.add_argument("--rate-drop-request", type=float, default=0.0)
    parser.add_argument("--rate-drop-response", type=float, default=0.0)
    parser.add_argument("--rate-delay", type=float, default=0.0)
    parser.add_argument("--rate-reset", type=float, default=0.0)
    parser.add_argument("--delay-s", type=float, default=3.0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every frame, each way, while degraded")
    parser.add_argument("--start-healthy", action="store_true",
                        help="inject nothing until SIGUSR1 (SIGUSR2 restores the link)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stats", type=Path, default=None, help="JSON file of outcome counts")
    trio.run(_main, parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
