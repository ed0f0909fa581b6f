"""`azsidecar agent`: run the zone agent that appends WAL entries to the partition leaders.

Secrets (the notification keys, the upstream SASL password) come through
`azsidecar/secrets.py`; the WAL bucket is checked before the agent listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
from collections.abc import Coroutine
from typing import Any

import uvloop

from azsidecar.agent_monitor import monitor_agent
from azsidecar.broker_wait import probe_for, wait_for_brokers
from azsidecar.commands import HMAC_ENV
from azsidecar.config import Config, load_config, require_bootstrap_servers, require_wal_location
from azsidecar.exposition import LabelledRegistry
from azsidecar.failures import StartupFailure
from azsidecar.health import AgentHealth
from azsidecar.logs import setup_logging
from azsidecar.preflight import check_wal_store, startup_errors
from azsidecar.secrets import resolve_secrets
from azsidecar.status import StatusServer
from core.audit import AuditSink, NullAuditSink
from core.configload import ConfigError
from core.object_summary_sink import ObjectSummarySink
from core.periodic_flush import flush_every
from leader_notify.agent.errors import KafkaAppendUnavailable
from leader_notify.agent.runner import running_agent
from leader_notify.metrics import process_agent_metrics
from spark_audit.writer import AuditWriter

log = logging.getLogger("azsidecar.agent")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"zone": args.zone, "log_format": args.log_format, "log_level": args.log_level,
                           "agent.metrics_port": args.metrics_port}
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--listen: expected HOST:PORT, got {args.listen!r}")
        out["agent.listen_host"], out["agent.listen_port"] = host, int(port)
    out["upstream.bootstrap_servers"] = args.bootstrap_servers  # HOST:PORT[,...], split as in the file
    return out


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config, overrides_from_args(args), os.environ)
    setup_logging(config.log_format, config.log_level,  # the flags', else the variables' or the file's
                  component="agent", zone=config.zone)
    require_bootstrap_servers(config, "agent")
    config = resolve_secrets(config, os.environ, args.hmac_key_file)
    if not config.zone:
        raise ConfigError("zone: the agent needs --zone (or zone in the config file)")
    if not config.notify.hmac_keys:
        raise ConfigError(f"notify.hmac_keys: none given (set ${HMAC_ENV}, notify.hmac_key_file or --hmac-key-file)")
    require_wal_location(config, "agent")
    check_wal_store(config.wal, config.wal.bucket_for(config.zone))
    with startup_errors():
        return run_on_event_loop(config.agent.event_loop, _serve_until_signal(config, config.zone))


def run_on_event_loop(name: str, main: Coroutine[Any, Any, int]) -> int:
    """Run `main` on the event loop `agent.event_loop` names (validated by the config).

    uvloop's loop turns and socket I/O cost less CPU than asyncio's selector loop: 9-12 %
    less per MiB appended (docs/benchmarks.md)."""
    if name == "uvloop":
        return uvloop.run(main)
    return asyncio.run(main)


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """What the start-up line says the agent runs on: the loop's class, not the config."""
    return "uvloop" if isinstance(loop, uvloop.Loop) else "asyncio"


async def _serve_until_signal(config: Config, zone: str) -> int:
    metrics = process_agent_metrics()
    health = AgentHealth()
    # The default registry: the agent's own counters and the WAL reader's block cache.
    status = (StatusServer(config.agent.listen_host, config.agent.metrics_port, health.live, health.checks,
                           LabelledRegistry("agent", {"zone": zone}))
              if config.agent.metrics_port else None)
    writer = AuditWriter(config.audit, zone, "agent") if config.audit.enabled else None
    audit: AuditSink = writer if writer is not None else NullAuditSink()
    # The agent's per-object records (reads, applies, checkpoint manifests), summed per interval
    # and key before the writer (audit.object_detail "summary"); flushed on the way out.
    summing: asyncio.Task[None] | None = None
    if writer is not None and config.audit.object_detail == "summary":
        objects = ObjectSummarySink(writer, path_mtu=config.audit.path_mtu)
        summing = asyncio.create_task(flush_every(config.audit.interval_s, objects.flush, objects.close))
        audit = objects
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    keys = tuple(k.encode() for k in config.notify.hmac_keys)
    try:
        if not await asyncio.to_thread(wait_for_brokers, config.upstream.bootstrap_servers,
                                       config.upstream.startup_wait_s, config.upstream.connect_timeout_s,
                                       on_waiting=health.waiting_for_brokers, stopped=stop.is_set,
                                       probe=probe_for(config.upstream.security_protocol)):
            return 0  # stopped while waiting
        health.brokers_reachable()
        async with running_agent(config, zone, keys, audit=audit, metrics=metrics) as (agent, port):
            monitor = asyncio.create_task(monitor_agent(health, agent.probe_brokers, stop.is_set))
            # The line tests and scripts wait for; the port matters when --listen ends in :0.
            print(f"agent zone={zone} event_loop={loop_name(loop)} listening={config.agent.listen_host}:{port}",
                  flush=True)
            try:
                await stop.wait()
                health.facts = dataclasses.replace(health.facts, draining=True)
                log.info("agent for zone %s shutting down", zone)
            finally:
                monitor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await monitor
    except KafkaAppendUnavailable as exc:
        raise StartupFailure(f"upstream.bootstrap_servers: {exc}") from exc
    finally:
        if summing is not None:  # its last flush (the close) writes what the agent counted
            summing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await summing
        if writer is not None:
            writer.close()
        if status is not None:
            status.close()
    return 0
