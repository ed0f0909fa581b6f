"""`azsidecar plan leaders`: move partition leaders to the zone their produce bytes come from
and their consumers fetch from (consumer bytes: the pass-through's fetch_bytes records).

Reads the audit records (leader_placement.audit_input, and the earlier applies' leader_move
records: leader_placement.applied), the cluster's placement through the Admin API with the
upstream's security (leader_placement.admin), plans (leader_placement.plan), prints the moves,
the savings and the placements undone since they were applied, and writes the plan file
(leader_placement.plan_file) and the reassignment file. With --apply --plan FILE, carries
out exactly that saved plan; with --apply alone, the plan it just made. The apply goes batch
by batch (leader_placement.apply), writes a leader_move audit record per verified move, and
stops at the first refusal or anomaly: exit code 1 with the message. Bad input is a
ConfigError (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from azsidecar.config import Config, load_config, require_bootstrap_servers
from azsidecar.failures import StartupFailure
from azsidecar.secrets import apply_secrets
from core.audit import AuditSink
from core.configload import ConfigError
from core.prices_file import load_prices
from kafka_upstream.config import UpstreamConfig
from leader_placement.admin import KafkaLeaderAdmin, LeaderAdminError, kafka_python_security
from leader_placement.applied import LEADER_MOVE, AppliedMoves, Undone, leader_move_fields, undone
from leader_placement.apply import ApplyResult, apply_moves
from leader_placement.audit_input import (
    AuditedTraffic,
    AuditInputError,
    leader_prices,
    produce_bytes_by_zone,
    read_records,
)
from leader_placement.plan import (
    Constraints,
    LeaderPlan,
    LeaderPlanError,
    LeaderPrices,
    Move,
    plan_leaders,
    reassignment_json,
)
from leader_placement.plan_file import (
    PlanFileError,
    SavedPlan,
    make_plan_id,
    other_cluster,
    parse_plan,
    plan_document,
)
from spark_audit.config import AuditConfig
from spark_audit.writer import AuditWriter

AUDIT_COMPONENT = "plan-leaders"  # names the audit files the apply writes
POLL_S = 0.5  # between reads of the cluster's state while a batch's reassignment or election completes
CREDENTIALS_RE = re.compile(r"Authentication|Authorization|certificate", re.I)  # the client errors that name a cause


class _ClientErrors(logging.Handler):
    """Keeps kafka-python's first error lines (a refused connection, SASL login or TLS
    handshake) for our one line on failure, instead of its retry log on stderr."""

    KEPT = 20

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message in self.messages:
            return
        # The first line naming a refused login or certificate is kept even past KEPT: on a
        # loaded host the client logged twenty "socket disconnected" lines (a line per port)
        # before the SASL failure, and the one line on failure then named no cause.
        if len(self.messages) < self.KEPT or (
                CREDENTIALS_RE.search(message) and not any(CREDENTIALS_RE.search(m) for m in self.messages)):
            self.messages.append(message)

    def cause(self, failure: str) -> str:
        """The kept line that says most about `failure`: a refused login or certificate first,
        else the first that says more than `failure` does; "" if none."""
        more = [m for m in self.messages if m not in failure and failure not in m and "Bootstrap failed" not in m]
        return next((m for m in more if CREDENTIALS_RE.search(m)), more[0] if more else "")


def sasl_hint(upstream: UpstreamConfig, cause: str) -> str:
    """What to check when a SASL login failed but the client only saw the connection close:
    a broker closes the connection after refusing a login, and kafka-python, when it reads
    the refusal and the close together (a loaded host), reports only "socket disconnected"
    (seen in loaded test runs; every connection of the bootstrap time-out alike)."""
    if not upstream.security_protocol.startswith("SASL_") or CREDENTIALS_RE.search(cause):
        return ""
    return (f"; the brokers may have refused the SASL login and closed the connection: check "
            f"upstream.sasl_mechanism ({upstream.sasl_mechanism}), upstream.sasl_username and the password")


def _quiet_client() -> _ClientErrors:
    handler = _ClientErrors()
    client_log = logging.getLogger("kafka")
    client_log.propagate = False
    client_log.addHandler(handler)
    return handler


def main(args: argparse.Namespace) -> int:
    if args.plan and not args.apply:
        raise ConfigError("plan leaders: --plan FILE is carried out with --apply (a dry run plans anew from "
                          "--from-audit and writes --plan-out)")
    if args.plan and args.format == "json":
        raise ConfigError("plan leaders: --format json prints a new plan; with --apply --plan the plan is the file")
    if not args.plan and not args.from_audit:
        raise ConfigError("plan leaders: give --from-audit DIR (or --apply --plan FILE)")
    if args.apply and not (args.audit_out or args.from_audit):
        raise ConfigError("plan leaders: --apply --plan: give --audit-out DIR|s3://bucket/prefix (or --from-audit "
                          "DIR), where the leader_move records of the moves go")
    config = apply_secrets(load_config(args.config, {"upstream.bootstrap_servers": args.bootstrap_servers},
                                       os.environ), os.environ)
    require_bootstrap_servers(config, "plan leaders")
    saved = read_plan(Path(args.plan)) if args.plan else None
    inputs = _read_inputs(args) if saved is None else None
    security = kafka_python_security(config.upstream)
    client_errors = _quiet_client()
    try:
        with KafkaLeaderAdmin(config.upstream.bootstrap_servers, security) as admin:
            if inputs is not None:
                saved = _plan(admin, args, config, *inputs)
                if not args.apply:
                    return 0
            elif saved is not None:
                refused = other_cluster(saved, admin.cluster_id())
                if refused:
                    print(f"azsidecar: leader placement refused: {refused}", file=sys.stderr)
                    return 1
                print_saved(saved, args.plan, time.time(), sys.stdout)
            if saved is None or not saved.moves:
                return 0
            result = _apply(admin, saved, args, config)
    except LeaderAdminError as exc:
        cause = client_errors.cause(str(exc))
        detail = f" (first client error: {cause})" if cause else ""
        raise StartupFailure(f"{exc}{detail}{sasl_hint(config.upstream, cause)}") from exc
    if not result.started:
        print(f"azsidecar: leader placement refused, nothing changed: {result.error}", file=sys.stderr)
        return 1
    if not result.ok:
        print(f"azsidecar: leader placement stopped after {len(result.moved)} of {len(saved.moves)} moves: "
              f"{result.error}", file=sys.stderr)
        return 1
    print(f"applied {len(result.moved)} moves of plan {saved.plan_id}")
    return 0


def read_plan(path: Path) -> SavedPlan:
    """The saved plan at `path`. Raises ConfigError naming the file and what is wrong."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--plan {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"--plan {path}: not JSON ({exc})") from exc
    try:
        return parse_plan(doc)
    except PlanFileError as exc:
        raise ConfigError(f"--plan {path}: {exc}") from exc


_Inputs = tuple[AuditedTraffic, AppliedMoves, list[str], Constraints, LeaderPrices]


def _read_inputs(args: argparse.Namespace) -> _Inputs:
    """The audit's traffic and earlier applies, the topics to plan, the constraints and prices.
    Raises ConfigError for bad input."""
    prices = load_prices(args.prices)
    root = Path(args.from_audit)
    applied = AppliedMoves()
    try:
        audited = produce_bytes_by_zone(applied.watch(read_records(root)))
    except AuditInputError as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        raise ConfigError(f"{root}: {exc}") from exc
    topics = [t for t in audited.topics if not args.topic or t in args.topic]
    if not topics:
        raise ConfigError(f"{root}: no successful produce_batch or produce_summary records"
                          + (f" of topic(s) {', '.join(args.topic)}" if args.topic else "")
                          + " (nor fetch_bytes records a leader served)")
    try:
        constraints = Constraints(skew=args.skew, min_saving_bytes=args.min_saving_bytes,
                                  min_saving_usd=args.min_saving_usd, max_moves=args.max_moves)
        cross_prices = leader_prices(audited, prices, args.storage_class)
    except (LeaderPlanError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    return audited, applied, topics, constraints, cross_prices


def _plan(admin: KafkaLeaderAdmin, args: argparse.Namespace, config: Config, audited: AuditedTraffic,
          applied: AppliedMoves, topics: list[str], constraints: Constraints, cross_prices: LeaderPrices) -> SavedPlan:
    """Plan on the audit and the cluster as it is; print the plan and the placements undone;
    write the plan file and the reassignment file. Raises StartupFailure for a placement the
    planner cannot read, LeaderAdminError when the cluster refuses."""
    traffic = {k: v for k, v in audited.bytes_by_zone.items() if k[0] in topics}
    fetches = {k: v for k, v in audited.fetch_bytes_by_zone.items() if k[0] in topics}
    placement, unknown = admin.placement(topics)
    try:
        plan = plan_leaders(traffic, placement, cross_prices, constraints, audited.window_s, fetches)
    except LeaderPlanError as exc:
        raise StartupFailure(f"the cluster's placement: {exc}") from exc
    if unknown:
        print(f"azsidecar: not in the cluster (left out): {', '.join(unknown)}", file=sys.stderr)
    if audited.local_bytes == 0:
        print("azsidecar: warning: no batch of the audit went to a leader in its own zone; with "
              "proxy.bypass_same_zone those are not audited and the plan overstates its savings",
              file=sys.stderr)
    earlier = {k: m for k, m in applied.latest.items() if not args.topic or k[0] in args.topic}
    now = {p.key: p for p in placement.partitions if p.key in earlier}
    elsewhere = sorted(k for k in earlier if k not in now)  # moved partitions of topics not planned now
    if elsewhere:  # (describing no topic would describe them all)
        now.update(admin.describe(elsewhere))
    undone_moves = undone(earlier, now, placement.broker_zones)
    created_ms = int(time.time() * 1000)
    cluster_id = admin.cluster_id()
    saved = SavedPlan(make_plan_id(plan.moves, cluster_id, created_ms), created_ms, cluster_id,
                      tuple(config.upstream.bootstrap_servers), audited.window_s, plan.moves)
    files = PlanFiles(Path(args.out), Path(args.plan_out), saved.plan_id)
    files.out.write_text(json.dumps(reassignment_json(plan.moves), indent=1) + "\n")
    files.plan_out.write_text(json.dumps(plan_document(saved), indent=1) + "\n")
    if args.format == "json":
        json.dump(as_json(plan, audited, cross_prices.usd_per_cross_byte, files, args.apply, undone_moves,
                          len(earlier)), sys.stdout, indent=1)
        print()
    else:
        print_text(plan, audited, cross_prices.usd_per_cross_byte, files, args.apply, sys.stdout)
        print_undone(undone_moves, len(earlier), sys.stdout)
    return saved


def _apply(admin: KafkaLeaderAdmin, saved: SavedPlan, args: argparse.Namespace, config: Config) -> ApplyResult:
    """Carry the plan out, each verified move audited as a leader_move record (in --audit-out,
    default the --from-audit directory); warns when a record could not be written."""
    audit_out = args.audit_out or args.from_audit
    writer = AuditWriter(AuditConfig(output=audit_out, s3_endpoint_url=config.audit.s3_endpoint_url),
                         config.zone or "", AUDIT_COMPONENT)
    sink: AuditSink = writer  # typed per kind: the record's names and types are checked
    try:
        return apply_moves(admin, saved.moves, batch_size=args.batch_size, throttle_s=args.throttle_s,
                           timeout_s=args.timeout_s, poll_s=POLL_S, clock=time.monotonic, sleep=time.sleep,
                           report=lambda line: print(line, flush=True),
                           record=lambda m: sink.emit(LEADER_MOVE, leader_move_fields(m, saved.plan_id)))
    finally:
        closed = writer.close()
        stats = writer.stats()
        if stats.emitted:
            print(f"{stats.written} leader_move records written to {audit_out}", flush=True)
        if not closed or stats.written < stats.emitted or stats.dropped or stats.rejected:
            print(f"azsidecar: warning: of {stats.emitted} leader_move records {stats.written} were written to "
                  f"{audit_out}: a later run cannot tell whether the other moves were undone", file=sys.stderr)


@dataclass(frozen=True)
class PlanFiles:
    out: Path  # the reassignment file, as kafka-reassign-partitions reads it
    plan_out: Path  # the saved plan, as --apply --plan reads it
    plan_id: str


def as_json(plan: LeaderPlan, audited: AuditedTraffic, usd_per_byte: float, files: PlanFiles, apply: bool,
            undone_moves: Sequence[Undone] = (), applied_seen: int = 0) -> dict[str, Any]:
    return {
        "window_s": audited.window_s, "usd_per_cross_byte": usd_per_byte, "leader_cap": plan.leader_cap,
        "reassignment_file": str(files.out), "plan_file": str(files.plan_out), "plan_id": files.plan_id,
        "apply": apply,
        "saving_bytes": plan.saving_bytes, "saving_usd": plan.saving_usd,
        "saving_usd_per_month": plan.per_month(plan.saving_usd),
        "produce_saving_bytes": plan.saving_bytes - plan.fetch_saving_bytes,
        "fetch_saving_bytes": plan.fetch_saving_bytes,
        "consumer_bytes": {"leader": audited.leader_fetch_bytes, "follower": audited.follower_fetch_bytes,
                           "unattributed": audited.unknown_fetch_bytes},
        "topics": [{"topic": t.topic, "moves": t.moves, "saving_bytes": t.saving_bytes, "saving_usd": t.saving_usd,
                    "saving_usd_per_month": plan.per_month(t.saving_usd),
                    "produce_saving_bytes": t.saving_bytes - t.fetch_saving_bytes,
                    "fetch_saving_bytes": t.fetch_saving_bytes} for t in plan.topics],
        "moves": [{"topic": m.topic, "partition": m.partition, "from_broker": m.from_broker, "from_zone": m.from_zone,
                   "to_broker": m.to_broker, "to_zone": m.to_zone, "saving_bytes": m.saving_bytes,
                   "produce_saving_bytes": m.produce_saving_bytes, "fetch_saving_bytes": m.fetch_saving_bytes,
                   "saving_usd": m.saving_usd, "replicas": list(m.replicas_after)} for m in plan.moves],
        "held": [{"topic": h.topic, "partition": h.partition, "to_zone": h.to_zone, "saving_bytes": h.saving_bytes,
                  "reason": h.reason} for h in plan.held],
        "applied_moves_seen": applied_seen,
        "undone": [{"topic": u.applied.topic, "partition": u.applied.partition, "plan_id": u.applied.plan_id,
                    "applied_ms": u.applied.applied_ms, "to_broker": u.applied.to_broker,
                    "to_zone": u.applied.to_zone, "leader": u.leader, "leader_zone": u.leader_zone}
                   for u in undone_moves],
    }


def _month(plan: LeaderPlan, usd: float) -> str:
    month = plan.per_month(usd)
    return f", {month:,.2f} USD a month at this rate" if month is not None else ""


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _split(total: int, fetched: int, consumers: bool) -> str:
    """` (P produce, F consumer)` beside a byte count, when the audit had consumer bytes."""
    return f" ({total - fetched:,} produce, {fetched:,} consumer)" if consumers or fetched else ""


def move_line(m: Move, consumers: bool = False) -> str:
    return (f"  {m.topic}-{m.partition}: broker {m.from_broker} ({m.from_zone}) -> {m.to_broker} ({m.to_zone}), "
            f"saves {m.saving_bytes:,} bytes{_split(m.saving_bytes, m.fetch_saving_bytes, consumers)}, "
            f"replicas {list(m.replicas_before)} -> {list(m.replicas_after)}")


def print_text(plan: LeaderPlan, audited: AuditedTraffic, usd_per_byte: float, files: PlanFiles, apply: bool,
               fh: TextIO) -> None:
    print(f"audit window {audited.window_s:.1f} s; a cross-zone byte costs {usd_per_byte * 1e9:.4f} USD/GB; "
          f"a broker may lead at most {plan.leader_cap} of these partitions", file=fh)
    consumers = bool(audited.leader_fetch_bytes or audited.follower_fetch_bytes or audited.unknown_fetch_bytes)
    if consumers:
        print(f"consumer bytes through the pass-through: {audited.leader_fetch_bytes:,} served by leaders "
              f"(planned with), {audited.follower_fetch_bytes:,} by followers and {audited.unknown_fetch_bytes:,} "
              "unattributed (left out: the leader's place does not change them, or no leader was known)", file=fh)
    if not plan.moves:
        print("no leader moves planned", file=fh)
    else:
        print(f"{len(plan.moves)} leader moves, saving {plan.saving_bytes:,} cross-zone bytes"
              f"{_split(plan.saving_bytes, plan.fetch_saving_bytes, consumers)} "
              f"({plan.saving_usd:.6f} USD) over the window{_month(plan, plan.saving_usd)}:", file=fh)
        for t in plan.topics:
            print(f"  topic {t.topic}: {t.moves} moves, {t.saving_bytes:,} bytes"
                  f"{_split(t.saving_bytes, t.fetch_saving_bytes, consumers)}, {t.saving_usd:.6f} USD"
                  f"{_month(plan, t.saving_usd)}", file=fh)
        for m in plan.moves:
            print(move_line(m, consumers), file=fh)
    for h in plan.held:
        print(f"  held {h.topic}-{h.partition} (would save {h.saving_bytes:,} bytes in {h.to_zone}): {h.reason}",
              file=fh)
    print(f"plan file: {files.plan_out} (plan {files.plan_id})", file=fh)
    print(f"reassignment file: {files.out}" + ("" if apply else (
        f" (dry run: nothing changed; review, then apply exactly this plan with --apply --plan {files.plan_out}, "
        "or run kafka-reassign-partitions with this file)")), file=fh)


def print_undone(undone_moves: Sequence[Undone], applied_seen: int, fh: TextIO) -> None:
    """The placements earlier applies made that the cluster no longer has (nothing without leader_move records)."""
    if not applied_seen:
        return
    if not undone_moves:
        print(f"earlier applies: {applied_seen} partitions moved, each still led by the broker it was moved to",
              file=fh)
        return
    print(f"placement undone: {len(undone_moves)} of {applied_seen} partitions moved by earlier applies are no "
          "longer led by the broker they were moved to:", file=fh)
    for u in undone_moves:
        a = u.applied
        now = ("no longer exists" if u.leader is None else "has no leader" if u.leader < 0
               else f"now led by broker {u.leader} ({u.leader_zone or 'zone unknown'})")
        print(f"  {a.topic}-{a.partition}: moved to broker {a.to_broker} ({a.to_zone}) by plan {a.plan_id} at "
              f"{_utc(a.applied_ms)}; {now}", file=fh)


def print_saved(saved: SavedPlan, path: str, now_s: float, fh: TextIO) -> None:
    print(f"plan {saved.plan_id} from {path}: made {_utc(saved.created_ms)} "
          f"({max(0.0, now_s - saved.created_ms / 1000) / 60:,.0f} min ago) for cluster {saved.cluster_id}; "
          f"{len(saved.moves)} leader moves", file=fh)
    for m in saved.moves:
        print(move_line(m), file=fh)
