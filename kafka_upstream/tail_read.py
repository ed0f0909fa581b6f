"""Verify a leader's DUPLICATE_SEQUENCE_NUMBER by reading the partition's tail (trio shell).

The search itself is core/duplicates.py (pure); this module only fetches the offset
ranges it asks for over an upstream connection. The agent does the same with aiokafka
(leader_notify/agent/appender.py), with the same waits for the same Tansu reasons.
"""

from __future__ import annotations

import logging

import trio
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest

from core.duplicates import BatchHeader, TailSearch, Verdict, batch_headers, covered_until
from kafka_upstream.errors import UpstreamError
from kafka_upstream.upstream import UpstreamCluster, UpstreamConnection

log = logging.getLogger(__name__)

FETCH_API_KEY = 1
LIST_OFFSETS_API_KEY = 2
HIGHEST_FETCH_VERSION = 11  # v13 addresses topics by id
HIGHEST_LIST_OFFSETS_VERSION = 5
TAIL_FETCH_BYTES = 4 * 1024 * 1024
TAIL_FETCHES_PER_RANGE = 256
# Tansu answers a Fetch with max_wait 0 with no partitions at all, and with less data the
# shorter the wait: a range read waits up to 500 ms (it returns once it has data), the
# high-watermark probe 1 ms. A read that gets no batch is tried this often before it ends.
TAIL_FETCH_WAIT_MS = 500
PROBE_FETCH_WAIT_MS = 1
TAIL_FETCH_STALLS = 3
BEYOND_ANY_OFFSET = 1 << 62  # a Fetch here returns no records, only the high watermark
LATEST_TIMESTAMP = -1


class _TailUnreadable(Exception):
    """The leader's answer to a tail read could not be used."""


async def verify_duplicate(cluster: UpstreamCluster, conn: UpstreamConnection, topic: str, partition: int,
                           batch: bytes | memoryview, timeout_s: float) -> tuple[Verdict, int]:
    """(verdict, base offset if present) for `batch`, which the leader called a duplicate; never raises."""
    headers = batch_headers(batch)
    if not headers:
        return Verdict.UNKNOWN, -1
    wanted = headers[0]
    reader = _Reader(cluster, conn, topic, partition, timeout_s)
    try:
        with trio.fail_after(timeout_s):
            search = TailSearch(wanted.producer_id, wanted.producer_epoch, wanted.base_sequence,
                                await reader.high_watermark())
            while (searched := search.next_range()) is not None:
                search.feed(searched, await reader.read_range(searched.start, searched.end))
    except (UpstreamError, trio.TooSlowError, _TailUnreadable) as exc:
        log.info("verifying a duplicate in %s-%d: %r", topic, partition, exc,
                 extra={"topic": topic, "partition": partition})
        return Verdict.UNKNOWN, -1
    verdict, base_offset = search.outcome()
    log.info("duplicate of producer %d seq %d in %s-%d: %s", wanted.producer_id, wanted.base_sequence,
             topic, partition, verdict.value, extra={"topic": topic, "partition": partition})
    return verdict, base_offset


class _Reader:
    def __init__(self, cluster: UpstreamCluster, conn: UpstreamConnection, topic: str, partition: int,
                 timeout_s: float) -> None:
        self._cluster = cluster
        self._conn = conn
        self._topic = topic
        self._partition = partition
        self._timeout_s = timeout_s

    async def _fetch(self, offset: int, max_bytes: int, max_wait_ms: int) -> tuple[int, bytes]:
        """(high watermark, records). Raises UpstreamError or _TailUnreadable."""
        version = self._cluster.version_for(FETCH_API_KEY, HIGHEST_FETCH_VERSION)
        request = FetchRequest(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[FetchRequest.FetchTopic(topic=self._topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=self._partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                partition_max_bytes=max_bytes)])])
        response = await self._conn.request(request, version, self._timeout_s)
        for topic in response.responses:
            for p in topic.partitions:
                if topic.topic == self._topic and p.partition_index == self._partition:
                    if p.error_code != 0:
                        raise _TailUnreadable(f"fetch at {offset}: error {p.error_code}")
                    return p.high_watermark, bytes(p.records or b"")
        raise _TailUnreadable("fetch answer without the partition")

    async def high_watermark(self) -> int:
        # A Fetch past the end answers with the high watermark on Tansu, whose ListOffsets
        # "latest" lags (it names the last batch's base offset + 1); Kafka answers that Fetch
        # OFFSET_OUT_OF_RANGE and its ListOffsets is exact.
        try:
            high_watermark, _ = await self._fetch(BEYOND_ANY_OFFSET, 1, PROBE_FETCH_WAIT_MS)
            if high_watermark >= 0:
                return high_watermark
        except _TailUnreadable:
            pass
        version = self._cluster.version_for(LIST_OFFSETS_API_KEY, HIGHEST_LIST_OFFSETS_VERSION)
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=self._topic, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=self._partition, current_leader_epoch=-1, timestamp=LATEST_TIMESTAMP)])])
        response = await self._conn.request(request, version, self._timeout_s)
        for topic in response.topics:
            for p in topic.partitions:
                if topic.name == self._topic and p.partition_index == self._partition and p.error_code == 0:
                    return int(p.offset)
        raise _TailUnreadable("no high watermark")

    async def read_range(self, start: int, end: int) -> list[BatchHeader]:
        """Every batch header from `start` up to `end` (or to where the leader has no more batches).

        A leader that answers no batches at an offset below its high watermark, several
        times, has none there (Tansu advances the watermark before it writes the batch, so
        a broker stopped in between leaves such a hole at the end of the log).
        """
        found: list[BatchHeader] = []
        offset = start
        stalls = 0
        for _ in range(TAIL_FETCHES_PER_RANGE):
            if offset >= end:
                return found
            _hw, records = await self._fetch(offset, TAIL_FETCH_BYTES, TAIL_FETCH_WAIT_MS)
            headers = batch_headers(records)
            after = covered_until(headers, offset)
            if after <= offset:
                stalls += 1
                if stalls >= TAIL_FETCH_STALLS:
                    return found
                continue
            stalls = 0
            found.extend(headers)
            offset = after
        raise _TailUnreadable(f"range {start}-{end} not read in {TAIL_FETCHES_PER_RANGE} fetches")
