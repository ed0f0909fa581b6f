"""The report's own settings, from the command line and the files it names: one immutable object.

- the shortest window a projection is made from (`--min-projection-hours`, default 1);
- the compute rates (`spark_audit.compute_costs.ComputeModel`): a `[compute]` table in the
  `--prices` file, each key overridden by its flag (`--agent-hour-usd` ...);
- the team rules (`--teams FILE`, `spark_audit.teams`).
`load_report_options` reads the files; everything below it is pure.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.configload import ConfigError, build
from spark_audit.compute_costs import ComputeModel
from spark_audit.projection import MIN_PROJECTION_WINDOW_S
from spark_audit.teams import TeamRules, parse_team_rules

COMPUTE_TABLE = "compute"  # the prices file's table of compute rates


@dataclass(frozen=True)
class ReportOptions:
    min_projection_window_s: float = MIN_PROJECTION_WINDOW_S
    compute: ComputeModel = field(default_factory=ComputeModel)
    teams: TeamRules | None = None  # None: no --teams, no split by team
    teams_source: str = ""  # the file the rules came from, named in the report


def _toml(path: str, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} {path}: not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {path}: {exc}") from exc


def compute_model(prices_file: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> ComputeModel:
    """The `[compute]` table of a prices file's TOML mapping (or none), with `overrides`
    (the flags given, None left out) on top. Raises ConfigError naming the key."""
    table = dict((prices_file or {}).get(COMPUTE_TABLE, {}))
    table.update({k: v for k, v in overrides.items() if v is not None})
    return build(ComputeModel, table, COMPUTE_TABLE)


def load_report_options(prices_path: str | None = None, teams_path: str | None = None,
                        min_projection_hours: float | None = None,
                        compute_overrides: Mapping[str, Any] | None = None) -> ReportOptions:
    """The options from the files and flags. Raises ConfigError (missing or bad file, a bad value)."""
    if min_projection_hours is not None and min_projection_hours < 0:
        raise ConfigError(f"--min-projection-hours {min_projection_hours}: must be >= 0")
    prices_file = _toml(prices_path, "prices file") if prices_path is not None else None
    teams = parse_team_rules(_toml(teams_path, "teams file"), f"teams file {teams_path}") if teams_path else None
    return ReportOptions(
        min_projection_window_s=(min_projection_hours * 3600 if min_projection_hours is not None
                                 else MIN_PROJECTION_WINDOW_S),
        compute=compute_model(prices_file, compute_overrides or {}),
        teams=teams, teams_source=teams_path or "")
