"""The process-wide settings of azsidecar/runtime.py that a unit test can check in-process."""

from __future__ import annotations

from azsidecar.runtime import HEAP_BLOCK_MAX_BYTES
from kafka_protocol.kafka_codec import MAPPED_FRAME_MIN_BYTES


def test_the_heap_block_limit_is_the_codecs_own_mapping_threshold():
    # Frames from this size on get their own mapping in the codec; below it they must come
    # from the heap, or the tuning misses the requests it is for.
    assert HEAP_BLOCK_MAX_BYTES == MAPPED_FRAME_MIN_BYTES
