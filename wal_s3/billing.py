"""Counting the S3 requests that no other audit record bills: epoch markers, GC, recovery.

WAL object PUTs (wal_flush.put_requests), the agents' ranged GETs (agent_read.gets) and
checkpoint manifest PUTs (checkpoint_write) are billed through their own records. Every
other request the product sends is counted here per attempt (a failed attempt is billed
too) and written as one `s3_request` record per operation when the work is done.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from core.audit import AuditSink
from wal_s3.s3 import DELETE_BATCH_KEYS

LIST_PAGE_KEYS = 1000  # ListObjectsV2 returns at most 1,000 keys per request

T = TypeVar("T")


class S3RequestTally:
    """Requests sent per operation (PUT, LIST, GET, HEAD, DELETE) until `emit`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, operation: str, requests: int = 1) -> None:
        if requests > 0:
            self.counts[operation] += requests

    def each_attempt(self, operation: str, fn: Callable[[int], T], requests: int = 1) -> Callable[[int], T]:
        """`fn` for `with_retries`, counting `requests` requests per attempt."""
        def attempt(n: int) -> T:
            self.add(operation, requests)
            return fn(n)
        return attempt

    def listed(self, keys: int) -> None:
        """A LIST that returned `keys` keys took a request per page; its first is counted per attempt."""
        self.add("LIST", max(1, math.ceil(keys / LIST_PAGE_KEYS)) - 1)

    def emit(self, audit: AuditSink | None, purpose: str) -> None:
        """One s3_request record per operation counted, then start again from zero."""
        if audit is not None:
            for operation, requests in sorted(self.counts.items()):
                audit.emit("s3_request", {"operation": operation, "purpose": purpose, "requests": requests})
        self.counts.clear()


def delete_requests(keys: int) -> int:
    """DeleteObjects requests for `keys` keys."""
    return math.ceil(keys / DELETE_BATCH_KEYS)
