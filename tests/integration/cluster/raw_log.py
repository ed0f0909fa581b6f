"""A partition's log as its leader stores it: batch headers, control markers, sizes.

Read with Fetch v4 (read_uncommitted) on a plain socket, encoded and decoded by
kafka-python's protocol classes: the consumer clients hide control batches, and the
producer id, epoch and batch size are only in the batch headers.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.record import MemoryRecords

TIMEOUT_S = 10.0
MAX_FETCHES = 1000  # a partition of a test is read in a few; more means no progress


@dataclass(frozen=True)
class Batch:
    producer_id: int
    producer_epoch: int
    values: list[int]  # the records' values as integers ([] for a control batch)
    control: int | None  # control record type: 0 ABORT, 1 COMMIT; None for data
    size_bytes: int  # the whole batch as stored and fetched


def raw_log(address: str, topic: str, partition: int) -> list[Batch]:
    """Every batch of the partition from offset 0 to its high watermark, in log order."""
    host, _, port = address.rpartition(":")
    out: list[Batch] = []
    offset = 0
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as s:
        for correlation_id in range(1, MAX_FETCHES):
            data = _fetch(s, topic, partition, offset, correlation_id)
            records = MemoryRecords(bytes(data.records))
            while (batch := records.next_batch()) is not None:
                if batch.is_control_batch:
                    key = next(iter(batch)).key
                    values, control = [], struct.unpack(">hh", key)[1]
                else:
                    values, control = [int(r.value) for r in batch], None
                out.append(Batch(batch.producer_id, batch.producer_epoch, values, control, batch.size_in_bytes))
                offset = batch.next_offset
            if offset >= data.high_watermark:
                return out
    raise AssertionError(f"no progress reading {topic}-{partition} at offset {offset}")


def _fetch(s: socket.socket, topic: str, partition: int, offset: int, correlation_id: int):
    request = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 24, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                                                      partition_max_bytes=1 << 24)])])
    request.with_header(correlation_id=correlation_id, client_id="raw-log")
    s.sendall(bytes(request.encode(version=4, header=True, framed=True)))
    size = struct.unpack(">i", _read(s, 4))[0]
    data = FetchResponse.decode(_read(s, size), version=4, header=True).responses[0].partitions[0]
    assert data.error_code == 0, data
    return data


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "the broker closed the connection"
        buf += chunk
    return buf
