"""`azsidecar plan leaders`: move partition leaders to the zone their produce bytes come from.

Reads the audit records (leader_placement.audit_input), the cluster's placement through
the Admin API with the upstream's security (leader_placement.admin), plans
(leader_placement.plan), prints the moves and savings and writes the reassignment file.
With --apply, carries the moves out batch by batch (leader_placement.apply) and stops at the
first anomaly: exit code 1 with the message. Bad input is a ConfigError (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from azsidecar.config import load_config, require_bootstrap_servers
from azsidecar.failures import StartupFailure
from azsidecar.secrets import apply_secrets
from core.configload import ConfigError
from core.prices_file import load_prices
from kafka_upstream.config import UpstreamConfig
from leader_placement.admin import KafkaLeaderAdmin, LeaderAdminError, kafka_python_security
from leader_placement.apply import apply_moves
from leader_placement.audit_input import (
    AuditedTraffic,
    AuditInputError,
    leader_prices,
    produce_bytes_by_zone,
    read_records,
)
from leader_placement.plan import Constraints, LeaderPlan, LeaderPlanError, plan_leaders, reassignment_json

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
    config = apply_secrets(load_config(args.config, {"upstream.bootstrap_servers": args.bootstrap_servers},
                                       os.environ), os.environ)
    require_bootstrap_servers(config, "plan leaders")
    prices = load_prices(args.prices)
    root = Path(args.from_audit)
    try:
        audited = produce_bytes_by_zone(read_records(root))
    except AuditInputError as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        raise ConfigError(f"{root}: {exc}") from exc
    topics = [t for t in audited.topics if not args.topic or t in args.topic]
    if not topics:
        raise ConfigError(f"{root}: no successful produce_batch records"
                          + (f" of topic(s) {', '.join(args.topic)}" if args.topic else ""))
    try:
        constraints = Constraints(skew=args.skew, min_saving_bytes=args.min_saving_bytes,
                                  min_saving_usd=args.min_saving_usd, max_moves=args.max_moves)
        cross_prices = leader_prices(audited, prices, args.storage_class)
    except (LeaderPlanError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    traffic = {k: v for k, v in audited.bytes_by_zone.items() if k[0] in topics}
    security = kafka_python_security(config.upstream)
    client_errors = _quiet_client()
    try:
        with KafkaLeaderAdmin(config.upstream.bootstrap_servers, security) as admin:
            placement, unknown = admin.placement(topics)
            try:
                plan = plan_leaders(traffic, placement, cross_prices, constraints, audited.window_s)
            except LeaderPlanError as exc:
                raise StartupFailure(f"the cluster's placement: {exc}") from exc
            if unknown:
                print(f"azsidecar: not in the cluster (left out): {', '.join(unknown)}", file=sys.stderr)
            if audited.local_bytes == 0:
                print("azsidecar: warning: no batch of the audit went to a leader in its own zone; with "
                      "proxy.bypass_same_zone those are not audited and the plan overstates its savings",
                      file=sys.stderr)
            out = Path(args.out)
            out.write_text(json.dumps(reassignment_json(plan.moves), indent=1) + "\n")
            if args.format == "json":
                json.dump(as_json(plan, audited, cross_prices.usd_per_cross_byte, str(out), args.apply), sys.stdout,
                          indent=1)
                print()
            else:
                print_text(plan, audited, cross_prices.usd_per_cross_byte, str(out), args.apply, sys.stdout)
            if not args.apply or not plan.moves:
                return 0
            result = apply_moves(admin, plan.moves, batch_size=args.batch_size, throttle_s=args.throttle_s,
                                 timeout_s=args.timeout_s, poll_s=POLL_S, clock=time.monotonic, sleep=time.sleep,
                                 report=lambda line: print(line, flush=True))
    except LeaderAdminError as exc:
        cause = client_errors.cause(str(exc))
        detail = f" (first client error: {cause})" if cause else ""
        raise StartupFailure(f"{exc}{detail}{sasl_hint(config.upstream, cause)}") from exc
    if not result.ok:
        print(f"azsidecar: leader placement stopped after {len(result.moved)} of {len(plan.moves)} moves: "
              f"{result.error}", file=sys.stderr)
        return 1
    print(f"applied {len(result.moved)} moves")
    return 0


def as_json(plan: LeaderPlan, audited: AuditedTraffic, usd_per_byte: float, out: str, apply: bool) -> dict[str, Any]:
    return {
        "window_s": audited.window_s, "usd_per_cross_byte": usd_per_byte, "leader_cap": plan.leader_cap,
        "reassignment_file": out, "apply": apply,
        "saving_bytes": plan.saving_bytes, "saving_usd": plan.saving_usd,
        "saving_usd_per_month": plan.per_month(plan.saving_usd),
        "topics": [{"topic": t.topic, "moves": t.moves, "saving_bytes": t.saving_bytes, "saving_usd": t.saving_usd,
                    "saving_usd_per_month": plan.per_month(t.saving_usd)} for t in plan.topics],
        "moves": [{"topic": m.topic, "partition": m.partition, "from_broker": m.from_broker, "from_zone": m.from_zone,
                   "to_broker": m.to_broker, "to_zone": m.to_zone, "saving_bytes": m.saving_bytes,
                   "saving_usd": m.saving_usd, "replicas": list(m.replicas_after)} for m in plan.moves],
        "held": [{"topic": h.topic, "partition": h.partition, "to_zone": h.to_zone, "saving_bytes": h.saving_bytes,
                  "reason": h.reason} for h in plan.held],
    }


def _month(plan: LeaderPlan, usd: float) -> str:
    month = plan.per_month(usd)
    return f", {month:,.2f} USD a month at this rate" if month is not None else ""


def print_text(plan: LeaderPlan, audited: AuditedTraffic, usd_per_byte: float, out: str, apply: bool,
               fh: TextIO) -> None:
    print(f"audit window {audited.window_s:.1f} s; a cross-zone byte costs {usd_per_byte * 1e9:.4f} USD/GB; "
          f"a broker may lead at most {plan.leader_cap} of these partitions", file=fh)
    if not plan.moves:
        print("no leader moves planned", file=fh)
    else:
        print(f"{len(plan.moves)} leader moves, saving {plan.saving_bytes:,} cross-zone bytes "
              f"({plan.saving_usd:.6f} USD) over the window{_month(plan, plan.saving_usd)}:", file=fh)
        for t in plan.topics:
            print(f"  topic {t.topic}: {t.moves} moves, {t.saving_bytes:,} bytes, {t.saving_usd:.6f} USD"
                  f"{_month(plan, t.saving_usd)}", file=fh)
        for m in plan.moves:
            print(f"  {m.topic}-{m.partition}: broker {m.from_broker} ({m.from_zone}) -> {m.to_broker} ({m.to_zone}), "
                  f"saves {m.saving_bytes:,} bytes, replicas {list(m.replicas_before)} -> {list(m.replicas_after)}",
                  file=fh)
    for h in plan.held:
        print(f"  held {h.topic}-{h.partition} (would save {h.saving_bytes:,} bytes in {h.to_zone}): {h.reason}",
              file=fh)
    print(f"reassignment file: {out}" + ("" if apply else " (dry run: nothing changed; --apply to move, or review "
                                                          "the file and run kafka-reassign-partitions)"), file=fh)
