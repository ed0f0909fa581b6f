"""Checkpoints and GC against moto: never delete an object with an unapplied zone (until it
is an orphan older than max_orphan_age_s); `azsidecar gc` prints what it did."""

from __future__ import annotations

import functools
import itertools
import time

import pytest
import trio

from azsidecar.cli import main as azsidecar_main
from core.audit import MemoryAuditSink
from wal_s3.checkpoint_manifest import MANIFEST_DIR, decode_manifest
from wal_s3.format import WalEntry
from wal_s3.gc import Checkpoints, checkpoint_key, run_gc
from wal_s3.writer import WalWriter

pytestmark = pytest.mark.integration

ZONES = ("az1", "az2", "az3")


def keys(client, bucket):
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))


async def write_object(config, client, zones) -> str:
    """One WAL object with one entry for each of `zones`; returns its key."""
    placements = []
    writer = WalWriter(config, "az0", "p1", client, MemoryAuditSink())
    async with writer.running():
        async with trio.open_nursery() as n:
            async def one(zone):
                placements.append(await writer.append(WalEntry("t", 0, 1, 0, 0, 1, b"x"), zone))
            for z in zones:
                n.start_soon(one, z)
            await trio.testing.wait_all_tasks_blocked()
            writer.close()
    assert len({p.key for p in placements}) == 1
    return placements[0].key


def test_gc_deletes_exactly_the_fully_applied_objects(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000, orphan_report_age_s=3600, max_orphan_age_s=7200)
    client = make_client(config)
    subsets = [frozenset(c) for r in range(len(ZONES) + 1) for c in itertools.combinations(ZONES, r)]

    async def main():
        objects = {}
        for applied in subsets:  # 8 objects, each with all three zones, a different subset applied
            key = await write_object(config, client, ZONES)
            for z in applied:
                await Checkpoints(config, client).mark_applied(key, z)
            objects[key] = applied
        assert await Checkpoints(config, client).applied_zones(key) == set(ZONES)
        dry = await run_gc(config, client, dry_run=True, audit=dry_audit)
        report = await run_gc(config, client, audit=audit)
        return objects, dry, report

    dry_audit, audit = MemoryAuditSink(), MemoryAuditSink()
    objects, dry, report = trio.run(main)
    # Billed S3 requests of each pass, by hand: one LIST (fewer than 1,000 keys); a GET for
    # each of the 0*1 + 1*3 + 2*3 + 3*1 = 12 manifests (one per mark_applied; no cache across
    # these passes); a HEAD for each of the 7 objects with a checkpoint (the one without is
    # young: skipped); then one DeleteObjects for the object and one for its 3 manifests (not
    # in the dry run).
    assert sorted((r["operation"], r["purpose"], r["requests"]) for r in dry_audit.of("s3_request")) == [
        ("GET", "gc", 12), ("HEAD", "gc", 7), ("LIST", "gc", 1)]
    assert sorted((r["operation"], r["purpose"], r["requests"]) for r in audit.of("s3_request")) == [
        ("DELETE", "gc", 2), ("GET", "gc", 12), ("HEAD", "gc", 7), ("LIST", "gc", 1)]
    full = [k for k, a in objects.items() if a == set(ZONES)]
    assert len(full) == 1
    assert dry.deleted == tuple(full) and dry.dry_run
    assert report.deleted == tuple(full)
    assert report.scanned == 8 and report.pending == 7 and report.orphans == () and report.orphans_deleted == ()
    assert report.checkpoints_deleted == 3
    remaining = keys(client, config.bucket)
    index = trio.run(Checkpoints(config, client).applied_index)
    for key, applied in objects.items():
        assert (key in remaining) == (applied != set(ZONES))
        # The deleted object's checkpoints went with it; the others' are all still there.
        assert index.get(key, set()) == (set() if applied == set(ZONES) else set(applied))


def test_orphans_are_reported_then_deleted_only_after_max_age(wal_env):
    make_config, make_client = wal_env
    config = make_config(prefix="tenant/", linger_ms=60_000, orphan_report_age_s=100, max_orphan_age_s=1000)
    client = make_client(config)

    async def main():
        key = await write_object(config, client, ("az1", "az2"))
        await Checkpoints(config, client).mark_applied(key, "az1")
        now = time.time()
        young = await run_gc(config, client, now_s=now)
        reported = await run_gc(config, client, now_s=now + 500)
        assert key in keys(client, config.bucket)
        old = await run_gc(config, client, now_s=now + 2000)
        return key, young, reported, old

    key, young, reported, old = trio.run(main)
    assert key.startswith("tenant/") and "/wal/az0/p1/" in key
    assert (young.pending, young.orphans, young.deleted) == (1, (), ())
    assert [(o.key, o.unapplied_zones) for o in reported.orphans] == [(key, ("az2",))]
    assert reported.orphans_deleted == () and reported.deleted == ()
    assert old.orphans_deleted == (key,) and old.checkpoints_deleted == 1
    assert [k for k in keys(client, config.bucket) if "/wal/" in k] == []


def test_old_orphan_holding_acknowledged_entries_is_held_not_deleted(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000, orphan_report_age_s=100, max_orphan_age_s=1000)
    client = make_client(config)

    async def main():
        held = await write_object(config, client, ("az1", "az2"))  # topic "t" in both zones
        await Checkpoints(config, client).mark_applied(held, "az1")
        applied_acked = await write_object(config, client, ("az1",))
        await Checkpoints(config, client).mark_applied(applied_acked, "az1")
        report = await run_gc(config, client, now_s=time.time() + 2000, acked_topic=lambda t: t == "t")
        other = await run_gc(config, client, now_s=time.time() + 2000, acked_topic=lambda t: t == "u")
        return held, applied_acked, report, other

    held, applied_acked, report, other = trio.run(main)
    # az2 never applied its share of `held`, and topic "t" was acknowledged on durability: kept.
    assert report.held == (held,) and report.orphans_deleted == ()
    assert report.deleted == (applied_acked,)  # fully applied objects go as always
    assert f"HELD {held}: unapplied acknowledged (ack_mode wal) entries; run `azsidecar recover`" in report.lines()
    # Once no unapplied entry is of an acknowledged topic, the old orphan goes as before.
    assert other.held == () and other.orphans_deleted == (held,)


def applied_object(wal_env, s3_bucket):
    """A bucket holding one WAL object whose only zone is applied: (server, bucket, client, key)."""
    make_config, make_client = wal_env
    server, bucket = s3_bucket
    config = make_config(linger_ms=60_000)
    client = make_client(config)

    async def main():
        key = await write_object(config, client, ("az1",))
        await Checkpoints(config, client).mark_applied(key, "az1")
        return key

    return server, bucket, client, trio.run(main)


def test_cli_gc_once_prints_what_it_did(wal_env, s3_bucket, capsys):
    server, bucket, client, key = applied_object(wal_env, s3_bucket)
    args = ["gc", "--once", "--bucket", bucket, "--region", "us-east-1", "--endpoint-url", server.endpoint_url]
    assert azsidecar_main(args + ["--dry-run"]) == 0
    assert f"would delete {key} (all zones applied)" in capsys.readouterr().out
    assert key in keys(client, bucket)
    assert azsidecar_main(args) == 0
    out = capsys.readouterr().out
    assert f"deleted {key} (all zones applied)" in out
    assert "gc: scanned 1 objects, deleted 1 applied" in out
    assert key not in keys(client, bucket)


def test_stale_checkpoints_go_once_old_and_periodic_gc_runs_in_a_nursery(wal_env):
    from wal_s3.gc import run_gc_periodically

    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000, orphan_report_age_s=100, max_orphan_age_s=1000)
    client = make_client(config)
    gone = "0abc/wal/az0/p1/0000000001/000000000007"  # its object was never written (or expired)

    async def main():
        await Checkpoints(config, client).mark_applied(gone, "az1")
        young = await run_gc(config, client)
        assert await Checkpoints(config, client).applied_zones(gone) == {"az1"}
        old = await run_gc(config, client, now_s=time.time() + 200)
        key = await write_object(config, client, ("az1",))
        await Checkpoints(config, client).mark_applied(key, "az1")
        async with trio.open_nursery() as n:
            await n.start(functools.partial(run_gc_periodically, config, client, interval_s=0.01, passes=2))
        return young, old, key

    young, old, key = trio.run(main)
    assert (young.checkpoints_deleted, old.checkpoints_deleted) == (0, 1)
    remaining = keys(client, config.bucket)
    assert remaining and all(k.startswith("_epochs/") for k in remaining)  # WAL object and checkpoints gone
    assert key not in remaining


def test_looping_gc_serves_its_counters_on_metrics_port(wal_env, s3_bucket):
    import os
    import select
    import subprocess
    import sys
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from deploy.local.processes import DUMMY_CREDENTIALS, free_port, stop_process

    server, bucket, client, key = applied_object(wal_env, s3_bucket)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "gc", "--bucket", bucket,
                             "--region", "us-east-1", "--endpoint-url", server.endpoint_url, "--interval-s", "3600",
                             "--metrics-port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **DUMMY_CREDENTIALS})
    try:
        deadline = time.monotonic() + 60
        out = b""  # raw reads: a buffered readline would hide lines from select
        while b"gc: scanned" not in out:
            assert time.monotonic() < deadline, f"no pass reported: {out!r}"
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                assert chunk, f"gc exited: {proc.stderr.read()!r}"
                out += chunk
        lines = out.decode().splitlines()
        assert f"deleted {key} (all zones applied)" in lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        # labelled like the proxy's and agent's series (no zone configured here), and only gc's own
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert samples[("azsidecar_wal_gc_deleted_total", (("component", "gc"), ("reason", "applied"), ("zone", "")))] == 1
        assert samples[("azsidecar_wal_gc_orphans", (("component", "gc"), ("zone", "")))] == 0
        assert not [name for name, _ in samples if name.startswith(("azsidecar_proxy_", "azsidecar_agent_"))]
    finally:
        stop_process(proc, 10.0)


def test_one_manifest_checkpoints_many_objects_and_goes_when_all_of_them_are_gone(wal_env):
    make_config, make_client = wal_env
    config = make_config(prefix="p/", linger_ms=60_000, orphan_report_age_s=100, max_orphan_age_s=1000)
    client = make_client(config)

    async def main():
        a = await write_object(config, client, ("az1",))
        b = await write_object(config, client, ("az1", "az2"))  # az2 never applies its share
        await Checkpoints(config, client).mark_applied_many([a, b, a], "az1")  # a re-sent notification: a twice
        manifests = [k for k in keys(client, config.bucket) if k.startswith(f"p/_checkpoints/{MANIFEST_DIR}/az1/")]
        body = client.get_object(Bucket=config.bucket, Key=manifests[0])["Body"].read()
        cache: dict = {}
        first = await run_gc(config, client, manifest_cache=cache)
        second = await run_gc(config, client, manifest_cache=cache)  # the manifest is not read again
        cached = dict(cache)
        late = await run_gc(config, client, now_s=time.time() + 2000, manifest_cache=cache)  # b is an old orphan
        await run_gc(config, client, manifest_cache=cache)  # prunes what is no longer listed
        return a, b, manifests, body, cached, cache, first, second, late

    a, b, manifests, body, cached, cache, first, second, late = trio.run(main)
    assert list(cached) == manifests
    assert len(manifests) == 1  # one PUT for both objects
    # Keys are written without the WAL prefix, each once.
    assert decode_manifest(body) == ("az1", (a[len("p/"):], b[len("p/"):]))
    assert first.deleted == (a,) and first.pending == 1
    assert first.checkpoints_deleted == 0  # b is still there: the manifest stays
    assert second.deleted == () and second.checkpoints_deleted == 0
    assert late.orphans_deleted == (b,) and late.checkpoints_deleted == 1
    assert cache == {}  # pruned once the manifest is gone
    remaining = keys(client, config.bucket)
    assert not [k for k in remaining if not k.startswith("p/_epochs/")]


def test_checkpoints_of_the_per_object_layout_are_still_honoured(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000)
    client = make_client(config)

    async def main():
        key = await write_object(config, client, ("az1", "az2"))
        client.put_object(Bucket=config.bucket, Key=checkpoint_key(config, key, "az1"), Body=b"")  # an older agent
        await Checkpoints(config, client).mark_applied(key, "az2")
        return key, await run_gc(config, client)

    key, report = trio.run(main)
    assert report.deleted == (key,) and report.checkpoints_deleted == 2  # the old marker and the manifest
    assert not [k for k in keys(client, config.bucket) if not k.startswith("_epochs/")]


def test_a_manifest_that_is_not_ours_is_ignored_not_deleted(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000, orphan_report_age_s=100, max_orphan_age_s=1000)
    client = make_client(config)
    stray = f"_checkpoints/{MANIFEST_DIR}/az1/1790000000000-00112233aabbccdd"

    async def main():
        key = await write_object(config, client, ("az1",))
        client.put_object(Bucket=config.bucket, Key=stray, Body=b"not json")
        return key, await run_gc(config, client, now_s=time.time() + 200)

    key, report = trio.run(main)
    assert report.deleted == () and report.pending == 0 and [o.key for o in report.orphans] == [key]
    assert stray in keys(client, config.bucket)  # an operator looks at it; GC neither trusts nor deletes it


def test_a_zone_with_several_agents_is_applied_when_every_share_is(wal_env):
    make_config, make_client = wal_env
    config = make_config(linger_ms=60_000, orphan_report_age_s=100, max_orphan_age_s=1000)
    client = make_client(config)

    async def main():
        writer = WalWriter(config, "az0", "p1", client, MemoryAuditSink())
        writer.share_of = lambda zone, topic, partition: f"az2.{partition + 1}of2"
        async with writer.running():
            pending = [await writer.buffer(WalEntry("t", p, 1, 0, 0, 1, b"x"), "az2") for p in (0, 1)]
            writer.close()
        key = (await pending[0].placement()).key
        await Checkpoints(config, client).mark_applied(key, "az2.1of2")
        one_share = await run_gc(config, client)
        held = await run_gc(config, client, now_s=time.time() + 2000, acked_topic=lambda t: t == "t")
        await Checkpoints(config, client).mark_applied(key, "az2.2of2")
        both = await run_gc(config, client)
        return key, one_share, held, both

    key, one_share, held, both = trio.run(main)
    assert one_share.deleted == () and one_share.pending == 1  # the second agent has not applied its share
    assert held.held == (key,)  # its unapplied share holds an acknowledged topic: held, not deleted
    assert both.deleted == (key,)
