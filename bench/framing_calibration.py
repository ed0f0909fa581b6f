"""The framing model (core/framing.py) against the demo's meter, taken apart (root only).

Runs `azsidecar demo`'s pipeline (12 MB of 1 KB records by default) in network namespaces
with the links' offloads off and their MTU set, reads every frame of the baseline run
(deploy/local/port_capture.py) and prints what the meter counted part by part: data
segments and their headers each way, pure ACKs each way, connection set-up, the Kafka
requests and responses by API, and the audit's estimate of a direct produce against the
meter. The estimate is core.framing's formula on the sidecar run's produce_batch records
(the cross-zone ones: routes wal and direct_cross), the sums the Spark job's
`direct_equivalent_bytes` makes; Spark itself is not started. One JSON line per run goes
to --out.

    sudo .venv/bin/python bench/framing_calibration.py --mtu 1500 --also-mtu 9001 --runs 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

from azsidecar.demo import meter_framing, run_demo
from core.framing import direct_produce_wire_bytes
from deploy.local.frame_tally import FrameTally
from deploy.local.zones import CrossZoneReading

# The demo test's slow-host deadlines: a loaded host must not send batches direct mid-run.
SLOW_HOST = {"notify": {"gray_floor_s": 8.0, "gray_max_s": 8.0}}
API_NAMES = {0: "Produce", 3: "Metadata", 18: "ApiVersions", 22: "InitProducerId", -1: "unparsed"}


def breakdown(frames: FrameTally) -> dict[str, object]:
    """The meter's bytes by part, and the ACK rates."""
    def part(direction: str, kind: str) -> dict[str, int]:
        return vars(frames.parts(direction, kind))

    data_to, data_from = frames.parts("to_broker", "data"), frames.parts("from_broker", "data")
    acks_from, acks_to = frames.parts("from_broker", "pure_ack"), frames.parts("to_broker", "pure_ack")
    k = frames.kafka
    produce_request_bytes = k.request_bytes.get(0, 0)
    return {
        "data_to_broker": part("to_broker", "data"), "data_from_broker": part("from_broker", "data"),
        "pure_acks_from_broker": part("from_broker", "pure_ack"), "pure_acks_to_broker": part("to_broker", "pure_ack"),
        "control": {d: part(d, "control") for d in ("to_broker", "from_broker")},
        "other_frames": vars(frames.other),
        "data_segments_per_broker_ack": data_to.packets / max(acks_from.packets, 1),
        "data_segments_per_client_ack": data_from.packets / max(acks_to.packets, 1),
        "batch_bytes": k.batch_bytes, "batches": k.batches, "topic_entries": k.topic_entries,
        "produce_requests": k.requests.get(0, 0),
        "produce_request_bytes_beyond_batches": produce_request_bytes - k.batch_bytes,
        "produce_response_bytes": k.response_bytes.get(0, 0),
        "other_api_bytes": {API_NAMES.get(a, str(a)): k.request_bytes[a] + k.response_bytes.get(a, 0)
                            for a in k.request_bytes if a != 0},
        "retransmitted": vars(frames.retransmitted), "broken_streams": frames.broken_streams,
    }


def audited_cross_zone_batches(audit_dir: Path) -> tuple[int, int]:
    """(bytes, batches) of the cross-zone produce_batch records under audit_dir."""
    total_bytes = batches = 0
    for path in audit_dir.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as lines:
            for line in lines:
                record = json.loads(line)
                if record.get("kind") == "produce_batch" and record.get("route") in ("wal", "direct_cross"):
                    total_bytes += int(record["bytes"])
                    batches += 1
    return total_bytes, batches


def one_run(mtu: int, more_mtus: list[int], mb: float, work: Path) -> list[dict[str, object]]:
    """One environment: a baseline at `mtu`, the sidecar run, then a baseline per `more_mtus`."""
    load = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = run_demo(work, mb=mb, record_bytes=1000, policy="wal", mode="netns", progress=lambda _m: None,
                      offloads=False, sidecar_config=SLOW_HOST, link_mtu=mtu, capture_frames=True, audit=False,
                      more_baseline_mtus=more_mtus)
    audit_bytes, audit_batches = audited_cross_zone_batches(result.run_dir / "audit")
    baselines = [(mtu, result.baseline), *result.mtu_baselines.items()]
    return [{"started_utc": started, "load_avg": [round(x, 2) for x in load], "mb": mb,
             **row(m, baseline.reading, audit_bytes, audit_batches)} for m, baseline in baselines]


def row(mtu: int, reading: CrossZoneReading, audit_bytes: int, audit_batches: int) -> dict[str, object]:
    frames = reading.frames
    assert frames is not None and reading.total_bytes is not None
    framing = meter_framing(False, mtu)
    parts = breakdown(frames)
    estimate = direct_produce_wire_bytes(audit_bytes, audit_batches, framing)
    model_on_capture = direct_produce_wire_bytes(frames.kafka.batch_bytes, frames.kafka.batches, framing)
    return {
        "mtu": mtu, "meter_bytes": reading.total_bytes, "meter_packets": reading.total_packets,
        "captured_bytes": frames.total_bytes, "frames_dropped": reading.frames_dropped,
        "audit_estimate": estimate, "audit_vs_meter": estimate / reading.total_bytes - 1,
        "audit_batches": audit_batches, "audit_batch_bytes": audit_bytes,
        "model_on_captured_batches": model_on_capture, "model_on_capture_vs_meter": model_on_capture / reading.total_bytes - 1,
        **parts,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mtu", type=int, default=1500)
    parser.add_argument("--also-mtu", type=int, action="append", default=[],
                        help="one more baseline run in the same environment with the links at this MTU")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mb", type=float, default=12.0)
    parser.add_argument("--out", default="framing-calibration.jsonl")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="framing-cal-") as work, open(args.out, "a") as out:
        for _ in range(args.runs):
            for line in one_run(args.mtu, args.also_mtu, args.mb, Path(work)):
                out.write(json.dumps(line) + "\n")
                out.flush()
                print(json.dumps(line, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
