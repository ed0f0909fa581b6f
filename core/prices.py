"""List prices in USD: the one price table the router's cost policy and the audit share.

Configured under `router.prices`; the defaults are S3 Standard request prices and inter-AZ
transfer (us-east-1 list prices).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.configload import require


@dataclass(frozen=True)
class Prices:
    """USD list prices. Defaults: S3 Standard requests, inter-AZ transfer $0.01/GB each way."""

    s3_put_per_1000: float = 0.005
    s3_get_per_1000: float = 0.0004
    cross_az_per_gb_each_way: float = 0.01

    def __post_init__(self) -> None:
        for name in ("s3_put_per_1000", "s3_get_per_1000", "cross_az_per_gb_each_way"):
            require(getattr(self, name) >= 0, f"router.prices.{name}: must be >= 0")
