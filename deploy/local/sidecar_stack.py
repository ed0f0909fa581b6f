"""Start the sidecar (proxy + agent) of each zone of a ZoneEnv, as real processes.

Each zone gets a TOML file written from the same settings the production config uses;
`azsidecar agent` and `azsidecar proxy` run inside the zone (its network namespace, or
loopback). Agent addresses are fixed before anything starts, so every proxy knows every
agent; proxies connect to agents lazily. Used by the demo, the end-to-end tests and the
benchmarks through `sidecar_starter(...)`, which fits deploy.local.scenario.run_sidecar.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AnyStr

from deploy.local.processes import DUMMY_CREDENTIALS, LOCAL_REGION, free_port, stop_process
from deploy.local.zones import Zone, ZoneEnv, ZoneProcess

if TYPE_CHECKING:
    from deploy.local.scenario import StartSidecar

AGENT_PORT = 9400
READY_TIMEOUT_S = 120.0  # a Python process start: ~1.5 CPU-s of imports, many starting at once on a loaded 2-core host
# What `azsidecar agent` and `azsidecar proxy` log once they serve: the readiness the local tools wait for.
READY_LINES = {"agent": "listening=", "proxy": "listening on"}
STOP_GRACE_S = 15.0  # the proxy drains in-flight requests, the WAL writer flushes


@dataclass(frozen=True)
class SidecarSettings:
    wal_bucket: str
    audit_dir: Path
    policy: str = "wal"
    linger_ms: int = 50
    max_bytes: int = 8 * 1024 * 1024
    partition_zones: Mapping[str, str] = field(default_factory=dict)
    route_direct_to_leader_zone: bool = True  # Tansu: send direct batches to the leader zone's broker
    hmac_key: str = field(default_factory=lambda: secrets.token_hex(24))
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # more TOML sections/keys
    # Where proxies send notifications, per zone, when not straight to the agents (a fault
    # injector in between, deploy/local/notify_faults.py); empty: the agents' own addresses.
    notify_via: Mapping[str, str] = field(default_factory=dict)
    # audit.produce_detail: "summary" (the default: produce batches summed per interval) or
    # "batch" (one record per batch: what tests that follow single batches read)
    produce_detail: str = "summary"
    # audit.object_detail: "summary" (the default: the WAL path's per-object records summed per
    # interval) or "object" (one record per object: what tests that follow single objects read)
    object_detail: str = "summary"


def to_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for our config shape: top-level scalars, then tables, then sub-tables."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, Mapping):
            return "{ " + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, Mapping)]
    for k, v in data.items():
        if isinstance(v, Mapping):
            lines.append(f"\n[{k}]")
            lines.extend(f"{json.dumps(str(kk))} = {value(vv)}" for kk, vv in v.items())
    return "\n".join(lines) + "\n"


def agent_addresses(env: ZoneEnv) -> dict[str, str]:
    if env.mode == "netns":
        return {z.name: f"{z.address}:{AGENT_PORT}" for z in env.zones}
    return {z.name: f"127.0.0.1:{free_port()}" for z in env.zones}


def zone_config(env: ZoneEnv, zone: Zone, settings: SidecarSettings, agents: Mapping[str, str]) -> dict[str, Any]:
    agent_host, _, agent_port = agents[zone.name].rpartition(":")
    config: dict[str, Any] = {
        "zone": zone.name,
        "proxy": {"listen_host": zone.sidecar_host, "listen_port": zone.sidecar_port,
                  "proxy_id": f"proxy-{zone.name}"},
        "upstream": {"bootstrap_servers": [zone.broker_bootstrap]},
        "router": {"policy": settings.policy, "partition_zones": dict(settings.partition_zones)},
        "wal": {"bucket": settings.wal_bucket, "region": LOCAL_REGION, "endpoint_url": zone.s3_endpoint, "linger_ms": settings.linger_ms,
                "max_bytes": settings.max_bytes},
        "notify": {"agents": {**agents, **settings.notify_via}},
        "agent": {"listen_host": agent_host, "listen_port": int(agent_port)},
        "audit": {"output": str(settings.audit_dir), "produce_detail": settings.produce_detail,
                  "object_detail": settings.object_detail},
    }
    if settings.route_direct_to_leader_zone and env.kafka is None:  # Kafka's leaders are real
        config["router"]["zone_brokers"] = {z.name: z.broker_bootstrap for z in env.zones}
    for section, values in settings.extra.items():
        config.setdefault(section, {}).update(values)
    return config


def _log_size(env: ZoneEnv, log_name: str) -> int:
    path = env.log_dir / f"{log_name}.log"
    return path.stat().st_size if path.exists() else 0


def _wait_for_log_line(proc: subprocess.Popen[AnyStr], log_path: Path, needle: str, timeout_s: float, what: str,
                       offset: int) -> None:
    """Wait until `needle` appears in what the process wrote after `offset` (logs are appended)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log_path.read_bytes()[offset:].decode(errors="replace") if log_path.exists() else ""
        if needle in text:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{text[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {timeout_s}s:\n{text[-3000:]}")
        time.sleep(0.05)  # polling a log file for readiness, bounded by the deadline


def sidecar_starter(env: ZoneEnv, settings: SidecarSettings) -> StartSidecar:
    """A `start_sidecar_fn(env, zone)` context-manager factory for scenario.run_sidecar."""
    agents = agent_addresses(env)
    settings.audit_dir.mkdir(parents=True, exist_ok=True)

    process_env = {**DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": settings.hmac_key,
                   "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"}
    early_agents: dict[str, ZoneProcess] = {}  # started before any proxy, waiting for their zone's start()
    ready_offsets: dict[ZoneProcess, int] = {}  # an agent's log size at its start: its ready line comes after

    def config_of(zone: Zone) -> Path:
        config_path = env.log_dir / f"{zone.name}-sidecar.toml"
        config_path.write_text(to_toml(zone_config(env, zone, settings, agents)))
        return config_path

    def launch_agent(zone: Zone) -> ZoneProcess:
        offset = _log_size(env, f"{zone.name}-agent")
        agent = env.run_in_zone(zone, [sys.executable, "-m", "azsidecar", "agent", "--config", str(config_of(zone))],
                                process_env, log_name=f"{zone.name}-agent")
        ready_offsets[agent] = offset
        return agent

    def wait_agent(zone: Zone, agent: ZoneProcess) -> None:
        _wait_for_log_line(agent, agent.log_path, READY_LINES["agent"], READY_TIMEOUT_S,
                           f"agent of {zone.name}", ready_offsets[agent])

    started: set[str] = set()

    @contextlib.contextmanager
    def start(env: ZoneEnv, zone: Zone) -> Iterator[dict[str, object]]:
        if not started:
            # Every zone's agent first, as a deployment starts them: a proxy whose probes of
            # another zone's agent are refused (not started yet) opens that zone's circuit
            # (agent_gone) and sends its first batches direct; on a loaded host a zone started
            # 12 s after the one before made 5 batches of a demo run go direct_cross.
            for other in env.zones:
                early_agents[other.name] = launch_agent(other)
            for other in env.zones:
                try:
                    wait_agent(other, early_agents[other.name])
                except BaseException:
                    for proc in early_agents.values():
                        stop_process(proc, STOP_GRACE_S)
                    early_agents.clear()
                    raise
        started.add(zone.name)
        config_path = config_of(zone)
        agent = early_agents.pop(zone.name, None)
        if agent is None:
            agent = launch_agent(zone)
        proxy = None
        try:
            proxy_offset = _log_size(env, f"{zone.name}-proxy")
            proxy = env.run_in_zone(zone, [sys.executable, "-m", "azsidecar", "proxy", "--config", str(config_path)],
                                    process_env, log_name=f"{zone.name}-proxy")
            wait_agent(zone, agent)
            _wait_for_log_line(proxy, proxy.log_path, READY_LINES["proxy"], READY_TIMEOUT_S, f"proxy of {zone.name}",
                               proxy_offset)
            yield {"agent": agents[zone.name], "proxy": zone.sidecar_bootstrap, "config": config_path,
                   "agent_proc": agent, "proxy_proc": proxy}
        finally:
            if proxy is not None:
                stop_process(proxy, STOP_GRACE_S)
            stop_process(agent, STOP_GRACE_S)

    return start
