"""An idempotent producer's connection moves between zone gateway instances mid-run.

Real parts over loopback sockets: the shared loopback zones on Apache Kafka (three KRaft
nodes, one rack per zone; their moto holds the WAL bucket), one agent for the second zone,
two `azsidecar proxy` gateway instances of the first zone (policy wal; every partition is
led in the second zone: every batch goes through S3 and the agent), confluent-kafka as the
producer and the consumer. A
small TCP load balancer stands in for the zone's NLB: each new connection goes to the first
instance that accepts it, and a connection ends when its instance's end does. Both
instances advertise the balancer's address, as gateways advertise their zonal name.

Once a third of the records are acknowledged, instance A is killed with -9 (or drained
with SIGTERM) while batches are in flight on it; the producer reconnects through the
balancer to B and retries. The consumer must find every record exactly once and each
key's records in produce order.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

from deploy.local.processes import DUMMY_CREDENTIALS, free_port, stop_process, wait_for_port
from tests.conftest import unique_name
from tests.integration.azsidecar.test_gateway_workers import consume
from tests.integration.proxy.clients_matrix import PARTITIONS

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

START_TIMEOUT_S = 60.0
RECORDS = 3000
KEYS = 12
CHUNK = 50  # records handed to the producer between polls


class Balancer:
    """TCP pass-through to the first backend that accepts, in a thread with its own trio loop."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.port = 0
        self.connections: list[int] = []  # backend port of each accepted client connection
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    def __enter__(self) -> Balancer:
        self._thread.start()
        assert self._ready.wait(10), "balancer did not start"
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None and self._cancel is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
        self._thread.join(10)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as self._cancel:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
            self._ready.set()
            await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        upstream = None
        for port in self.backends:
            try:
                upstream = await trio.open_tcp_stream("127.0.0.1", port)
                self.connections.append(port)
                break
            except OSError:
                continue
        if upstream is None:
            await client.aclose()
            return

        async def pipe(src: trio.SocketStream, dst: trio.SocketStream, done: trio.CancelScope) -> None:
            try:
                while data := await src.receive_some(65536):
                    await dst.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            done.cancel()  # either side ending ends the connection, as an NLB target's reset does

        async with client, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pipe, client, upstream, nursery.cancel_scope)
            nursery.start_soon(pipe, upstream, client, nursery.cancel_scope)


def _start(cmd: list[str], env: dict, log: Path, port: int, what: str) -> subprocess.Popen:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, proc, START_TIMEOUT_S, what, log)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def produce_records(log_dir: Path) -> list[dict]:
    records = []
    for path in (log_dir / "audit").rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as fh:
            records += [r for r in map(json.loads, fh) if r["kind"] == "produce_batch"]
    return records


@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_connection_moves_between_gateways_without_loss_or_reordering(how, loopback_kafka_zones, tmp_path):
    from confluent_kafka import Producer

    zones = loopback_kafka_zones
    gateway_zone, agent_zone = zones.zones[0].name, zones.zones[1].name
    bootstrap, endpoint, bucket = zones.cluster_bootstrap, zones.s3_local_endpoint, "wal"
    servers = ", ".join(f'"{z.broker_bootstrap}"' for z in zones.zones)  # a TOML list
    topic = unique_name("moves")
    # Every partition led in the agent's zone (an agent appends only to leaders in its own zone),
    # a replica in every zone: the first replica of an assignment leads.
    order = [zones.kafka.node_of_rack(z).node_id for z in (agent_zone, gateway_zone, zones.zones[2].name)]
    zones.kafka.create_topic(topic, PARTITIONS, assignments={p: order for p in range(PARTITIONS)})
    assert set(zones.kafka.leader_racks(topic).values()) == {agent_zone}
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": secrets.token_hex(24),
           "AWS_DEFAULT_REGION": "us-east-1"}
    agent_port, port_a, port_b = free_port(), free_port(), free_port()
    wal = f'[wal]\nbucket = "{bucket}"\nregion = "us-east-1"\nprefix = "wal/"\nendpoint_url = "{endpoint}"\nlinger_ms = 50\n'
    audit = f'[audit]\noutput = "{tmp_path / "audit"}"\nproduce_detail = "batch"\n'
    agent_cfg = tmp_path / "agent.toml"
    agent_cfg.write_text(f'zone = "{agent_zone}"\n[upstream]\nbootstrap_servers = [{servers}]\n{wal}'
                         f'[agent]\nlisten_host = "127.0.0.1"\nlisten_port = {agent_port}\n{audit}')
    with contextlib.ExitStack() as stack:
        agent = _start([sys.executable, "-m", "azsidecar", "agent", "--config", str(agent_cfg)], env,
                       tmp_path / "agent.log", agent_port, "agent")
        stack.callback(stop_process, agent)
        balancer = stack.enter_context(Balancer([port_a, port_b]))
        gateways = {}
        for name, port in (("gw-a", port_a), ("gw-b", port_b)):
            cfg = tmp_path / f"{name}.toml"
            cfg.write_text(
                f'zone = "{gateway_zone}"\n[proxy]\nlisten_host = "127.0.0.1"\nlisten_port = {port}\nproxy_id = "{name}"\n'
                f'advertised_host = "127.0.0.1"\nadvertised_port = {balancer.port}\nshutdown_grace_s = 10\n'
                f'[upstream]\nbootstrap_servers = [{servers}]\n'
                f'[router]\npolicy = "wal"\n[router.partition_zones]\n"{topic}:*" = "{agent_zone}"\n'
                f'[notify.agents]\n"{agent_zone}" = "127.0.0.1:{agent_port}"\n{wal}{audit}[authz]\nsource = "none"\n')
            gateways[name] = _start([sys.executable, "-m", "azsidecar", "proxy", "--config", str(cfg)], env,
                                    tmp_path / f"{name}.log", port, name)
            stack.callback(stop_process, gateways[name])

        acked: list[int] = []
        errors: list = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked.append(int(msg.value()))

        producer = Producer({"bootstrap.servers": f"127.0.0.1:{balancer.port}", "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000,
                             "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        moved = False
        for start in range(0, RECORDS, CHUNK):
            # At most a third of the records unacknowledged before A goes: the first acks wait for
            # the idempotent producer's id and the first WAL round, and production must not end
            # before a third is acknowledged (a bounded wait on acknowledgements, not on time).
            deadline = time.monotonic() + START_TIMEOUT_S
            while not moved and start - len(acked) >= RECORDS // 3:
                assert time.monotonic() < deadline, f"{len(acked)} of {start} records acknowledged"
                producer.poll(0.05)
            for i in range(start, start + CHUNK):
                producer.produce(topic, key=f"k{i % KEYS}".encode(), value=f"{i:06d}".encode(),
                                 on_delivery=on_delivery)
            producer.poll(0.02)
            if not moved and len(acked) >= RECORDS // 3:
                # batches of the last chunks are in flight on A now
                in_flight = start + CHUNK - len(acked)
                gateways["gw-a"].send_signal(signal.SIGKILL if how == "kill-9" else signal.SIGTERM)
                moved = True
        assert moved, f"only {len(acked)} records acknowledged while producing"
        assert in_flight > 0, "nothing was in flight when A went away: the test proves nothing"
        assert producer.flush(90) == 0, "records still unacknowledged"
        assert not errors, errors[:3]
        assert gateways["gw-a"].wait(timeout=30) == (-signal.SIGKILL if how == "kill-9" else 0)
        assert sorted(acked) == list(range(RECORDS))

        received = consume(bootstrap, topic, RECORDS, timeout_s=60)
        values = sorted(int(v) for records in received.values() for _, v in records)
        assert values == list(range(RECORDS)), "lost or duplicated records"
        for records in received.values():
            by_key: dict[bytes, list[int]] = {}
            for k, v in records:
                by_key.setdefault(k, []).append(int(v))
            for k, seqs in by_key.items():
                assert seqs == sorted(seqs), f"key {k!r} out of order"
        assert port_b in balancer.connections, "the producer never reached instance B"
        stop_process(gateways["gw-b"])  # closes its audit files
    by_proxy: dict[str, int] = {}
    for r in produce_records(tmp_path):
        if r["error_code"] == 0:
            by_proxy[r["proxy_id"]] = by_proxy.get(r["proxy_id"], 0) + 1
    assert by_proxy.get("gw-b", 0) > 0, by_proxy  # B carried batches through the WAL after the move
