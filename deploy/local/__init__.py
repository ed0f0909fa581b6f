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
