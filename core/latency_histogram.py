"""The fixed-bucket latency histogram of produce_summary records (core.audit.LATENCY_BUCKETS_MS).

Strategy: an interval's batches of one key are counted per bucket, so the record stays a
few dozen bytes whatever the batch count, and histograms of any records add bucket by
bucket (the Spark latency job sums them, per-batch records counted into the same buckets).
A percentile read back is the upper bound of the bucket that holds its rank, capped at the
largest latency seen: never below the exact value, at most one bucket step above it.
Text form: "index:count" pairs, comma separated, in index order, empty buckets left out.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from core.audit import LATENCY_BUCKETS_MS


def bucket_of(latency_ms: float) -> int:
    """The index of the bucket that counts `latency_ms` (bounds are inclusive above)."""
    return bisect.bisect_left(LATENCY_BUCKETS_MS, latency_ms)


def encode(counts: Mapping[int, int]) -> str:
    """The text form of {bucket index: count}; zero counts are left out."""
    return ",".join(f"{i}:{counts[i]}" for i in sorted(counts) if counts[i])


def decode(text: str) -> dict[int, int]:
    """{bucket index: count} from the text form ("" is empty). Raises ValueError on a
    malformed pair or an index outside the buckets."""
    counts: dict[int, int] = {}
    for pair in filter(None, text.split(",")):
        index_text, _, count_text = pair.partition(":")
        index, count = int(index_text), int(count_text)
        if not 0 <= index < len(LATENCY_BUCKETS_MS):
            raise ValueError(f"latency bucket {index} outside 0..{len(LATENCY_BUCKETS_MS) - 1}")
        counts[index] = counts.get(index, 0) + count
    return counts


def percentile(counts: Mapping[int, int], q: float, max_ms: float) -> float | None:
    """The q-quantile (0 < q <= 1) read from the histogram: the upper bound of the bucket
    holding rank ceil(q * n), capped at `max_ms`; None when the histogram is empty."""
    total = sum(counts.values())
    if total == 0:
        return None
    rank = max(1, -(-int(q * total * 1_000_000) // 1_000_000))  # ceil without float drift
    seen = 0
    for index in sorted(counts):
        seen += counts[index]
        if seen >= rank:
            return min(LATENCY_BUCKETS_MS[index], max_ms)
    return max_ms
