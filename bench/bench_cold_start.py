"""The same forward-path Python work, run back to back and run after the CPU idled.

Run:  .venv/bin/python bench/bench_cold_start.py [--iterations 300] [--gaps-ms 0,0.2,2,10] [--rounds 2]

Why: the proxy's CPU per forwarded produce request, measured from /proc, is several times
what its functions cost in a loop. Timing the local route section by section inside a
saturated proxy (thread CPU around each function) read the scan of a ~1 MB request's
header at ~40 µs and the scan of its answer at ~25-30 µs; in a loop here they take ~5 and
~3 µs. The difference is not the byte copies: a proxy waits for the leader between its
requests (acks=all), so its CPU idles, and on a shared virtual machine whatever runs on
the core meanwhile leaves the caches and branch predictors cold for the next request.
A paced producer (one request every 10 ms) meets only cold requests.

This bench shows that effect with nothing else involved: one process repeats the two scans
of a forwarded request (kafka_protocol.produce_scan, a Produce v9 request of one ~1 MB
batch built by kafka-python, and its answer) and before each repetition sleeps for a gap,
none or one of --gaps-ms; the scans' thread CPU is timed alone. Gaps alternate within a
round, rounds alternate the order. Prints per gap the median µs of CPU per repetition and
its ratio to no gap.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from kafka_protocol.produce_scan import scan_produce_request, scan_produce_response  # noqa: E402

VERSION = 9
MAX_BATCH = 2_000_000


def request_body(records: int, record_bytes: int) -> memoryview:
    """A Produce v9 request body (after its header) with one batch of `records` records."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=7,
                                        producer_epoch=0, base_sequence=0, batch_size=MAX_BATCH)
    for offset in range(records):
        builder.append(offset, timestamp=None, key=None, value=b"v" * record_bytes, headers=[])
    batch = bytes(builder.build())
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        ProduceRequest.TopicProduceData(name="bench", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    request.with_header(correlation_id=1, client_id="bench")
    frame = bytes(request.encode(version=VERSION, header=True, framed=True))
    (client_len,) = struct.unpack_from(">h", frame, 12)
    return memoryview(frame)[14 + client_len + 1:]  # size, header v2 (api, version, id, client id, tags)


def answer_frame() -> bytes:
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
        index=0, error_code=0, base_offset=100, log_append_time_ms=-1, log_start_offset=0, record_errors=[],
        error_message=None)
    response = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="bench", partition_responses=[
        partition])], throttle_time_ms=0, node_endpoints=[])
    response.API_VERSION = VERSION
    response.with_header(correlation_id=1)
    return bytes(response.encode(header=True, framed=True))[4:]


def cpu_per_repetition(body: memoryview, answer: bytes, gap_s: float, iterations: int) -> float:
    """Median µs of thread CPU of one request scan and one answer scan, each after `gap_s` idle."""
    taken = []
    for _ in range(iterations):
        if gap_s:
            time.sleep(gap_s)
        started = time.thread_time_ns()
        scanned = scan_produce_request(body, VERSION, MAX_BATCH)
        read = scan_produce_response(answer, VERSION)
        taken.append(time.thread_time_ns() - started)
        assert scanned is not None and read.plain
    return statistics.median(taken) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--gaps-ms", default="0,0.2,2,10")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=900, help="1 KiB records in the one batch (~1 MB)")
    args = parser.parse_args(argv)
    gaps = [float(g) / 1000 for g in args.gaps_ms.split(",")]
    body, answer = request_body(args.records, 1024), answer_frame()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; request body {len(body)} bytes", flush=True)
    readings: dict[float, list[float]] = {g: [] for g in gaps}
    for round_no in range(args.rounds):
        order = gaps if round_no % 2 == 0 else list(reversed(gaps))
        for gap in order:
            us = cpu_per_repetition(body, answer, gap, args.iterations)
            readings[gap].append(us)
            print(f"round {round_no + 1} gap {gap * 1000:g} ms: {us:.1f} µs CPU per request scan + answer scan",
                  flush=True)
    hot = statistics.median(readings[gaps[0]])
    for gap in gaps:
        median = statistics.median(readings[gap])
        print(f"gap {gap * 1000:g} ms: median {median:.1f} µs, {median / hot:.2f}x the first gap")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
