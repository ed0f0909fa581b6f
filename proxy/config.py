"""Settings of the client-facing Kafka listener (the upstream cluster's: kafka_upstream/config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.addresses import is_loopback
from core.configload import ConfigError, require
from kafka_upstream.config import SASL_MECHANISMS
from proxy.principal_mapping import MappingRuleError, parse_rules

MiB = 1024 * 1024
WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # noqa: S104 - names the wildcard addresses, binds nothing
MAX_WORKERS = 256



@dataclass(frozen=True)
class ProxyConfig:
    listen_host: str = "127.0.0.1"  # loopback: the sidecar serves only its own host's producers
    listen_port: int = 9092  # the Kafka listener's port; producers' bootstrap.servers name it
    proxy_id: str = "proxy-1"  # names this sidecar in WAL keys, audit records and logs
    max_frame_bytes: int = 100 * MiB  # broker socket.request.max.bytes default
    max_in_flight_per_connection: int = 32  # requests read ahead of their responses
    max_batch_bytes: int = 1 * MiB + 12  # broker message.max.bytes default (1048588)
    shutdown_grace_s: float = 10.0  # how long draining in-flight requests may take
    metrics_port: int = 0  # 0 = no /metrics endpoint
    metrics_host: str = "127.0.0.1"  # where /metrics listens; 0.0.0.0 to let a scraper in
    tls_cert_file: str = ""  # PEM certificate (chain) for TLS on the client listener; "" = plaintext
    tls_key_file: str = ""  # PEM private key of tls_cert_file
    tls_client_ca_file: str = ""  # PEM CA bundle: require a client certificate signed by it (mutual TLS); the client's principal is then User:<name> from its subject, unless it logs in with SASL
    tls_principal_mapping_rules: tuple[str, ...] = ("DEFAULT",)  # with tls_client_ca_file: the certificate subject (CN=alice,OU=eng,O=Example) to a name, as Kafka's ssl.principal.mapping.rules, one rule per string: "RULE:^CN=(.*?),OU=eng.*$/$1/L", "DEFAULT" (docs/security.md)
    sasl_mechanisms: tuple[str, ...] = ()  # SASL required on the client listener: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; () = none
    sasl_users_file: str = ""  # users and their SCRAM keys (TOML, see docs/security.md); required with sasl_mechanisms
    max_connections: int = 1024  # open client connections; more are accepted and closed at once (a producer needs one or two)
    max_connections_per_source: int = 64  # open connections per source address, non-loopback sources only (zone gateway)
    request_receive_timeout_s: float = 30.0  # once a request's first bytes arrived, the rest must within this (slowloris); a 100 MiB frame at 4 MB/s fits
    idle_timeout_s: float = 600.0  # close a connection with no request for this long: the broker's connections.max.idle.ms default, above Java/kafka-python/aiokafka's 540 s; librdkafka (0 = never) reconnects as it does to brokers
    max_receive_buffer_bytes: int = 256 * MiB  # bytes held for requests still arriving, all connections together; beyond it reads wait (backpressure)
    broker_listeners: bool | None = None  # one local listener per upstream broker, every API passes through (consumers, admin); unset: on for a loopback sidecar (one worker, no advertised address), off for a gateway
    passthrough_audit_interval_s: float = 10.0  # with pass-through: one passthrough_bytes audit record per broker and API this often
    consumer_rack: str | None = None  # with pass-through: rack_id put into consumers' Fetch requests that carry none (KIP-392); unset: this zone's AZ id (MSK's broker.rack); "" = none
    bypass_same_zone: bool = False  # with pass-through: Metadata names this zone's brokers (broker_zones or rack) at their real address, so same-zone batches skip the proxy; off by default: clients then learn every broker's real address from them (docs/protocol-front-door.md)
    # Zone gateway (docs/deploy.md): the address Metadata answers send clients to, when it is not the bind address.
    advertised_host: str = ""  # host clients connect to (a load balancer's zonal DNS name, a Service); "" = listen_host
    advertised_port: int = 0  # port clients connect to; 0 = the port the listener bound
    workers: int = 1  # processes sharing the listener (SO_REUSEPORT), worker i: proxy_id "-w<i>", own WAL epoch, status port metrics_port + i
    max_principal_labels: int = 100  # distinct client principals with their own series in azsidecar_proxy_principal_produce_bytes_total; later ones count as "other" (audit records keep every name)
    forward_local_produce: bool = True  # a Produce request whose every partition goes the local route to one leader is sent there as the client's bytes (only its header rewritten) and answered with the leader's bytes; off: every request is decoded and built again (docs/architecture.md)
    insecure_listener: bool = False  # let a listener other hosts can reach start without TLS and SASL (private test networks only)

    def __post_init__(self) -> None:
        require(bool(self.tls_cert_file) == bool(self.tls_key_file),
                "proxy.tls_cert_file and proxy.tls_key_file: give both or neither")
        for mechanism in self.sasl_mechanisms:
            require(mechanism in SASL_MECHANISMS,
                    f"proxy.sasl_mechanisms: {mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}")
        require(bool(self.sasl_mechanisms) == bool(self.sasl_users_file),
                "proxy.sasl_mechanisms and proxy.sasl_users_file: give both or neither")
        require(not self.tls_client_ca_file or bool(self.tls_cert_file),
                "proxy.tls_client_ca_file: client certificates need TLS on the listener (proxy.tls_cert_file)")
        try:
            parse_rules(self.tls_principal_mapping_rules)
        except MappingRuleError as exc:
            raise ConfigError(f"proxy.tls_principal_mapping_rules: {exc}") from exc
        require(0 <= self.listen_port <= 65535, f"proxy.listen_port: {self.listen_port} is not a port")
        require(0 <= self.metrics_port <= 65535, f"proxy.metrics_port: {self.metrics_port} is not a port")
        require(1024 <= self.max_frame_bytes <= 1024 * MiB, "proxy.max_frame_bytes: must be within 1 KiB..1 GiB")
        require(1 <= self.max_in_flight_per_connection <= 1024, "proxy.max_in_flight_per_connection: 1..1024")
        require(1 <= self.max_batch_bytes <= self.max_frame_bytes, "proxy.max_batch_bytes: 1..max_frame_bytes")
        require(self.shutdown_grace_s >= 0, "proxy.shutdown_grace_s: must be >= 0")
        require(bool(self.proxy_id) and "/" not in self.proxy_id, "proxy.proxy_id: non-empty, no '/'")
        require(0 <= self.advertised_port <= 65535, f"proxy.advertised_port: {self.advertised_port} is not a port")
        require(self.passthrough or not self.bypass_same_zone,
                "proxy.bypass_same_zone: requires pass-through (proxy.broker_listeners, on by default for a "
                "loopback sidecar; brokers keep their own node ids)")
        require(1 <= self.workers <= MAX_WORKERS, f"proxy.workers: 1..{MAX_WORKERS}")
        require(0 <= self.max_principal_labels <= 10_000, "proxy.max_principal_labels: 0..10000")
        require(self.passthrough_audit_interval_s > 0, "proxy.passthrough_audit_interval_s: must be > 0")
        require(self.listen_host not in WILDCARD_HOSTS or bool(self.advertised_host),
                f"proxy.advertised_host: required when proxy.listen_host is {self.listen_host!r} "
                "(clients cannot connect to a wildcard address: give the name they reach this proxy by)")
        require(is_loopback(self.listen_host) or self.insecure_listener
                or (bool(self.tls_cert_file) and (bool(self.sasl_mechanisms) or bool(self.tls_client_ca_file))),
                f"proxy.listen_host: {self.listen_host!r} is reachable from other hosts, so the listener needs TLS "
                "(proxy.tls_cert_file, proxy.tls_key_file) and SASL (proxy.sasl_mechanisms, proxy.sasl_users_file) "
                "or client certificates (proxy.tls_client_ca_file); "
                "set proxy.insecure_listener = true only on a private test network")

        require(1 <= self.max_connections <= 1_000_000, "proxy.max_connections: 1..1000000")
        require(1 <= self.max_connections_per_source <= 1_000_000, "proxy.max_connections_per_source: 1..1000000")
        require(self.request_receive_timeout_s > 0, "proxy.request_receive_timeout_s: must be > 0")
        require(self.idle_timeout_s > 0, "proxy.idle_timeout_s: must be > 0")
        # One whole frame must fit, or a client sending the largest allowed frame would wait forever.
        require(self.max_receive_buffer_bytes >= self.max_frame_bytes + MiB,
                "proxy.max_receive_buffer_bytes: must be >= proxy.max_frame_bytes + 1 MiB")

    @property
    def passthrough(self) -> bool:
        """Whether every broker gets a listener (`broker_listeners`; unset: on for a loopback
        sidecar, whose extra listeners on ephemeral ports its own clients reach, off for a
        gateway behind a load balancer or with several workers, where they could not)."""
        if self.broker_listeners is not None:
            return self.broker_listeners
        return is_loopback(self.listen_host) and not self.advertised_host and self.workers == 1

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) for Metadata answers; port 0 means the port the listener bound."""
        return (self.advertised_host or self.listen_host, self.advertised_port)


AUTHZ_SOURCES = ("none", "cluster", "file")
MAX_SUPER_USERS = 1024


@dataclass(frozen=True)
class AuthzConfig:
    """Authorization of each client principal at the proxy (docs/security.md#authorization)."""

    source: str = ""  # "none": every client may do what the sidecar's own principal may; "cluster": the cluster's ACLs (DescribeAcls, refreshed); "file": acl_file; "" = unset: "none" for a per-host sidecar, deny everything for a zone gateway (non-loopback listen_host, advertised_host or workers > 1)
    acl_file: str = ""  # with source "file": the ACL bindings (TOML [[acl]] tables, docs/security.md); read at start-up
    super_users: tuple[str, ...] = ()  # principals allowed everything, e.g. ["User:ops"] (the cluster's super.users are not visible to DescribeAcls)
    refresh_interval_s: float = 30.0  # with source "cluster": DescribeAcls this often; an ACL added or removed applies within this (plus the brokers' own propagation)
    max_stale_s: float = 300.0  # with source "cluster": when DescribeAcls keeps failing, the last ACLs read serve this long after they were read, then every request is denied until a refresh succeeds

    def __post_init__(self) -> None:
        require(self.source in ("", *AUTHZ_SOURCES),
                f"authz.source: {self.source!r} is not one of {', '.join(AUTHZ_SOURCES)} (or unset)")
        require((self.source == "file") == bool(self.acl_file),
                "authz.acl_file: required with authz.source \"file\", not allowed otherwise")
        require(len(self.super_users) <= MAX_SUPER_USERS, f"authz.super_users: at most {MAX_SUPER_USERS}")
        for principal in self.super_users:
            kind, sep, name = principal.partition(":")
            require(bool(sep) and bool(kind) and bool(name) and name != "*",
                    f"authz.super_users: {principal!r} is not a principal TYPE:NAME, e.g. User:ops (no wildcard)")
        require(self.refresh_interval_s > 0, "authz.refresh_interval_s: must be > 0")
        require(self.max_stale_s >= self.refresh_interval_s, "authz.max_stale_s: must be >= authz.refresh_interval_s")

    def effective_source(self, proxy: ProxyConfig) -> str:
        """"none", "cluster", "file", or "deny" (a zone gateway left unset: no rules, so no rights)."""
        if self.source:
            return self.source
        return "none" if is_sidecar(proxy) else "deny"


def is_sidecar(proxy: ProxyConfig) -> bool:
    """A per-host sidecar (loopback listener, no advertised address, one worker) rather than
    a zone gateway that many hosts' producers share."""
    return is_loopback(proxy.listen_host) and not proxy.advertised_host and proxy.workers == 1


@dataclass(frozen=True)
class QuotaConfig:
    """Produce byte-rate quotas per client principal at the proxy (docs/security.md#quotas-per-client-principal)."""

    produce_bytes_per_s: float = 0.0  # every principal's produce byte rate (request bytes), unless listed in principal_produce_bytes_per_s; 0 = no quota
    principal_produce_bytes_per_s: dict[str, float] = field(default_factory=dict)  # per principal, e.g. "User:alice" = 1048576; 0 = no quota for that one
    burst_s: float = 1.0  # a principal may send this many seconds' worth of its rate at once before it is throttled

    def __post_init__(self) -> None:
        require(self.produce_bytes_per_s >= 0, "quotas.produce_bytes_per_s: must be >= 0")
        for principal, rate in self.principal_produce_bytes_per_s.items():
            kind, sep, name = principal.partition(":")
            require(bool(sep) and bool(kind) and bool(name),
                    f"quotas.principal_produce_bytes_per_s: {principal!r} is not a principal TYPE:NAME")
            require(rate >= 0, f"quotas.principal_produce_bytes_per_s.{principal}: must be >= 0")
        require(0 < self.burst_s <= 60, "quotas.burst_s: 0 < burst_s <= 60")

    @property
    def enabled(self) -> bool:
        return self.produce_bytes_per_s > 0 or any(r > 0 for r in self.principal_produce_bytes_per_s.values())
