"""The report's settings: team rules, compute rates from the prices file and flags, the projection minimum."""

from __future__ import annotations

import argparse

import pytest

from core.configload import ConfigError
from core.prices_file import load_prices
from spark_audit.cli import add_job_arguments, compute_overrides
from spark_audit.report_options import load_report_options
from spark_audit.teams import UNASSIGNED, parse_team_rules

TEAMS = """
[[rule]]
team = "orders"
principal = "User:orders-app"

[[rule]]
team = "payments"
topic_prefix = "payments."

[[rule]]
team = "analytics"
principal = "User:etl"
topic_prefix = "events."
"""


@pytest.mark.parametrize(("principal", "topic", "team"), [
    ("User:orders-app", "anything", "orders"),  # the principal alone decides the first rule
    ("User:etl", "payments.eu", "payments"),  # first match wins: the topic rule comes before analytics
    ("User:etl", "events.clicks", "analytics"),  # both keys of a rule match
    ("User:etl", "logs", UNASSIGNED),  # the principal matches, the prefix does not
    ("", "events.clicks", UNASSIGNED),  # no principal (records before v11): only topic rules can match
    (None, "payments.us", "payments"),
])
def test_first_matching_rule_names_the_team(tmp_path, principal, topic, team):
    path = tmp_path / "teams.toml"
    path.write_text(TEAMS)
    rules = load_report_options(teams_path=str(path)).teams
    assert rules is not None and rules.team_of(principal, topic) == team


@pytest.mark.parametrize(("data", "message"), [
    ({}, "no [[rule]] tables"),
    ({"team": [{"team": "a", "principal": "User:a"}]}, "unknown table 'team'"),
    ({"rule": [{"team": "a", "principal": "User:a"}, {"team": "b"}]}, "rule[1]: a rule needs a principal"),
    ({"rule": [{"team": "a", "principal": "User:a", "prefix": "x"}]}, "rule[0].prefix: unknown setting"),
    ({"rule": [{"team": "", "topic_prefix": "x"}]}, "rule[0]: team: a non-empty name"),
])
def test_bad_team_files_name_the_rule(data, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_team_rules(data)


def test_compute_rates_from_the_prices_file_and_flags_on_top(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text("s3_put_per_1000 = 0.0045\n\n[compute]\nagent_hour_usd = 0.1\nagents_per_zone = 2\n")
    options = load_report_options(prices_path=str(path), min_projection_hours=0.5,
                                  compute_overrides={"agent_hour_usd": None, "vcpu_hour_usd": 0.05})
    assert (options.compute.agent_hour_usd, options.compute.agents_per_zone, options.compute.vcpu_hour_usd) == \
        (0.1, 2, 0.05)
    assert options.min_projection_window_s == 1800
    # the prices keep reading the same file: its [compute] table is the report's
    assert load_prices(str(path)).s3_put_per_1000 == 0.0045


def test_bad_settings_are_configuration_errors(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text("[compute]\nagent_hour_usd = -1\n")
    with pytest.raises(ConfigError, match="compute.agent_hour_usd: must be >= 0"):
        load_report_options(prices_path=str(path))
    with pytest.raises(ConfigError, match="teams file .*: not found"):
        load_report_options(teams_path=str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="--min-projection-hours"):
        load_report_options(min_projection_hours=-1)


def test_the_flags_reach_the_options():
    parser = argparse.ArgumentParser()
    add_job_arguments(parser)
    args = parser.parse_args(["report", "--input", "in", "--output", "out", "--min-projection-hours", "24",
                              "--agents-per-zone", "2", "--vcpu-hour-usd", "0.05"])
    options = load_report_options(args.prices, args.teams, args.min_projection_hours, compute_overrides(args))
    assert (options.min_projection_window_s, options.compute.agents_per_zone, options.compute.vcpu_hour_usd,
            options.compute.agent_hour_usd) == (86_400, 2, 0.05, pytest.approx(0.04937))
    with pytest.raises(SystemExit):
        parser.parse_args(["report", "--input", "in", "--output", "out", "--agent-hour-usd", "-1"])
