"""The prices a proxy runs with, served as `azsidecar_router_price_usd{item}`.

Strategy: the router prices its routes with `router.prices` and the WAL's storage class
(`wal.storage_class`); the dashboard's savings panel and the savings alert read the same
numbers from this gauge instead of carrying list prices of their own. Each series is the
USD of one unit of `item` in base units (one request, one byte), so a query multiplies a
rate of requests or bytes by it with no conversion. The items are those the router's cost
policy uses (router/decide.py): what a byte costs across zones, and what the WAL's storage
class charges per request and per byte moved (0 where the class charges nothing per byte).

`price_items` is pure; `export_prices` sets the gauge once at start-up (prices change only
with a restart: SIGHUP reloads the routing policy alone).
"""

from __future__ import annotations

from prometheus_client import Gauge

from core.prices import Prices
from router.decide import direct_cost_per_byte

ITEMS = ("cross_zone_transfer_byte", "wal_put_request", "wal_get_request", "wal_upload_byte", "wal_retrieval_byte")

PRICE = Gauge("azsidecar_router_price_usd",
              "USD of one unit of item (a request, a byte) at the proxy's router.prices and wal.storage_class",
              ["item"])


def price_items(prices: Prices, storage_class: str) -> dict[str, float]:
    """USD per unit of each of ITEMS. Raises ValueError for an unknown storage class.

    cross_zone_transfer_byte: a byte sent directly to another zone, billed out of one zone and
    into the other (2 x cross_az_per_gb_each_way per decimal GB), what a WAL byte avoids;
    wal_put_request, wal_get_request: one PUT or GET of the storage class;
    wal_upload_byte, wal_retrieval_byte: one byte of a PUT or GET body (S3 Express only).
    """
    store = prices.store(storage_class)
    return {
        "cross_zone_transfer_byte": direct_cost_per_byte(prices),
        "wal_put_request": store.put_usd(0),
        "wal_get_request": store.get_usd(0),
        "wal_upload_byte": store.upload_per_byte,
        "wal_retrieval_byte": store.retrieval_per_byte,
    }


def export_prices(prices: Prices, storage_class: str) -> None:
    """Set one series of azsidecar_router_price_usd per item."""
    for item, usd in price_items(prices, storage_class).items():
        PRICE.labels(item).set(usd)
