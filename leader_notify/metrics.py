"""Prometheus metrics of the agent (azsidecar_agent_*) and the sender (azsidecar_notify_*).

Each instance registers in its own CollectorRegistry unless one is given, so several agents
in one test process do not collide. The processes themselves use one instance each on
prometheus_client's default registry (process_agent_metrics, process_sender_metrics), which
is what their /metrics serves next to the module-level wal_s3, proxy and router collectors.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# The zone notifiers' re-sends (leader_notify/sender/notifier.py), on the default registry with the
# router's metrics under their original names, which the dashboard queries.
REDRIVE_PENDING = Gauge("azsidecar_router_wal_redrive_pending",
                        "1 while a zone's notifications wait for acknowledged (ack_mode wal) entries to be re-sent",
                        ["dest_zone"])
REDRIVES = Counter("azsidecar_router_wal_redrives_total",
                   "Re-sent notifications of acknowledged (ack_mode wal) entries", ["dest_zone"])

class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.notifications = Counter("azsidecar_agent_notifications_total", "Notifications answered, by outcome",
                                     ["outcome"], registry=r)
        self.entries_appended = Counter("azsidecar_agent_entries_appended_total", "Batches appended to a leader",
                                        registry=r)
        self.appended_bytes = Counter("azsidecar_agent_appended_bytes_total", "Raw batch bytes appended",
                                      registry=r)
        self.duplicates = Counter("azsidecar_agent_duplicates_total",
                                  "Entries already appended (source: leader said 46, or agent's applied map)",
                                  ["source"], registry=r)
        self.errors = Counter("azsidecar_agent_append_errors_total", "Entries answered with a Kafka error code",
                              ["error_code"], registry=r)
        self.append_latency = Histogram("azsidecar_agent_append_latency_seconds",
                                        "One batch append, retries included", buckets=LATENCY_BUCKETS_S, registry=r)
        self.auth_failures = Counter("azsidecar_agent_auth_failures_total",
                                     "Frames refused: bad_mac (replays included), bad_frame, malformed, foreign_key",
                                     ["reason"], registry=r)
        self.connections = Gauge("azsidecar_agent_connections",
                                 "Open notification connections (unauthenticated: no verified HELLO yet)",
                                 ["state"], registry=r)
        self.protocol_connections = Counter("azsidecar_agent_protocol_connections_total",
                                            "Authenticated notification connections, by the protocol version "
                                            "agreed with the proxy", ["protocol_version"], registry=r)
        self.connections_refused = Counter("azsidecar_agent_connections_refused_total",
                                           "Connections closed at accept: max_connections, max_per_source, "
                                           "max_unauthenticated", ["reason"], registry=r)
        self.connections_closed = Counter("azsidecar_agent_connections_timed_out_total",
                                          "Connections closed by a timeout: request_deadline, idle",
                                          ["reason"], registry=r)
        # Read when scraped (Agent sets the functions): nothing to update per append.
        self.append_slots_free = Gauge("azsidecar_agent_append_slots_free",
                                       "agent.max_in_flight_appends slots no partition run holds", registry=r)
        self.append_runs_waiting = Gauge("azsidecar_agent_append_runs_waiting",
                                         "Partition runs whose turn it is, waiting for an append slot", registry=r)

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (tests and the benchmark read counters through this)."""
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v


class SenderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.notifications = Counter("azsidecar_notify_notifications_total", "Notifications sent, by final outcome",
                                     ["dest_zone", "outcome"], registry=r)
        self.attempts = Counter("azsidecar_notify_attempts_total", "Notification attempts (retries included)",
                                ["dest_zone"], registry=r)
        self.prefetches = Counter("azsidecar_notify_prefetches_total", "Prefetch requests answered, by outcome",
                                  ["dest_zone", "outcome"], registry=r)
        self.rtt = Histogram("azsidecar_notify_rtt_seconds", "Notification round trip, retries included",
                             ["dest_zone"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.gray = Counter("azsidecar_notify_gray_total", "Attempts abandoned at the gray deadline or refused while gray",
                            ["dest_zone", "outcome"], registry=r)
        self.protocol_connections = Counter("azsidecar_notify_protocol_connections_total",
                                            "Connections opened to agents, by the protocol version agreed",
                                            ["dest_zone", "protocol_version"], registry=r)
        self.pipelining_off = Counter("azsidecar_notify_pipelining_off_total",
                                      "Pipelines that found their agent speaking a protocol version without "
                                      "ordered requests (its objects then go one at a time)",
                                      ["dest_zone", "reason"], registry=r)

    def value(self, name: str, **labels: str) -> float:
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v


_process_agent: AgentMetrics | None = None
_process_sender: SenderMetrics | None = None


def process_agent_metrics() -> AgentMetrics:
    """The agent process's metrics, on the default registry (created on first use)."""
    global _process_agent  # noqa: PLW0603 - one set of collectors per process, like wal_s3.metrics
    if _process_agent is None:
        _process_agent = AgentMetrics(REGISTRY)
    return _process_agent


def process_sender_metrics() -> SenderMetrics:
    """The proxy process's notification metrics, on the default registry (created on first use)."""
    global _process_sender  # noqa: PLW0603
    if _process_sender is None:
        _process_sender = SenderMetrics(REGISTRY)
    return _process_sender
