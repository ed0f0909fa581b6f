"""The event loop's own floor: CPU per request of one process driving three connections
against three processes driving one each, with no azsidecar code in the path.

Run:  .venv/bin/python bench/bench_loop_floor.py [--requests 30000] [--request-kib 43]
                                                 [--rounds 3] [--event-loop uvloop|asyncio]

Why: bench_agent.py's agents spend 15-30 % more CPU per MiB when three of them each drive
one broker than when one drives all three (docs/benchmarks.md, "Several agents per
zone"), with the same requests reaching each broker. This bench asks whether that is the
agent's code or the runtime's: a client written the way aiokafka talks to a broker (a
reader task per connection that reads length-prefixed answers and settles the caller's
future, the caller writing one request and awaiting its answer, one request in flight per
connection) sends the same number of requests of the same size in both shapes:

- `x1`: one client process with three connections, one per server port, all busy at once
  (one agent leading three brokers);
- `x3`: three client processes one after the other, each with one connection and a third
  of the requests (three agents, each leading one broker, run one at a time as
  bench_agent.py's `--one-at-a-time` does).

The server is one separate process (the same event loop) with three listening ports that
answers every request with a small frame (the size of a ProduceResponse for a few
partitions). Each client measures its own CPU with getrusage around the timed part (no
start-up), and its voluntary context switches. Printed per round and in sum: µs of CPU per
request for x1 and x3, their ratio, and the sleeps per request.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.local.processes import free_port  # noqa: E402

ANSWER = b"\x00" * 64  # about a ProduceResponse for a few partitions
SIZE = struct.Struct(">i")
READY_S = 20.0


def install_loop(name: str) -> None:
    if name == "uvloop":
        import uvloop

        uvloop.install()


class AnswerEveryFrame(asyncio.Protocol):
    """Server side: one small answer per whole length-prefixed request."""

    def connection_made(self, transport) -> None:
        self.transport, self.buf = transport, bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            (n,) = SIZE.unpack_from(self.buf)
            if len(self.buf) < 4 + n:
                return
            del self.buf[:4 + n]
            self.transport.write(SIZE.pack(len(ANSWER)) + ANSWER)


async def serve(ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(AnswerEveryFrame, "127.0.0.1", port) for port in ports]
    print("listening", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


class Connection:
    """aiokafka's shape: a reader task settles the oldest waiting future per answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.waiting: list[asyncio.Future] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            (n,) = SIZE.unpack(await self.reader.readexactly(4))
            answer = await self.reader.readexactly(n)
            self.waiting.pop(0).set_result(answer)

    async def request(self, frame: bytes) -> bytes:
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self.writer.write(frame)
        return await fut


def python_work(steps: int) -> int:
    """A fixed amount of interpreter work (what the agent does per request, in kind: objects,
    dicts, calls), so its cost per request can be compared between the two shapes."""
    total = 0
    table: dict[int, int] = {}
    for i in range(steps):
        table[i & 63] = table.get(i & 63, 0) + i
        total += len(str(i))
    return total


async def drive(ports: list[int], requests_each: int, request_bytes: int, in_flight: int,
                work_steps: int = 0) -> dict:
    body = b"\x01" * request_bytes
    frame = SIZE.pack(len(body)) + body
    conns = [Connection(*await asyncio.open_connection("127.0.0.1", port)) for port in ports]

    async def one(conn: Connection, count: int) -> None:
        for _ in range(count):
            await conn.request(frame)
            if work_steps:
                python_work(work_steps)

    lanes = [(c, requests_each // in_flight + (i < requests_each % in_flight))
             for c in conns for i in range(in_flight)]
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(one(c, count) for c, count in lanes))
    after, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for c in conns:
        c.task.cancel()
        c.writer.close()
    return {"user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime,
            "sleeps": after.ru_nvcsw - before.ru_nvcsw, "wall": t1 - t0,
            "requests": requests_each * len(ports)}


def client(ports: list[int], requests_each: int, request_bytes: int, loop: str, in_flight: int,
           work_steps: int) -> dict:
    argv = [sys.executable, __file__, "--client", ",".join(map(str, ports)), "--requests", str(requests_each),
            "--request-bytes", str(request_bytes), "--event-loop", loop, "--in-flight", str(in_flight),
            "--work-steps", str(work_steps)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=30000, help="requests per shape per round")
    ap.add_argument("--request-kib", type=float, default=43.0,
                    help="request size (43: 2.67 batches of 16 KiB, bench_agent.py's 8 partitions on 3 brokers)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--in-flight", type=int, default=1, help="requests in flight per connection")
    ap.add_argument("--work-steps", type=int, default=0,
                    help="interpreter work per answer (python_work steps; 150 take ~13 µs here)")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--request-bytes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    install_loop(args.event_loop)
    if args.serve:
        asyncio.run(serve([int(p) for p in args.serve.split(",")]))
        return 0
    if args.client:
        print(json.dumps(asyncio.run(drive([int(p) for p in args.client.split(",")], args.requests,
                                            args.request_bytes, args.in_flight, args.work_steps))))
        return 0

    ports = [free_port() for _ in range(3)]
    request_bytes = int(args.request_kib * 1024)
    each = args.requests // 3
    server = subprocess.Popen([sys.executable, __file__, "--serve", ",".join(map(str, ports)),
                               "--event-loop", args.event_loop], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "listening":
            raise SystemExit("the server did not start")
        print(f"{3 * each} requests of {request_bytes} bytes per shape per round, answers of "
              f"{len(ANSWER)} bytes, {args.event_loop}, {args.in_flight} request(s) in flight per connection, "
              f"{args.work_steps} steps of interpreter work per answer")
        sums = {"x1": [0.0, 0.0, 0], "x3": [0.0, 0.0, 0]}  # CPU s, of it system, sleeps
        for r in range(args.rounds):
            run = functools.partial(client, requests_each=each, request_bytes=request_bytes, loop=args.event_loop,
                                    in_flight=args.in_flight, work_steps=args.work_steps)
            got = {"x1": [run(ports)], "x3": [run([port]) for port in ports]}
            line = [f"round {r}:"]
            for shape, runs in got.items():
                cpu = sum(x["user"] + x["system"] for x in runs)
                system = sum(x["system"] for x in runs)
                sleeps = sum(x["sleeps"] for x in runs)
                wall = sum(x["wall"] for x in runs)
                sums[shape][0] += cpu
                sums[shape][1] += system
                sums[shape][2] += sleeps
                line.append(f"{shape} {1e6 * cpu / (3 * each):6.1f} µs/request "
                            f"({3 * each / wall:7.0f} requests/s)")
            print("   ".join(line), flush=True)
        total = args.rounds * 3 * each
        print(f"{'':8s}{'CPU µs/request':>16s}{'of it system':>14s}{'sleeps/request':>16s}")
        for shape, (cpu, system, sleeps) in sums.items():
            print(f"{shape:8s}{1e6 * cpu / total:16.1f}{1e6 * system / total:14.1f}{sleeps / total:16.2f}")
        print(f"x3 / x1: {sums['x3'][0] / sums['x1'][0]:.2f}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
