"""Prometheus metrics of the agent (azsidecar_agent_*) and the sender (azsidecar_notify_*).

Each instance registers in its own CollectorRegistry unless one is given, so several agents
in one test process do not collide; the CLI serves the registry on `agent.metrics_port`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.notifications = Counter("azsidecar_agent_notifications", "Notifications answered, by outcome",
                                     ["status"], registry=r)
        self.entries_appended = Counter("azsidecar_agent_entries_appended", "Batches appended to a leader",
                                        registry=r)
        self.bytes_appended = Counter("azsidecar_agent_bytes_appended", "Raw batch bytes appended", registry=r)
        self.duplicates = Counter("azsidecar_agent_duplicates",
                                  "Entries already appended (source: leader said 46, or agent's applied map)",
                                  ["source"], registry=r)
        self.errors = Counter("azsidecar_agent_append_errors", "Entries answered with a Kafka error code",
                              ["code"], registry=r)
        self.append_latency = Histogram("azsidecar_agent_append_latency_seconds",
                                        "One batch append, retries included", buckets=LATENCY_BUCKETS_S, registry=r)
        self.auth_failures = Counter("azsidecar_agent_auth_failures",
                                     "Frames refused: bad_mac, bad_frame, replay, malformed, foreign_key",
                                     ["reason"], registry=r)

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (tests and the benchmark read counters through this)."""
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v


class SenderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.notifications = Counter("azsidecar_notify_notifications", "Notifications sent, by final status",
                                     ["dest_zone", "status"], registry=r)
        self.attempts = Counter("azsidecar_notify_attempts", "Notification attempts (retries included)",
                                ["dest_zone"], registry=r)
        self.rtt = Histogram("azsidecar_notify_rtt_seconds", "Notification round trip, retries included",
                             ["dest_zone"], buckets=LATENCY_BUCKETS_S, registry=r)

    def value(self, name: str, **labels: str) -> float:
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v
