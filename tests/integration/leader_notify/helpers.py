"""Test helpers: real record batches, real WAL objects in moto, an agent in a thread, a consumer."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from azsidecar.config import load_config
from tests.integration.readback import read_partitions
from wal_s3.format import WalEntry, encode_object

KEYS = ("test-notify-key-0123456789",)
THREAD_START_TIMEOUT_S = 30.0


def make_batch(values: list[bytes], producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A v2 record batch as a Kafka client builds it (kafka-python's builder)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                  producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, int(time.time() * 1000), None, v, [])
    return bytes(b.build())


def wal_entry(topic: str, partition: int, values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1) -> WalEntry:
    return WalEntry(topic, partition, pid, epoch, seq, len(values), make_batch(values, pid, epoch, seq))


def new_producer_id(bootstrap: str) -> tuple[int, int]:
    """(producer_id, epoch) allocated by the broker for a real idempotent kafka-python producer."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, request_timeout_ms=10_000)
    try:
        p.send("pid-warmup", b"x").get(timeout=10)
        pe = p._transaction_manager.producer_id_and_epoch  # the id the broker granted this producer
        return pe.producer_id, pe.epoch
    finally:
        p.close(timeout=5)


@dataclass(frozen=True)
class Flushed:
    """What wal_s3's writer reports after a PUT (the fields NotifySender reads)."""

    key: str
    zones: Any


def put_object(s3, bucket: str, key: str, entries_by_zone: dict[str, list[WalEntry]], sequence: int = 0) -> Flushed:
    obj = encode_object(writer_id="proxy-a", epoch=1, sequence=sequence, created_ms=int(time.time() * 1000),
                        entries_by_zone=entries_by_zone)
    s3.put_object(Bucket=bucket, Key=key, Body=obj.data)
    return Flushed(key, obj.zones)


def config_for(endpoint_url: str, bucket: str, bootstrap: str, agents: dict[str, str] | None = None, **more):
    overrides = {
        "wal.bucket": bucket, "wal.region": "us-east-1", "wal.prefix": "wal/", "wal.endpoint_url": endpoint_url,
        "upstream.bootstrap_servers": [bootstrap], "agent.listen_port": 0,
        "notify.hmac_keys": list(KEYS), "notify.agents": agents or {},
        "notify.timeout_s": 10.0, "notify.backoff_initial_s": 0.1, "notify.backoff_max_s": 1.0,
    }
    overrides.update(more)
    return load_config(None, overrides)


class AgentThread:
    """A real agent (same wiring as `azsidecar agent`) on its own asyncio loop in a thread."""

    def __init__(self, config, zone: str, audit, port: int = 0, checkpoint=True) -> None:
        self._config, self._zone, self._audit, self._want_port = config, zone, audit, port
        self._checkpoint = checkpoint
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.agent = None
        self.port = 0
        self.error: BaseException | None = None

    def start(self) -> AgentThread:
        self._ready.clear()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(THREAD_START_TIMEOUT_S):
            raise RuntimeError("agent did not start")
        if self.error:
            raise self.error
        return self

    async def _main(self) -> None:
        from leader_notify.agent.runner import running_agent

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            async with running_agent(self._config, self._zone, tuple(k.encode() for k in KEYS), audit=self._audit,
                                     port=self._want_port, checkpoint=self._checkpoint) as (agent, port):
                self.agent, self.port = agent, port
                self._want_port = port  # a restart comes back on the same port
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(THREAD_START_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError("agent thread did not stop")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def consume(bootstrap: str, topic: str, partition: int, timeout_s: float = 20.0) -> list[tuple[int, bytes]]:
    """Every (offset, value) of the partition, read with kafka-python from the beginning to
    its end (tests/integration/readback.py says where that is on Tansu)."""
    records = read_partitions(bootstrap, [(topic, partition)], timeout_s=timeout_s)
    return [(r.offset, r.value) for r in records.get((topic, partition), [])]
