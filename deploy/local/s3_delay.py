"""A TCP proxy in front of moto that delays each HTTP request by its method.

tc/netem is not available here, so S3 latency is injected in user space: the first bytes
of every request on a connection are held for `put_ms` (PUT) or `get_ms` (GET, HEAD)
before being passed on. HTTP/1.1 clients (boto3) send a request only after reading the
previous response, so "client bytes after server bytes" marks a new request.

Run: `python -m deploy.local.s3_delay --upstream 127.0.0.1:4566 --listen 127.0.0.1:0
--put-ms 30 --get-ms 15`; it prints `listening=HOST:PORT` once ready.
"""

from __future__ import annotations

import argparse
import sys

import trio

from deploy.local.fault_common import hostport

CHUNK = 65536


async def _pump_requests(src: trio.SocketStream, dst: trio.SocketStream, state: dict, put_s: float,
                         get_s: float) -> None:
    async for data in src:
        if state["new_request"]:
            state["new_request"] = False
            head = bytes(data[:8])
            delay = put_s if head.startswith(b"PUT") else get_s if head.startswith((b"GET", b"HEAD")) else 0.0
            if delay:
                await trio.sleep(delay)  # the injected S3 latency itself
        await dst.send_all(data)
    await dst.send_eof()


async def _pump_responses(src: trio.SocketStream, dst: trio.SocketStream, state: dict) -> None:
    async for data in src:
        state["new_request"] = True
        await dst.send_all(data)


async def _handle(client: trio.SocketStream, upstream: tuple[str, int], put_s: float, get_s: float) -> None:
    try:
        server = await trio.open_tcp_stream(*upstream)
    except OSError:
        await client.aclose()
        return
    state = {"new_request": True}
    try:
        async with server, client, trio.open_nursery() as nursery:
            nursery.start_soon(_pump_requests, client, server, state, put_s, get_s)
            nursery.start_soon(_pump_responses, server, client, state)
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # either side went away (trio groups the pumps' errors): only this connection ends


async def serve(listen: tuple[str, int], upstream: tuple[str, int], put_ms: float, get_ms: float,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    task_status.started(listeners[0].socket.getsockname()[:2])

    async def handler(stream: trio.SocketStream) -> None:
        await _handle(stream, upstream, put_ms / 1000, get_ms / 1000)

    await trio.serve_listeners(handler, listeners)


async def _main(args: argparse.Namespace) -> None:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, hostport(args.listen), hostport(args.upstream), args.put_ms,
                                         args.get_ms)
        print(f"listening={host}:{port}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--put-ms", type=float, default=30.0)
    parser.add_argument("--get-ms", type=float, default=15.0)
    try:
        trio.run(_main, parser.parse_args())
    except KeyboardInterrupt:
        sys.exit(0)
