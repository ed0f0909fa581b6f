"""List prices in USD: the one price table the router's cost policy, the flush rule and the audit share.

Configured under `router.prices`. Defaults are us-east-1 list prices, read 2026-11-26 (docs/latency-and-cost.md
cites the pages): S3 Standard requests, S3 Express One Zone requests and its per-GB upload and retrieval charges,
and inter-AZ transfer. The WAL's storage class (`wal.storage_class`) picks which S3 prices apply: `store()`.

S3 Express One Zone bills the upload and retrieval charge on every byte of a PUT or GET (AWS's worked examples
charge a 10 KB request; the rule before the April 2025 price change billed only the part of a request over
512 KB) per GB of 2**30 bytes, as those examples compute it. Reads from another zone of the same region carry
no transfer fee in either class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.configload import require

StorageClass = Literal["standard", "express"]
STORAGE_CLASSES: tuple[StorageClass, ...] = ("standard", "express")
GIB = 1024**3  # S3 Express upload/retrieval: "per GB", computed by AWS's examples as KB / 1,048,576


@dataclass(frozen=True)
class StorePrices:
    """What one S3 storage class charges for the WAL's requests: per request and per byte moved."""

    put_per_1000: float
    get_per_1000: float
    upload_per_gb: float = 0.0  # per GiB of PUT bodies
    retrieval_per_gb: float = 0.0  # per GiB of GET bodies

    def put_usd(self, body_bytes: float) -> float:
        """USD for one PUT of `body_bytes`."""
        return self.put_per_1000 / 1000.0 + body_bytes * self.upload_per_gb / GIB

    def get_usd(self, body_bytes: float) -> float:
        """USD for one GET returning `body_bytes`."""
        return self.get_per_1000 / 1000.0 + body_bytes * self.retrieval_per_gb / GIB

    @property
    def upload_per_byte(self) -> float:
        return self.upload_per_gb / GIB

    @property
    def retrieval_per_byte(self) -> float:
        return self.retrieval_per_gb / GIB


@dataclass(frozen=True)
class Prices:
    """USD list prices (us-east-1, read 2026-11-26). S3 Standard: PUT $0.005/1000, GET $0.0004/1000.
    S3 Express One Zone: PUT $0.00113/1000, GET $0.00003/1000, upload $0.0032/GB, retrieval $0.0006/GB.
    Inter-AZ transfer $0.01/GB each way."""

    s3_put_per_1000: float = 0.005  # S3 Standard PUT/LIST, USD per 1,000 requests
    s3_get_per_1000: float = 0.0004  # S3 Standard GET, USD per 1,000 requests
    cross_az_per_gb_each_way: float = 0.01  # inter-AZ transfer, USD per GB out of one zone (and again into the other)
    express_put_per_1000: float = 0.00113  # S3 Express One Zone PUT/LIST, USD per 1,000 requests
    express_get_per_1000: float = 0.00003  # S3 Express One Zone GET, USD per 1,000 requests
    express_upload_per_gb: float = 0.0032  # S3 Express One Zone, USD per GB of PUT bodies (every byte)
    express_retrieval_per_gb: float = 0.0006  # S3 Express One Zone, USD per GB of GET bodies (every byte)

    def __post_init__(self) -> None:
        for name in ("s3_put_per_1000", "s3_get_per_1000", "cross_az_per_gb_each_way", "express_put_per_1000",
                     "express_get_per_1000", "express_upload_per_gb", "express_retrieval_per_gb"):
            require(getattr(self, name) >= 0, f"router.prices.{name}: must be >= 0")

    def store(self, storage_class: str) -> StorePrices:
        """The S3 prices of `storage_class` ("standard" or "express"); raises ValueError otherwise."""
        if storage_class == "standard":
            return StorePrices(self.s3_put_per_1000, self.s3_get_per_1000)
        if storage_class == "express":
            return StorePrices(self.express_put_per_1000, self.express_get_per_1000,
                               self.express_upload_per_gb, self.express_retrieval_per_gb)
        raise ValueError(f"storage class {storage_class!r}: 'standard' or 'express'")
