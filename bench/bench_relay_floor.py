"""The floor under the proxy's CPU per MiB: a bare trio relay against one that receives and
answers with the proxy's own codec, buffer pool and response queue, no Kafka involved.

Run:  .venv/bin/python bench/bench_relay_floor.py [--frames 3000] [--frame-bytes 1000000] [--rounds 3]

Why: the local route's goal is 0.5 ms of proxy user CPU per MiB. What does relaying 1 MB
requests cost in trio on this machine before the proxy does anything of its own? Each relay
is a process that accepts one client, connects to a sink, and for every length-prefixed
frame rewrites the correlation id, writes the frame on with `writev`, and writes the sink's
small answer back with the client's id, one request at a time in order as the proxy does:

- `bare`: the least code that does this (each frame read into its own bytearray, a dict of
  correlation ids, one reader task per direction);
- `shell`: the same, receiving through `kafka_protocol.kafka_codec.ServerCodec` with a
  `FramePool` and answering through `proxy.response_slots.ResponseQueue` (the proxy's read
  loop and write path without its routing, audit or metrics).

Both tune glibc's allocator as the product does (azsidecar/runtime.py). The client (this
process) keeps 5 requests in flight and the sink (one more process) answers each with 60
bytes. Rounds alternate the relays; CPU is the relay process's own, from /proc, around the
timed frames only. Prints per round and the medians: user and kernel ms per MiB, and the
shell's ratio to the bare relay.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from azsidecar.runtime import tune_allocator  # noqa: E402
from deploy.local.processes import free_port, stop_process, wait_for_port  # noqa: E402
from kafka_protocol.frame_pool import FramePool  # noqa: E402
from kafka_protocol.kafka_codec import NEED_DATA, ServerCodec  # noqa: E402
from proxy.response_slots import ResponseQueue, ResponseSlot  # noqa: E402

# A request frame's start: size, api_key, api_version, correlation_id, client_id length (-1: null);
# an answer's: size, correlation_id.
REQUEST_HEAD = struct.Struct(">ihhih")
ANSWER_HEAD = struct.Struct(">ii")
ANSWER_BYTES = 60
IN_FLIGHT = 5
STARTUP_TIMEOUT_S = 30.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


async def _read_exact(sock: trio.socket.SocketType, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        try:
            n = os.readv(sock.fileno(), [view[got:]])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)
            continue
        if not n:
            return False
        got += n
    return True


async def _writev(sock: trio.socket.SocketType, parts: list[bytes | bytearray | memoryview]) -> None:
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        try:
            n = os.writev(sock.fileno(), views)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        while n:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0


async def _open(sink_port: int) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", sink_port)
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 0)
    return stream


async def _answers_back(up: trio.socket.SocketType, ids: dict[int, bytes], answer) -> None:
    head = bytearray(ANSWER_HEAD.size)
    while await _read_exact(up, memoryview(head)):
        size, ours = ANSWER_HEAD.unpack(head)
        rest = bytearray(size - 4)
        await _read_exact(up, memoryview(rest))
        await answer(ours, head[:4] + ids.pop(ours) + rest)


async def bare_relay(client: trio.SocketStream, sink_port: int) -> None:
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 0)
    up = await _open(sink_port)
    ids: dict[int, bytes] = {}

    async def answer(_ours: int, data: bytes | bytearray) -> None:
        await _writev(client.socket, [data])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_answers_back, up.socket, ids, answer)
        head, n = bytearray(REQUEST_HEAD.size), 0
        while await _read_exact(client.socket, memoryview(head)):
            size, key, version, theirs, _client_id = REQUEST_HEAD.unpack(head)
            body = bytearray(size + 4 - REQUEST_HEAD.size)
            await _read_exact(client.socket, memoryview(body))
            ids[n] = struct.pack(">i", theirs)
            await _writev(up.socket, [REQUEST_HEAD.pack(size, key, version, n, -1), body])
            n += 1
        nursery.cancel_scope.cancel()


async def shell_relay(client: trio.SocketStream, sink_port: int) -> None:
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 0)
    up = await _open(sink_port)
    ids: dict[int, bytes] = {}
    slots: dict[int, ResponseSlot] = {}
    codec = ServerCodec(64 * 1024 * 1024, POOL)
    queue = ResponseQueue(client.socket.fileno(), 32, lambda: None)

    async def answer(ours: int, data: bytes | bytearray) -> None:
        slots.pop(ours).fill(bytes(data))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_answers_back, up.socket, ids, answer)
        nursery.start_soon(queue.run_writer, client, nursery.cancel_scope, lambda: None)
        sock, n = client.socket, 0
        while True:
            view = codec.frame_buffer()
            if view is not None:
                got = await _read_into(sock, view)
                view.release()
                codec.received_into(got)
            else:
                data = await _read_some(sock)
                got = len(data)
                codec.receive_data(data)
            if not got:
                break
            while (frame := codec.next_frame()) is not NEED_DATA:
                ids[n] = struct.pack(">i", frame.correlation_id)
                slot = ResponseSlot()
                slots[n] = slot
                await queue.put(slot)
                head = REQUEST_HEAD.pack(frame.size, frame.api_key, frame.api_version, n, -1)  # null client id
                await _writev(up.socket, [head, frame.body])
                n += 1
        queue.close()
        nursery.cancel_scope.cancel()


async def _read_into(sock: trio.socket.SocketType, view: memoryview) -> int:
    while True:
        try:
            return os.readv(sock.fileno(), [view])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)


async def _read_some(sock: trio.socket.SocketType) -> bytes:
    while True:
        try:
            return os.read(sock.fileno(), 64 * 1024)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)


POOL = FramePool()


async def sink(port: int) -> None:
    async def serve(stream: trio.SocketStream) -> None:
        head = bytearray(REQUEST_HEAD.size)
        while await _read_exact(stream.socket, memoryview(head)):
            size, _key, _version, ours, _client_id = REQUEST_HEAD.unpack(head)
            rest = bytearray(size + 4 - REQUEST_HEAD.size)
            await _read_exact(stream.socket, memoryview(rest))
            await _writev(stream.socket, [ANSWER_HEAD.pack(ANSWER_BYTES - 4, ours), bytes(ANSWER_BYTES - ANSWER_HEAD.size)])

    await trio.serve_tcp(serve, port, host="127.0.0.1")


async def relay(kind: str, port: int, sink_port: int) -> None:
    handler = bare_relay if kind == "bare" else shell_relay
    await trio.serve_tcp(lambda stream: handler(stream, sink_port), port, host="127.0.0.1")


def cpu_s(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def drive(port: int, frames: int, frame_bytes: int) -> None:
    """Send `frames` frames of `frame_bytes` (a Produce v3 request header, then filler),
    IN_FLIGHT at a time, and read every answer; checks that each comes back with its own
    correlation id, in order."""
    body = bytes(frame_bytes - REQUEST_HEAD.size)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        sent = answered = 0
        pending = b""
        while answered < frames:
            while sent < frames and sent - answered < IN_FLIGHT:
                conn.sendall(REQUEST_HEAD.pack(frame_bytes - 4, 0, 3, sent, -1) + body)
                sent += 1
            pending += conn.recv(65536)
            while len(pending) >= ANSWER_BYTES:
                _size, theirs = ANSWER_HEAD.unpack_from(pending)
                if theirs != answered:
                    raise RuntimeError(f"answer for request {theirs}, expected {answered}")
                pending = pending[ANSWER_BYTES:]
                answered += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--frame-bytes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "PORT", "SINK_PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tune_allocator()
    if args.serve:
        kind, port, sink_port = args.serve[0], int(args.serve[1]), int(args.serve[2])
        trio.run(sink, port) if kind == "sink" else trio.run(relay, kind, port, sink_port)
        return 0

    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    me = [sys.executable, str(Path(__file__).resolve()), "--serve"]
    log_dir = Path(tempfile.mkdtemp(prefix="bench-relay-floor-"))
    sink_port = free_port()
    procs: dict[str, tuple[subprocess.Popen, int]] = {}

    def start(kind: str, port: int) -> subprocess.Popen:
        log = log_dir / f"{kind}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(me + [kind, str(port), str(sink_port)], stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        wait_for_port("127.0.0.1", port, proc, STARTUP_TIMEOUT_S, kind, log)
        return proc

    sink_proc = start("sink", sink_port)
    try:
        for kind in ("bare", "shell"):
            port = free_port()
            proc = start(kind, port)
            procs[kind] = (proc, port)
            drive(port, 50, args.frame_bytes)  # warm-up
        mib = args.frames * args.frame_bytes / (1024 * 1024)
        results: dict[str, list[tuple[float, float]]] = {"bare": [], "shell": []}
        for n in range(args.rounds):
            for kind in (("bare", "shell") if n % 2 == 0 else ("shell", "bare")):
                proc, port = procs[kind]
                user0, sys0 = cpu_s(proc.pid)
                started = time.perf_counter()
                drive(port, args.frames, args.frame_bytes)
                wall = time.perf_counter() - started
                user1, sys1 = cpu_s(proc.pid)
                per_mib = ((user1 - user0) * 1e3 / mib, (sys1 - sys0) * 1e3 / mib)
                results[kind].append(per_mib)
                print(f"round {n + 1} {kind}: {per_mib[0]:.3f} user + {per_mib[1]:.3f} kernel ms per MiB, "
                      f"{mib / wall:.0f} MiB/s", flush=True)
    finally:
        for proc, _port in procs.values():
            stop_process(proc)
        stop_process(sink_proc)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    medians = {k: (statistics.median(u for u, _ in v), statistics.median(s for _, s in v)) for k, v in results.items()}
    for kind, (user, kernel) in medians.items():
        print(f"{kind}: median {user:.3f} user + {kernel:.3f} kernel ms per MiB; "
              f"{(user + kernel) / sum(medians['bare']):.3f}x the bare relay's CPU, user {user / medians['bare'][0]:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
