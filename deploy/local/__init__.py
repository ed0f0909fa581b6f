"""The local environment: real S3 (moto server) and real Kafka (Tansu) as child processes.

Used by the test fixtures, `azsidecar demo` and the benchmarks. Every launcher is a
context manager that waits (bounded) for the service to accept connections and always
terminates the process on exit.

The names below are imported on first use (PEP 562): many small processes run a module of
this package (`python -m deploy.local.kafka_admin`, the fault fronts, the workload), and
importing the three-zone environment (zones.py, scenario.py: kafka-python, the frame
capture) for each of them cost ~0.3 s of CPU a process.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "deploy.local.processes": ("MotoServer", "TansuBroker", "free_port", "start_moto", "start_tansu", "tansu_binary"),
    # The three-zone environment (zones.py) and the runs over it (scenario.py).
    "deploy.local.scenario": ("RunResult", "ScenarioError", "TopicSpec", "Workload", "run_baseline", "run_sidecar"),
    "deploy.local.zones": ("CrossZoneMeter", "CrossZoneReading", "LinkBytes", "Zone", "ZoneEnv", "ZoneSetupError",
                           "ZonesTerminated", "cleanup_leftovers", "three_zones"),
    "deploy.local.leader_zones": ("leader_zone_of", "partition_zones"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'deploy.local' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
