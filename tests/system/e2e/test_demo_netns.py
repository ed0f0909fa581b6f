"""The demo's pipeline, smaller, in real network namespaces (root only): the two targets
of the three-zone environment and exactly-once delivery in both runs, with the links'
offloads off (1,500-byte packets, as a real network carries them).

Offloads on (64 KB packets) is what `make demo` runs; the suite ran it here too until the
suite neared CI's 20 minutes (41 s). Its assertions are a subset of these: the same runs
and checks without the per-packet framing floor."""

from __future__ import annotations

import os
import shutil

import pytest

# No timing claims (bytes, records and the audit against the meter; the gray deadlines below
# wait for a slow host) and an environment of its own: it runs beside the system chain.
BESIDE_THE_SYSTEM_TIER = True

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root; "
                                                            "tests/system/e2e/test_three_zones_loopback.py covers loopback")]


@pytest.mark.parametrize("offloads", [
    pytest.param(False, id="offloads-off",
                 marks=pytest.mark.skipif(shutil.which("ethtool") is None, reason="needs ethtool (make setup)")),
])
def test_wal_route_cuts_metered_cross_zone_bytes_by_99_percent_and_the_audit_agrees(tmp_path, offloads):
    from azsidecar.demo import run_demo

    # The suite runs this beside other tests on two cores: at load 20-40 an agent's answers
    # can take longer than the gray-failure deadline (at most notify.gray_max_s, 1.5 s), the
    # proxies then open the zone's circuit and send its batches direct for 10 s (a fallback
    # tests/system/reliability/test_gray_failures.py tests), which this meter would count:
    # a loaded run measured 94 % instead of 99 %. Here the deadline waits for a slow host.
    slow_host = {"notify": {"gray_floor_s": 8.0, "gray_max_s": 8.0}}
    result = run_demo(tmp_path, mb=12.0, record_bytes=1000, policy="wal", mode="netns", progress=lambda _m: None,
                      offloads=offloads, sidecar_config=slow_host)

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
    # The audit's estimate of what a direct produce sends across zones, framing included for
    # the links' packet size (azsidecar.demo.meter_framing), against the meter: within 3 %,
    # as docs/audit-records.md states. The estimate leaves out request headers, Metadata and
    # connection set-up, which on a run this small weigh ~0.5-2 % and vary with how the
    # baseline producers batch: with offloads on the estimate was 8,111,762 bytes in every
    # run, the meter 8,157,837-8,224,985 (-0.56 % to -1.38 %); offloads off, a loaded run
    # -2.05 %. Without the framing model the estimate is 5.7-7.2 % low: the bound catches that.
    estimate = result.audit_total("direct_equivalent_bytes")
    assert estimate is not None, result.audit_tables.get("savings", [{}])[0].keys()
    assert abs(estimate / result.baseline.reading.total_bytes - 1) <= 0.03, (estimate,
                                                                             result.baseline.reading.total_bytes)
