"""Notification sender (in the proxy) and agent settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from azsidecar._configload import require


@dataclass(frozen=True)
class NotifyConfig:
    # Agent address per zone: {"use1-az1": "10.0.1.5:9400"}.
    agents: dict[str, str] = field(default_factory=dict)
    # HMAC-SHA256 keys; the first signs, all verify (rotation). Given as files or env in main.
    hmac_keys: tuple[str, ...] = ()
    timeout_s: float = 10.0
    max_in_flight_per_zone: int = 64
    max_attempts: int = 3

    def __post_init__(self) -> None:
        require(self.timeout_s > 0, "notify.timeout_s: must be > 0")
        require(1 <= self.max_in_flight_per_zone <= 4096, "notify.max_in_flight_per_zone: 1..4096")
        require(1 <= self.max_attempts <= 20, "notify.max_attempts: 1..20")


@dataclass(frozen=True)
class AgentConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9400
    max_concurrent_reads: int = 8
    max_in_flight_appends: int = 64
    checkpoint_prefix: str = "checkpoints"

    def __post_init__(self) -> None:
        require(0 <= self.listen_port <= 65535, f"agent.listen_port: {self.listen_port} is not a port")
        require(1 <= self.max_concurrent_reads <= 256, "agent.max_concurrent_reads: 1..256")
        require(1 <= self.max_in_flight_appends <= 4096, "agent.max_in_flight_appends: 1..4096")
