"""Notification sender (in the proxy) and agent settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.configload import require


@dataclass(frozen=True)
class NotifyConfig:
    #: agents per zone: `{"use1-az1" = "10.0.1.5:9400"}` or a list, `{"use1-az1" = ["10.0.1.5:9400",
    #: "10.0.1.6:9400"]}`; partitions are spread over a zone's agents. None of another zone: the WAL route is off
    agents: dict[str, str | tuple[str, ...]] = field(default_factory=dict)
    # How a zone's partitions are spread over its agents (leader_notify/sender/owners.py): "leader",
    # each broker's partitions to one agent (a broker gets the requests one agent would send;
    # a zone scales out with its brokers), or "partition", rendezvous hashing of every
    # partition (scales out on one broker, at agents-times the ProduceRequests).
    agent_ownership: str = "leader"  # "leader": a broker's partitions to one agent of its zone; "partition": hashed per partition
    # File with the HMAC-SHA256 keys, one per line, the first signs, all verify (rotation);
    # owner-readable only. Without it: $AZSIDECAR_NOTIFY_HMAC_KEYS (comma-separated).
    hmac_key_file: str = ""  # the notification keys, one per line (mode 600); else $AZSIDECAR_NOTIFY_HMAC_KEYS
    hmac_keys: tuple[str, ...] = field(default=(), repr=False)  # not a file setting (refused there): filled from hmac_key_file or the environment
    #: per attempt; recent answers set a tighter one (gray_factor x p99, at least gray_floor_s), but
    #: not for a notification naming a partition its agent has not appended for this proxy (a new
    #: topic, a leader just moved: the leader's first append waits for its followers) while the zone is not gray
    timeout_s: float = 10.0
    gray_floor_s: float = 1.0  # an attempt slower than max(gray_factor x p99 of the last minute, this) is abandoned and counts as a failure
    gray_factor: float = 3.0  # that deadline in multiples of the recent p99 round trip
    # (a p99 of 0.85 s made the deadline 2.5 s and the fallback 5.1 s; with 2 s it was 4.4 s on an idle host)
    #: the deadline never goes above this (per unit of work: gray_unit_entries), however slow the
    #: recent answers: a hung agent is abandoned within it and its zone falls back within about two of it (attempt and hedge),
    #: inside the 5 s fallback bound of `tests/system/reliability/test_gray_failures.py` on a
    #: loaded host too; an agent whose answers all take longer is treated as failing. Before 5 answers
    #: from an agent its deadline is 3 x this (at most timeout_s). At least `gray_floor_s`
    gray_max_s: float = 1.5
    #: a notification's deadlines above (floor, maximum, the cold start's 3 x maximum) are per
    #: unit of work: 1 for the notification, plus 1 per this many entries and 1 per
    #: gray_unit_bytes; at most timeout_s. 512 entries of an 8 MiB object are 10 units (15 s,
    #: so timeout_s); 1 entry 1.02
    gray_unit_entries: int = 64
    #: bytes of a notification's range that count as one unit of work (gray_unit_entries)
    gray_unit_bytes: int = 8 * 1024 * 1024
    max_in_flight_per_zone: int = 64  # per agent address (the name predates several agents per zone)
    max_attempts: int = 3  # notification attempts per object and zone, then its entries fail (or are re-sent, ack_mode wal)
    connect_timeout_s: float = 3.0  # TCP (and the HELLO) to an agent
    backoff_initial_s: float = 0.2  # doubled per attempt up to backoff_max_s
    backoff_max_s: float = 2.0  # the longest wait between attempts
    #: pooled connections idle longer than this are closed by the proxy, before the agent's
    #: agent.idle_timeout_s closes them under a notification about to be sent
    max_idle_s: float = 300.0
    #: with `pipeline_depth` 1: objects of one agent read ahead (prefetch) while an earlier
    #: object's notification is applied; 0 = off. Not used while pipelining (the agent reads
    #: the objects in flight concurrently)
    prefetch_depth: int = 2
    # Opt-in: one notification timeout fails up to this many objects at once, and their
    # batches' producers may retry (at-least-once for non-idempotent ones; docs/notify-protocol.md).
    #: objects whose notifications one agent has in flight at once, on one connection, in
    #: object order, 1..16: the agent appends object k+1 while object k's appends are in
    #: flight, each partition in order (docs/notify-protocol.md, "Pipelining"). 1 = one object at a time per agent.
    #: Needs an agent of notify protocol v4: to an agent of the previous release, objects go
    #: one at a time (logged, `azsidecar_notify_pipelining_off_total`)
    pipeline_depth: int = 1

    def __post_init__(self) -> None:
        require(self.timeout_s > 0, "notify.timeout_s: must be > 0")
        require(self.gray_floor_s > 0, "notify.gray_floor_s: must be > 0")
        require(self.gray_factor >= 1, "notify.gray_factor: must be >= 1")
        require(self.gray_floor_s <= self.gray_max_s, "notify.gray_max_s: must be >= notify.gray_floor_s")
        require(1 <= self.gray_unit_entries <= 1_000_000, "notify.gray_unit_entries: 1..1000000")
        require(64 * 1024 <= self.gray_unit_bytes <= 5 * 1024 ** 3, "notify.gray_unit_bytes: 64 KiB..5 GiB")
        require(self.connect_timeout_s > 0, "notify.connect_timeout_s: must be > 0")
        require(0 < self.backoff_initial_s <= self.backoff_max_s, "notify.backoff_initial_s: 0 < initial <= backoff_max_s")
        require(self.max_idle_s > 0, "notify.max_idle_s: must be > 0")
        require(0 <= self.prefetch_depth <= 16, "notify.prefetch_depth: 0..16")
        require(1 <= self.pipeline_depth <= 16, "notify.pipeline_depth: 1..16")
        require(self.agent_ownership in ("leader", "partition"),
                f"notify.agent_ownership: {self.agent_ownership!r} is not \"leader\" or \"partition\"")
        for key in self.hmac_keys:
            require(len(key.encode()) >= 16, "notify.hmac_keys: every key must be at least 16 bytes")
        require(1 <= self.max_in_flight_per_zone <= 4096, "notify.max_in_flight_per_zone: 1..4096")
        require(1 <= self.max_attempts <= 20, "notify.max_attempts: 1..20")
        for zone, given in self.agents.items():
            addresses = (given,) if isinstance(given, str) else given
            require(1 <= len(addresses) <= 64, f"notify.agents.{zone}: 1..64 agent addresses")
            require(len(set(addresses)) == len(addresses), f"notify.agents.{zone}: an address is listed twice")
            for address in addresses:
                host, _, port = address.rpartition(":")
                require(bool(host) and port.isdigit() and 0 < int(port) < 65536,
                        f"notify.agents.{zone}: {address!r} is not host:port")


EVENT_LOOPS = ("uvloop", "asyncio")


@dataclass(frozen=True)
class AgentConfig:
    listen_host: str = "127.0.0.1"  # the notification listener's address (the proxies of other zones connect to it)
    listen_port: int = 9400  # the notification listener's port
    max_concurrent_reads: int = 8  # WAL object GETs in flight at once
    #: partition runs appending at once, over all leaders, 1..4096. Each has one batch in
    #: flight (an idempotent producer's up to `requests_in_flight_per_leader`), so with objects
    #: that hold a batch or two of each of many partitions this bounds the rate at a leader's
    #: latency L to about slots × batch size / L (64 slots of 16 KiB batches at 5 ms: 0.64× a
    #: plain producer; docs/benchmarks.md, `bench/bench_agent.py --broker-rtt-ms 5`)
    max_in_flight_appends: int = 1024
    #: record batches per ProduceRequest at most, 64 KiB..64 MiB (a producer's
    #: `max.request.size`); a larger batch goes alone. Keeps requests far below the broker's
    #: `socket.request.max.bytes` however many partitions append at once
    max_request_bytes: int = 1024 * 1024
    max_append_attempts: int = 5  # per batch, with metadata refresh and backoff (~1.5 s in total)
    #: ProduceRequests in flight per leader, 1..5. A partition has one batch in flight, except
    #: that an idempotent producer's next batch in sequence may go in a further request behind
    #: a batch in flight whose predecessor the leader confirmed
    #: (leader_notify/agent/sequence_chain.py); the leader's sequence check then refuses a
    #: batch that would land out of order. Batches without producer id stay one at a time per
    #: partition; the further requests also carry partitions with nothing in flight. 1: one request at a time.
    #: What it gains is the network's share of a round trip: Apache Kafka reads a connection's
    #: next request only after answering the one before, so with acks=all a leader still
    #: appends one batch per partition per replication round trip (2 and 4 read alike on a
    #: local three-node cluster, 2026-12-02, docs/benchmarks.md)
    requests_in_flight_per_leader: int = 2
    produce_timeout_ms: int = 10_000  # ProduceRequest timeout sent to the leader
    #: entries already appended, remembered with their offsets so a re-sent notification
    #: never appends a batch without producer id twice; about 200 bytes each
    applied_cache_entries: int = 100_000
    metrics_port: int = 0  # 0 = no /metrics endpoint
    # GC checkpoints: one manifest PUT names every object applied in an interval (S3 requests
    # fall from one per object to one per interval; GC may delete an object that much later).
    checkpoint_interval_ms: int = 1_000  # one checkpoint manifest per interval (docs/wal-format.md)
    checkpoint_max_keys: int = 1_000  # a manifest is written at once when this many objects wait
    # Listener limits (leader_notify/agent/_limits.py). Connections from one proxy: at most
    # notify.max_in_flight_per_zone each; per source does not apply to loopback peers.
    max_connections: int = 1024  # open notification connections; more are closed at accept (a proxy opens up to notify.max_in_flight_per_zone)
    max_connections_per_source: int = 256  # open connections per source address; not for loopback peers
    max_unauthenticated_connections: int = 64  # connected, HELLO not yet verified
    request_timeout_s: float = 10.0  # a frame begun (or the HELLO, from accept) must arrive whole within this
    idle_timeout_s: float = 900.0  # between frames; above notify.max_idle_s, so proxies close first
    #: the `azsidecar agent` process's asyncio event loop: `uvloop` (9-12 % less CPU per MiB
    #: appended, docs/benchmarks.md, "Agent append") or `asyncio` (the standard library's selector loop)
    event_loop: str = "uvloop"

    def __post_init__(self) -> None:
        require(1 <= self.max_connections <= 1_000_000, "agent.max_connections: 1..1000000")
        require(1 <= self.max_connections_per_source <= self.max_connections,
                "agent.max_connections_per_source: 1..agent.max_connections")
        require(1 <= self.max_unauthenticated_connections <= self.max_connections,
                "agent.max_unauthenticated_connections: 1..agent.max_connections")
        require(self.request_timeout_s > 0, "agent.request_timeout_s: must be > 0")
        require(self.idle_timeout_s > 0, "agent.idle_timeout_s: must be > 0")
        require(self.event_loop in EVENT_LOOPS,
                f"agent.event_loop: {self.event_loop!r} is not one of {', '.join(EVENT_LOOPS)}")
        require(1 <= self.checkpoint_interval_ms <= 600_000, "agent.checkpoint_interval_ms: 1..600000")
        require(1 <= self.checkpoint_max_keys <= 10_000, "agent.checkpoint_max_keys: 1..10000")
        require(1 <= self.max_append_attempts <= 50, "agent.max_append_attempts: 1..50")
        require(1 <= self.requests_in_flight_per_leader <= 5, "agent.requests_in_flight_per_leader: 1..5 "
                "(Kafka keeps an idempotent producer's order for at most 5 requests in flight)")
        require(self.produce_timeout_ms > 0, "agent.produce_timeout_ms: must be > 0")
        require(1 <= self.applied_cache_entries <= 10_000_000, "agent.applied_cache_entries: 1..10000000")
        require(0 <= self.metrics_port <= 65535, f"agent.metrics_port: {self.metrics_port} is not a port")
        require(0 <= self.listen_port <= 65535, f"agent.listen_port: {self.listen_port} is not a port")
        require(1 <= self.max_concurrent_reads <= 256, "agent.max_concurrent_reads: 1..256")
        require(1 <= self.max_in_flight_appends <= 4096, "agent.max_in_flight_appends: 1..4096")
        require(64 * 1024 <= self.max_request_bytes <= 64 * 1024 * 1024, "agent.max_request_bytes: 64 KiB..64 MiB")
