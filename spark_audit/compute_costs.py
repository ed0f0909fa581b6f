"""What the sidecar's own compute costs over the audited window: the agents and the proxies' CPU.

Two lines, each a rate times what the audit shows:
- **agent tasks**: `agent_hour_usd` x agents x window hours. The audit names an agent only
  by its zone: agent_read, agent_apply and checkpoint_write records carry the common fields
  (`zone` = the agent's zone) and no agent id, so the agents seen are the zones with agent
  records times `agents_per_zone` (default 1: what the records prove; the Terraform agents
  module runs 2 per zone by default). An agent is paid for the whole window, busy or idle.
- **proxy CPU**: `vcpu_hour_usd` x CPU seconds, the CPU seconds being each route's bytes
  (produce_batch `bytes`: record-batch bytes the proxies handled) in GiB times the measured
  CPU seconds per GiB of that route. `local` and `direct_cross` batches are forwarded to a
  broker alike and share one rate; `wal` batches go through the WAL writer and the notifier.

Defaults, and where they come from:
- `agent_hour_usd` 0.04937: one Fargate task of 1 vCPU and 2 GB (the agents module's default
  task_size) at the us-east-1 Linux/x86 rates of the AWS Fargate pricing page, $0.04048 per
  vCPU-hour + 2 x $0.004445 per GB-hour (the figures price tables dated 2024 to 2026 quote;
  check your region's and your discounts);
- `vcpu_hour_usd` 0.04048: the same Fargate vCPU-hour (a sidecar's CPU is a share of its
  host's or task's vCPUs);
- `proxy_cpu_s_per_gib_local` 4.94 and `proxy_cpu_s_per_gib_wal` 5.40: docs/benchmarks.md,
  "Front door", `bench/bench_proxy.py --broker kafka --rounds 3` on 2026-11-29 at `40e75da`
  (Apache Kafka, saturated producer): the proxy's 3.77 user + 1.05 kernel = 4.82 ms of CPU
  per MiB of record bytes on the local route and 4.06 + 1.21 = 5.27 ms on the WAL route,
  x 1024 MiB per GiB. A saturated producer sends full requests; the same table has the
  proxy at 105.5 ms per MiB (local) and 24.6 ms (WAL) behind a producer paced at 2,000 small
  records a second, so a lightly loaded fleet should set its own figure: the proxies'
  process CPU seconds over the window divided by the GiB they routed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.configload import require

GIB = 1024**3
SECONDS_PER_HOUR = 3600.0
MIB_PER_GIB = 1024


@dataclass(frozen=True)
class ComputeModel:
    """The rates the compute lines use; `[compute]` in the prices file, or flags."""

    agent_hour_usd: float = 0.04048 + 2 * 0.004445  # Fargate 1 vCPU + 2 GB, us-east-1 Linux/x86
    vcpu_hour_usd: float = 0.04048  # Fargate per vCPU-hour, us-east-1 Linux/x86
    agents_per_zone: int = 1  # agents behind each zone seen in agent records (the records carry no agent id)
    proxy_cpu_s_per_gib_local: float = 4.82 * MIB_PER_GIB / 1000  # local and direct_cross routes
    proxy_cpu_s_per_gib_wal: float = 5.27 * MIB_PER_GIB / 1000  # WAL route

    def __post_init__(self) -> None:
        for name in ("agent_hour_usd", "vcpu_hour_usd", "proxy_cpu_s_per_gib_local", "proxy_cpu_s_per_gib_wal"):
            require(getattr(self, name) >= 0, f"compute.{name}: must be >= 0")
        require(self.agents_per_zone >= 0, "compute.agents_per_zone: must be >= 0")

    def cpu_seconds(self, forwarded_bytes: float, wal_bytes: float) -> float:
        """CPU seconds the proxies spend on `forwarded_bytes` (local and direct_cross) and `wal_bytes`."""
        return (forwarded_bytes * self.proxy_cpu_s_per_gib_local + wal_bytes * self.proxy_cpu_s_per_gib_wal) / GIB


@dataclass(frozen=True)
class ComputeCost:
    """The two compute lines over one window."""

    model: ComputeModel
    agent_zones: tuple[str, ...]
    window_s: float
    forwarded_bytes: float  # local + direct_cross produce bytes
    wal_bytes: float

    @property
    def agents(self) -> int:
        return len(self.agent_zones) * self.model.agents_per_zone

    @property
    def agent_hours(self) -> float:
        return self.agents * self.window_s / SECONDS_PER_HOUR

    @property
    def agent_usd(self) -> float:
        return self.agent_hours * self.model.agent_hour_usd

    @property
    def cpu_seconds(self) -> float:
        return self.model.cpu_seconds(self.forwarded_bytes, self.wal_bytes)

    @property
    def cpu_usd(self) -> float:
        return self.cpu_seconds / SECONDS_PER_HOUR * self.model.vcpu_hour_usd

    @property
    def total_usd(self) -> float:
        return self.agent_usd + self.cpu_usd


def compute_cost(model: ComputeModel, agent_zones: Iterable[str], window_s: float, forwarded_bytes: float,
                 wal_bytes: float) -> ComputeCost:
    """The compute lines for a window; `agent_zones`: the zones of agent records (blanks ignored)."""
    zones = tuple(sorted({z for z in agent_zones if z}))
    return ComputeCost(model, zones, max(window_s, 0.0), forwarded_bytes, wal_bytes)


NO_COMPUTE = ComputeModel(agent_hour_usd=0.0, vcpu_hour_usd=0.0)  # costs nothing: the transfer and S3 lines alone
