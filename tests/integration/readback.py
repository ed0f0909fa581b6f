"""Reading partitions back from a broker, to check what a test produced.

Where a partition ends is not one number on Tansu 0.6:
- ListOffsets "latest" is the base offset + 1 of the batch object S3 lists as last modified,
  at S3's one-second resolution: it stops short of the batches written in the last second
  (docs/reliability.md, finding 4);
- the high watermark in Fetch answers counts the offsets of a batch whose object a broker
  stopped before writing (a hole, docs/reliability.md, open finding 1): no fetch reaches it.

So the read goes at least to the larger of ListOffsets' end and what the caller knows was
acknowledged (`at_least`), then on toward the high watermark while fetches bring records;
two empty polls in a row there end it (a hole at the tail). A fetch out of range raises
(auto_offset_reset "none") instead of jumping to the end.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping

READ_TIMEOUT_S = 60.0
TAIL_EMPTY_POLLS = 2  # past the known end: this many empty polls in a row end the read


def read_partitions(bootstrap: str, partitions: Iterable[tuple[str, int]], *,
                    at_least: Mapping[tuple[str, int], int] | None = None,
                    timeout_s: float = READ_TIMEOUT_S) -> dict[tuple[str, int], list]:
    """(topic, partition) -> every record (kafka-python ConsumerRecord) from the beginning, in
    offset order. `at_least`: (topic, partition) -> an offset the read must get past (one past
    the highest acknowledged). Raises TimeoutError if the end is not reached in `timeout_s`."""
    from kafka import KafkaConsumer, TopicPartition

    tps = [TopicPartition(topic, p) for topic, p in partitions]
    want = at_least or {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             request_timeout_ms=15_000, auto_offset_reset="none")
    out: dict[tuple[str, int], list] = defaultdict(list)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)

        listed = consumer.end_offsets(tps)
        target = {tp: max(listed[tp], want.get((tp.topic, tp.partition), 0)) for tp in tps}
        deadline = time.monotonic() + timeout_s

        def poll() -> int:
            if time.monotonic() > deadline:
                state = {f"{tp.topic}-{tp.partition}": (consumer.position(tp), target[tp], consumer.highwater(tp))
                         for tp in tps}
                raise TimeoutError(f"reading back: not at the end after {timeout_s:.0f} s "
                                   f"(position, end to reach, high watermark): {state}")
            got = 0
            for tp, records in consumer.poll(timeout_ms=500).items():
                out[(tp.topic, tp.partition)].extend(records)
                got += len(records)
            return got

        while any(consumer.position(tp) < target[tp] for tp in tps):
            poll()
        empty_polls = 0
        while empty_polls < TAIL_EMPTY_POLLS and any(consumer.position(tp) < (consumer.highwater(tp) or 0)
                                                     for tp in tps):
            empty_polls = 0 if poll() else empty_polls + 1
    finally:
        consumer.close()
    for (topic, p), records in out.items():
        offsets = [r.offset for r in records]
        if offsets != sorted(set(offsets)):
            raise AssertionError(f"reading back {topic}-{p}: offsets read twice or out of order")
    return dict(out)
