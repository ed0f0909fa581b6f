"""What a GC pass does with each WAL object and checkpoint: pure decisions, no S3.

`wal_s3/gc.py` lists the bucket, reads manifests, HEADs candidates and deletes; these
functions say which objects need a HEAD, what each object's state means, and which
checkpoints have outlived their objects. Ages are in seconds at the pass's `now_s`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


class ObjectFate(enum.Enum):
    PENDING = "pending"  # a zone has not applied it yet and it is young: normal in-flight work
    APPLIED = "applied"  # every zone applied its share: delete
    ORPHAN = "orphan"  # an unapplied zone and older than the report age: report, keep
    EXPIRED = "expired"  # an orphan older than max_orphan_age_s: delete unless it holds acknowledged entries


@dataclass(frozen=True)
class Ages:
    report_s: float  # an unapplied object older than this is reported as an orphan
    max_orphan_s: float  # and deleted once older than this

    @classmethod
    def of(cls, orphan_report_age_s: float, max_orphan_age_s: float) -> Ages:
        """The report age never exceeds the deletion age (a deleted orphan was reported)."""
        return cls(min(orphan_report_age_s, max_orphan_age_s), max_orphan_age_s)


def needs_head(age_s: float, applied_zones: set[str], ages: Ages) -> bool:
    """Whether the object's zone list (HEAD) is needed: not for a young object no zone applied."""
    return bool(applied_zones) or age_s >= ages.report_s


def object_fate(age_s: float, zones: Sequence[str], applied_zones: set[str],
                ages: Ages) -> tuple[ObjectFate, tuple[str, ...]]:
    """(fate, unapplied zones) of an object whose zone list is `zones` (empty: unknown, the
    object has no zones metadata, so it can never count as applied)."""
    unapplied = tuple(z for z in zones if z not in applied_zones)
    if zones and not unapplied:
        return ObjectFate.APPLIED, ()
    if age_s < ages.report_s:
        return ObjectFate.PENDING, unapplied
    if age_s >= ages.max_orphan_s:
        return ObjectFate.EXPIRED, unapplied
    return ObjectFate.ORPHAN, unapplied


@dataclass(frozen=True)
class ManifestView:
    key: str
    relative_keys: tuple[str, ...]  # WAL objects (without prefix) it names
    modified_s: float


def checkpoints_to_delete(per_object: Mapping[str, Iterable[tuple[str, float]]],
                          manifests: Iterable[ManifestView], listed_objects: set[str], deleted: set[str],
                          now_s: float, ages: Ages, checkpoint_root: str) -> list[str]:
    """Checkpoint keys whose objects are gone, objects first, then manifests.

    An object is gone if this pass deletes it, or if it was not listed and its checkpoint
    is older than the report age (a younger one may have raced a brand-new object's
    listing). A per-object checkpoint `<checkpoint_root><rel>/<zone>` goes with its object;
    a manifest once every object it names is gone (an empty manifest once it is old).
    """
    def gone(rel: str, checkpoint_modified_s: float) -> bool:
        return rel in deleted or (rel not in listed_objects and now_s - checkpoint_modified_s >= ages.report_s)

    out = [f"{checkpoint_root}{rel}/{zone}"
           for rel, zones in per_object.items() for zone, modified in zones if gone(rel, modified)]
    out += [m.key for m in manifests
            if all(gone(rel, m.modified_s) for rel in m.relative_keys)
            and (m.relative_keys or now_s - m.modified_s >= ages.report_s)]
    return out
