"""The routing produce backend: per partition batch, LOCAL / DIRECT_CROSS via the upstream
leader, or WAL via S3 and the leader zone's agent.

Strategy: `submit` runs in the client connection's request order. For each partition it
asks the pure `decide()` for a path; if the path (or the leader, or the WAL route's owning
agent) differs from the one the partition's earlier batches are still travelling, it first
waits for them to drain (router/partition_book.py), so batches reach the log in the order
received whatever path each takes and wherever the leader moves. Direct batches
are handed to the DirectBackend in one go; WAL batches are buffered in the WalWriter
before `submit` returns (so their order in WAL objects is the request order;
router/wal_path.py). Each WAL object is announced to each destination zone's agent by one
notification, sent per zone strictly in object sequence order (the writer releases objects
in that order). A zone with several agents: each agent owns some of the zone's partitions
(leader_notify/sender/owners.py) and gets its own notifications, in object order, in
parallel with the zone's other agents; each agent has its own circuit
(router/zone_circuits.py), so an agent that is down sends only its own partitions to
`router.fallback` (after they drain, as on any path switch).

What happens after the batches are handed on - results, settlement, the answer,
accounting - belongs to the request's `ProduceRound` (router/produce_round.py). A batch
refused by a leader that moved is sent again by the round through `follow` and `hand_on`
here: the same lookup and policy as `submit`, the batch unchanged.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Literal

import trio

from core import errors
from core.audit import AuditSink, NullAuditSink
from core.produce import PartitionBatches, PartitionResult, ProduceContext
from core.zones import leader_zone
from kafka_protocol.produce_scan import ScannedProduce
from kafka_upstream.direct import DirectBackend
from kafka_upstream.errors import UpstreamError
from kafka_upstream.forward import ForwardedAnswer
from kafka_upstream.metadata import MetadataCache
from leader_notify.sender.owners import AgentMap
from router import metrics as router_metrics
from router.config import RouterConfig
from router.decide import SAME_ZONE, ObjectShape, Path, Route, ZoneView, decide, predicted_shape, shadow
from router.forwarded_round import ForwardedPartition, ForwardedRound
from router.metrics import FORWARD_DECLINED_BY
from router.partition_book import PartitionBook, PartitionState
from router.produce_round import Followed, ProduceRound, Resent, RoundServices
from router.rates import ZoneRates
from router.resend_order import Lane
from router.wal_path import WalPath
from router.zone_circuits import ZoneCircuits
from router.zone_health import Signal, allows
from wal_s3.config import WalConfig
from wal_s3.flush_policy import producer_wait_s

log = logging.getLogger(__name__)

OBSERVED_FRESH_LINGERS = 4  # flush sizes older than 4 lingers no longer describe the traffic
OBSERVED_FRESH_MIN_S = 1.0
TOPIC_REFUSALS_CACHED = 10_000  # topics whose pilot answer is remembered; beyond that it is worked out per batch
# A refused batch's leader is looked up afresh while the answer still names the lane that
# refused it: a broker's metadata may lag an election (the old leader already knows it lost
# it). Backoff 0.05, 0.1, 0.2, 0.4 s, then every 0.5 s, for up to 3 s in all: an election
# reaches every broker's metadata in well under a second on an idle cluster, but on a busy
# host it has taken longer than the 0.75 s a count of five lookups allowed. 3 s is a tenth of
# a producer's default request time-out; after it the refusal goes to the producer.
FOLLOW_BUDGET_S = 3.0
FOLLOW_BACKOFF_S = 0.05
FOLLOW_BACKOFF_MAX_S = 0.5

# What `forward` sends: the leader's id and zone, each partition's (batch, route, shadow
# route), each partition's (batch, leader zone, cached) lookup.
_ForwardPlan = tuple[int, str | None, list[tuple[PartitionBatches, Route, Route | None]],
                     list[tuple[PartitionBatches, str | None, bool]]]


class RoutingBackend:
    """ProduceBackend that routes each partition batch by zone, policy, cost and health."""

    def __init__(self, zone: str, config: RouterConfig, wal_config: WalConfig, direct: DirectBackend,
                 metadata: MetadataCache, wal_path: WalPath | None, nursery: trio.Nursery,
                 audit: AuditSink | None = None, proxy_id: str = "",
                 direct_by_zone: Mapping[str, DirectBackend] | None = None, *,
                 circuits: ZoneCircuits | None = None) -> None:
        """`circuits`: the destinations' circuits, shared with the WAL writer's and the sender's
        gray-failure hooks (the composition root wires them); a fresh set following
        `metadata` when not given."""
        self.zone = zone
        self._direct_by_zone = dict(direct_by_zone or {})
        self.config = config
        self._wal_config = wal_config
        self._direct = direct
        self._metadata = metadata
        self._wal = wal_path
        self._nursery = nursery
        if circuits is None:
            circuits = ZoneCircuits(AgentMap({}), config.broker_zones)
            circuits.follow(metadata)
        self.circuits = circuits
        self._book = PartitionBook()
        self._services = RoundServices(self._book, circuits, metadata, audit or NullAuditSink(), proxy_id,
                                       follower=self, nursery=nursery)
        self._rates = ZoneRates()
        self.policy: str = config.policy  # as set_policy checks it
        self._topic_refusals: dict[str, str | None] = {}  # config.wal_refusal per topic seen
        self.route_counts: dict[str, int] = defaultdict(int)

    def observe_zone(self, key: str, signal: Signal, detail: str = "") -> None:
        """One signal about a destination's WAL path (the monitor's agent probes)."""
        self.circuits.observe(key, signal, detail)

    def zone_circuits(self) -> dict[str, str]:
        """Each destination zone's circuit as of now: closed, open or half_open (zones seen so far)."""
        return self.circuits.states()

    def zone_reasons(self) -> dict[str, str]:
        """Each destination zone's circuit with its cause and what was last seen (for /readyz)."""
        return self.circuits.reasons()

    def set_policy(self, policy: str) -> None:
        """Switch policy at run time (ordering is kept by the drain-before-switch rule)."""
        if policy not in ("cost", "wal", "direct"):
            raise ValueError(f"unknown policy {policy!r}")
        self.policy = policy

    async def _leader_zone(self, item: PartitionBatches) -> tuple[str | None, bool, int]:
        """(the leader's zone, whether the topic's metadata was cached, the leader's id or -1)."""
        cached = self._metadata.cached(item.topic)
        info, broker, _err = await self._metadata.leader(item.topic, item.partition)
        zone = leader_zone(item.topic, item.partition, info.leader_id if info else None,
                           broker.rack if broker else None, self.config.partition_zones, self.config.broker_zones)
        if self._wal is not None and zone is not None and info is not None:
            self._wal.note_leader(zone, item.topic, item.partition, info.leader_id)
        return zone, cached, info.leader_id if info is not None else -1

    def _lane(self, item: PartitionBatches, route: Route, dest: str | None, leader_id: int) -> Lane:
        """Where the batch goes: the WAL by the owning agent of the leader's zone (which appends
        to whichever broker of its zone leads), a direct route to the leader itself."""
        if route.path is Path.WAL:
            agent = self._wal.agent_of(dest, item.topic, item.partition) if self._wal and dest else 0
            return route.path_name, dest or "", agent
        return route.path_name, dest or "", leader_id

    def _book_lane(self, item: PartitionBatches, route: Route, dest: str | None, leader_id: int) -> tuple[str, int]:
        """What the partition's batches in flight must share with this one for it to leave
        without waiting for them (PartitionState.lane): on the WAL route the leader zone's
        owning agent, on the direct routes the leader. A leader that moved refuses the
        batches still on their way to it, and they are sent again to the new one: a later
        batch sent there first would overtake them (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for
        an idempotent librdkafka producer)."""
        if route.path is Path.WAL and self._wal is not None and dest is not None:
            return dest, self._wal.agent_of(dest, item.topic, item.partition)
        return dest or "", leader_id

    def _direct_target(self, route: Route, dest: str | None) -> DirectBackend:
        if route.path is Path.DIRECT_CROSS and dest in self._direct_by_zone:
            return self._direct_by_zone[dest]
        return self._direct

    async def follow(self, item: PartitionBatches, refused: Route, lane: Lane) -> Followed | None:
        """The route to the partition's leader looked up afresh, for a batch `lane` refused
        because its leader moved (produce_round.LeaderFollower); None while every lookup still
        names `lane`, or none answers."""
        backoff_s = FOLLOW_BACKOFF_S
        give_up_at = trio.current_time() + FOLLOW_BUDGET_S
        lookups = 0
        while True:
            self._metadata.invalidate(item.topic)
            lookups += 1
            try:
                dest, _cached, leader_id = await self._leader_zone(item)
            except UpstreamError:
                return None
            route, would = self._route(item, dest, self._book.state((item.topic, item.partition)))
            followed_lane = self._lane(item, route, dest, leader_id)
            if followed_lane != lane:
                reason = f"leader moved: re-routed ({refused.path.value} to {lane[1] or '?'} refused)"
                return Followed(Route(route.path, reason), dest, followed_lane, would)
            left_s = give_up_at - trio.current_time()
            if left_s <= 0:
                break
            await trio.sleep(min(backoff_s, left_s))  # the cluster's metadata catches up
            backoff_s = min(backoff_s * 2, FOLLOW_BACKOFF_MAX_S)
        log.info("%s-%d: refused by a moved leader, but its leader still reads as %s after %d lookups in %.1f s; "
                 "the producer retries", item.topic, item.partition, lane, lookups, FOLLOW_BUDGET_S)
        return None

    async def hand_on(self, item: PartitionBatches, ctx: ProduceContext, followed: Followed) -> Resent:
        """Send a refused batch again by `followed` (produce_round.LeaderFollower)."""
        self.route_counts[followed.route.path_name] += 1
        if followed.route.path is Path.WAL:
            assert self._wal is not None and followed.dest is not None  # the policy routes WAL only then
            ack_mode = "leader" if any(b.is_transactional for b in item.batches) else self._ack_mode(item.topic)
            return Resent(None, await self._wal.submit(item, followed.dest, ack_mode))
        return Resent(await self._direct_target(followed.route, followed.dest).submit([item], ctx), None)

    def _count_submit(self, lookups: list[tuple[PartitionBatches, str | None, bool]],
                      routed: list[tuple[PartitionBatches, Route, Route | None]]) -> None:
        """Metrics and audit records of what submit looked up and decided. Called once the
        batches are handed on: a WAL batch then waits for its object's linger anyway."""
        for item, zone, cached in lookups:
            self._services.audit.emit("metadata_lookup", {"topic": item.topic, "partition": item.partition,
                                                 "leader_zone": zone or "", "cache": "hit" if cached else "miss"})
            router_metrics.METADATA_LOOKUPS_BY("hit" if cached else "miss").inc()
        for item, route, would in routed:
            router_metrics.BYTES_IN_BY(route.path_name).inc(item.size)
            router_metrics.DECISIONS_BY(route.path_name, route.reason).inc()
            if would is not None:
                router_metrics.SHADOW_DECISIONS_BY(would.path_name, would.reason).inc()
                router_metrics.SHADOW_BYTES_BY(would.path_name).inc(item.size)

    def _producer_wait_s(self, item: PartitionBatches, since_previous: float | None) -> float:
        if not self._wal_config.linger_counts_producer_wait:
            return 0.0
        return producer_wait_s(time.time() * 1000.0, item.batches[0].first_timestamp, since_previous)

    def _ack_mode(self, topic: str) -> str:
        return self.config.ack_mode(topic)

    def _wal_refusal(self, topic: str) -> str | None:
        refusal: str | None | Literal[False] = self._topic_refusals.get(topic, False)  # False: not seen yet
        if refusal is False:
            refusal = self.config.wal_refusal(topic)
            if len(self._topic_refusals) < TOPIC_REFUSALS_CACHED:
                self._topic_refusals[topic] = refusal
        return refusal

    def _route(self, item: PartitionBatches, dest: str | None, state: PartitionState) -> tuple[Route, Route | None]:
        """(the route the batch takes, in shadow mode the route the policy would have taken)."""
        if not self.config.shadow:
            return self._policy_route(item, dest, state), None
        would = self._policy_route(item, dest, state)
        return shadow(would), would

    def _policy_route(self, item: PartitionBatches, dest: str | None, state: PartitionState) -> Route:
        now = trio.current_time()
        healthy = True
        shape = ObjectShape(0, 0)
        if dest is not None and dest != self.zone:
            # Shadow mode has no WAL path to be unhealthy: it asks what the policy would do.
            healthy = self.config.shadow or (self._wal is not None and allows(
                self.circuits.now(self.circuits.key(dest, item.topic, item.partition), now)))
            # Observed flush sizes while the WAL is in use; predicted from byte rates otherwise.
            linger_ms = self._wal_config.linger_ms
            assert linger_ms is not None  # WalConfig.__post_init__ resolved an unset one
            fresh_s = max(OBSERVED_FRESH_MIN_S, OBSERVED_FRESH_LINGERS * linger_ms / 1000)
            observed = self._wal.observed_shape(now, fresh_s) if self._wal else None
            shape = observed or predicted_shape(self._rates.rate(dest, now), self._rates.total(now),
                                                linger_ms, self._wal_config.max_bytes)
            self._rates.add(dest, item.size, now)
        transactional = any(b.is_transactional for b in item.batches)
        refusal = self._wal_refusal(item.topic)
        if (not transactional and (self._wal is not None or self.config.shadow) and dest is not None
                and dest != self.zone and refusal is None and self._ack_mode(item.topic) == "wal"):
            # Answered on durability: later batches must never overtake one the zone's
            # notifier is still re-sending, so these topics never leave the WAL path.
            return Route(Path.WAL, "ack_mode wal")
        view = ZoneView(self.zone, dest, healthy, self.config.fallback)
        route = decide(self.policy, view, state.path, shape, self.config.prices, transactional,
                       self._wal_config.storage_class, refusal)
        if route.path is Path.WAL and self._wal is None and not self.config.shadow:
            return Route(Path.DIRECT_CROSS, "no WAL configured")
        return route

    async def forward(self, request: ScannedProduce, ctx: ProduceContext, body: memoryview,
                      answer: ForwardedAnswer) -> bool:
        """The local route's forward path (kafka_upstream/forward.py, router/forwarded_round.py):
        send the client's request whole when every partition takes the local route to one
        leader, with no path switch to drain and no sequence gap to hold back; False, having
        changed nothing, otherwise. Raises nothing.

        Every produce request of a same-zone producer comes this way, so it does only what
        the decision needs (measured per request: its Python calls are the local route's
        CPU): a same-zone leader's route is the constant `decide` gives it, and an open
        connection is taken without a wait, after which nothing can have moved a partition."""
        plan = await self._forward_plan(request, ctx)
        if plan is None:
            return False
        leader_id, dest, routed, lookups = plan
        conn = self._direct.open_connection(leader_id)
        if conn is None:
            try:
                conn = await self._direct.connection(leader_id)
            except UpstreamError:
                FORWARD_DECLINED_BY("connection").inc()
                return False  # the decoding path fails the partitions as it always has
            if not all(self._clear_to_forward(item, (dest or "", leader_id)) for item, _route, _would in routed):
                return False  # another request moved a partition while this one connected
        book = self._book
        now = trio.current_time()
        partitions = []
        for item, route, would in routed:
            tp = (item.topic, item.partition)
            book.since_previous_request(book.state(tp), now)
            ticket = book.take(tp, Path.LOCAL, (dest or "", leader_id))
            partitions.append(ForwardedPartition(item, route, would, ticket))
        self.route_counts[SAME_ZONE.path_name] += len(partitions)  # every forwarded batch is local
        forwarded = ForwardedRound(self._services, self._direct, partitions, ctx, dest, leader_id, answer,
                                   time.perf_counter())
        await conn.forward_produce(ctx.client_version, body, self._direct.timeout_s, forwarded.on_answer)
        self._count_submit(lookups, routed)  # after the send: the producer does not wait for the accounting
        return True

    async def _forward_plan(self, request: ScannedProduce, ctx: ProduceContext) -> _ForwardPlan | None:
        """(leader id, its zone, each partition's route, the lookups) when the request may be
        forwarded whole, else None (counted by reason). Changes no routing state."""
        if not request.partitions or not self._direct.speaks_produce(ctx.client_version):
            FORWARD_DECLINED_BY("version").inc()
            return None
        leader: int | None = None
        dest: str | None = None
        routed: list[tuple[PartitionBatches, Route, Route | None]] = []
        lookups: list[tuple[PartitionBatches, str | None, bool]] = []
        book = self._book
        same_zone = (SAME_ZONE, SAME_ZONE if self.config.shadow else None)  # what _route gives a same-zone leader
        for item in request.partitions:
            try:
                zone, cached, leader_id = await self._leader_zone(item)
            except UpstreamError:
                FORWARD_DECLINED_BY("metadata").inc()
                return None
            if leader_id < 0 or (zone is not None and zone != self.zone) or leader not in (None, leader_id):
                FORWARD_DECLINED_BY("route").inc()
                return None
            if zone == self.zone:
                route, would = same_zone
            else:  # no zone known: the policy says (no side effect here)
                route, would = self._route(item, zone, book.state((item.topic, item.partition)))
                if route.path is not Path.LOCAL:
                    FORWARD_DECLINED_BY("route").inc()
                    return None
            if not self._clear_to_forward(item, (zone or "", leader_id)):
                return None
            leader, dest = leader_id, zone
            routed.append((item, route, would))
            lookups.append((item, zone, cached))
        assert leader is not None
        return leader, dest, routed, lookups

    def _clear_to_forward(self, item: PartitionBatches, lane: tuple[str, int]) -> bool:
        """Whether the partition's batch may leave by the local route to the leader of `lane`
        now: no batch in flight on another path or to another leader (which `submit` would
        drain first), no sequence gap of its producer (which `submit` would decide on).
        Counted by reason when not."""
        state = self._book.state((item.topic, item.partition))
        if state.in_flight > 0 and state.path is not None and (state.path is not Path.LOCAL or state.lane != lane):
            FORWARD_DECLINED_BY("switch").inc()
            return False
        if self._book.gap_open(item):
            FORWARD_DECLINED_BY("gap").inc()
            return False
        return True

    async def submit(self, items: list[PartitionBatches], ctx: ProduceContext) -> ProduceRound:
        produce_round = ProduceRound(self._services, items, time.perf_counter(), ctx.principal, ctx)
        direct_items: dict[DirectBackend, list[PartitionBatches]] = defaultdict(list)
        lookups: list[tuple[PartitionBatches, str | None, bool]] = []
        routed: list[tuple[PartitionBatches, Route, Route | None]] = []
        book = self._book
        for item in items:
            tp = (item.topic, item.partition)
            try:
                dest, cached, leader_id = await self._leader_zone(item)
            except UpstreamError as exc:
                # No broker answered Metadata: this partition fails retriably, the connection
                # and the other partitions go on; later batches wait for this one's retry.
                failed = PartitionResult(errors.REQUEST_TIMED_OUT, error_message=f"no metadata: {exc}")
                produce_round.hold_back(tp, failed)
                book.note_failure(item, failed)
                continue
            lookups.append((item, dest, cached))
            state = book.state(tp)
            since_previous = book.since_previous_request(state)
            route, would = self._route(item, dest, state)
            lane = self._book_lane(item, route, dest, leader_id)
            if state.in_flight > 0 and state.path is not None and (state.path != route.path or state.lane != lane):
                await book.drain_before_switch(tp, state, route.path)
            if book.behind_a_gap(item):
                produce_round.hold_back(tp, PartitionResult(
                    errors.REQUEST_TIMED_OUT,
                    error_message="an earlier batch of this producer failed; it must be retried first"))
                continue
            ticket = book.take(tp, route.path, lane)
            produce_round.routed(item, route, dest, would, ticket, self._lane(item, route, dest, leader_id))
            self.route_counts[route.path_name] += 1
            routed.append((item, route, would))
            if route.path is Path.WAL:
                assert self._wal is not None and dest is not None
                outcome = await self._wal.submit(item, dest, self._ack_mode(item.topic)
                                                 if not any(b.is_transactional for b in item.batches) else "leader",
                                                 self._producer_wait_s(item, since_previous))
                produce_round.add_wal(item, dest, outcome)
            else:
                direct_items[self._direct_target(route, dest)].append(item)
        for target, group in direct_items.items():
            produce_round.add_direct(await target.submit(group, ctx), group)
        self._count_submit(lookups, routed)
        if produce_round.has_direct:  # settled (and answered, with on_results) by a task of the backend
            produce_round.settle_in(self._nursery)
        return produce_round
