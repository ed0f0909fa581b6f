"""A proxy from its configuration: the listener's TLS and SASL files, the ACL source, the
upstream connections and the produce backend, then the server (`run_proxy`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path

import trio

from core.audit import AuditSink
from core.configload import ConfigError
from core.produce import ProduceBackend
from core.tls import check_private, server_context
from kafka_protocol.fetch_response import TopicId
from kafka_upstream.config import UpstreamConfig
from kafka_upstream.direct import (
    DirectBackend,
)
from kafka_upstream.forward import ProduceForwarder
from kafka_upstream.metadata import MetadataCache
from kafka_upstream.upstream import UpstreamCluster, open_upstream
from proxy import metrics
from proxy.acl import AclProvider, AclSet
from proxy.acl_rules import AclFileError, parse_acl_file
from proxy.acl_source import ClusterAcls, FixedAcls
from proxy.bypass import SameZoneBypass
from proxy.config import AuthzConfig, ProxyConfig, QuotaConfig
from proxy.fetch_audit import FetchMeter
from proxy.listen import open_listeners
from proxy.passthrough import BrokerListeners
from proxy.passthrough_audit import PassthroughMeter
from proxy.quota import ProduceQuotas
from proxy.request_handler import RequestHandler
from proxy.sasl import (
    Credentials,
    CredentialsError,
    load_credentials,
)
from proxy.server import ProxyServer

log = logging.getLogger(__name__)

ProduceBackendFactory = Callable[[UpstreamCluster, MetadataCache], Awaitable[ProduceBackend]]


def leader_of(metadata: MetadataCache, topic: str, partition: int) -> int | None:
    """The partition's leader in the proxy's metadata as it is now; None when it names none."""
    info = metadata.view.topics.get(topic)
    p = info.partitions.get(partition) if info is not None else None
    return p.leader_id if p is not None and p.leader_id >= 0 else None


def topic_name(metadata: MetadataCache, topic_id: TopicId) -> str | None:
    """The name of the topic with this id (Fetch v13+) in the proxy's metadata; None if none.
    A scan of the topics: the pass-through offers Fetch up to v12, so this runs only for a
    broker that answered above the version it was asked."""
    return next((name for name, info in metadata.view.topics.items() if info.topic_id.bytes == topic_id), None)


def load_fixed_acls(authz: AuthzConfig, source: str) -> AclProvider | None:
    """The rules of source "file" (read now) or "deny" (none); None for "none" and "cluster".

    Raises ConfigError naming authz.acl_file when it cannot be read or is not valid.
    """
    if source == "deny":
        return FixedAcls(AclSet.of([], authz.super_users))
    if source != "file":
        return None
    try:
        text = Path(authz.acl_file).read_text()
    except OSError as exc:
        raise ConfigError(f"authz.acl_file: {authz.acl_file}: {exc.strerror or exc}") from exc
    try:
        rules = parse_acl_file(text, authz.super_users)
    except AclFileError as exc:
        raise ConfigError(f"authz.acl_file: {authz.acl_file}: {exc}") from exc
    metrics.AUTHZ_ACLS.set(len(rules.bindings))
    return FixedAcls(rules)


def listener_security(config: ProxyConfig) -> tuple[ssl.SSLContext | None, Credentials | None]:
    """The listener's TLS context and SASL users, loaded from the configured files.

    Raises ConfigError when a file cannot be read or parsed.
    """
    context = server_context(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file) \
        if config.tls_cert_file else None
    credentials = None
    if config.sasl_mechanisms:
        check_private(config.sasl_users_file, "proxy.sasl_users_file")
        try:
            credentials = load_credentials(config.sasl_users_file)
        except CredentialsError as exc:
            raise ConfigError(f"proxy.sasl_users_file: {exc}") from exc
    return context, credentials


async def run_proxy(proxy_config: ProxyConfig, upstream_config: UpstreamConfig,
                    backend_factory: ProduceBackendFactory | None = None,
                    task_status: trio.TaskStatus[tuple[ProxyServer, int]] = trio.TASK_STATUS_IGNORED, *,
                    bypass: SameZoneBypass | None = None,
                    audit: AuditSink | None = None, broker_zones: Mapping[str, str] | None = None,
                    authz: AuthzConfig | None = None, quotas: QuotaConfig | None = None) -> None:
    """Connect upstream, listen, serve. `task_status.started((server, port))` once listening.
    `bypass`: with proxy.bypass_same_zone, the zone whose brokers Metadata names at their
    real addresses.

    `audit`: where `passthrough_bytes` records go (with proxy.broker_listeners); the record's
    `zone` is the audit writer's, and a broker's zone is `broker_zones[str(node id)]`, else
    its rack.

    `authz`: how each client principal is authorized (None: as authz.source "none").
    `quotas`: produce byte rates per client principal (None: none).

    Raises ConfigError if the listener's TLS or SASL files or the ACL file cannot be loaded,
    AclSourceError if the cluster's ACLs cannot be read at start-up.
    """
    ssl_context, credentials = listener_security(proxy_config)
    source = authz.effective_source(proxy_config) if authz is not None else "none"
    fixed_acls = load_fixed_acls(authz, source) if authz is not None else None
    async with open_upstream(upstream_config) as cluster:
        metadata = MetadataCache(cluster, upstream_config.metadata_ttl_s, upstream_config.metadata_timeout_s)
        if backend_factory is None:
            backend: ProduceBackend = DirectBackend(cluster, metadata, upstream_config.request_timeout_s)
        else:
            backend = await backend_factory(cluster, metadata)
        listeners = await open_listeners(proxy_config.listen_host, proxy_config.listen_port,
                                         reuse_port=proxy_config.workers > 1)
        port = listeners[0].socket.getsockname()[1]
        advertised_host, advertised_port = proxy_config.advertised
        acls: AclProvider | None = fixed_acls
        cluster_acls = None
        if source == "cluster" and authz is not None:
            cluster_acls = ClusterAcls(cluster, metadata, frozenset(authz.super_users), authz.refresh_interval_s,
                                       authz.max_stale_s)
            await cluster_acls.refresh()  # the first read must succeed: refusing everyone silently helps no one
            acls = cluster_acls
        if source == "deny":
            log.warning("authz: a zone gateway without authz.source denies every client (set authz.source to "
                        "\"cluster\" or \"file\", or \"none\" to give every client the sidecar's rights)")
        handler = RequestHandler(proxy_config, upstream_config, cluster, metadata, backend,
                                 advertised_host, advertised_port or port, authz=acls,
                                 quotas=ProduceQuotas(quotas.produce_bytes_per_s, quotas.principal_produce_bytes_per_s,
                                                      quotas.burst_s) if quotas is not None and quotas.enabled else None,
                                 forwarder=backend if isinstance(backend, ProduceForwarder) else None)
        await handler.start()
        server = ProxyServer(proxy_config, handler, ssl_context=ssl_context, credentials=credentials)
        if proxy_config.passthrough:
            handler.brokers = BrokerListeners(server.open_broker_listener)
            handler.bypass = bypass if proxy_config.bypass_same_zone else None
            if audit is not None:
                zones = dict(broker_zones or {})

                def zone_of(node_id: int) -> str:
                    broker = metadata.view.brokers.get(node_id)
                    return zones.get(str(node_id)) or (broker.rack if broker is not None else None) or ""

                handler.meter = PassthroughMeter(audit, proxy_config.proxy_id, zone_of,
                                                 proxy_config.passthrough_audit_interval_s)
                handler.fetch_meter = FetchMeter(audit, proxy_config.proxy_id, zone_of, partial(leader_of, metadata),
                                                 partial(topic_name, metadata), proxy_config.passthrough_audit_interval_s)
        await handler.start()
        async with trio.open_nursery() as nursery:
            if handler.meter is not None:
                nursery.start_soon(handler.meter.run)
            if handler.fetch_meter is not None:
                nursery.start_soon(handler.fetch_meter.run)
            if cluster_acls is not None:
                nursery.start_soon(cluster_acls.run)
            await nursery.start(server.serve, listeners)
            task_status.started((server, port))
