"""The traffic a plan is for, from a CSV profile row or from the sidecars' audit records:
one `Flow` per producer host and leader zone, and what a run's audit says it cost (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.audit import AGENT_READ_KINDS, NOTIFICATION_KINDS
from core.prices import Prices
from planner.audit_batches import field_number, record_ts_ms, successful_batches
from planner.plan import DEFAULT_BATCH_BYTES, PRODUCE_OVERHEAD_BYTES, ClassPrices, Flow, PlanError, cross_byte_usd


def flow_from_row(row: Mapping[str, str], default_batch_bytes: int = DEFAULT_BATCH_BYTES,
                  where: str = "", closed_loop_requests_per_s: float | None = None) -> Flow:
    """One CSV row: host, zone, leader_zone, bytes_per_s and optionally batches_per_s and
    requests_per_s. Without requests_per_s, `closed_loop_requests_per_s` (if given) is the
    row's request rate (and, without batches_per_s, its batch rate: a batch per request).

    Raises PlanError naming the row and column.
    """
    def number(column: str) -> float:
        text = (row.get(column) or "").strip()
        try:
            value = float(text)
        except ValueError as exc:
            raise PlanError(f"{where}{column}: {text!r} is not a number") from exc
        if not math.isfinite(value) or value < 0:
            raise PlanError(f"{where}{column}: {text!r} must be a finite number >= 0")
        return value

    def given(column: str) -> bool:
        return bool((row.get(column) or "").strip())

    for column in ("host", "zone", "leader_zone", "bytes_per_s"):
        if not given(column):
            raise PlanError(f"{where}{column}: missing")
    rate = number("bytes_per_s")
    requests = number("requests_per_s") if given("requests_per_s") else (closed_loop_requests_per_s or 0.0)
    if rate <= 0:
        requests = 0.0
    if given("batches_per_s"):
        batches = number("batches_per_s")
    else:
        batches = requests if requests > 0 else rate / default_batch_bytes
    if requests > batches > 0:
        raise PlanError(f"{where}requests_per_s: {requests:g} is more than batches_per_s {batches:g}")
    closed_loop = requests > 0 and not given("requests_per_s")
    return Flow(row["host"].strip(), row["zone"].strip(), row["leader_zone"].strip(), rate, batches, requests,
                closed_loop)


# Batches a proxy received within this long of each other (ts_ms - latency_ms) came in one produce
# request, or in requests that reached the writer together: one arrival for the object model.
REQUEST_GAP_S = 0.005


def flows_from_produce_batches(records: Iterable[Mapping[str, object]]) -> tuple[list[Flow], float]:
    """A profile from audit `produce_batch` or `produce_summary` records (core/audit.py;
    summaries as planner.audit_batches spreads them): per proxy (host) and leader zone, bytes,
    batches and arrivals (batches received within REQUEST_GAP_S of each other, a produce
    request: `requests_per_s`; from summaries, at interval resolution, evenly paced batches)
    over the window from the first to the last batch. Returns the flows and the window in
    seconds. Raises PlanError when there is nothing to measure."""
    sums: dict[tuple[str, str, str], list[float]] = {}
    received: dict[tuple[str, str], list[tuple[float, str]]] = {}
    first = last = None
    for batch in successful_batches(records):
        ts = batch.ended_ms
        first = ts if first is None else min(first, ts)
        last = ts if last is None else max(last, ts)
        host = (batch.proxy_id, batch.zone)
        acc = sums.setdefault((*host, batch.leader_zone), [0.0, 0.0, 0.0])
        acc[0] += batch.nbytes
        acc[1] += 1
        received.setdefault(host, []).append((batch.received_s, batch.leader_zone))
    if first is None or last is None:
        raise PlanError("no successful produce_batch or produce_summary records in the audit input")
    for (proxy, zone), times in received.items():
        times.sort()
        request: set[str] = set()
        previous = None
        for t, leader in [*times, (math.inf, "")]:  # the sentinel closes the last request
            if previous is not None and t - previous > REQUEST_GAP_S:
                for z in request:
                    sums[(proxy, zone, z)][2] += 1
                request = set()
            request.add(leader)
            previous = t
    window_s = max((last - first) / 1000.0, 0.001)
    return [Flow(h, z, lz, b / window_s, n / window_s, q / window_s)
            for (h, z, lz), (b, n, q) in sorted(sums.items())], window_s


@dataclass(frozen=True)
class Audited:
    """What a run's audit records say, counted the way spark_audit/jobs.py `savings` does."""

    window_s: float
    direct_equivalent_bytes: float
    crossed_bytes: float  # direct_cross wire bytes + notification bytes
    wal_objects: int
    put_requests: float  # WAL PUTs + checkpoint manifest PUTs
    get_requests: float

    def bill(self, prices: Prices, cls: ClassPrices) -> tuple[float, float, float]:
        """(transfer USD, S3 request USD, net savings USD) of the audited run."""
        byte_usd = cross_byte_usd(prices)
        transfer = self.crossed_bytes * byte_usd
        requests = self.put_requests * cls.put + self.get_requests * cls.get
        return transfer, requests, self.direct_equivalent_bytes * byte_usd - transfer - requests


def audited_totals(records: Iterable[Mapping[str, object]]) -> Audited:
    """Totals of one run's audit records (any order; produce batches one per record or summed
    per interval). Raises PlanError without produce_batch or produce_summary records."""
    direct_eq = crossed = puts = gets = 0.0
    objects = 0
    first = last = None
    for r in records:
        kind = r.get("kind")
        if kind in ("produce_batch", "produce_summary"):
            if r.get("error_code", 0) not in (0, None):
                continue
            summary = kind == "produce_summary"
            batches = field_number(r, "batches") if summary else 1.0
            ts = record_ts_ms(r)
            start = int(field_number(r, "first_ts_ms")) or ts if summary else ts  # a summary spans its interval
            end = int(field_number(r, "last_ts_ms")) or ts if summary else ts
            first = start if first is None else min(first, start)
            last = end if last is None else max(last, end)
            if r.get("route") != "local":
                direct_eq += field_number(r, "bytes") + batches * PRODUCE_OVERHEAD_BYTES
            if r.get("route") == "direct_cross":
                crossed += field_number(r, "wire_bytes")
        elif kind in NOTIFICATION_KINDS:  # one round trip, or a summary's sums (schema v15)
            crossed += field_number(r, "request_bytes") + field_number(r, "response_bytes")
        elif kind == "wal_flush":
            objects += 1
            puts += field_number(r, "put_requests")
        elif kind == "wal_flush_summary":
            objects += int(field_number(r, "objects"))
            puts += field_number(r, "put_requests")
        elif kind == "checkpoint_write":
            puts += 1
        elif kind == "checkpoint_summary":  # each manifest's PUT shared among its source zones
            puts += field_number(r, "manifest_puts")
        elif kind in AGENT_READ_KINDS:
            gets += field_number(r, "gets")
    if first is None or last is None:
        raise PlanError("no successful produce_batch or produce_summary records in the audit input")
    return Audited(max((last - first) / 1000.0, 0.001), direct_eq, crossed, objects, puts, gets)
