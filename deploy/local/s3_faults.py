"""A TCP proxy in front of moto that injects S3 faults per request, at configurable rates.

Strategy. Like deploy/local/s3_delay.py, one trio task pair per client connection; HTTP/1.1
clients (boto3) send a request only after reading the previous response, so "client bytes
after a final (non-1xx) response" marks a new request (a PUT body sent after "100 Continue"
belongs to its request). The proxy reads that request's head (up to the
blank line), then draws one fault for it:

- `500`: answer `500 InternalError` itself (a minimal S3 XML error) and close the connection;
- `503`: answer `503 SlowDown` itself, likewise;
- `reset`: close the client connection with an RST (SO_LINGER 0), nothing answered;
- `stall`: hold the request `stall_s` before passing it on (seconds-long stalls; with a
  stall longer than the client's read timeout this is a timeout);
- otherwise pass it on after `delay_ms`.

Answering errors closes the connection (`Connection: close`): the request body may still
be on its way, and draining it would only delay the client's retry. botocore retries all
four faults (5xx, SlowDown throttling, connection errors, read timeouts).

Counts of every outcome are rewritten to `--stats` (JSON) once a second and at exit, so a
campaign can report how many faults the sidecars actually met.

Run: `python -m deploy.local.s3_faults --upstream 127.0.0.1:4566 --listen 127.0.0.1:0
--rate-503 0.1 --rate-reset 0.05 --rate-stall 0.01 --stall-s 2 --stats faults.json`; it
prints `listening=HOST:PORT` once ready.
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import trio

from deploy.local.fault_common import hostport, keep_writing_counts, until_sigint_or_sigterm

MAX_HEAD_BYTES = 65536  # an S3 request head is a few hundred bytes; beyond this it is passed on undecided
INTERIM_STATUS = b"HTTP/1.1 1"  # 1xx: botocore sends PUT bodies after "100 Continue"
FAULTS = ("500", "503", "reset", "stall")

_ERRORS = {
    "500": (b"500 Internal Server Error", b"InternalError", b"We encountered an internal error. Please try again."),
    "503": (b"503 Slow Down", b"SlowDown", b"Please reduce your request rate."),
}


@dataclass(frozen=True)
class FaultRates:
    """Probability of each fault per request (their sum must be <= 1); the rest pass through."""

    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_reset: float = 0.0
    rate_stall: float = 0.0
    stall_s: float = 2.0
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        rates = (self.rate_500, self.rate_503, self.rate_reset, self.rate_stall)
        if any(r < 0 for r in rates) or sum(rates) > 1:
            raise ValueError(f"fault rates must be >= 0 and sum to <= 1, got {rates}")
        if self.stall_s < 0 or self.delay_ms < 0:
            raise ValueError("stall_s and delay_ms must be >= 0")

    def draw(self, rng: random.Random) -> str:
        """One outcome: a name from FAULTS or "pass"."""
        x = rng.random()
        for name, rate in zip(FAULTS, (self.rate_500, self.rate_503, self.rate_reset, self.rate_stall), strict=True):
            if x < rate:
                return name
            x -= rate
        return "pass"


def error_response(fault: str, request_id: str) -> bytes:
    """A minimal valid S3 error response for fault "500" or "503" (raises KeyError for others)."""
    status, code, message = _ERRORS[fault]
    body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + code + b"</Code><Message>" + message
            + b"</Message><RequestId>" + request_id.encode() + b"</RequestId></Error>")
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nx-amz-request-id: " + request_id.encode()
            + b"\r\nConnection: close\r\n\r\n" + body)


def rst_on_close(stream: trio.SocketStream) -> None:
    """Make the next close send an RST instead of a FIN."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Exchange(TypedDict):
    """Where one connection's pumps are: the client's request head still to be decided on."""

    new_request: bool  # the next bytes from the client start a request (its answer came)
    head: bytes  # the request head received so far, before a fault is drawn for it


class _Injector:
    def __init__(self, upstream: tuple[str, int], rates: FaultRates, seed: int | None) -> None:
        self.upstream = upstream
        self.rates = rates
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()

    async def handle(self, client: trio.SocketStream) -> None:
        try:
            server = await trio.open_tcp_stream(*self.upstream)
        except OSError:
            await client.aclose()
            return
        state: _Exchange = {"new_request": True, "head": b""}
        try:
            async with server, client, trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_requests, client, server, state, nursery.cancel_scope)
                nursery.start_soon(self._pump_responses, server, client, state)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # either side went away (trio groups the pumps' errors): the connection ends, serving goes on

    async def _pump_requests(self, src: trio.SocketStream, dst: trio.SocketStream, state: _Exchange,
                             scope: trio.CancelScope) -> None:
        async for data in src:
            if not state["new_request"]:
                await dst.send_all(data)
                continue
            head = state["head"] + bytes(data)
            if b"\r\n\r\n" not in head and len(head) < MAX_HEAD_BYTES:
                state["head"] = head  # the head is split over reads: wait for the rest before deciding
                continue
            state["head"] = b""
            state["new_request"] = False
            fault = self.rates.draw(self.rng)
            self.counts[fault] += 1
            self.counts["requests"] += 1
            if fault in _ERRORS:
                await src.send_all(error_response(fault, f"FAULT{self.counts['requests']:08d}"))
                scope.cancel()  # Connection: close; the upstream connection goes with it
                return
            if fault == "reset":
                rst_on_close(src)
                scope.cancel()
                return
            if fault == "stall":
                await trio.sleep(self.rates.stall_s)  # the injected stall itself
            elif self.rates.delay_ms:
                await trio.sleep(self.rates.delay_ms / 1000)  # the injected latency itself
            await dst.send_all(head)
        await dst.send_eof()

    async def _pump_responses(self, src: trio.SocketStream, dst: trio.SocketStream, state: _Exchange) -> None:
        async for data in src:
            if not bytes(data[:10]).startswith(INTERIM_STATUS):
                state["new_request"] = True  # a final response; "100 Continue" only releases the body
            await dst.send_all(data)


async def serve(listen: tuple[str, int], upstream: tuple[str, int], rates: FaultRates, seed: int | None = None,
                stats_path: Path | None = None,
                task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; task_status gets the (host, port) listened on. Raises OSError on bind."""
    injector = _Injector(upstream, rates, seed)
    listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, injector.handle, listeners)
        task_status.started(listeners[0].socket.getsockname()[:2])
        if stats_path is not None:
            await keep_writing_counts(injector.counts, stats_path)


async def _main(args: argparse.Namespace) -> None:
    rates = FaultRates(rate_500=args.rate_500, rate_503=args.rate_503, rate_reset=args.rate_reset,
                       rate_stall=args.rate_stall, stall_s=args.stall_s, delay_ms=args.delay_ms)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, hostport(args.listen), hostport(args.upstream), rates,
                                         args.seed, args.stats)
        print(f"listening={host}:{port}", flush=True)
        await until_sigint_or_sigterm(nursery)  # stop cleanly, stats written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--rate-500", type=float, default=0.0)
    parser.add_argument("--rate-503", type=float, default=0.0)
    parser.add_argument("--rate-reset", type=float, default=0.0)
    parser.add_argument("--rate-stall", type=float, default=0.0)
    parser.add_argument("--stall-s", type=float, default=2.0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stats", type=Path, default=None, help="JSON file of outcome counts")
    trio.run(_main, parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
