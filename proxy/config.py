"""Settings of the client-facing Kafka listener and of the upstream cluster it fronts."""

from __future__ import annotations

from dataclasses import dataclass

from azsidecar._configload import require

MiB = 1024 * 1024


@dataclass(frozen=True)
class ProxyConfig:
    listen_host: str = "127.0.0.1"  # loopback: the sidecar serves only its own host's producers
    listen_port: int = 9092
    proxy_id: str = "proxy-1"  # names this sidecar in WAL keys, audit records and logs
    max_frame_bytes: int = 100 * MiB  # broker socket.request.max.bytes default
    max_in_flight_per_connection: int = 32  # requests read ahead of their responses
    max_batch_bytes: int = 1 * MiB + 12  # broker message.max.bytes default (1048588)
    shutdown_grace_s: float = 10.0  # how long draining in-flight requests may take
    metrics_port: int = 0  # 0 = no /metrics endpoint
    metrics_host: str = "127.0.0.1"  # where /metrics listens; 0.0.0.0 to let a scraper in

    def __post_init__(self) -> None:
        require(0 <= self.listen_port <= 65535, f"proxy.listen_port: {self.listen_port} is not a port")
        require(0 <= self.metrics_port <= 65535, f"proxy.metrics_port: {self.metrics_port} is not a port")
        require(1024 <= self.max_frame_bytes <= 1024 * MiB, "proxy.max_frame_bytes: must be within 1 KiB..1 GiB")
        require(1 <= self.max_in_flight_per_connection <= 1024, "proxy.max_in_flight_per_connection: 1..1024")
        require(1 <= self.max_batch_bytes <= self.max_frame_bytes, "proxy.max_batch_bytes: 1..max_frame_bytes")
        require(self.shutdown_grace_s >= 0, "proxy.shutdown_grace_s: must be >= 0")
        require(bool(self.proxy_id) and "/" not in self.proxy_id, "proxy.proxy_id: non-empty, no '/'")


@dataclass(frozen=True)
class UpstreamConfig:
    bootstrap_servers: tuple[str, ...] = ("127.0.0.1:19092",)
    client_id: str = "azsidecar"
    metadata_ttl_s: float = 30.0  # how long a cached upstream Metadata view is trusted
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        require(len(self.bootstrap_servers) > 0, "upstream.bootstrap_servers: at least one host:port")
        for hp in self.bootstrap_servers:
            host, sep, port = hp.rpartition(":")
            require(bool(sep) and bool(host) and port.isdigit(), f"upstream.bootstrap_servers: {hp!r} is not host:port")
        require(self.metadata_ttl_s > 0, "upstream.metadata_ttl_s: must be > 0")
        require(self.request_timeout_s > 0, "upstream.request_timeout_s: must be > 0")
        require(self.connect_timeout_s > 0, "upstream.connect_timeout_s: must be > 0")
