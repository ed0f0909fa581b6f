"""Which zone "leads" each partition in the local three-zone environment: a module of its
own, so that the workload processes (bench/workload.py) know it without importing the
environment (zones.py imports kafka-python and the frame capture: ~0.3 s of CPU a process)."""

from __future__ import annotations

from collections.abc import Sequence


def leader_zone_of(partition: int, zones: Sequence[str]) -> str:
    """The zone whose broker "leads" `partition` of every topic: zones[partition % len(zones)]."""
    if partition < 0 or not zones:
        raise ValueError(f"partition must be >= 0 and zones non-empty, got {partition}, {zones!r}")
    return zones[partition % len(zones)]


def partition_zones(zones: Sequence[str], max_partitions: int, topic_glob: str = "*") -> dict[str, str]:
    """The router's `partition_zones` override map for partitions 0..max_partitions-1."""
    return {f"{topic_glob}:{p}": leader_zone_of(p, zones) for p in range(max_partitions)}
