"""Shared fixtures: real moto (S3 over HTTP) and real Tansu brokers on free loopback ports.

Processes are started once per session where sharing is harmless (moto, one memory-backed
Tansu) and always terminated at the end. Tests that need isolation create their own
bucket or topic names with `unique_name`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable

import pytest

# No test may reach EC2 instance metadata (169.254.169.254): point every `azsidecar`
# process the tests start at a closed loopback port instead.
os.environ["AZSIDECAR_IMDS_ENDPOINT"] = "http://127.0.0.1:9"

# py4j's gateway connections log "Closing down" at INFO from __del__ at interpreter exit,
# after pytest has closed the stream the log handler writes to ("--- Logging error ---").
logging.getLogger("py4j").setLevel(logging.WARNING)

from deploy.local import start_moto, start_tansu
from deploy.local.processes import DUMMY_CREDENTIALS, PORT_SLICE_ENV
from deploy.local.s3_express import create_directory_bucket, running_front
from wal_s3.config import WalConfig
from wal_s3.s3 import make_s3_client

# `make test` runs most of the suite on parallel workers (pytest-xdist): each picks listener
# ports from its own slice, so two workers never start servers on the same free port.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    os.environ[PORT_SLICE_ENV] = f"{int(_WORKER[2:])}/{os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')}"

# The test pyramid by directory: tests/unit (pure; its conftest refuses sockets, subprocesses
# and the JVM), tests/integration (one real part or a few: moto, Kafka, Tansu, clients, Spark),
# tests/system (three zones of processes: end to end, reliability campaigns, the local fleet).
# The system tests run one at a time (marker "serial"), on one worker of `make test` while the
# other workers run the integration tier. A system module that makes no timing claim (only
# bytes, records and bounded waits) and shares no environment with the others sets
# BESIDE_THE_SYSTEM_TIER = True: it runs as a group of its own, beside the chain, at the
# integration tier's priority, and the chain (the run's longest) gets shorter.
SYSTEM_TIER = "system"


def xdist_group_of(relative: str, kafka_version: str | None, beside: bool = False, own: bool = False) -> str:
    """The pytest-xdist group a test runs in (`make test` runs `--dist loadgroup`): the
    system tier in one group, one test after another (a module `beside` it: its own group);
    the tests on a shared Apache Kafka cluster in one group per broker version, so each
    version's cluster starts once; the Spark job tests in one group (one SparkSession);
    every other test file its own group, so its module fixtures start once. An integration
    module that uses none of its package's shared environment sets OWN_XDIST_GROUP = True
    (`own`): a group of its own, so it does not lengthen that package's chain."""
    parts = relative.split(os.sep)
    if parts[0] == SYSTEM_TIER:
        return relative if beside else "system"
    if own:
        return relative
    package = parts[1] if parts[0] == "integration" and len(parts) > 2 else ""
    if package == "kafka":
        return f"kafka-{kafka_version or 'default'}"
    if package == "spark_audit":
        return "spark"  # one SparkSession (tests/integration/spark_audit/conftest.py) for all of them
    return relative


_GROUP_OF: dict[str, str] = {}  # test node id -> its xdist group
_GROUP_CLOSERS: dict[str, list[Callable[[], None]]] = {}


# tryfirst: pytest-xdist's worker reads the xdist_group marks in its own collection hook (it
# appends `@group` to each node id, which is what keeps a group on one worker); a conftest
# hook runs after it unless it goes first, and then every test was a unit of its own.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    tests_dir = os.path.dirname(__file__)
    for item in items:
        relative = os.path.relpath(str(item.path), tests_dir)
        if relative.split(os.sep, 1)[0] == SYSTEM_TIER:
            item.add_marker(pytest.mark.serial)
        version = getattr(item.module, "KAFKA_GROUP_VERSION", None)
        group = xdist_group_of(relative, version, getattr(item.module, "BESIDE_THE_SYSTEM_TIER", False),
                               getattr(item.module, "OWN_XDIST_GROUP", False))
        _GROUP_OF[item.nodeid] = group
        _GROUP_OF[f"{item.nodeid}@{group}"] = group  # the node id once xdist has appended the group
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadgroup`: the groups that took longest in a measured run start first
    (tests/group_seconds.py says why), so no long group starts last and runs alone."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    from tests import group_seconds

    measured = group_seconds.load()

    class LongestGroupsFirst(LoadGroupScheduling):
        _ordered = False

        def _assign_work_unit(self, node):
            if not self._ordered:  # the work queue is complete before the first assignment
                self._ordered = True
                order = sorted(self.workqueue.items(),
                               key=lambda unit: -group_seconds.expected_s(unit[0], len(unit[1]), measured))
                self.workqueue.clear()
                self.workqueue.update(order)
            super()._assign_work_unit(node)

    return LongestGroupsFirst(config, log)


def group_of_node(nodeid: str) -> str:
    """The xdist group of a test, or of a module's tests (one group per module or coarser)."""
    if nodeid in _GROUP_OF:
        return _GROUP_OF[nodeid]
    return next((group for test, group in _GROUP_OF.items() if test.startswith(nodeid + "::")), nodeid)


def close_with_group(group: str, close: Callable[[], None]) -> None:
    """Run `close` once this worker has run the last test of the item's group in a row.

    A worker of `make test` runs each group's tests one after another, and keeps session
    fixtures until all its groups are done: an idle three-node Kafka cluster burns ~7 % of a
    core, so a cluster shared by a group is stopped when the group ends, not at the end of
    the worker's session. A later test of the same group (a plain `pytest` run, files in
    another order) starts it again through its fixture."""
    _GROUP_CLOSERS.setdefault(group, []).append(close)


# CPU priority under `make test`: the system tier's tests make timing claims (fallback within
# 5 s, latency bounds, memory over time) and run one after another on one worker, the longest
# chain of the run; every other test only needs to finish. On parallel workers the others run
# at a lower priority (nice 10: about a tenth of the CPU share when both want the CPU), so the
# system tier runs close to its speed alone and the rest fills the remaining CPU. Processes a
# test starts inherit its priority. Raising the priority back needs root; without it nothing
# is reniced.
SYSTEM_NICENESS = 0
OTHER_NICENESS = 10


def _renice_for(item) -> None:
    if not _WORKER or os.geteuid() != 0:
        return
    chain = _GROUP_OF.get(item.nodeid) == "system"
    os.setpriority(os.PRIO_PROCESS, 0, SYSTEM_NICENESS if chain else OTHER_NICENESS)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _renice_for(item)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    group = _GROUP_OF.get(item.nodeid, item.nodeid)
    if nextitem is not None and _GROUP_OF.get(nextitem.nodeid, nextitem.nodeid) == group:
        return
    for close in reversed(_GROUP_CLOSERS.pop(group, [])):
        close()


@pytest.fixture(scope="session")
def _shared_stacks():
    """Environments shared by a group of tests, by name; each closes when its group ends
    (close_with_group) or, at the latest, with the session."""
    with contextlib.ExitStack() as session_stack:
        yield {"session": session_stack}


def shared_environment(stacks: dict, name: str, nodeid: str, start: Callable[[], contextlib.AbstractContextManager]):
    """The running environment `name`, started (start() is its context manager) if needed and
    stopped when the group of the requesting test or module (`nodeid`) ends."""
    if name not in stacks:
        stack = contextlib.ExitStack()
        stacks["session"].callback(stack.close)
        stacks[name] = (stack.enter_context(start()), stack)

        def close() -> None:
            entry = stacks.pop(name, None)  # None: discarded already (discard_environment)
            if entry is not None:
                entry[1].close()

        close_with_group(group_of_node(nodeid), close)
    return stacks[name][0]


def discard_environment(stacks: dict, name: str) -> None:
    """Stop the running environment `name` now, because a test left it unusable; the next test
    that asks for it starts a new one."""
    entry = stacks.pop(name, None)
    if entry is not None:
        entry[1].close()


@pytest.fixture
def loopback_kafka_zones(_shared_stacks, tmp_path_factory, request):
    """Three loopback zones on Apache Kafka (three KRaft nodes, one rack per zone) with a WAL
    bucket "wal", shared by the three-zone tests of a group (they make their own topics and
    fleets): each Kafka start costs three JVMs' startup CPU. Tests kill brokers; a node a
    test left down is restarted before the next one, so one failed test never leaves the
    next with a two-node cluster."""
    from deploy.local.zones import three_zones

    @contextlib.contextmanager
    def start():
        with three_zones(mode="loopback", log_dir=tmp_path_factory.mktemp("kafka-zones"), broker="kafka") as env:
            env.create_bucket("wal")
            yield env

    env = shared_environment(_shared_stacks, "loopback-kafka-zones", request.node.nodeid, start)
    env.restart_stopped_brokers()
    yield env
    shed_topics(env.kafka)


def shed_topics(cluster) -> None:
    """After a test on a shared Kafka cluster: its topics deleted (kafka_admin.delete_topics says
    what idle partitions cost the next tests). A cluster the test left broken is not worth
    failing the test over: the next test's fixture restarts its nodes."""
    if cluster is None or not any(node.running for node in cluster.nodes.values()):
        return
    try:
        cluster.delete_topics()
    except Exception as exc:  # noqa: BLE001 - cleanup only; the next test works on a fuller cluster
        logging.getLogger(__name__).warning("could not delete the test's topics: %s", exc)


@pytest.fixture
def dummy_aws_credentials(monkeypatch):
    """The dummy credentials moto accepts, in this process's environment (boto3 and the
    processes a test starts take them from their usual chain). The one place tests set them."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    with start_moto(log_dir=tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def s3_bucket(moto_server):
    """A fresh, empty bucket on the shared moto server: (server, bucket_name)."""
    name = unique_name("bkt")
    moto_server.create_bucket(name)
    return moto_server, name


@pytest.fixture(scope="session")
def tansu(tmp_path_factory):
    """One memory-backed Tansu broker for the session."""
    with start_tansu(log_dir=tmp_path_factory.mktemp("tansu")) as broker:
        yield broker


@pytest.fixture
def tansu_shared_bucket(moto_server, tmp_path_factory):
    """Factory fixture: start_brokers(n) -> n Tansu brokers sharing one fresh bucket."""
    import contextlib

    stack = contextlib.ExitStack()
    bucket = unique_name("tansu")
    moto_server.create_bucket(bucket)
    log_dir = tmp_path_factory.mktemp("tansu-s3")

    def start_brokers(n: int):
        return [stack.enter_context(start_tansu(moto_server.endpoint_url, bucket, log_dir=log_dir))
                for _ in range(n)]

    with stack:
        yield start_brokers


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create topics {name: partitions} on a broker (kafka-python admin)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(n, p, 1) for n, p in topics.items()])
    finally:
        admin.close()


@pytest.fixture(scope="session")
def express_front(moto_server, tmp_path_factory):
    """deploy/local/s3_express.py in front of the shared moto: its endpoint URL (S3 Express One
    Zone directory buckets with session authentication)."""
    log = tmp_path_factory.mktemp("s3-express") / "front.log"
    with running_front(f"127.0.0.1:{moto_server.port}", log) as endpoint:
        yield endpoint


WAL_STORE_ZONES = ("az0", "az1", "az2", "az3")  # zones whose directory buckets `wal_store` creates


@pytest.fixture(params=["standard", "express"])
def wal_store(request, moto_server, monkeypatch):
    """(config factory, client factory) like tests/integration/wal_s3's `wal_env`, on plain moto (one
    bucket) and on the S3 Express front (a directory bucket per zone of WAL_STORE_ZONES)."""
    for k, v in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    base = unique_name("wal")
    if request.param == "express":
        endpoint = request.getfixturevalue("express_front")
        for zone in WAL_STORE_ZONES:
            create_directory_bucket(("127.0.0.1", moto_server.port), f"{base}--{zone}--x-s3")
    else:
        endpoint = moto_server.endpoint_url
        moto_server.create_bucket(base)

    def config(**overrides) -> WalConfig:
        settings = {"bucket": base, "region": "us-east-1", "endpoint_url": endpoint, "retry_base_ms": 1, "retry_max_ms": 5,
                    "storage_class": request.param}
        settings.update(overrides)
        return WalConfig(**settings)

    return config, make_s3_client
