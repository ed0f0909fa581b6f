"""Prices from a TOML file, for the commands that take `--prices` (audit, plan).

Pure Python and no pyspark, so `azsidecar plan` runs where the audit's Spark does not
(the container image).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from core.configload import ConfigError, build
from core.prices import Prices


def load_prices(path: str | None) -> Prices:
    """Prices from a TOML file: top-level keys, a [prices] table, or [router.prices].

    A `[compute]` table beside them is the audit report's (spark_audit.report_options) and
    is left to it. None gives the defaults of core.prices.Prices. Raises ConfigError naming the key.
    """
    if path is None:
        return Prices()
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"prices file {path}: not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"prices file {path}: {exc}") from exc
    if "router" in data and isinstance(data["router"], dict) and "prices" in data["router"]:
        return build(Prices, data["router"]["prices"], "router.prices")
    if "prices" in data:
        return build(Prices, data["prices"], "prices")
    return build(Prices, {k: v for k, v in data.items() if k != "compute"}, "prices")
