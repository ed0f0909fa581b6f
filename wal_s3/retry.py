"""Retry with full-jitter exponential backoff (AWS Architecture Blog, "Exponential Backoff And Jitter")."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import NotRequired, TypedDict, TypeVar

import anyio

from wal_s3.s3 import S3Error

T = TypeVar("T")


class RetryArgs(TypedDict):
    """with_retries' backoff keywords, as callers keep them to pass on with `**`."""

    max_attempts: int
    base_ms: int
    max_ms: int
    rng: NotRequired[random.Random]


def backoff_s(attempt: int, base_ms: int, max_ms: int, rng: random.Random) -> float:
    """Sleep before retry number `attempt` (1 = first retry): uniform in [0, min(max, base*2**attempt)]."""
    return rng.uniform(0, min(max_ms, base_ms * (2 ** attempt))) / 1000.0


async def with_retries(op: Callable[[int], Awaitable[T]], *, max_attempts: int, base_ms: int, max_ms: int,
                       on_retry: Callable[[int, S3Error], None] | None = None,
                       rng: random.Random | None = None) -> T:
    """Call op(attempt) (attempt counts from 1) until it returns, retrying retriable S3Errors.

    Raises the last S3Error once it is not retriable or max_attempts are used up.
    """
    rng = rng or random.Random()
    attempt = 1
    while True:
        try:
            return await op(attempt)
        except S3Error as exc:
            if not exc.retriable or attempt >= max_attempts:
                raise
            if on_retry is not None:
                on_retry(attempt, exc)
            await anyio.sleep(backoff_s(attempt, base_ms, max_ms, rng))
            attempt += 1
