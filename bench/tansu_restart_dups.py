"""Reproduce finding 1 with Tansu alone: a restart leaves sequences consumed without their batches.

One Tansu broker on moto (s3 storage engine), one partition, one idempotent producer id.
A raw client pipelines batches of RECORDS records (sequences 0, 10, 20, ...) with at most
--in-flight requests outstanding, stops the broker after --acked answers (SIGTERM: Tansu
keeps serving open connections for up to 5 s, then stops mid-request; or --kill: kill -9),
restarts it, re-sends every unanswered batch with its original sequence, and reads the
partition back. It prints, per re-sent batch, the broker's answer and whether its records
are in the log. A DUPLICATE_SEQUENCE_NUMBER (46) for a batch that is not in the log is the
finding: Tansu writes the producer's sequence (meta.json), then the watermark, then the
batch object, and the stop fell in between. Nothing of azsidecar runs here.

  .venv/bin/python bench/tansu_restart_dups.py --runs 3
  .venv/bin/python bench/tansu_restart_dups.py --runs 3 --kill
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402

from deploy.local import start_moto, start_tansu  # noqa: E402
from tests.conftest import create_topics  # noqa: E402
from tests.integration.leader_notify.helpers import make_batch, new_producer_id  # noqa: E402

RECORDS = 10
VERSION = 7
TOPIC = "restart"
ANSWER_TIMEOUT_S = 20.0


def produce_frame(correlation_id: int, batch: bytes) -> bytes:
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    request.with_header(correlation_id=correlation_id, client_id="restart-dups")
    return bytes(request.encode(version=VERSION, header=True, framed=True))


def pipeline(bootstrap: str, sequences: list[int], pid: int, in_flight: int, on_answer=None) -> tuple[list, dict]:
    """Send one batch per sequence, pipelined; returns (sequences sent, {sequence: (error, offset)})."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S)
    slots = threading.Semaphore(in_flight)
    by_correlation: dict[int, int] = {}
    answers: dict[int, tuple[int, int]] = {}
    closed = threading.Event()

    def read() -> None:
        buf = bytearray()
        try:
            while True:
                while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                size = struct.unpack_from(">i", buf)[0]
                frame = bytes(buf[4:4 + size])
                del buf[:4 + size]
                response = ProduceResponse.decode(frame, version=VERSION, header=True)
                p = response.responses[0].partition_responses[0]
                answers[by_correlation[struct.unpack_from(">i", frame)[0]]] = (p.error_code, p.base_offset)
                slots.release()
                if on_answer:
                    on_answer(len(answers))
        except OSError:
            return
        finally:
            closed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sent = []
    for i, seq in enumerate(sequences):
        while not slots.acquire(timeout=0.1):
            if closed.is_set():
                break
        if closed.is_set():
            break
        by_correlation[i + 1] = seq
        try:
            sock.sendall(produce_frame(i + 1, make_batch([str(seq + k).encode() for k in range(RECORDS)], pid, 0, seq)))
        except OSError:
            break
        sent.append(seq)
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while len(answers) < len(sent) and not closed.is_set() and time.monotonic() < deadline:
        closed.wait(0.1)  # waiting for outstanding answers, bounded
    sock.close()
    reader.join(ANSWER_TIMEOUT_S)
    return sent, answers


def read_values(bootstrap: str, end_offset: int, timeout_s: float = 600.0) -> set[int]:
    """Every value up to `end_offset` (Tansu's ListOffsets "latest" lags, so the end comes from the answers)."""
    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415

    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        values: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end_offset:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read to {consumer.position(tp)} of {end_offset}")
            for records in consumer.poll(timeout_ms=500).values():
                values.update(int(r.value) for r in records)
        return values
    finally:
        consumer.close()


def one_run(moto, kill: bool, acked_before_stop: int, in_flight: int) -> dict:
    bucket = f"dups-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    with start_tansu(moto.endpoint_url, bucket) as broker:
        create_topics(broker.bootstrap, {TOPIC: 1})
        pid, _epoch = new_producer_id(broker.bootstrap)
        stopped = threading.Event()

        def stop_once(answered: int) -> None:
            if answered == acked_before_stop and not stopped.is_set():
                stopped.set()
                threading.Thread(target=broker.stop, kwargs={"kill": kill}, daemon=True).start()

        sequences = [i * RECORDS for i in range(2000)]
        sent, first = pipeline(broker.bootstrap, sequences, pid, in_flight, stop_once)
        while broker.proc is not None and broker.proc.poll() is None:
            time.sleep(0.05)  # the stop thread's SIGTERM grace (5 s) or kill; polling a process
        broker.start()
        unanswered = [s for s in sent if s not in first]
        _, retried = pipeline(broker.bootstrap, unanswered, pid, in_flight)
        end = max((offset + RECORDS for code, offset in [*first.values(), *retried.values()] if code == 0), default=0)
        present = read_values(broker.bootstrap, end)
    outcomes = []
    for seq in unanswered:
        code, _offset = retried.get(seq, (None, -1))
        have = sum(1 for k in range(RECORDS) if seq + k in present)
        outcomes.append({"sequence": seq, "answer": code, "records_in_log": have})
    lost = [o for o in outcomes if o["answer"] in (0, 46) and o["records_in_log"] < RECORDS]
    return {"sent": len(sent), "answered_before_restart": len(first), "resent": outcomes,
            "acknowledged_but_absent": lost}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kill", action="store_true", help="kill -9 instead of SIGTERM")
    parser.add_argument("--acked", type=int, default=30, help="answers before the stop begins")
    parser.add_argument("--in-flight", type=int, default=5)
    args = parser.parse_args(argv)
    with start_moto() as moto:
        for run in range(args.runs):
            r = one_run(moto, args.kill, args.acked, args.in_flight)
            print(f"run {run + 1} ({'kill -9' if args.kill else 'SIGTERM'}): sent {r['sent']}, "
                  f"answered before the restart {r['answered_before_restart']}")
            for o in r["resent"]:
                print(f"  re-sent seq {o['sequence']}: answer {o['answer']}, records in log {o['records_in_log']}/{RECORDS}")
            print(f"  answered 0/46 but not in the log: {[o['sequence'] for o in r['acknowledged_but_absent']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
