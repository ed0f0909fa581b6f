"""azsidecar_router_price_usd: the prices of a hand-written configuration, per unit of each item."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from azsidecar.config import load_config
from azsidecar.exposition import LabelledRegistry
from azsidecar.price_gauges import ITEMS, export_prices, price_items
from core.prices import Prices

PRICES_TOML = """
zone = "use1-az1"

[wal]
bucket = "acme-wal"
storage_class = "{storage_class}"

[router.prices]
s3_put_per_1000 = 0.006
s3_get_per_1000 = 0.0005
cross_az_per_gb_each_way = 0.015
express_put_per_1000 = 0.002
express_get_per_1000 = 0.0001
express_upload_per_gb = 0.008
express_retrieval_per_gb = 0.001
"""

# By hand from PRICES_TOML: a crossing byte is billed out and in, 2 x 0.015 per 10**9 bytes;
# requests are priced per 1000; S3 Express per-GB charges are per 2**30 bytes.
STANDARD = {"cross_zone_transfer_byte": 3e-11, "wal_put_request": 6e-6, "wal_get_request": 5e-7,
            "wal_upload_byte": 0.0, "wal_retrieval_byte": 0.0}
EXPRESS = {"cross_zone_transfer_byte": 3e-11, "wal_put_request": 2e-6, "wal_get_request": 1e-7,
           "wal_upload_byte": 0.008 / 2**30, "wal_retrieval_byte": 0.001 / 2**30}


def _config(tmp_path, storage_class):
    path = tmp_path / "azsidecar.toml"
    path.write_text(PRICES_TOML.format(storage_class=storage_class))
    return load_config(path, environ={})


@pytest.mark.parametrize(("storage_class", "expected"), [("standard", STANDARD), ("express", EXPRESS)])
def test_the_items_of_a_configuration_s_prices(tmp_path, storage_class, expected):
    config = _config(tmp_path, storage_class)
    assert price_items(config.router.prices, config.wal.storage_class) == pytest.approx(expected, rel=1e-12)


def test_the_defaults_are_the_list_prices_the_dashboard_used_to_carry():
    # $0.02/GB across zones (0.01 each way), S3 Standard PUT $0.005/1000 and GET $0.0004/1000
    assert price_items(Prices(), "standard") == pytest.approx(
        {"cross_zone_transfer_byte": 2e-11, "wal_put_request": 5e-6, "wal_get_request": 4e-7,
         "wal_upload_byte": 0.0, "wal_retrieval_byte": 0.0}, rel=1e-12)
    assert tuple(price_items(Prices(), "express")) == ITEMS


def test_export_sets_one_series_per_item_and_the_proxy_serves_them(tmp_path):
    config = _config(tmp_path, "express")
    export_prices(config.router.prices, config.wal.storage_class)
    for item, usd in EXPRESS.items():
        assert REGISTRY.get_sample_value("azsidecar_router_price_usd", {"item": item}) == pytest.approx(usd, rel=1e-12)

    served = CollectorRegistry()
    served.register(LabelledRegistry("proxy", {"zone": "use1-az1"}))
    labels = {"item": "wal_put_request", "zone": "use1-az1", "component": "proxy"}
    assert served.get_sample_value("azsidecar_router_price_usd", labels) == pytest.approx(2e-6, rel=1e-12)
    agent = CollectorRegistry()
    agent.register(LabelledRegistry("agent", {"zone": "use1-az1"}))
    assert agent.get_sample_value("azsidecar_router_price_usd", {**labels, "component": "agent"}) is None


def test_an_unknown_storage_class_is_refused():
    with pytest.raises(ValueError, match="storage class 'glacier'"):
        price_items(Prices(), "glacier")
