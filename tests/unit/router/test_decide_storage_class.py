"""The cost policy priced in the WAL's storage class (hand-computed from the list prices)."""

from __future__ import annotations

import pytest

from core.configload import ConfigError
from core.prices import Prices, StorePrices
from router.decide import ObjectShape, Path, ZoneView, choose_cost, decide, wal_cost_per_byte

LIST = Prices()
MiB = 1024 * 1024
GIB = 1024**3


def test_store_prices_per_class():
    assert LIST.store("standard") == StorePrices(0.005, 0.0004, 0.0, 0.0)
    assert LIST.store("express") == StorePrices(0.00113, 0.00003, 0.0032, 0.0006)
    with pytest.raises(ValueError, match="'standard' or 'express'"):
        LIST.store("glacier")


def test_express_put_and_get_usd_include_the_per_gib_charge():
    express = LIST.store("express")
    # 1.13e-6 per PUT + 1 GiB * $0.0032/GiB = 0.00320113
    assert express.put_usd(GIB) == pytest.approx(0.00320113)
    # 3e-8 per GET + 512 KiB = 1/2048 GiB * $0.0006 = 2.9296875e-7 -> 3.2296875e-7
    assert express.get_usd(512 * 1024) == pytest.approx(3.2296875e-7)
    # Standard: the request price alone, whatever the size
    assert LIST.store("standard").put_usd(GIB) == pytest.approx(5e-6)


def test_express_wal_cost_at_8_mib():
    # PUT 1.13e-6 / 8388608 = 1.34706e-13; GET + checkpoint PUT (3e-8 + 1.13e-6) / 4194304 = 2.76566e-13;
    # upload 0.0032 / 2**30 = 2.98023e-12; retrieval 0.0006 / 2**30 = 5.58794e-13 -> 3.95030e-12,
    # 0.1975 of the 2e-11 direct (Standard at this size: 1.88351e-12, 0.0942).
    shape = ObjectShape(object_bytes=8 * MiB, zone_bytes=4 * MiB)
    assert wal_cost_per_byte(shape, LIST, "express") == pytest.approx(3.95030e-12, rel=1e-4)
    assert wal_cost_per_byte(shape, LIST, "standard") == pytest.approx(1.88351e-12, rel=1e-4)


@pytest.mark.parametrize("size,standard,express", [
    # Break-even below the 20 % hysteresis band (1.6e-11 per byte), one zone, object = zone share:
    # Standard (5e-6 + 4e-7 + 5e-6) / S <= 1.6e-11 -> S >= 650,000 bytes.
    # Express (1.13e-6 + 3e-8 + 1.13e-6) / S + 3.53903e-12 <= 1.6e-11 -> S >= 183,773 bytes.
    (150_000, Path.DIRECT_CROSS, Path.DIRECT_CROSS),
    (200_000, Path.DIRECT_CROSS, Path.WAL),
    (640_000, Path.DIRECT_CROSS, Path.WAL),
    (660_000, Path.WAL, Path.WAL),
])
def test_break_even_moves_with_the_class(size, standard, express):
    shape = ObjectShape(size, size)
    assert choose_cost(None, shape, LIST, "standard").path is standard
    assert choose_cost(None, shape, LIST, "express").path is express


def test_express_per_byte_charges_set_a_floor():
    # With transfer 10x cheaper ($0.001/GB each way: 2e-12 per byte) Express never pays:
    # its per-byte charges alone are 3.539e-12 per byte, whatever the object size.
    cheap = Prices(cross_az_per_gb_each_way=0.001)
    assert choose_cost(None, ObjectShape(5 * GIB, 5 * GIB), cheap, "express").path is Path.DIRECT_CROSS
    # Standard at 5 GiB: (1.04e-5) / 5 GiB = 1.94e-15 per byte, far under 1.6e-12: WAL
    assert choose_cost(None, ObjectShape(5 * GIB, 5 * GIB), cheap, "standard").path is Path.WAL


def test_decide_passes_the_class_to_the_cost_policy():
    view = ZoneView(proxy_zone="use1-az1", leader_zone="use1-az2", zone_healthy=True, fallback="direct")
    shape = ObjectShape(200_000, 200_000)
    assert decide("cost", view, None, shape, LIST).path is Path.DIRECT_CROSS
    assert decide("cost", view, None, shape, LIST, storage_class="express").path is Path.WAL


def test_negative_express_price_is_refused():
    with pytest.raises(ConfigError, match="router.prices.express_upload_per_gb"):
        Prices(express_upload_per_gb=-1)
