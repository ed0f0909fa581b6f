"""Agent logic above its adapters: fake reader and appender (the adapters have their own
integration tests against moto and Tansu)."""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from dataclasses import dataclass

import pytest

from core.audit import MemoryAuditSink
from leader_notify import protocol as p
from leader_notify.agent.agent import Agent, AgentSettings
from leader_notify.agent.appender import AppendResult
from leader_notify.agent.partition_order import AppliedEntries
from tests.asyncio_idle import all_tasks_blocked
from tests.refcount import WeakBuffer, collector_off, still_alive

KEY = b"unit-test-key-0123456789"


@dataclass
class E:
    topic: str
    partition: int
    batch: bytes


class Reader:
    """Serves entries; a read of `slow_key` waits for `release` (to reorder reads)."""

    def __init__(self, objects, slow_key=None):
        self.objects = objects
        self.slow_key = slow_key
        self.release = asyncio.Event()
        self.reads = 0

    async def read_zone(self, key, zone_offset, zone_length, *, source_zone, expected_entries):
        self.reads += 1
        if key == self.slow_key:
            await self.release.wait()
        return self.objects[key]


class Appender:
    def __init__(self, fail=None):
        self.log: list[tuple[str, int, bytes]] = []
        self.fail = fail or {}  # batch -> error code
        self.groups: list[list[tuple[str, int]]] = []  # the partitions of each append_runs call

    async def append(self, topic, partition, batch):
        await asyncio.sleep(0)  # an append is an await point, as a real one (not synchronization)
        if batch in self.fail:
            return AppendResult(self.fail[batch])
        self.log.append((topic, partition, batch))
        offset = sum(1 for t, q, _ in self.log if (t, q) == (topic, partition)) - 1
        return AppendResult(0, offset)

    async def append_run(self, topic, partition, batches, results):
        for batch in batches:  # as KafkaAppender's: in order, stopping after the first failure
            results.append(await self.append(topic, partition, batch))
            if results[-1].error_code:
                return

    async def append_runs(self, runs, on_through=None):
        self.groups.append([(run.topic, run.partition) for run in runs])

        async def one(k, run):
            await self.append_run(*run)
            if on_through is not None:
                on_through(k)

        await asyncio.gather(*(one(k, run) for k, run in enumerate(runs)))


def crc(b: bytes) -> int:
    import crc32c

    return crc32c.crc32c(b)


def request(key, entries, request_id=1):
    return p.NotifyRequest(request_id, "az1", "az2", "proxy", 1, "bkt", key, 0, 100, tuple(
        p.NotifyEntry(e.topic, e.partition, 0, len(e.batch), crc(e.batch), 1, -1, -1, -1) for e in entries))


def agent(reader, appender, checkpoints=None, applied=1000, audit=None, **settings):
    async def checkpoint(keys, zone):
        checkpoints.append((list(keys), zone))

    s = AgentSettings(zone="az2", bucket="bkt", prefix="wal/", keys=(KEY,), applied_cache_entries=applied, **settings)
    return Agent(s, reader, appender, checkpoint=checkpoint if checkpoints is not None else None, audit=audit)


def test_partition_order_is_arrival_order_even_if_first_read_is_slow():
    objs = {"wal/1": [E("t", 0, b"first"), E("t", 1, b"other")], "wal/2": [E("t", 0, b"second")]}

    async def main():
        reader = Reader(objs, slow_key="wal/1")
        app = Appender()
        a = agent(reader, app)
        t1 = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"])))
        await all_tasks_blocked()  # t1 has taken its tickets and waits in the slow read
        t2 = asyncio.create_task(a.handle_request(request("wal/2", objs["wal/2"], 2)))
        await all_tasks_blocked()  # t2 has gone as far as it can
        assert app.log == []  # t2's partition-0 batch waits behind t1's
        reader.release.set()
        r1, r2 = await t1, await t2
        return app.log, r1, r2

    log, r1, r2 = asyncio.run(main())
    assert [b for t, q, b in log if q == 0] == [b"first", b"second"]
    assert [(r.error_code, r.base_offset) for r in r1.results] == [(0, 0), (0, 0)]
    assert [(r.error_code, r.base_offset) for r in r2.results] == [(0, 1)]


def test_failed_entry_fails_later_entries_of_its_partition_only():
    entries = [E("t", 0, b"a"), E("t", 0, b"b"), E("t", 0, b"c"), E("t", 1, b"d")]
    checkpoints: list = []

    async def main():
        app = Appender(fail={b"b": 6})
        a = agent(Reader({"wal/x": entries}), app, checkpoints)
        res = await a.handle_request(request("wal/x", entries))
        await a.drain_checkpoints()  # a scheduled checkpoint would show up now
        return app.log, res

    log, res = asyncio.run(main())
    assert [b for _, _, b in log] == [b"a", b"d"]
    assert [r.error_code for r in res.results] == [0, 6, 6, 0]
    assert checkpoints == []  # not every entry applied: GC must keep the object


def test_entry_not_matching_the_object_fails_itself_and_later_entries_of_its_partition():
    named = [E("t", 0, b"a"), E("t", 0, b"b"), E("t", 0, b"c"), E("t", 1, b"d")]
    in_object = [E("t", 0, b"a"), E("t", 0, b"B"), E("t", 0, b"c"), E("t", 1, b"d")]  # b's bytes changed

    async def main():
        app = Appender()
        res = await agent(Reader({"wal/m": in_object}), app).handle_request(request("wal/m", named))
        return app.log, res

    log, res = asyncio.run(main())
    assert [b for _, _, b in log] == [b"a", b"d"]  # c is never appended before the missing b
    assert [r.error_code for r in res.results] == [0, 2, 2, 0]  # CORRUPT_MESSAGE


def test_resend_answers_from_applied_map_and_checkpoints_once_complete():
    entries = [E("t", 0, b"a"), E("t", 0, b"b")]
    checkpoints: list = []

    async def main():
        reader, app = Reader({"wal/y": entries}), Appender()
        a = agent(reader, app, checkpoints)
        first = await a.handle_request(request("wal/y", entries))
        again = await a.handle_request(request("wal/y", entries, 2))
        await a.drain_checkpoints()  # written after the answers, off the produce latency path
        return app.log, reader.reads, first, again

    log, reads, first, again = asyncio.run(main())
    assert len(log) == 2 and reads == 1
    assert [(r.base_offset, r.duplicate) for r in first.results] == [(0, False), (1, False)]
    assert [(r.base_offset, r.duplicate) for r in again.results] == [(0, True), (1, True)]
    assert checkpoints == [(["wal/y"], "az2")]  # one manifest, the re-sent object named once


def test_checkpoints_go_out_as_one_manifest_per_interval_or_per_max_keys():
    objs = {f"wal/{i}": [E("t", i % 2, f"v{i}".encode())] for i in range(5)}
    checkpoints: list = []
    audit = MemoryAuditSink()

    async def main():
        a = agent(Reader(objs), Appender(), checkpoints, audit=audit, checkpoint_interval_s=3600, checkpoint_max_keys=3)
        for i, key in enumerate(objs):
            await a.handle_request(request(key, objs[key], i + 1))
            await all_tasks_blocked()  # a flush that is due has started
        written_before_drain = list(checkpoints)
        await a.drain_checkpoints()
        return written_before_drain

    before = asyncio.run(main())
    # The third key filled a manifest at once; the last two waited for the interval (here: the drain).
    assert before == [(["wal/0", "wal/1", "wal/2"], "az2")]
    assert checkpoints == [(["wal/0", "wal/1", "wal/2"], "az2"), (["wal/3", "wal/4"], "az2")]
    assert [(c["keys"], c["wal_keys"], c["status"]) for c in audit.of("checkpoint_write")] == [
        (3, "wal/0,wal/1,wal/2", "ok"), (2, "wal/3,wal/4", "ok")]


def test_a_failed_manifest_is_audited_and_the_agent_carries_on():
    objs = {"wal/a": [E("t", 0, b"a")]}
    audit = MemoryAuditSink()

    async def failing(keys, zone):
        raise RuntimeError("S3 down")

    async def main():
        s = AgentSettings(zone="az2", bucket="bkt", prefix="wal/", keys=(KEY,))
        a = Agent(s, Reader(objs), Appender(), checkpoint=failing, audit=audit)
        res = await a.handle_request(request("wal/a", objs["wal/a"]))
        await a.drain_checkpoints()
        return res

    res = asyncio.run(main())
    assert [r.error_code for r in res.results] == [0]  # the append stands; GC keeps the object for now
    assert [(c["keys"], c["status"]) for c in audit.of("checkpoint_write")] == [(1, "failed")]


def test_entry_not_matching_object_is_corrupt_and_nothing_appended():
    in_object = [E("t", 0, b"real")]
    claimed = [E("t", 0, b"fake")]  # CRC of other bytes

    async def main():
        app = Appender()
        res = await agent(Reader({"wal/z": in_object}), app).handle_request(request("wal/z", claimed))
        return app.log, res

    log, res = asyncio.run(main())
    assert log == [] and [r.error_code for r in res.results] == [2]


def test_wrong_zone_and_foreign_key_refused_without_reading():
    entries = [E("t", 0, b"a")]

    async def main():
        reader, app = Reader({"wal/a": entries, "nope/a": entries}), Appender()
        a = agent(reader, app)
        wrong_zone = await a.handle_request(p.NotifyRequest(1, "az1", "az3", "x", 1, "bkt", "wal/a", 0, 1, ()))
        foreign = await a.handle_request(request("nope/a", entries))
        return reader.reads, app.log, wrong_zone, foreign

    reads, log, wrong_zone, foreign = asyncio.run(main())
    assert (reads, log) == (0, [])
    assert wrong_zone.status == p.RequestStatus.WRONG_ZONE
    assert foreign.status == p.RequestStatus.FORBIDDEN_KEY


def test_reader_failure_is_retriable_internal_status():
    class Broken:
        async def read_zone(self, *a, **k):
            raise OSError("S3 down")

    async def main():
        return await agent(Broken(), Appender()).handle_request(request("wal/q", [E("t", 0, b"a")]))

    res = asyncio.run(main())
    assert res.status == p.RequestStatus.INTERNAL and res.status in p.RETRIABLE_STATUSES


def test_applied_entries_is_bounded_lru():
    m = AppliedEntries(2)
    m.put("k", 0, 10)
    m.put("k", 1, 11)
    assert m.get("k", 0) == 10  # touch: k/1 is now the oldest
    m.put("k", 2, 12)
    assert (m.get("k", 0), m.get("k", 1), m.get("k", 2), len(m)) == (10, None, 12, 2)


def test_leader_rack_in_another_zone_is_refused_retriably():
    from leader_notify.agent.appender import zone_refusal

    assert "in use1-az3 (its rack)" in zone_refusal("t", 0, 1, "use1-az3", "use1-az2", {})
    assert zone_refusal("t", 0, 1, "use1-az2", "use1-az2", {}) == ""
    assert zone_refusal("t", 0, 1, None, "use1-az2", {}) == ""  # Tansu: no rack, no map: unknown, allowed
    assert zone_refusal("t", 0, 1, "use1-az3", None, {}) == ""  # no home zone: no check
    # O1: without racks, router.broker_zones places the broker; the map wins over a rack
    assert "in use1-az1 (router.broker_zones)" in zone_refusal("t", 0, 1, None, "use1-az2", {"1": "use1-az1"})
    assert zone_refusal("t", 0, 1, "use1-az3", "use1-az2", {"1": "use1-az2"}) == ""


def test_appender_answers_not_leader_at_once_when_leader_left_the_zone():
    from aiokafka.structs import BrokerMetadata

    from core.errors import NOT_LEADER_OR_FOLLOWER
    from leader_notify.agent.appender import KafkaAppender

    class Cluster:  # the part of aiokafka's ClusterMetadata the appender reads
        def leader_for_partition(self, tp):
            return 7

        def broker_metadata(self, node_id):
            return BrokerMetadata(node_id, "h", 9092, "use1-az3")

    class Client:
        cluster = Cluster()
        sent = 0
        refreshed = 0

        async def send(self, node_id, request):
            Client.sent += 1
            raise AssertionError("must not produce to a leader in another zone")

        async def force_metadata_update(self):
            Client.refreshed += 1  # B3: asked before refusing; the leader is still in az3
            return True

    async def main():
        app = KafkaAppender(["x:1"], home_zone="use1-az2", max_attempts=5)
        app._client = Client()
        first = await app.append("t", 0, b"batch")
        second = await app.append("t", 0, b"batch")
        return first, second

    first, second = asyncio.run(main())
    assert (first.error_code, first.attempts, Client.sent) == (NOT_LEADER_OR_FOLLOWER, 1, 0)
    assert second.error_code == NOT_LEADER_OR_FOLLOWER and Client.refreshed == 2
    assert "broker 7 in use1-az3 (its rack)" in first.reason


def test_partitions_whose_turn_it_is_go_to_the_appender_as_one_group():
    """Notification 2 finds partition 0 still being appended by notification 1 (its read is
    slow): partitions 2 and 3 go at once, together; partition 0 waits for its turn and then
    goes as a wave of its own."""
    objs = {"wal/1": [E("t", 0, b"first"), E("t", 1, b"other")],
            "wal/2": [E("t", 0, b"second"), E("t", 2, b"c"), E("t", 3, b"d")]}

    async def main():
        reader = Reader(objs, slow_key="wal/1")
        app = Appender()
        a = agent(reader, app)
        t1 = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"])))
        await all_tasks_blocked()  # t1 holds its tickets and waits in the slow read
        t2 = asyncio.create_task(a.handle_request(request("wal/2", objs["wal/2"], 2)))
        await all_tasks_blocked()  # t2's partitions 2 and 3 do not wait for t1
        assert [b for _t, q, b in app.log] == [b"c", b"d"]
        reader.release.set()
        return app, await t1, await t2

    app, r1, r2 = asyncio.run(main())
    assert app.groups == [[("t", 2), ("t", 3)], [("t", 0), ("t", 1)], [("t", 0)]]
    assert [b for t, q, b in app.log if q == 0] == [b"first", b"second"]
    assert [(r.error_code, r.base_offset) for r in r1.results] == [(0, 0), (0, 0)]
    assert [(r.error_code, r.base_offset) for r in r2.results] == [(0, 1), (0, 0), (0, 0)]


def one_notification(app, entries, *, slots):
    """(app, answer) of an agent with `slots` append slots applying one object of `entries`."""
    async def main():
        return await agent(Reader({"wal/x": entries}), app, max_in_flight_appends=slots).handle_request(
            request("wal/x", entries))

    return app, asyncio.run(main())


def test_partitions_beyond_the_free_append_slots_wait_for_one_and_all_are_appended():
    entries = [E("t", 0, b"a"), E("t", 1, b"b"), E("t", 1, b"b2"), E("t", 2, b"c")]
    app, res = one_notification(Appender(), entries, slots=1)
    assert app.groups == [[("t", 0)], [("t", 1)], [("t", 2)]]  # one slot: a wave of one each, in order
    assert sorted(b for _t, _q, b in app.log) == [b"a", b"b", b"b2", b"c"]
    assert [b for _t, q, b in app.log if q == 1] == [b"b", b"b2"]
    assert [(r.error_code, r.base_offset) for r in res.results] == [(0, 0), (0, 0), (0, 1), (0, 0)]


def test_a_group_failure_fails_later_entries_of_that_partition_only_and_a_mismatch_is_corrupt():
    named = [E("t", 0, b"a"), E("t", 0, b"b"), E("t", 1, b"c"), E("t", 2, b"d"), E("t", 2, b"e")]
    stored = named[:2] + [E("t", 1, b"XX")] + named[3:]  # partition 1's entry is not what the notification names

    async def main():
        app = Appender(fail={b"d": 19})
        res = await agent(Reader({"wal/x": stored}), app).handle_request(request("wal/x", named))
        return app, res

    app, res = asyncio.run(main())
    assert app.groups == [[("t", 0), ("t", 2)]]  # partition 1 has nothing to append
    assert [b for _t, _q, b in app.log] == [b"a", b"b"]
    assert [r.error_code for r in res.results] == [0, 0, 2, 19, 19]


class CountingAppender(Appender):
    """Appender that counts the runs at it at once (a run is at the appender from its
    append_runs call until its on_through)."""

    def __init__(self):
        super().__init__()
        self.at_once = 0
        self.most_at_once = 0

    async def append_runs(self, runs, on_through=None):
        self.at_once += len(runs)
        self.most_at_once = max(self.most_at_once, self.at_once)

        def through(k):
            self.at_once -= 1
            if on_through is not None:
                on_through(k)

        await super().append_runs(runs, through)


def test_many_partitions_over_few_slots_go_in_waves_never_beyond_the_slots():
    """Ten partitions of two entries each, three append slots: at most three runs at the
    appender at any time; the first wave is partitions 0-2, each later one at most three;
    every batch appended once and each partition in order."""
    entries = [E("t", q, f"{q}-{i}".encode()) for q in range(10) for i in range(2)]
    app, res = one_notification(CountingAppender(), entries, slots=3)
    assert app.most_at_once == 3
    assert app.groups[0] == [("t", 0), ("t", 1), ("t", 2)]
    assert all(1 <= len(group) <= 3 for group in app.groups)
    assert sorted(q for group in app.groups for _t, q in group) == list(range(10))
    for q in range(10):
        assert [b for _t, p_, b in app.log if p_ == q] == [f"{q}-0".encode(), f"{q}-1".encode()]
    assert [(r.error_code, r.base_offset) for r in res.results] == [(0, 0), (0, 1)] * 10


class GatedAppender(Appender):
    """Appender whose runs wait for `gate` before appending."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()

    async def append_runs(self, runs, on_through=None):
        await self.gate.wait()
        await super().append_runs(runs, on_through)


def test_a_cancelled_notification_starts_none_of_its_waiting_runs_and_leaks_no_slot():
    """One slot, held by notification 1 (gated); notification 2's two partitions wait for it
    and notification 2 is cancelled. Released, notification 1 finishes; notification 2's
    batches are never appended, and notification 3 gets the slot."""
    objs = {"wal/1": [E("t", 0, b"a")], "wal/2": [E("t", 1, b"b"), E("t", 2, b"c")], "wal/3": [E("t", 3, b"d")]}

    async def main():
        app = GatedAppender()
        a = agent(Reader(objs), app, max_in_flight_appends=1)
        t1 = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"])))
        t2 = asyncio.create_task(a.handle_request(request("wal/2", objs["wal/2"], 2)))
        reader = a._reader  # noqa: SLF001 - the test's own Reader
        async with asyncio.timeout(10):
            while reader.reads < 2:  # notification 1 holds the slot, notification 2 waits for it
                await asyncio.sleep(0)
            waiting = (a.metrics.value("azsidecar_agent_append_slots_free"),
                       a.metrics.value("azsidecar_agent_append_runs_waiting"))
            t2.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t2
            app.gate.set()
            r1 = await t1
            r3 = await a.handle_request(request("wal/3", objs["wal/3"], 3))
        after = (a.metrics.value("azsidecar_agent_append_slots_free"),
                 a.metrics.value("azsidecar_agent_append_runs_waiting"))
        return app, r1, r3, waiting, after

    app, r1, r3, waiting, after = asyncio.run(main())
    assert waiting == (0, 2) and after == (1, 0)  # the gauges: no slot free, two runs waiting; then all free
    assert app.groups == [[("t", 0)], [("t", 3)]]
    assert [b for _t, _q, b in app.log] == [b"a", b"d"]
    assert [(r.error_code, r.base_offset) for r in r1.results] == [(0, 0)]
    assert [(r.error_code, r.base_offset) for r in r3.results] == [(0, 0)]


class JitteryAppender(CountingAppender):
    """CountingAppender whose batches take 0-3 loop turns each (seeded), so runs of
    different notifications interleave."""

    def __init__(self, seed):
        super().__init__()
        import random

        self.rng = random.Random(seed)

    async def append(self, topic, partition, batch):
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)
        return await super().append(topic, partition, batch)


@pytest.mark.parametrize("seed", range(6))
def test_concurrent_notifications_over_shared_partitions_keep_arrival_order_and_the_slot_bound(seed):
    """Twelve notifications arrive at once, each with entries of 2-5 of eight partitions
    (so most partitions wait for an earlier notification's turn), over 1-4 slots: each
    partition's log is its entries in arrival order, no more runs than slots are ever at
    the appender, and every slot is free again at the end (a last notification over as
    many partitions as there are slots goes as one wave)."""
    import random

    rng = random.Random(seed)
    slots = rng.randrange(1, 5)
    objs = {}
    for n in range(12):
        partitions = rng.sample(range(8), rng.randrange(2, 6))
        objs[f"wal/{n}"] = [E("t", q, f"{n}-{q}-{i}".encode()) for q in partitions for i in range(rng.randrange(1, 3))]
    objs["wal/last"] = [E("t", q, f"last-{q}".encode()) for q in range(slots)]

    async def main():
        app = JitteryAppender(seed)
        a = agent(Reader(objs), app, max_in_flight_appends=slots)
        tasks = [asyncio.create_task(a.handle_request(request(f"wal/{n}", objs[f"wal/{n}"], n + 1))) for n in range(12)]
        async with asyncio.timeout(30):
            answers = await asyncio.gather(*tasks)
            most = app.most_at_once
            app.groups.clear()
            last = await a.handle_request(request("wal/last", objs["wal/last"], 99))
        return app, answers, most, last

    app, answers, most, last = asyncio.run(main())
    assert most <= slots
    assert all(r.error_code == 0 for resp in answers for r in resp.results)
    for q in range(8):
        expected = [e.batch for n in range(12) for e in objs[f"wal/{n}"] if e.partition == q]
        assert [b for _t, p_, b in app.log if p_ == q and not b.startswith(b"last")] == expected
    assert app.groups == [[("t", q) for q in range(slots)]]
    assert all(r.error_code == 0 for r in last.results)


def test_a_notification_cancelled_after_its_run_got_a_slot_gives_the_slot_back():
    """One slot. Notification 2's run waits for it; the moment notification 1's run is
    through, the slot passes to notification 2's run, and notification 2 is cancelled
    before its task takes it to the appender. The slot is free again: notification 3 gets
    it, and notification 2's batch is never appended."""
    objs = {"wal/1": [E("t", 0, b"a")], "wal/2": [E("t", 1, b"b")], "wal/3": [E("t", 2, b"c")]}
    victim: list[asyncio.Task] = []

    class CancelOnThrough(Appender):
        async def append_runs(self, runs, on_through=None):
            def through(k):
                on_through(k)  # the slot goes to notification 2's waiting run now
                if victim:
                    victim.pop().cancel()

            await super().append_runs(runs, through)

    async def main():
        app = CancelOnThrough()
        a = agent(Reader(objs), app, max_in_flight_appends=1)
        t1 = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"])))
        t2 = asyncio.create_task(a.handle_request(request("wal/2", objs["wal/2"], 2)))
        victim.append(t2)
        async with asyncio.timeout(10):
            r1 = await t1
            with pytest.raises(asyncio.CancelledError):
                await t2
            r3 = await a.handle_request(request("wal/3", objs["wal/3"], 3))
        return app, r1, r3

    app, r1, r3 = asyncio.run(main())
    assert [b for _t, _q, b in app.log] == [b"a", b"c"]
    assert [r.error_code for r in r1.results] == [0] and [r.error_code for r in r3.results] == [0]


class BatchGatedAppender(Appender):
    """Appends a batch only once its gate is opened (batches without a gate go at once), so
    a test decides which append is in flight while another notification's start."""

    def __init__(self, gated=(), fail=None):
        super().__init__(fail)
        self.gates = {b: asyncio.Event() for b in gated}
        self.started: list[bytes] = []  # batches whose append began, in order
        self.moved = asyncio.Event()

    async def append(self, topic, partition, batch):
        self.started.append(batch)
        self.moved.set()
        if batch in self.gates:
            await self.gates[batch].wait()
        return await super().append(topic, partition, batch)

    async def until_started(self, batch):
        while batch not in self.started:
            self.moved.clear()
            await self.moved.wait()


def ordered(key, entries, request_id):
    return dataclasses.replace(request(key, entries, request_id), ordered=True)


def test_object_k_plus_1_appends_while_object_k_is_in_flight_and_each_partition_keeps_order():
    objs = {"wal/1": [E("t", 0, b"1-p0"), E("t", 1, b"1-p1")],
            "wal/2": [E("t", 0, b"2-p0"), E("t", 1, b"2-p1")],
            "wal/3": [E("t", 0, b"3-p0")]}
    checkpoints: list = []

    async def main():
        app = BatchGatedAppender(gated=[b"1-p1"])  # object 1's partition-1 append hangs
        a = agent(Reader(objs), app, checkpoints)
        t1 = asyncio.create_task(a.handle_request(ordered("wal/1", objs["wal/1"], 1)))
        t2 = asyncio.create_task(a.handle_request(ordered("wal/2", objs["wal/2"], 2)))
        t3 = asyncio.create_task(a.handle_request(ordered("wal/3", objs["wal/3"], 3)))
        async with asyncio.timeout(10):
            r3 = await t3  # object 3 (partition 0 only) is done while object 1 still appends
            await a.drain_checkpoints()
        in_flight = (t1.done(), t2.done(), list(app.started), [list(k) for k, _ in checkpoints])
        app.gates[b"1-p1"].set()
        async with asyncio.timeout(10):
            r1, r2 = await t1, await t2
            await a.drain_checkpoints()
        return app, r1, r2, r3, in_flight

    app, r1, r2, r3, (done1, done2, started, checkpoints_then) = asyncio.run(main())
    # While 1-p1 was in flight, partition 0 went on with objects 2 and 3; 2-p1 waited for 1-p1.
    assert (done1, done2) == (False, False)
    assert [b for b in started if b.endswith(b"p0")] == [b"1-p0", b"2-p0", b"3-p0"]
    assert b"2-p1" not in started
    assert checkpoints_then == [["wal/3"]]  # only the object whose every append is done
    assert [b for t, q, b in app.log if q == 1] == [b"1-p1", b"2-p1"]
    assert [b for t, q, b in app.log if q == 0] == [b"1-p0", b"2-p0", b"3-p0"]
    assert [(r.error_code, r.base_offset) for r in r1.results] == [(0, 0), (0, 0)]
    assert [(r.error_code, r.base_offset) for r in r2.results] == [(0, 1), (0, 1)]
    assert [(r.error_code, r.base_offset) for r in r3.results] == [(0, 2)]
    assert sorted(k for keys, _ in checkpoints for k in keys) == ["wal/1", "wal/2", "wal/3"]


def test_after_an_ordered_failure_later_ordered_runs_of_the_partition_fail_unappended_until_the_resend():
    objs = {"wal/1": [E("t", 0, b"1-p0"), E("t", 1, b"1-p1")], "wal/2": [E("t", 0, b"2-p0"), E("t", 1, b"2-p1")],
            "wal/3": [E("t", 0, b"3-p0")]}

    async def main():
        app = BatchGatedAppender(fail={b"1-p0": 6})  # NOT_LEADER_OR_FOLLOWER for object 1's t-0
        a = agent(Reader(objs), app)
        r1 = await a.handle_request(ordered("wal/1", objs["wal/1"], 1))
        r2 = await a.handle_request(ordered("wal/2", objs["wal/2"], 2))  # was in flight behind 1
        app.fail.clear()  # the leader is back
        r3_held = await a.handle_request(ordered("wal/3", objs["wal/3"], 3))  # sent before the proxy knew
        tried_before_resend = list(app.started)
        # The proxy's recovery: every ordered request answered, then serial re-sends, in order.
        again1 = await a.handle_request(request("wal/1", objs["wal/1"], 1))
        again2 = await a.handle_request(request("wal/2", objs["wal/2"], 2))
        again3 = await a.handle_request(request("wal/3", objs["wal/3"], 3))
        return app, r1, r2, r3_held, again1, again2, again3, tried_before_resend

    app, r1, r2, r3, again1, again2, again3, tried = asyncio.run(main())
    assert [r.error_code for r in r1.results] == [6, 0]
    assert [r.error_code for r in r2.results] == [6, 0]  # 2-p0 held (never tried), 2-p1 appended
    assert [r.error_code for r in r3.results] == [6]
    assert tried == [b"1-p0", b"1-p1", b"2-p1"]  # 2-p0 and 3-p0 never went to the leader
    assert [(r.error_code, r.duplicate) for r in again1.results] == [(0, False), (0, True)]
    assert [(r.error_code, r.duplicate) for r in again2.results] == [(0, False), (0, True)]
    assert [r.error_code for r in again3.results] == [0]
    assert [b for t, q, b in app.log if q == 0] == [b"1-p0", b"2-p0", b"3-p0"]
    assert [b for t, q, b in app.log if q == 1] == [b"1-p1", b"2-p1"]


def test_a_connections_requests_are_handled_concurrently_and_answered_in_order():
    """Over a real asyncio stream pair on loopback is integration; here handle_frame's
    ordering is what matters: two ordered frames decoded in order take tickets in order."""
    objs = {"wal/1": [E("t", 0, b"1-p0")], "wal/2": [E("t", 0, b"2-p0")]}

    async def main():
        app = BatchGatedAppender(gated=[b"1-p0"])
        a = agent(Reader(objs), app)
        ch_p = p.Channel(p.Keyring((KEY,)), p.Role.PROXY, b"p" * 16)
        ch_a = p.Channel(p.Keyring((KEY,)), p.Role.AGENT, b"a" * 16)
        ch_a.receive_data(ch_p.hello())
        assert ch_a.next_frame() is None
        ch_p.receive_data(ch_a.hello())
        assert ch_p.next_frame() is None
        frames = []
        for i, key in ((1, "wal/1"), (2, "wal/2")):
            ch_a.receive_data(ch_p.send(p.MessageType.REQUEST, p.encode_request(ordered(key, objs[key], i))))
            frames.append(ch_a.next_frame())
        t1 = asyncio.create_task(a.handle_frame(frames[0]))
        t2 = asyncio.create_task(a.handle_frame(frames[1]))
        async with asyncio.timeout(10):
            await app.until_started(b"1-p0")
        assert b"2-p0" not in app.started  # behind 1-p0 in the partition's order
        app.gates[b"1-p0"].set()
        async with asyncio.timeout(10):
            out1, out2 = await t1, await t2
        return app, p.decode_response(out1[0]), p.decode_response(out2[0])

    app, a1, a2 = asyncio.run(main())
    assert [b for _, _, b in app.log] == [b"1-p0", b"2-p0"]
    assert (a1.request_id, a1.results[0].base_offset) == (1, 0)
    assert (a2.request_id, a2.results[0].base_offset) == (2, 1)



async def arrived(task: asyncio.Task) -> None:
    """Until `task` (just created) has taken its first step, in which a notification arrives:
    the applied map checked, its tickets taken, the runs it waits for chosen. Tasks start in
    creation order (the agent's connection loop relies on it too), so a task created after it
    has run means it has."""
    await asyncio.create_task(asyncio.sleep(0))
    assert not task.done() or task.exception() is None


def test_a_resend_that_arrives_while_its_original_still_appends_is_answered_from_the_applied_map():
    """The proxy abandons a pipelined object k at its deadline (the agent is slow) and re-sends
    it serially, unordered, on a new connection. The agent still holds k (and k+1, sent behind
    it on the dropped connection) and applies them to the end. The re-send arrives before k's
    append is through, so the applied map has nothing for it yet; at its partition's turn
    (behind k and k+1) k's batch is already in the log: appended again there, it would land
    after k+1's batch (a non-idempotent producer's record read back after later ones)."""
    objs = {"wal/1": [E("t", 0, b"1-p0"), E("t", 1, b"1-p1")], "wal/2": [E("t", 0, b"2-p0")]}

    async def main():
        app = BatchGatedAppender(gated=[b"1-p0", b"2-p0"])  # the leader is slow with object 1's t-0
        a = agent(Reader(objs), app)
        t1 = asyncio.create_task(a.handle_request(ordered("wal/1", objs["wal/1"], 1)))
        t2 = asyncio.create_task(a.handle_request(ordered("wal/2", objs["wal/2"], 2)))
        async with asyncio.timeout(10):
            await app.until_started(b"1-p0")
            again = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"], 1)))  # the proxy's re-send
            await arrived(again)
        # (1-p1 may or may not be through when the re-send arrived: its answer is the same.)
        app.gates[b"1-p0"].set()
        async with asyncio.timeout(10):
            r1, r_again = await t1, await again  # answered while object 2's append is still in flight
        t2_done_then = t2.done()
        app.gates[b"2-p0"].set()
        async with asyncio.timeout(10):
            r2 = await t2
        assert not t2_done_then
        return app, r1, r2, r_again

    app, r1, r2, again = asyncio.run(main())
    assert [b for t, q, b in app.log if q == 0] == [b"1-p0", b"2-p0"]  # 1-p0 once, before 2-p0
    assert [b for t, q, b in app.log if q == 1] == [b"1-p1"]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in r1.results] == [(0, 0, False), (0, 0, False)]
    assert [(r.error_code, r.base_offset) for r in r2.results] == [(0, 1)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in again.results] == [(0, 0, True), (0, 0, True)]


def test_a_serial_retry_racing_its_own_first_attempt_appends_each_batch_once():
    """Depth 1: attempt 1 times out at the proxy while the agent still appends; attempt 2 of
    the same request arrives before attempt 1's append is through. Each batch once."""
    objs = {"wal/1": [E("t", 0, b"1-p0"), E("t", 0, b"1-p0-b")]}

    async def main():
        app = BatchGatedAppender(gated=[b"1-p0"])
        a = agent(Reader(objs), app)
        first = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"], 1)))
        async with asyncio.timeout(10):
            await app.until_started(b"1-p0")
            second = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"], 1)))
            await arrived(second)
        app.gates[b"1-p0"].set()
        async with asyncio.timeout(10):
            return app, await first, await second

    app, first, second = asyncio.run(main())
    assert [b for _t, _q, b in app.log] == [b"1-p0", b"1-p0-b"]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in first.results] == [(0, 0, False), (0, 1, False)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in second.results] == [(0, 0, True), (0, 1, True)]



class FailOnceAppender(BatchGatedAppender):
    """Fails each batch of `fail` on its first try only (a leader that moved, then is back)."""

    async def append(self, topic, partition, batch):
        result = await super().append(topic, partition, batch)
        self.fail.pop(batch, None)
        return result


def test_resends_behind_a_partly_failed_original_append_only_what_it_did_not_and_that_once():
    """The original's run of a partition appended its first batch and failed on the second
    (the leader moved) while two re-sends (the proxy's attempts) waited for it: they answer
    the first from the applied map; the second batch is appended once, by the first re-send
    to reach the partition's turn, and the other finds it applied there."""
    objs = {"wal/1": [E("t", 0, b"1-a"), E("t", 0, b"1-b")]}

    async def main():
        app = FailOnceAppender(gated=[b"1-b"], fail={b"1-b": 6})
        a = agent(Reader(objs), app)
        first = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"], 1)))
        async with asyncio.timeout(10):
            await app.until_started(b"1-b")
            second = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"], 1)))
            third = asyncio.create_task(a.handle_request(request("wal/1", objs["wal/1"], 1)))
            await arrived(third)
        app.gates[b"1-b"].set()
        async with asyncio.timeout(10):
            return app, await first, await second, await third

    app, first, second, third = asyncio.run(main())
    assert [b for _t, _q, b in app.log] == [b"1-a", b"1-b"]
    assert [(r.error_code, r.base_offset) for r in first.results] == [(0, 0), (6, -1)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in second.results] == [(0, 0, True), (0, 1, False)]
    assert [(r.error_code, r.base_offset, r.duplicate) for r in third.results] == [(0, 0, True), (0, 1, True)]


class ReadsOnce(Reader):
    """Hands each object's entries out once and forgets them, as the S3 reader keeps only
    what its cache holds."""

    async def read_zone(self, key, zone_offset, zone_length, *, source_zone, expected_entries):
        entries = await super().read_zone(key, zone_offset, zone_length, source_zone=source_zone,
                                          expected_entries=expected_entries)
        del self.objects[key]
        return entries


class KeepsNoBatch(Appender):
    """Logs copies, so only the agent could keep the batches it was given."""

    async def append(self, topic, partition, batch):
        return await super().append(topic, partition, bytes(batch))


def test_a_finished_notification_leaves_no_cycle_holding_its_batches():
    """The batches are views of a share read from S3 (megabytes each): once a notification
    is answered, reference counting alone must free them. A cycle through them waits for
    the cyclic collector, which an agent under load runs seldom: it held hundreds of MiB of
    finished shares that way. (The Agent object itself is in a cycle with its metrics'
    callbacks; it lives as long as the process, so the reader here forgets what it served.)"""
    batches = [WeakBuffer(b"a"), WeakBuffer(b"b"), WeakBuffer(b"c")]
    alive = [weakref.ref(batch) for batch in batches]

    async def main(entries):
        app = KeepsNoBatch()
        a = agent(ReadsOnce({"wal/x": entries}), app)
        res = await a.handle_request(request("wal/x", [E(e.topic, e.partition, bytes(e.batch)) for e in entries]))
        return app.log, [(r.error_code, r.base_offset) for r in res.results]

    with collector_off():
        log, results = asyncio.run(main([E("t", 0, batches[0]), E("t", 0, batches[1]), E("t", 1, batches[2])]))
        del batches
        left = still_alive(alive)
    assert sorted(log) == [("t", 0, b"a"), ("t", 0, b"b"), ("t", 1, b"c")]
    assert results == [(0, 0), (0, 1), (0, 0)]
    assert left == []
