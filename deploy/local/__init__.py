"""The local environment: real S3 (moto server) and real Kafka (Tansu) as child processes.

Used by the test fixtures, `azsidecar demo` and the benchmarks. Every launcher is a
context manager that waits (bounded) for the service to accept connections and always
terminates the process on exit.
"""

from deploy.local.processes import (
    MotoServer,
    TansuBroker,
    free_port,
    start_moto,
    start_tansu,
    tansu_binary,
)

__all__ = ["MotoServer", "TansuBroker", "free_port", "start_moto", "start_tansu", "tansu_binary"]

# The three-zone environment (zones.py) and the runs over it (scenario.py).
from deploy.local.scenario import RunResult, ScenarioError, TopicSpec, Workload, run_baseline, run_sidecar  # noqa: E402
from deploy.local.zones import (  # noqa: E402
    CrossZoneMeter,
    CrossZoneReading,
    LinkBytes,
    Zone,
    ZoneEnv,
    ZoneSetupError,
    ZonesTerminated,
    cleanup_leftovers,
    leader_zone_of,
    partition_zones,
    three_zones,
)

__all__ += ["CrossZoneMeter", "CrossZoneReading", "LinkBytes", "RunResult", "ScenarioError", "TopicSpec", "Workload",
            "Zone", "ZoneEnv", "ZoneSetupError", "ZonesTerminated", "cleanup_leftovers", "leader_zone_of", "partition_zones",
            "run_baseline", "run_sidecar", "three_zones"]
