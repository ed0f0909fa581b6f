"""The GC pass's decisions, table by table (pure: no S3). Ages: report 600 s, delete 3600 s."""

from __future__ import annotations

import pytest

from wal_s3.gc_plan import Ages, ManifestView, ObjectFate, checkpoints_to_delete, needs_head, object_fate

AGES = Ages(report_s=600.0, max_orphan_s=3600.0)


def test_report_age_never_exceeds_deletion_age():
    assert Ages.of(900.0, 300.0) == Ages(300.0, 300.0)
    assert Ages.of(600.0, 3600.0) == AGES


@pytest.mark.parametrize(("age_s", "applied", "expected"), [
    (10.0, set(), False),  # young, nothing applied: pending without a HEAD
    (10.0, {"az2"}, True),  # a zone applied: maybe all did
    (600.0, set(), True),  # old enough to be an orphan
    (599.9, set(), False),
])
def test_needs_head(age_s, applied, expected):
    assert needs_head(age_s, applied, AGES) is expected


@pytest.mark.parametrize(("age_s", "zones", "applied", "fate", "unapplied"), [
    (5.0, ["az2", "az3"], {"az2", "az3"}, ObjectFate.APPLIED, ()),
    (5000.0, ["az2"], {"az2", "az9"}, ObjectFate.APPLIED, ()),  # an extra checkpoint changes nothing
    (5.0, ["az2", "az3"], {"az2"}, ObjectFate.PENDING, ("az3",)),
    (600.0, ["az2", "az3"], {"az2"}, ObjectFate.ORPHAN, ("az3",)),
    (3599.0, ["az2", "az3"], set(), ObjectFate.ORPHAN, ("az2", "az3")),
    (3600.0, ["az2", "az3"], {"az3"}, ObjectFate.EXPIRED, ("az2",)),
    (5.0, [], {"az2"}, ObjectFate.PENDING, ()),  # zones unknown: never applied
    (4000.0, [], {"az2"}, ObjectFate.EXPIRED, ()),
])
def test_object_fate(age_s, zones, applied, fate, unapplied):
    assert object_fate(age_s, zones, applied, AGES) == (fate, unapplied)


def test_checkpoints_go_with_their_objects_and_manifests_when_every_object_is_gone():
    per_object = {
        "a": [("az2", 100.0)],  # object deleted in this pass
        "b": [("az2", 100.0)],  # object still listed
        "c": [("az3", 100.0)],  # object not listed, checkpoint old (now 1000): gone
        "d": [("az3", 900.0)],  # object not listed, checkpoint young: maybe a racing new object
    }
    manifests = [
        ManifestView("m1", ("a", "c"), 100.0),  # every object gone
        ManifestView("m2", ("a", "b"), 100.0),  # b still there
        ManifestView("m3", (), 100.0),  # empty and old
        ManifestView("m4", (), 950.0),  # empty and young
        ManifestView("m5", ("e",), 950.0),  # names an unlisted object, but is young
    ]
    got = checkpoints_to_delete(per_object, manifests, listed_objects={"a", "b"}, deleted={"a"}, now_s=1000.0,
                                ages=AGES, checkpoint_root="wal/_cp/")
    assert got == ["wal/_cp/a/az2", "wal/_cp/c/az3", "m1", "m3"]
