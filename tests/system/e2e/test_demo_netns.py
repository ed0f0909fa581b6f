"""The demo's pipeline, smaller, in real network namespaces (root only): the two targets
of the three-zone environment and exactly-once delivery in both runs, with the links'
offloads off (1,500-byte packets, as a real network carries them), and the audit's estimate
of a direct produce against the meter at 1,500 and, in one more baseline run, 9,001 bytes.

Offloads on (64 KB packets) is what `make demo` runs; the suite ran it here too until the
suite neared CI's 20 minutes (41 s). Its assertions are a subset of these: the same runs
and checks without the per-packet framing floor."""

from __future__ import annotations

import os
import shutil

import pytest

from core.framing import Framing, direct_produce_wire_bytes
from deploy.local.zones import CrossZoneReading

# No timing claims (bytes, records and the audit against the meter; the gray deadlines below
# wait for a slow host) and an environment of its own: it runs beside the system chain.
BESIDE_THE_SYSTEM_TIER = True
JUMBO_MTU = 9001  # inside an AWS VPC

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root; "
                                                            "tests/system/e2e/test_three_zones_loopback.py covers loopback")]


@pytest.mark.parametrize("offloads", [
    pytest.param(False, id="offloads-off",
                 marks=pytest.mark.skipif(shutil.which("ethtool") is None, reason="needs ethtool (make setup)")),
])
def test_wal_route_cuts_metered_cross_zone_bytes_by_99_percent_and_the_audit_agrees(tmp_path, offloads,
                                                                                   record_property):
    from azsidecar.demo import run_demo

    # The suite runs this beside other tests on two cores: at load 20-40 an agent's answers
    # can take longer than the gray-failure deadline (at most notify.gray_max_s, 1.5 s), the
    # proxies then open the zone's circuit and send its batches direct for 10 s (a fallback
    # tests/system/reliability/test_gray_failures.py tests), which this meter would count:
    # a loaded run measured 94 % instead of 99 %. Here the deadline waits for a slow host.
    slow_host = {"notify": {"gray_floor_s": 8.0, "gray_max_s": 8.0}}
    result = run_demo(tmp_path, mb=12.0, record_bytes=1000, policy="wal", mode="netns", progress=lambda _m: None,
                      offloads=offloads, sidecar_config=slow_host, capture_frames=True,
                      more_baseline_mtus=(JUMBO_MTU,), audit_job="savings")

    # Exactly once, in per-partition order, in both runs (the verifier reads every record back).
    assert result.baseline.verification["ok"] and result.sidecar.verification["ok"]
    assert result.baseline.verification["records"] == 12_000
    assert result.sidecar.verification["records"] == 12_000
    # Two thirds of the partitions lead in another zone: ~8 MB of payload must cross in the
    # baseline; through the sidecar only notifications cross.
    assert result.baseline.cross_zone_payload_bytes > 7_500_000
    assert result.baseline.reading.total_bytes >= result.baseline.cross_zone_payload_bytes
    assert result.metered_reduction >= 0.99, (result.baseline.reading.total_bytes,
                                              result.sidecar.reading.total_bytes)
    # With offloads off, every 1,448 payload bytes travel in their own packet with 66 bytes of
    # Ethernet/IP/TCP headers, plus the ACKs: the meter reads at least 4.5 % above the payload.
    if not offloads:
        assert result.baseline.reading.total_bytes >= 1.045 * result.baseline.cross_zone_payload_bytes
    # The audit's estimate of what a direct produce sends across zones (the savings job's
    # direct_equivalent_bytes; the whole report is `make demo`'s and tests/integration/spark_audit's:
    # the sidecar run's cross-zone batches with TCP/IP framing for the links' packet size,
    # azsidecar.demo.meter_framing) is a lower bound: never above the meter, and within 1 % of
    # what the meter read less the retransmissions. These links lose nothing: the segments sent
    # twice are tail-loss probes (RFC 8985), the producer's kernel sending a request's last
    # segment again when the broker's ACK of it takes longer than 2 x SRTT + 2 timer ticks; the
    # broker D-SACKs the copy. Any Linux sender does that and a user's meter bills it (up to one
    # segment a request: 2-3 % of the meter at 9,001 bytes), so the environment keeps them; a
    # segment sent twice that is neither a probe's last segment nor D-SACKed (what a loss
    # looks like) counts as delivered, and more than two such segments in a run fail. The
    # estimate counts a data packet's headers per MSS and no pure ACKs (here the brokers ACK a
    # bulk produce about once per 50 KB, but need not); the meter also holds those ACKs,
    # connection set-up and ApiVersions/Metadata: -0.4 to -0.9 % (docs/audit-records.md, "Bytes
    # on the wire"). An estimate that counted one ACK per 2 segments read +1.4 % above this
    # meter at 1,500 bytes.
    estimate = result.audit_total("direct_equivalent_bytes")
    assert estimate is not None, result.audit_tables.get("savings", [{}])[0].keys()
    record_property("mtu_1500", figures(estimate, result.baseline.reading))
    assert_lower_bound_within_1_percent(estimate, result.baseline.reading)
    # At 9,001 bytes, the same formula on the same audited batches against a baseline run
    # with the links' MTU at 9,001: 8,949 payload bytes a packet.
    savings = result.audit_tables["savings"]
    audited_bytes = sum(int(float(r[f"bytes_{route}"])) for r in savings for route in ("wal", "direct_cross"))
    audited_batches = sum(int(float(r[f"batches_{route}"])) for r in savings for route in ("wal", "direct_cross"))
    jumbo_estimate = direct_produce_wire_bytes(audited_bytes, audited_batches, Framing(JUMBO_MTU, link_header_bytes=14))
    record_property("mtu_9001", figures(jumbo_estimate, result.mtu_baselines[JUMBO_MTU].reading))
    assert_lower_bound_within_1_percent(jumbo_estimate, result.mtu_baselines[JUMBO_MTU].reading)


def figures(estimate: float, reading: CrossZoneReading) -> dict[str, object]:
    """What a --junitxml report keeps of one comparison (docs/benchmarks.md quotes them)."""
    frames, meter = reading.frames, reading.total_bytes
    if frames is None or not meter:
        return {"estimate": round(estimate), "meter": meter}
    resent = frames.retransmitted
    return {"estimate": round(estimate), "meter": meter, "vs_meter": round(estimate / meter - 1, 5),
            "retransmitted_segments": resent.packets, "retransmitted_bytes": resent.frame_bytes,
            "vs_meter_less_retransmitted": round(estimate / (meter - resent.frame_bytes) - 1, 5),
            "retransmissions": frames.retransmissions().as_dict(), "broken_streams": frames.broken_streams,
            "tcp_counters": {zone: dict(counters) for zone, counters in reading.tcp_counters.items()},
            "load_avg": os.getloadavg()}


def assert_lower_bound_within_1_percent(estimate: float, reading: CrossZoneReading) -> None:
    frames = reading.frames
    assert frames is not None and reading.total_bytes is not None and reading.frames_dropped == 0
    # The segments sent twice are tail-loss probes or reached their receiver twice (a D-SACK),
    # with at most a few exceptions: in 35 baseline runs (2026-11-30) 4 of 1,005 were not
    # D-SACKed (all at the tail) and 1 was not at the tail as the capture read it (D-SACKed);
    # a loaded CI run (2026-12-02) had one segment of 24 that was neither. Such a segment may be
    # a first copy the meter never counted (lost before the bridge port) or one the receiver
    # dropped (a starved broker's full socket: both copies metered). So the lower bound counts
    # it as delivered, and more than two of them in a run (a lossy environment: 1 % loss would
    # be ~60 of the ~6,000 segments at 1,500 bytes) fail.
    unexplained = frames.retransmissions().unexplained
    assert unexplained.packets <= 2, (frames.as_dict(), reading.tcp_counters)
    delivered = reading.total_bytes - frames.retransmitted.frame_bytes + unexplained.frame_bytes
    assert 0.99 * delivered <= estimate <= reading.total_bytes, (estimate, reading.total_bytes, frames.as_dict())
