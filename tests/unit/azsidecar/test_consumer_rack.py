"""proxy.consumer_rack defaults to the proxy's zone (KIP-392 rack_id for consumers' Fetches)."""

from __future__ import annotations

import pytest

from azsidecar.config import load_config
from azsidecar.run_proxy import with_consumer_rack


@pytest.mark.parametrize(("toml", "expected"), [
    ('zone = "use1-az2"\n', "use1-az2"),  # unset: the zone, as MSK names its brokers' racks
    ('zone = "use1-az2"\n[proxy]\nconsumer_rack = "rack-b"\n', "rack-b"),  # set: kept
    ('zone = "use1-az2"\n[proxy]\nconsumer_rack = ""\n', ""),  # "" turns it off
])
def test_consumer_rack_is_this_zone_unless_set(tmp_path, toml, expected):
    path = tmp_path / "azsidecar.toml"
    path.write_text(toml)
    assert with_consumer_rack(load_config(path, {})).proxy.consumer_rack == expected
