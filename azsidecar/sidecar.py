"""Wires the sidecar together from the one Config: upstream, router, WAL, notifications.

Without agents of other zones configured, every partition takes the direct path (the
router still records which zone each leader is in). With them, the WAL writer and the
notification sender run in this nursery and the router may choose the WAL path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable

import trio

from azsidecar.config import Config
from azsidecar.health import ProxyHealth
from azsidecar.placement_check import watch_placement
from azsidecar.proxy_monitor import monitor_proxy
from core.audit import AuditSink, NullAuditSink
from core.object_summary_sink import ObjectSummarySink
from core.periodic_flush import flush_every
from kafka_upstream.direct import DirectBackend
from kafka_upstream.metadata import MetadataCache
from kafka_upstream.upstream import UpstreamCluster, open_upstream
from leader_notify.metrics import process_sender_metrics
from leader_notify.sender.owners import AgentMap, probe_targets
from leader_notify.sender.recovery import recover_acknowledged
from leader_notify.sender.sender import NotifySender
from proxy.bypass import SameZoneBypass
from proxy.server import ProxyServer
from proxy.startup import run_proxy
from router.backend import RoutingBackend
from router.summary_sink import SummarizingAuditSink
from router.wal_path import ObjectAnnouncer, WalPath
from router.zone_circuits import ZoneCircuits
from wal_s3.s3 import S3Error, make_s3_client
from wal_s3.writer import WalWriter

log = logging.getLogger(__name__)


def wal_enabled(config: Config) -> bool:
    """The WAL route can be taken: agents of another zone are configured, and not in shadow mode."""
    return (not config.router.shadow and bool(config.zone)
            and any(z != config.zone for z in config.notify.agents))


async def recover_before_serving(config: Config, epoch: int, sender: NotifySender,
                                 audit: AuditSink | None = None) -> None:
    """Deliver acknowledged (ack_mode wal) entries of this proxy's earlier epochs that no
    agent applied, before new batches can overtake them; bounded by router.recovery_timeout_s."""
    zone = config.zone
    assert zone is not None  # the WAL path is on (wal_enabled): the zone is known
    with trio.move_on_after(config.router.recovery_timeout_s) as scope:
        try:
            await recover_acknowledged(config.wal, make_s3_client(config.wal), sender, config.proxy.proxy_id, epoch,
                                       lambda topic: config.router.ack_mode(topic) == "wal",
                                       bucket=config.wal.bucket_for(zone), audit=audit)
        except S3Error as exc:
            log.error("recovery of earlier epochs failed: %s; serving anyway (run `azsidecar recover`)", exc)
    if scope.cancelled_caught:
        log.error("recovery of earlier epochs took over router.recovery_timeout_s=%.0fs; serving anyway "
                  "(run `azsidecar recover`)", config.router.recovery_timeout_s)


async def run_sidecar(config: Config, audit: AuditSink | None = None, *,
                      on_backend: Callable[[RoutingBackend], None] | None = None, health: ProxyHealth | None = None,
                      task_status: trio.TaskStatus[tuple[ProxyServer, int]] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the proxy; `task_status.started((server, port))` once it listens.

    `config.zone` must be resolved (see router.placement.resolve_zone). `on_backend`, if
    given, receives the RoutingBackend (tests and the demo switch policies through it).
    `health`, if given, is kept current for /livez and /readyz by a monitor task.
    Raises WalWriteError if the WAL epoch cannot be registered.
    """
    audit = audit or NullAuditSink()
    async with trio.open_nursery() as nursery, contextlib.AsyncExitStack() as stack:
        # The WAL path's per-object records (writer, sender), summed per interval and key before
        # the writer (audit.object_detail "summary"); every other record passes straight through.
        if config.audit.object_detail == "summary":
            objects = ObjectSummarySink(audit, path_mtu=config.audit.path_mtu)
            nursery.start_soon(flush_every, config.audit.interval_s, objects.flush, objects.close)
            audit = objects
        # The router's per-batch accounting, summed per interval and key before the writer
        # (audit.produce_detail "summary"); every other record passes straight through.
        router_audit: AuditSink = audit
        if config.audit.produce_detail == "summary":
            summaries = SummarizingAuditSink(audit, config.audit.interval_s)
            nursery.start_soon(summaries.run)
            router_audit = summaries
        # The destinations' WAL-path circuits, fed by the router's outcomes, the monitor's
        # probes and, at once, by the writer's and the sender's gray-failure hooks.
        agents = AgentMap(config.notify.agents, config.notify.agent_ownership)
        circuits = ZoneCircuits(agents, config.router.broker_zones)
        wal_path = None
        if wal_enabled(config):
            zone = config.zone
            assert zone is not None  # wal_enabled: the zone is known
            # How a WAL produce is assembled: the writer buffers batches into objects; each
            # released object goes to the announcer, which hands it to the notifier of each
            # owning agent (the sender's connections); WalPath turns the writer's and the
            # notifiers' callbacks into each partition's outcome (router/wal_path.py).
            s3 = make_s3_client(config.wal)
            epoch = await WalWriter.win_epoch(config.wal, zone, config.proxy.proxy_id, s3, audit)
            sender = NotifySender(config.notify, zone, config.proxy.proxy_id, epoch, audit,
                                  bucket=config.wal.bucket_for(zone), metrics=process_sender_metrics(),
                                  agents=agents, on_gray=circuits.notify_abandoned)
            acked = (lambda topic: config.router.ack_mode(topic) == "wal") if "wal" in config.router.ack_modes.values() \
                else None
            announcer = ObjectAnnouncer(sender, nursery, acked_topic=acked)
            writer = WalWriter(config.wal, zone, config.proxy.proxy_id, s3, audit, prices=config.router.prices,
                               epoch=epoch, on_released=announcer.announce, share_of=agents.share_of,
                               on_gray_put=circuits.put_abandoned)
            await stack.enter_async_context(writer.running())
            stack.push_async_callback(sender.aclose)
            wal_path = WalPath(writer, announcer, agents)
            log.info("WAL path on: writer %s epoch %d, agents %s", config.proxy.proxy_id, epoch,
                     dict(config.notify.agents))
            if "wal" in config.router.ack_modes.values():
                await recover_before_serving(config, epoch, sender, audit)

        elif config.router.shadow:
            log.info("shadow mode (router.shadow): every batch goes direct; audit records say where policy %r "
                     "would have sent it (azsidecar plan --from-audit)", config.router.policy)

        direct_by_zone = {}
        for zone, bootstrap in config.router.zone_brokers.items():
            if zone == config.zone:
                continue
            zone_upstream = dataclasses.replace(config.upstream, bootstrap_servers=(bootstrap,))
            zone_cluster = await stack.enter_async_context(open_upstream(zone_upstream))
            zone_metadata = MetadataCache(zone_cluster, zone_upstream.metadata_ttl_s, zone_upstream.metadata_timeout_s)
            direct_by_zone[zone] = DirectBackend(zone_cluster, zone_metadata, zone_upstream.request_timeout_s)

        built: list[tuple[RoutingBackend, MetadataCache]] = []

        async def backend_factory(cluster: UpstreamCluster, metadata: MetadataCache) -> RoutingBackend:
            direct = DirectBackend(cluster, metadata, config.upstream.request_timeout_s)
            circuits.follow(metadata)  # a zone whose brokers left metadata is partitioned, not an agent fault
            backend = RoutingBackend(config.zone or "", config.router, config.wal, direct, metadata, wal_path,
                                     nursery, router_audit, config.proxy.proxy_id, direct_by_zone, circuits=circuits)
            built.append((backend, metadata))
            if on_backend is not None:
                on_backend(backend)
            return backend

        bypass = SameZoneBypass(config.zone or "", config.router.broker_zones)
        started = await nursery.start(functools.partial(run_proxy, bypass=bypass, audit=audit,
                                                        broker_zones=config.router.broker_zones, authz=config.authz,
                                                        quotas=config.quotas),
                                      config.proxy, config.upstream, backend_factory)
        nursery.start_soon(watch_placement, config, built[0][1], health, lambda: built[0][0].policy)
        if health is not None:
            server = started[0]
            health.draining = lambda: server.draining
            backend, metadata = built[0]
            probes = probe_targets(config.notify.agents, config.zone) if wal_path else {}  # keyed like the circuits
            nursery.start_soon(monitor_proxy, health, metadata.probe, probes, circuits.states,
                               circuits.reasons, circuits.observe)
        if wal_path is not None:
            started[0].on_shutdown.append(wal_path.drain)  # deliver what producers were already told
        task_status.started(started)
        # The WAL writer, sender and zone connections live in `stack`: keep it open for as
        # long as the proxy serves (until cancelled).
        await trio.sleep_forever()
