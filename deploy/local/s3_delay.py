"""An HTTP proxy in front of moto that delays each S3 request by its method.

tc/netem is not available here, so S3 latency is injected in user space: every request is
held for `put_ms` (PUT) or `get_ms` (GET, HEAD) once its head has arrived, before it is
passed on.

Two modes:
- `keepalive` (default): the proxy speaks HTTP/1.1 to its clients with h11 and keeps their
  connections open between requests, as S3 does. moto's server (Werkzeug) answers every
  request with `Connection: close`, so each request goes upstream on a new connection;
  the client never sees that close. Without this, every S3 request in a benchmark pays a
  new TCP connection in the client (and the proxy), which a client of real S3 pays once.
- `transparent`: a byte pump per connection (moto's closes reach the client). HTTP/1.1
  clients send a request only after reading the previous response, so "client bytes after
  server bytes" marks a new request.

Latency profiles (`--profile`, keepalive mode): instead of one delay per method, a delay
that grows with the bytes moved, as a first byte then a transfer: `standard` (S3 Standard:
PUT 25 ms + 10 ms per MiB sent, GET 15 ms + 10 ms per MiB asked for) and `express` (S3 Express
One Zone in the same zone: PUT 4 ms + 2 ms per MiB, GET 3 ms + 2 ms per MiB). These are
modelling assumptions for side-by-side runs (docs/latency-and-cost.md), not measurements: S3
Standard's small-object PUTs take tens of ms, Express's single-digit ms (AWS's own words),
and 100 MB/s per connection (Standard) or 500 MB/s (Express) stand for the transfer. PUT size
is the request's Content-Length, GET size its Range (no Range: the fixed part only).

Where the delay goes (`--hold`, keepalive mode): `request` (default) holds the request,
then passes it on; `answer` passes it on at once and holds moto's complete answer until
the delay has passed since the request's head arrived. With `answer`, moto's work for the
request and the injector's connection to it are done while the client waits, as with real
S3, whose work costs the client's host no CPU, and they are part of the delay, not added
to it: a request answered by moto within its delay takes the profile's time, no more
(with `request`, and with `answer` before 2026-11-26, the client saw delay + moto's own
time: ~7 ms more per request on a loaded 2-core machine, more than the Express profile's
whole 4 ms PUT); with `request` they also land on the shared cores just as the client
handles the answer.

Run: `python -m deploy.local.s3_delay --upstream 127.0.0.1:4566 --listen 127.0.0.1:0
--put-ms 30 --get-ms 15 [--profile standard|express] [--mode keepalive|transparent]
[--hold request|answer]`; it prints `listening=HOST:PORT` once ready.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import h11
import trio

from deploy.local.fault_common import hostport, running_listener
from deploy.local.processes import MotoServer

CHUNK = 65536
MODES = ("keepalive", "transparent")
HOLDS = ("request", "answer")
# Hop-by-hop headers: about one connection, not passed on. (Content-Length and
# Transfer-Encoding are kept: h11 frames each side's body by them.)
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"expect", b"te", b"upgrade"})


MiB = 1024 * 1024
_RANGE_RE = re.compile(rb"^bytes=(\d+)-(\d+)$")


@dataclass(frozen=True)
class Profile:
    """A size-dependent S3 latency: a fixed part per request plus a part per MiB moved."""

    put_ms: float
    get_ms: float
    put_ms_per_mib: float = 0.0
    get_ms_per_mib: float = 0.0


PROFILES = {
    "standard": Profile(put_ms=25.0, get_ms=15.0, put_ms_per_mib=10.0, get_ms_per_mib=10.0),
    "express": Profile(put_ms=4.0, get_ms=3.0, put_ms_per_mib=2.0, get_ms_per_mib=2.0),
}


def delay_for(method: bytes, put_s: float, get_s: float) -> float:
    return put_s if method == b"PUT" else get_s if method in (b"GET", b"HEAD") else 0.0


def profile_delay_s(profile: Profile, method: bytes, headers: dict[bytes, bytes]) -> float:
    """Seconds to hold a request of `method` with these (lower-case) headers under `profile`."""
    if method == b"PUT":
        size = int(headers.get(b"content-length", b"0") or 0)
        return (profile.put_ms + profile.put_ms_per_mib * size / MiB) / 1000
    if method in (b"GET", b"HEAD"):
        match = _RANGE_RE.match(headers.get(b"range", b""))
        size = int(match[2]) - int(match[1]) + 1 if match else 0
        return (profile.get_ms + profile.get_ms_per_mib * size / MiB) / 1000
    return 0.0


# --- keepalive mode ---------------------------------------------------------------------

async def _next_event(conn: h11.Connection,
                      stream: trio.SocketStream) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
    """The next h11 event of `conn`, reading from `stream` as needed (EOF: ConnectionClosed)."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(CHUNK))


def _passed_on(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in headers if name not in _HOP_BY_HOP]


async def _forward(request: h11.Request, client_conn: h11.Connection, client: trio.SocketStream,
                   upstream: tuple[str, int], answer_at: float | None = None) -> None:
    """Pass one request (head already read) to a new upstream connection and its answer back.

    With `answer_at` (trio time), the whole answer is read from upstream (and that
    connection closed) first, then held until `answer_at`, then sent. Raises OSError/trio
    errors/h11 errors if either side breaks; the caller drops the client.
    """
    held: list[h11.Response | h11.Data | h11.EndOfMessage] = []
    server = await trio.open_tcp_stream(*upstream)
    async with server:
        up = h11.Connection(h11.CLIENT)
        headers = [*_passed_on(request.headers), (b"connection", b"close")]
        await server.send_all(up.send(h11.Request(method=request.method, target=request.target, headers=headers)))
        if client_conn.they_are_waiting_for_100_continue:  # "Expect: 100-continue" was not passed on
            await client.send_all(client_conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        while True:  # the request body, as it arrives
            event = await _next_event(client_conn, client)
            if isinstance(event, h11.Data):
                await server.send_all(up.send(event))
            elif isinstance(event, h11.EndOfMessage):
                await server.send_all(up.send(h11.EndOfMessage()))
                break
            else:
                raise h11.RemoteProtocolError(f"client sent {type(event).__name__} inside a request body")
        while True:  # the answer, as it arrives
            event = await _next_event(up, server)
            if isinstance(event, h11.InformationalResponse):
                continue  # upstream's own 100 Continue: the client had its own already
            if isinstance(event, h11.Response):
                event = h11.Response(status_code=event.status_code, headers=_passed_on(event.headers),
                                     reason=event.reason)
            elif not isinstance(event, (h11.Data, h11.EndOfMessage)):
                raise h11.RemoteProtocolError(f"upstream ended the answer with {type(event).__name__}")
            if answer_at is not None:
                held.append(event)
            else:
                await client.send_all(client_conn.send(event))
            if isinstance(event, h11.EndOfMessage):
                break
    if held and answer_at is not None:  # held: answer_at was given
        await trio.sleep_until(answer_at)  # the injected S3 latency itself (upstream's time included)
        await client.send_all(b"".join(client_conn.send(event) for event in held))


async def _serve_keepalive(client: trio.SocketStream, upstream: tuple[str, int], put_s: float, get_s: float,
                           hold: str = "request", profile: Profile | None = None) -> None:
    conn = h11.Connection(h11.SERVER)
    async with client:
        try:
            while True:
                event = await _next_event(conn, client)
                if not isinstance(event, h11.Request):
                    return  # the client closed (or broke) between requests
                if profile is not None:
                    delay = profile_delay_s(profile, event.method, {n.lower(): v for n, v in event.headers})
                else:
                    delay = delay_for(event.method, put_s, get_s)
                if delay and hold == "request":
                    await trio.sleep(delay)  # the injected S3 latency itself
                answer_at = trio.current_time() + delay if delay and hold == "answer" else None
                await _forward(event, conn, client, upstream, answer_at)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # the client asked to close, or framing left the connection unusable
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, h11.ProtocolError):
            pass  # either side went away or spoke nonsense: only this connection ends


# --- transparent mode -------------------------------------------------------------------

class _Turn(TypedDict):
    new_request: bool  # the client's next bytes start a request (the answer to its last one came)


async def _pump_requests(src: trio.SocketStream, dst: trio.SocketStream, state: _Turn, put_s: float,
                         get_s: float) -> None:
    async for data in src:
        if state["new_request"]:
            state["new_request"] = False
            delay = delay_for(bytes(data[:8]).split(b" ", 1)[0], put_s, get_s)
            if delay:
                await trio.sleep(delay)  # the injected S3 latency itself
        await dst.send_all(data)
    await dst.send_eof()


async def _pump_responses(src: trio.SocketStream, dst: trio.SocketStream, state: _Turn) -> None:
    async for data in src:
        state["new_request"] = True
        await dst.send_all(data)


async def _serve_transparent(client: trio.SocketStream, upstream: tuple[str, int], put_s: float,
                             get_s: float) -> None:
    try:
        server = await trio.open_tcp_stream(*upstream)
    except OSError:
        await client.aclose()
        return
    state: _Turn = {"new_request": True}
    try:
        async with server, client, trio.open_nursery() as nursery:
            nursery.start_soon(_pump_requests, client, server, state, put_s, get_s)
            nursery.start_soon(_pump_responses, server, client, state)
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # either side went away (trio groups the pumps' errors): only this connection ends


async def serve(listen: tuple[str, int], upstream: tuple[str, int], put_ms: float, get_ms: float,
                mode: str = "keepalive", hold: str = "request",
                task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
                profile: str | None = None) -> None:
    """Serve until cancelled; `profile` (a PROFILES name, keepalive mode) replaces put_ms/get_ms."""
    if profile is not None and (profile not in PROFILES or mode != "keepalive"):
        raise ValueError(f"profile {profile!r}: one of {', '.join(PROFILES)}, in keepalive mode")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    if hold not in HOLDS or (hold == "answer" and mode != "keepalive"):
        raise ValueError(f"hold {hold!r}: expected one of {', '.join(HOLDS)} ('answer' in keepalive mode only)")
    listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    task_status.started(listeners[0].socket.getsockname()[:2])

    async def handler(stream: trio.SocketStream) -> None:
        if mode == "keepalive":
            await _serve_keepalive(stream, upstream, put_ms / 1000, get_ms / 1000, hold,
                                   PROFILES[profile] if profile is not None else None)
        else:
            await _serve_transparent(stream, upstream, put_ms / 1000, get_ms / 1000)

    await trio.serve_listeners(handler, listeners)


@contextlib.contextmanager
def keepalive_front(moto: MotoServer, log_dir: Path) -> Iterator[tuple[str, list[int]]]:
    """This front, keep-alive mode, no delay, in front of `moto` as a process: yields (the
    S3 URL to use, the pids serving it: moto's and the front's); stopped on exit. For
    benchmarks whose S3 client should keep its connections open as S3 lets it (moto's
    server closes every one)."""
    argv = [sys.executable, "-m", "deploy.local.s3_delay", "--upstream", f"{moto.host}:{moto.port}",
            "--listen", "127.0.0.1:0", "--put-ms", "0", "--get-ms", "0", "--mode", "keepalive"]
    front: list[subprocess.Popen[bytes]] = []
    with running_listener(argv, log_dir / "s3-keepalive.log", "S3 keep-alive front", started=front) as listening:
        yield f"http://{listening}", [moto.proc.pid, front[0].pid]


async def _main(args: argparse.Namespace) -> None:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(functools.partial(
            serve, hostport(args.listen), hostport(args.upstream), args.put_ms, args.get_ms, args.mode, args.hold,
            profile=args.profile))
        print(f"listening={host}:{port}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--put-ms", type=float, default=30.0)
    parser.add_argument("--get-ms", type=float, default=15.0)
    parser.add_argument("--profile", choices=sorted(PROFILES),
                        help="size-dependent latency of S3 Standard or S3 Express One Zone (replaces --put-ms/--get-ms)")
    parser.add_argument("--mode", choices=MODES, default="keepalive",
                        help="keepalive: keep client connections open between requests, as S3 does "
                             "(default); transparent: a byte pump, moto's per-request close reaches the client")
    parser.add_argument("--hold", choices=HOLDS, default="request",
                        help="request: hold each request before passing it on (default); answer (keepalive "
                             "mode): pass it on at once, hold moto's whole answer, then send it")
    try:
        trio.run(_main, parser.parse_args())
    except KeyboardInterrupt:
        sys.exit(0)
