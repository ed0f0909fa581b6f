"""WalWriter -> moto (real HTTP S3) -> WalReader: round trip, flush reasons, fencing, backpressure."""

from __future__ import annotations

import base64
import functools
import threading
import weakref

import pytest
import trio
import trio.testing
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.audit import KINDS, MemoryAuditSink
from tests.integration.wal_s3.conftest import Faults
from tests.refcount import WeakBuffer, collector_off, still_alive
from wal_s3.format import WalEntry, entry_encoded_size, parse_object
from wal_s3.reader import WalReader
from wal_s3.s3 import S3PreconditionFailed, S3Store
from wal_s3.writer import WalFencedError, WalWriter, object_key

pytestmark = pytest.mark.integration

KiB = 1024


def entry(i: int, size: int, topic: str = "orders") -> WalEntry:
    return WalEntry(topic, i % 4, 1000 + i, 0, i, 1, bytes([i % 251]) * size)


async def append_all(writer: WalWriter, items: list[tuple[WalEntry, str]]) -> list:
    placements: list = [None] * len(items)

    async def one(i: int, e: WalEntry, zone: str) -> None:
        placements[i] = await writer.append(e, zone)

    async with trio.open_nursery() as n:
        for i, (e, zone) in enumerate(items):
            n.start_soon(one, i, e, zone)
    return placements


zone_names = st.sampled_from(["use1-az1", "use1-az2", "use1-az3", "euw1-az1"])
wal_entries = st.builds(
    WalEntry, topic=st.sampled_from(["orders", "payments", "t"]), partition=st.integers(0, 50),
    producer_id=st.integers(-1, 2**40), producer_epoch=st.integers(-1, 5), base_sequence=st.integers(-1, 10**6),
    record_count=st.integers(1, 100), batch=st.binary(min_size=1, max_size=3000),
    crc32c=st.none())  # the encoder computes it


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(wal_entries, zone_names), min_size=1, max_size=25))
def test_round_trip_every_zone_through_moto(wal_env, items):
    make_config, make_client = wal_env
    config = make_config(linger_ms=20)
    client = make_client(config)
    audit = MemoryAuditSink()

    async def main():
        writer = WalWriter(config, "use1-az9", "proxy-1", client, audit)
        async with writer.running():
            placements = await append_all(writer, items)
        reader = WalReader(config, client, audit, "any")
        for (e, zone), p in zip(items, placements):
            assert p.dest_zone == zone
            got = await reader.read_zone(p.key, p.zone_offset, p.zone_length, source_zone="use1-az9")
            g = got[p.entry_index_in_zone]
            assert (g.topic, g.partition, g.producer_id, g.producer_epoch, g.base_sequence, g.record_count) == \
                (e.topic, e.partition, e.producer_id, e.producer_epoch, e.base_sequence, e.record_count)
            assert bytes(g.batch) == bytes(e.batch)
            by_name = await reader.read_zone_by_name(p.key, zone)
            assert bytes(by_name[p.entry_index_in_zone].batch) == bytes(e.batch)
            ref = p.flushed.zones[zone].entries[p.entry_index_in_zone]
            assert (ref.offset, ref.length) == (p.entry_offset, p.entry_length)
        # Every entry is in exactly one object, in its zone's share, in append order per zone.
        for key in {p.key for p in placements}:
            parsed = parse_object(client.get_object(Bucket=config.bucket, Key=key)["Body"].read())
            mine = [(e, z) for (e, z), p in zip(items, placements) if p.key == key]
            assert sum(len(v) for v in parsed.zones.values()) == len(mine)

    trio.run(main)
    flushes = audit.of("wal_flush")
    assert sum(f["entries"] for f in flushes) == len(items)
    assert all(f["ok"] and f["attempts"] == 1 for f in flushes)
    for f in flushes:
        assert set(f) - {"ts_ms", "zone"} == {name for name, _ in KINDS["wal_flush"]}
    for r in audit.of("agent_read"):
        assert set(r) - {"ts_ms", "zone"} == {name for name, _ in KINDS["agent_read"]}


@pytest.mark.trio
async def test_flush_reasons_size_then_shutdown(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, linger_ms=60_000)
    audit = MemoryAuditSink()
    e = entry(1, 20 * KiB)
    assert entry_encoded_size(e) == 20 * KiB + 2 + 6 + 30 + 4  # topic "orders"
    writer = WalWriter(config, "az1", "p1", make_client(config), audit)
    released = []
    writer.on_released = lambda flushed: released.append(flushed.sequence)
    async with writer.running():
        placements = await append_all_then_close(writer, [(e, "az2")] * 7)
    assert released == [0, 1, 2]  # the hook sees durable objects in sequence order
    # 3 entries = 61,566 bytes fit under 64 KiB, a 4th would not: objects of 3, 3, then 1 at close.
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["sequence"], f["entries"], f["reason"]) for f in flushes] == \
        [(0, 3, "size"), (1, 3, "size"), (2, 1, "shutdown")]
    assert len({p.key for p in placements}) == 3
    # One agent per zone: the metadata names the zone, no share layout, no runs in memory.
    head = make_client(config).head_object(Bucket=config.bucket, Key=placements[0].key)
    assert head["Metadata"] == {"zones": "az2"}
    assert placements[0].flushed.share_runs == {}


async def append_all_then_close(writer: WalWriter, items):
    """Append all in the order given, and close the writer once every append is buffered
    (so linger never fires). In order: `nursery.start` returns once the entry is in the open
    object (start_soon alone lets trio start the tasks in any order, which moved the cost
    seal of tests/integration/wal_s3/test_cost_flush.py in ~1 run of 8)."""
    placements: list = [None] * len(items)

    async def one(i, e, zone, task_status=trio.TASK_STATUS_IGNORED):
        placements[i] = await writer.append(e, zone, task_status=task_status)

    async with trio.open_nursery() as n:
        for i, (e, zone) in enumerate(items):
            await n.start(one, i, e, zone)
        await trio.testing.wait_all_tasks_blocked()
        writer.close()
    return placements


@pytest.mark.trio
async def test_flush_on_linger(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=30)
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", make_client(config), audit)
    async with writer.running():
        with trio.fail_after(10):
            p = await writer.append(entry(1, 100), "az2")
    assert p.flushed.reason == "linger"
    assert [f["reason"] for f in audit.of("wal_flush")] == ["linger"]
    assert p.key == object_key("", "az1", "p1", writer.epoch, 0)


@pytest.mark.trio
async def test_object_put_hands_botocore_one_buffer_and_keeps_the_integrity_headers(wal_env):
    # botocore turns a bytes body into a BytesIO that http.client sends 8 KiB at a time;
    # a bytearray goes to the socket in one sendall. The checksum S3 verifies stays.
    make_config, make_client = wal_env
    config = make_config(linger_ms=10)
    client = make_client(config)
    seen = []

    def before_send(request, **_kwargs):
        if "/_epochs/" not in request.url:
            seen.append((type(request.body), dict(request.headers), bytes(request.body)))
    client.meta.events.register("before-send.s3.PutObject", before_send)
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    async with writer.running():
        with trio.fail_after(10):
            p = await writer.append(entry(1, 300 * KiB), "az2")
    [(body_type, headers, body)] = seen
    assert body_type is bytearray
    assert headers["If-None-Match"] == b"*" and "x-amz-checksum-crc32" in headers
    assert body == client.get_object(Bucket=config.bucket, Key=p.key)["Body"].read()


@pytest.mark.trio
async def test_the_event_loop_transport_sends_each_object_with_its_crc32c(wal_env):
    """Over the default transport the PUT's x-amz-checksum-crc32c is the one the encoder
    continued from the trailer's CRC: it must equal the CRC-32C of the bytes S3 stored, for
    objects of one batch, of many and of batches larger than the encoder's copy chunk."""
    make_config, make_client = wal_env
    config = make_config(linger_ms=5, s3_transport="http")
    client = make_client(config)
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    keys = set()
    async with writer.running():
        with trio.fail_after(20):
            keys.add((await writer.append(entry(1, 100), "az2")).key)
            keys.add((await writer.append(entry(2, 700 * KiB), "az2")).key)
            async with trio.open_nursery() as nursery:
                async def one(i: int, zone: str) -> None:
                    keys.add((await writer.append(entry(i, 3 * KiB + i), zone)).key)
                for i in range(3, 40):
                    nursery.start_soon(one, i, ("az2", "az3")[i % 2])
    assert len(keys) >= 3
    for key in keys:
        got = client.get_object(Bucket=config.bucket, Key=key, ChecksumMode="ENABLED")
        body = got["Body"].read()
        assert got["ChecksumCRC32C"] == base64.b64encode(crc32c(body).to_bytes(4, "big")).decode(), key


@pytest.mark.trio
async def test_reused_encode_buffers_never_leak_bytes_between_objects(wal_env):
    # Each entry is at least max_bytes, so it is sealed alone at once; appended one after
    # another, every object after the first is encoded into the previous object's buffer
    # (the writer keeps it), whose bytes past a smaller object are an earlier, larger
    # object's. Each stored object must hold exactly its own entry.
    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, linger_ms=60_000)
    client = make_client(config)
    items = [entry(i, n * KiB, topic=f"t{i}") for i, n in enumerate([80, 64, 78, 66, 72, 79])]
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    async with writer.running():
        placements = []
        for e in items:
            with trio.fail_after(10):
                placements.append(await writer.append(e, "az2"))
    assert len({p.key for p in placements}) == len(items)
    for p, want in zip(placements, items):
        data = client.get_object(Bucket=config.bucket, Key=p.key)["Body"].read()
        assert len(data) == p.flushed.bytes
        [got] = parse_object(data).zones["az2"]
        assert (got.topic, bytes(got.batch)) == (want.topic, bytes(want.batch))


@pytest.mark.trio
async def test_objects_of_varying_sizes_are_encoded_into_one_buffer_never_resized(wal_env, monkeypatch):
    # Resizing a multi-MiB bytearray moves it to fresh pages, each faulted in and zeroed by
    # the kernel: with the buffer shrunk and regrown to every object's size, that was a
    # quarter of a busy WAL-route proxy's samples. One object at a time here, so every
    # object after the first must reuse the first one's buffer at its length: 2.94 MiB of
    # entry plus the header's bound (18,027 bytes) and the trailer round up to 3 MiB.
    import wal_s3.writer as writer_module
    seen: list[tuple[int, int, int]] = []  # id, length before, length after
    encode = writer_module.encode_object

    def spy(**kwargs):
        into = kwargs["into"]
        before = len(into)
        encoded = encode(**kwargs)
        seen.append((id(into), before, len(into)))
        return encoded
    monkeypatch.setattr(writer_module, "encode_object", spy)
    make_config, make_client = wal_env
    config = make_config(linger_ms=5, s3_transport="http")
    client = make_client(config)
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    sizes_kib = [3 * 1024 - 64, 300, 2 * 1024, 3 * 1024 - 64, 100, 1024]
    placements = []
    async with writer.running():
        for i, n in enumerate(sizes_kib):
            with trio.fail_after(10):
                placements.append(await writer.append(entry(i, n * KiB), "az2"))
    assert len({p.key for p in placements}) == len(sizes_kib)
    assert [(before, after) for _, before, after in seen] == [(3 * 1024 * KiB, 3 * 1024 * KiB)] * len(sizes_kib)
    assert len({buffer_id for buffer_id, _, _ in seen}) == 1
    for p, n in zip(placements, sizes_kib):
        body = client.get_object(Bucket=config.bucket, Key=p.key)["Body"].read()
        [got] = parse_object(body).zones["az2"]
        assert len(got.batch) == n * KiB


@pytest.mark.trio
async def test_moto_honours_if_none_match_and_a_collision_never_overwrites(wal_env):
    make_config, make_client = wal_env
    config = make_config()
    client = make_client(config)
    store = S3Store(client, config.bucket, trio.CapacityLimiter(2))
    await store.put_if_absent("k", b"first")
    with pytest.raises(S3PreconditionFailed):
        await store.put_if_absent("k", b"second")
    assert await store.get("k") == b"first"

    # A writer whose key is already taken (by a foreign object) is fenced, never overwrites.
    taken = object_key("", "az1", "p1", 1, 0)
    await store.put_if_absent(taken, b"someone else's object")
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", client, audit)
    with pytest.RaisesGroup(WalFencedError, flatten_subgroups=True, allow_unwrapped=True):
        async with writer.running():
            assert writer.epoch == 1
            with pytest.raises(WalFencedError, match="already exists"):
                await writer.append(entry(1, 10), "az2")
    assert await store.get(taken) == b"someone else's object"
    assert [(f["ok"], f["attempts"]) for f in audit.of("wal_flush")] == [(False, 1)]


@pytest.mark.trio
async def test_second_writer_with_same_id_takes_new_epoch_and_fences_the_first(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=10, epoch_check_interval_s=0)
    client = make_client(config)
    old_audit, new_audit = MemoryAuditSink(), MemoryAuditSink()
    old = WalWriter(config, "az1", "p1", client, old_audit)
    new = WalWriter(config, "az1", "p1", client, new_audit)
    with pytest.RaisesGroup(WalFencedError, flatten_subgroups=True, allow_unwrapped=True):
        async with old.running():
            p_old = await old.append(entry(1, 10), "az2")
            assert await new.register_epoch() == 2
            assert await old.check_epoch() is True
            with pytest.raises(WalFencedError, match="epoch 1 superseded by epoch 2"):
                await old.append(entry(2, 10), "az2")
    async with new.running():
        p_new = await new.append(entry(3, 10), "az2")
    assert p_old.key.endswith("/p1/0000000001/000000000000")
    assert p_new.key.endswith("/p1/0000000002/000000000000")

    def billed(audit):
        return sorted((r["purpose"], r["operation"], r["requests"]) for r in audit.of("s3_request"))
    # Each epoch cost one LIST of the markers and one conditional PUT; the old writer's
    # explicit check one more LIST (periodic checks are off: interval 0).
    assert billed(old_audit) == [("epoch", "LIST", 1), ("epoch", "PUT", 1), ("epoch_check", "LIST", 1)]
    assert billed(new_audit) == [("epoch", "LIST", 1), ("epoch", "PUT", 1)]


@pytest.mark.trio
async def test_backpressure_bounds_buffered_bytes(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, max_buffered_bytes=128 * KiB, linger_ms=200)
    client = make_client(config)
    puts = Faults(client, "PutObject", [])
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", client, audit)
    e = entry(1, 20 * KiB)
    size = entry_encoded_size(e)
    done = []
    async with writer.running():
        puts.gate = threading.Event()  # from now on PUTs hang until the test opens the gate
        async with trio.open_nursery() as n:
            async def one():
                await writer.append(e, "az2")
                done.append(1)
            for _ in range(7):
                n.start_soon(one)
            # Object 0 (3 entries) is PUTting when the 4th arrives; object 1 fills with entries
            # 4-6; the 7th would pass 128 KiB and waits. A PUT slot is free, so object 1 still
            # leaves on linger (no early seal: object 0's PUT will free space).
            await trio.to_thread.run_sync(puts.wait_requests, 3)  # epoch marker + 2 objects
            await trio.testing.wait_all_tasks_blocked()
            assert writer.buffered_bytes == 6 * size
            assert done == [] and puts.requests == 3
            puts.gate.set()
    assert len(done) == 7 and writer.buffered_bytes == 0
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["entries"], f["reason"]) for f in flushes] == [(3, "size"), (3, "linger"), (1, "linger")]


@pytest.mark.trio
async def test_full_buffer_held_by_the_open_object_is_sealed_not_deadlocked(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, max_buffered_bytes=64 * KiB, linger_ms=60_000)
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", make_client(config), audit)
    e = entry(1, 20 * KiB)
    done = []
    three_done = trio.Event()
    with trio.fail_after(20):  # without the early seal the 4th append would wait 60 s for linger
        async with writer.running():
            async with trio.open_nursery() as n:
                async def one():
                    await writer.append(e, "az2")
                    done.append(1)
                    if len(done) == 3:
                        three_done.set()
                for _ in range(4):
                    n.start_soon(one)
                await three_done.wait()
                await trio.testing.wait_all_tasks_blocked()  # the 4th is buffered, waiting on its object
                assert writer.buffered_bytes == entry_encoded_size(e)
                writer.close()
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["entries"], f["reason"]) for f in flushes] == [(3, "size"), (1, "shutdown")]


@pytest.mark.trio
async def test_cancelled_waiting_append_takes_no_room_and_waiters_are_served_in_order(wal_env):
    make_config, make_client = wal_env
    # linger 2 s: object 1 leaves on linger, long after the steps below (no close() race).
    config = make_config(max_bytes=64 * KiB, max_buffered_bytes=64 * KiB, linger_ms=2_000)
    client = make_client(config)
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", client, audit)
    size = entry_encoded_size(entry(0, 20 * KiB))
    results = {}

    async def keep(i):
        results[i] = await writer.append(entry(i, 20 * KiB), "az2")

    async def keep_small(i):
        results[i] = await writer.append(entry(i, 1 * KiB), "az2")

    async with writer.running():
        puts = Faults(client, "PutObject", [])
        puts.gate = threading.Event()
        with trio.fail_after(20):
            async with trio.open_nursery() as n:
                # nursery.start returns once each entry is in the open object: order is kept.
                for i in range(3):
                    await n.start(writer.append, entry(i, 20 * KiB), "az2")
                assert writer.buffered_bytes == 3 * size
                n.start_soon(keep, 10)  # does not fit: seals object 0 and waits for room
                await trio.testing.wait_all_tasks_blocked()
                n.start_soon(keep_small, 11)
                await trio.testing.wait_all_tasks_blocked()
                # 11 alone would fit (61,566 + 1,066 bytes < 64 KiB) but may not jump the queue.
                assert writer.buffered_bytes == 3 * size
                waiting = trio.CancelScope()

                async def doomed():
                    with waiting:
                        await writer.append(entry(12, 20 * KiB), "az2")
                n.start_soon(doomed)
                await trio.to_thread.run_sync(puts.wait_requests, 1)
                await trio.testing.wait_all_tasks_blocked()
                waiting.cancel()  # the third waiter gives up before any room frees
                await trio.testing.wait_all_tasks_blocked()
                assert writer.buffered_bytes == 3 * size  # nothing reserved for waiters
                puts.gate.set()
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["entries"], f["reason"]) for f in flushes] == [(3, "size"), (2, "linger")]
    # Both waiters landed in object 1; the cancelled 12 never entered an object.
    assert sorted((i, p.flushed.sequence) for i, p in results.items()) == [(10, 1), (11, 1)]
    assert sorted(p.entry_index_in_zone for p in results.values()) == [0, 1]
    assert writer.buffered_bytes == 0


@pytest.mark.trio
async def test_linger_seals_within_the_timer_tick_not_after_it(wal_env, mock_clock):
    # epoll sleeps whole milliseconds rounded up; an object due at exactly opened + linger was
    # sealed up to 1 ms late. Time here moves only when the test says so.
    make_config, make_client = wal_env
    config = make_config(linger_ms=50, epoch_check_interval_s=0)
    writer = WalWriter(config, "az1", "p1", make_client(config), MemoryAuditSink())
    async with writer.running(), trio.open_nursery() as nursery:
        await nursery.start(functools.partial(writer.append, entry(1, 100), "az2"))
        mock_clock.jump(0.0485)  # 1.5 ms before the linger: not due yet
        await trio.testing.wait_all_tasks_blocked()
        assert writer._open is not None and writer._open.count == 1
        mock_clock.jump(0.001)  # 0.5 ms before: within the tick, sealed now, not a tick later
        await trio.testing.wait_all_tasks_blocked()
        assert writer._open is None


@pytest.mark.trio
async def test_linger_counts_what_the_records_waited_in_the_producer(wal_env, mock_clock):
    # linger 100 ms. Entry 1 arrives fresh (due at +100 ms); entry 2 arrives 10 ms later with
    # records that had waited 60 ms in their producer: the object is due at 10 + 100 - 60 = 50 ms.
    make_config, make_client = wal_env
    config = make_config(linger_ms=100, epoch_check_interval_s=0)
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", make_client(config), audit)
    async with writer.running():
        await writer.buffer(entry(1, 100), "az2")
        mock_clock.jump(0.010)
        await writer.buffer(entry(2, 100), "az2", waited_s=0.060)
        mock_clock.jump(0.0385)  # at 48.5 ms: 1.5 ms before the entry-2 due time
        await trio.testing.wait_all_tasks_blocked()
        assert writer._open is not None and writer._open.count == 2
        mock_clock.jump(0.001)  # at 49.5 ms: within the timer tick of 50 ms, sealed
        await trio.testing.wait_all_tasks_blocked()
        assert writer._open is None
        # An entry whose records waited the whole linger is sealed at once.
        await writer.buffer(entry(3, 100), "az2", waited_s=0.5)
        await trio.testing.wait_all_tasks_blocked()
        assert writer._open is None
    flushes = sorted(audit.of("wal_flush"), key=lambda f: f["sequence"])
    assert [(f["entries"], f["reason"]) for f in flushes] == [(2, "linger"), (1, "linger")]


@pytest.mark.trio
async def test_buffer_returns_at_once_and_done_callbacks_run_in_object_order(wal_env):
    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, linger_ms=20)
    client = make_client(config)
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    seen: list = []
    async with writer.running():
        pendings = []
        with trio.testing.assert_no_checkpoints():  # room in the buffer: no waiting, no yielding
            for i in range(3):  # entries of ~40 KiB: each fills its own object (sealed on size)
                pendings.append(await writer.buffer(entry(i, 40 * KiB), "az2"))
        for i, pending in enumerate(pendings):
            pending.add_done_callback(lambda placement, error, i=i: seen.append((i, placement, error)))
        assert seen == []  # nothing is durable yet
        placements = [await pending.placement() for pending in pendings]
    assert [(i, error) for i, _p, error in seen] == [(0, None), (1, None), (2, None)]  # sequence order
    assert [p for _i, p, _e in seen] == placements
    assert [p.key.rsplit("/", 1)[1] for p in placements] == ["000000000000", "000000000001", "000000000002"]
    late: list = []
    pendings[1].add_done_callback(lambda placement, error: late.append((placement, error)))
    assert late == [(placements[1], None)]  # added after the release: called at once


@pytest.mark.trio
async def test_done_callbacks_get_the_error_of_an_object_that_failed(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=10, max_attempts=2)
    client = make_client(config)
    Faults(client, "PutObject", lambda n: None if n == 0 else "500")  # the epoch marker passes, data PUTs fail
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    seen: list = []
    async with writer.running():
        pending = await writer.buffer(entry(1, 10), "az2")
        pending.add_done_callback(lambda placement, error: seen.append((placement, error)))
        with pytest.raises(Exception, match="failed after 2 attempts"):
            await pending.placement()
    assert len(seen) == 1 and seen[0][0] is None and "failed after 2 attempts" in str(seen[0][1])


@pytest.mark.trio
async def test_fencing_fails_a_durable_object_that_waited_for_an_earlier_one(wal_env):
    """Object 1 is durable but waits for object 0, whose PUT then finds its key taken: the
    writer is fenced, object 1 is never announced, and its entries fail like object 0's."""
    from tests.integration.wal_s3.conftest import error_response

    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, linger_ms=5, max_in_flight_puts=2)
    client = make_client(config)
    object_1_stored = threading.Event()

    def before_send(request, **_kwargs):
        if request.url.endswith("/000000000000"):  # object 0: answered only after object 1 is stored
            object_1_stored.wait(timeout=10)
            return error_response(412, "PreconditionFailed")
        return None

    def after_call(http_response, **_kwargs):
        if http_response.url.endswith("/000000000001") and http_response.status_code == 200:
            object_1_stored.set()

    client.meta.events.register("before-send.s3.PutObject", before_send)
    client.meta.events.register("after-call.s3.PutObject", after_call)
    writer = WalWriter(config, "az1", "p1", client, MemoryAuditSink())
    announced: list = []
    seen: list = []
    with pytest.RaisesGroup(WalFencedError, flatten_subgroups=True, allow_unwrapped=True):
        async with writer.running():
            writer.on_released = lambda flushed: announced.append(flushed.sequence)
            for i in range(2):  # ~40 KiB each: one object each (the second seals the first on size)
                pending = await writer.buffer(entry(i, 40 * KiB), "az2")
                pending.add_done_callback(lambda placement, error, i=i: seen.append((i, placement, error)))
            with pytest.raises(WalFencedError):
                await pending.placement()
    assert announced == []
    assert [(i, placement, type(error)) for i, placement, error in seen] == [
        (0, None, WalFencedError), (1, None, WalFencedError)]


def test_shares_of_a_zone_with_several_agents_are_contiguous_and_in_order(wal_env):
    """share_of set (a zone with agents): each agent's entries are one run, each partition in
    append order, placements point at the right entries, and the metadata names the shares."""
    make_config, make_client = wal_env
    config = make_config(linger_ms=10_000, max_bytes=1 << 20)
    client = make_client(config)
    share = {0: "az2.1of2", 1: "az2.2of2", 2: "az2.1of2", 3: "az2.2of2"}  # by partition

    async def main():
        writer = WalWriter(config, "use1-az9", "proxy-1", client, MemoryAuditSink())
        writer.share_of = lambda zone, topic, partition: share[partition] if zone == "az2" else zone
        items = [(WalEntry("t", p, -1, -1, -1, 1, f"{p}-{i}".encode()), "az2") for i in range(3) for p in range(4)]
        items.append((WalEntry("t", 0, -1, -1, -1, 1, b"az3"), "az3"))
        async with writer.running():
            pending = [await writer.buffer(e, z) for e, z in items]
            writer._seal("test")
            placements = [await p.placement() for p in pending]
        assert len({p.key for p in placements}) == 1
        key = placements[0].key
        parsed = parse_object(client.get_object(Bucket=config.bucket, Key=key)["Body"].read())
        # Share 1of2 (partitions 0 and 2) first, then 2of2 (1 and 3); within each, append order.
        assert [bytes(e.batch) for e in parsed.zones["az2"]] == [
            b"0-0", b"2-0", b"0-1", b"2-1", b"0-2", b"2-2", b"1-0", b"3-0", b"1-1", b"3-1", b"1-2", b"3-2"]
        for (e, zone), p in zip(items, placements):
            assert bytes(parsed.zones[zone][p.entry_index_in_zone].batch) == bytes(e.batch)
        head = client.head_object(Bucket=config.bucket, Key=key)
        assert head["Metadata"]["zones"] == "az2.1of2,az2.2of2,az3"
        # The layout as written, for owners that change later: 6 entries each, then az3's one.
        assert head["Metadata"]["share-entries"] == "6,6,1"
        assert placements[0].flushed.share_runs == {"az2": ((0, 0, 6), (1, 6, 12))}

    trio.run(main)


@pytest.mark.trio
async def test_a_released_objects_entries_are_freed_by_reference_counting(wal_env):
    """An entry's batch is a view of its Produce request's buffer (up to megabytes): once its
    object is released, nothing the writer keeps (it lives as long as the proxy) may reach
    it, and no cycle may: the cyclic collector runs seldom under the raised thresholds
    (azsidecar/runtime.py). Checked with the collector off."""
    make_config, make_client = wal_env
    config = make_config(max_bytes=64 * KiB, linger_ms=60_000)
    writer = WalWriter(config, "az1", "p1", make_client(config), MemoryAuditSink())
    buffers = [WeakBuffer(bytes([i]) * 20 * KiB) for i in range(7)]
    alive = [weakref.ref(buffer) for buffer in buffers]
    with collector_off():
        async with writer.running():
            placements = await append_all_then_close(writer, [
                (WalEntry("orders", i % 4, -1, -1, -1, 1, memoryview(buffer)), "az2") for i, buffer in enumerate(buffers)])
        keys = sorted({p.key for p in placements})
        del placements, buffers
        left = still_alive(alive)
    assert len(keys) == 3  # 3 + 3 + 1 entries, as in test_flush_reasons_size_then_shutdown
    assert left == []
    assert writer.buffered_bytes == 0
