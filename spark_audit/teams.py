"""Which team a produce stream belongs to: rules over its Kafka principal and topic.

A teams file (`azsidecar audit report --teams teams.toml`) is a list of rules, tried in
order; the first that matches names the team, and a stream no rule matches is "unassigned":

    [[rule]]
    team = "orders"
    principal = "User:orders-app"     # the Kafka principal exactly as the audit records it

    [[rule]]
    team = "payments"
    topic_prefix = "payments."        # every topic whose name starts with it

    [[rule]]
    team = "analytics"
    principal = "User:etl"
    topic_prefix = "events."          # both given: both must match

The principal is produce_batch.principal (audit schema v11): `User:<SASL user>`,
`User:<certificate name>` with mutual TLS, `User:ANONYMOUS` for a client that did not
authenticate. Records older than v11 have none, so a principal rule never matches them (a
topic rule still does). Pure: the file is parsed by
`parse_team_rules` from its TOML mapping; reading it is the caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.configload import ConfigError, build, require

UNASSIGNED = "unassigned"


@dataclass(frozen=True)
class TeamRule:
    team: str
    principal: str | None = None  # matches this principal exactly
    topic_prefix: str | None = None  # matches topics starting with it ("" matches every topic)

    def __post_init__(self) -> None:
        require(bool(self.team.strip()), "team: a non-empty name")
        require(self.principal is not None or self.topic_prefix is not None,
                "a rule needs a principal, a topic_prefix or both")
        require(self.principal is None or bool(self.principal), "principal: non-empty (leave it out to match any)")

    def matches(self, principal: str, topic: str) -> bool:
        return ((self.principal is None or principal == self.principal)
                and (self.topic_prefix is None or topic.startswith(self.topic_prefix)))


@dataclass(frozen=True)
class TeamRules:
    rules: tuple[TeamRule, ...] = ()

    def team_of(self, principal: str | None, topic: str | None) -> str:
        """The first matching rule's team, else UNASSIGNED; None reads as ""."""
        for rule in self.rules:
            if rule.matches(principal or "", topic or ""):
                return rule.team
        return UNASSIGNED


def parse_team_rules(data: Mapping[str, Any], source: str = "teams file") -> TeamRules:
    """Rules from a teams file's TOML mapping: `[[rule]]` tables of team, principal, topic_prefix.

    Raises ConfigError naming the rule (rule[2].team ...) for an unknown key, a wrong type,
    a rule without principal or topic_prefix, or a file with no rules.
    """
    unknown = sorted(set(data) - {"rule"})
    if unknown:
        raise ConfigError(f"{source}: unknown table {unknown[0]!r} (the rules are [[rule]] tables)")
    rules = data.get("rule", [])
    if not isinstance(rules, list) or not rules or not all(isinstance(r, Mapping) for r in rules):
        raise ConfigError(f"{source}: no [[rule]] tables")
    parsed = []
    for i, rule in enumerate(rules):
        path = f"rule[{i}]"
        try:
            parsed.append(build(TeamRule, rule, path))
        except ConfigError as exc:
            message = str(exc) if str(exc).startswith(path) else f"{path}: {exc}"
            raise ConfigError(f"{source}: {message}") from exc
    return TeamRules(tuple(parsed))
