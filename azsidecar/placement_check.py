"""Warnings for a proxy whose configuration quietly sends every batch direct.

Two mistakes leave a proxy serving but saving nothing, and neither is an error: the WAL
path is off (no agent of another zone in `notify.agents`, shadow mode, policy `direct`),
or this proxy's `zone` matches no zone the brokers are in (a typo, an AZ of another
account, racks not set), so no leader is ever local and leader zones may be unknown.
Each is logged once when it appears (WARNING) and once when it clears (INFO), exported
as `azsidecar_proxy_config_warning{kind, reason} 1`, and shown in /readyz as a check that
stays ok (`warning:<kind>`): the proxy is ready, it just does not do what it is for.

The decisions are pure (`wal_path_off`, `zone_rack_problem`); `watch_placement` asks the
brokers for their racks every CHECK_INTERVAL_S and publishes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio
from prometheus_client import Gauge

from azsidecar.config import Config
from azsidecar.health import ProxyHealth
from kafka_upstream.metadata import MetadataCache

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 60.0  # racks and policy change rarely; a broker's Metadata answer is cheap
PROBE_TIMEOUT_S = 10.0

CONFIG_WARNING = Gauge("azsidecar_proxy_config_warning",
                       "1 while the configuration sends every batch direct (wal_path_off) or the zone is no rack (zone_rack)",
                       ["kind", "reason"])


def wal_path_off(config: Config, policy: str) -> tuple[str, str] | None:
    """(reason code, sentence) when no batch can take the WAL route, else None. `policy` is
    the router's current one (a SIGHUP may have changed it)."""
    if config.router.shadow:
        return "shadow", ("shadow mode (router.shadow): every batch goes direct by design; "
                          "audit records say where the policy would have sent it")
    others = sorted(z for z in config.notify.agents if z != config.zone)
    if not config.notify.agents:
        return "no_agents", ("notify.agents is empty: no agent to announce WAL objects to, so every "
                             "cross-zone batch goes direct at full transfer price")
    if not others:
        return "agents_only_in_own_zone", (f"notify.agents names only this proxy's zone {config.zone}: every "
                                           "cross-zone batch goes direct at full transfer price")
    if policy == "direct":
        return "policy_direct", "router.policy = \"direct\": every cross-zone batch goes direct"
    return None


def zone_rack_problem(zone: str, racks: Iterable[str | None], config: Config) -> tuple[str, str] | None:
    """(reason code, sentence) when `zone` is not among the zones the brokers are placed in
    (their racks, or router.broker_zones / partition_zones / zone_brokers where configured)."""
    known = {r for r in racks if r} | set(config.router.broker_zones.values()) \
        | set(config.router.partition_zones.values()) | set(config.router.zone_brokers)
    if not known:
        return "no_racks", ("no broker reports a rack and router.broker_zones is empty: leader zones are "
                            "unknown, so every batch goes direct (set broker.rack to the AZ id, or router.broker_zones)")
    if zone not in known:
        return "zone_not_a_rack", (f"zone {zone} matches no broker's zone ({', '.join(sorted(known))}): no leader "
                                   "is ever local; check that zone is this host's AZ id in the brokers' account")
    return None


def publish(health: ProxyHealth | None, kind: str, found: tuple[str, str] | None,
            shown: dict[str, tuple[str, str]]) -> None:
    """Log, export and show (in /readyz) the warning `found` of `kind`, or clear it."""
    before = shown.get(kind)
    if found == before:
        return
    if before is not None:
        CONFIG_WARNING.remove(kind, before[0])
    if found is None:
        shown.pop(kind, None)
        log.info("cleared: %s", before[1] if before else kind)
    else:
        shown[kind] = found
        CONFIG_WARNING.labels(kind, found[0]).set(1)
        log.warning("%s", found[1])
    if health is not None:
        health.warnings = {k: text for k, (_code, text) in shown.items()}


async def watch_placement(config: Config, metadata: MetadataCache, health: ProxyHealth | None,
                          policy: Callable[[], str]) -> None:
    """Runs until cancelled: the WAL-path check at once and every CHECK_INTERVAL_S, the rack
    check after each successful Metadata answer (a failing one is readiness's business)."""
    shown: dict[str, tuple[str, str]] = {}
    while True:
        publish(health, "wal_path_off", wal_path_off(config, policy()), shown)
        if config.zone:
            racks = await _racks(metadata)
            if racks is not None:
                publish(health, "zone_rack", zone_rack_problem(config.zone, racks, config), shown)
        await trio.sleep(CHECK_INTERVAL_S)


async def _racks(metadata: MetadataCache) -> Iterable[str | None] | None:
    with trio.move_on_after(PROBE_TIMEOUT_S):
        try:
            await metadata.probe()
        except Exception:  # noqa: BLE001 - unreachable brokers: readiness reports them
            return None
        brokers = metadata.view.brokers
        return [b.rack for b in brokers.values()]
    return None
