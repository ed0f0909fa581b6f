"""A client certificate's subject to a principal name, by rules in the style of Kafka's
`ssl.principal.mapping.rules` (pure).

Each rule is `DEFAULT` (the whole distinguished name) or `RULE:pattern/replacement/` with an
optional `L` or `U` after the last slash (lower or upper case the result). The rules are
tried in order; the first whose pattern matches the whole name gives
the replacement, with `$1`, `$2`, ... standing for the pattern's groups (Java's syntax, as
in Kafka's configs). A `/` or `\\` inside a pattern or replacement is written `\\/` or `\\\\`.
No rule matching is an error: the client is refused, as Kafka refuses it.

The name is the subject in RFC 4514 form, most specific first (`CN=alice,OU=eng,O=Example`),
as Kafka's `X500Principal.getName()` gives it for the usual attributes (CN, OU, O, L, ST, C).
Differences in escaping between RFC 2253 (Java) and RFC 4514 only show for names with
special characters; write patterns against the form `azsidecar` logs.

Rules are one string each in a TOML list (`proxy.tls_principal_mapping_rules`), not
Kafka's comma-separated single string, so a pattern may hold commas without escaping.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT = "DEFAULT"
MAX_NAME_CHARS = 1024  # a subject longer than this is refused before any regex runs on it
_GROUP_REF = re.compile(r"\$(\d+)")


class MappingRuleError(ValueError):
    """A rule that cannot be parsed (its author's fault)."""


class NoRuleMatched(ValueError):
    """No rule maps this subject: the client is refused."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"


def _split_unescaped(text: str) -> list[str]:
    """Split on '/' not preceded by a backslash; '\\/' becomes '/', '\\\\' stays a backslash pair."""
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "/\\":
            current.append("/" if text[i + 1] == "/" else "\\\\")
            i += 2
            continue
        if ch == "/":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def parse_rule(text: str) -> Rule:
    """One rule. Raises MappingRuleError saying what is wrong."""
    if text.strip() == DEFAULT:
        return Rule(None)
    if not text.startswith("RULE:"):
        raise MappingRuleError(f"{text!r}: a rule is DEFAULT or RULE:pattern/replacement/[LU]")
    parts = _split_unescaped(text[len("RULE:"):])
    if len(parts) != 3 or parts[2] not in ("", "L", "U"):
        raise MappingRuleError(f"{text!r}: expected RULE:pattern/replacement/ with an optional L or U after the "
                               "last '/'")
    pattern, replacement, case = parts
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise MappingRuleError(f"{text!r}: pattern {pattern!r} is not a regular expression: {exc}") from exc
    for ref in _GROUP_REF.findall(replacement):
        if int(ref) > compiled.groups:
            raise MappingRuleError(f"{text!r}: replacement refers to group ${ref}, the pattern has {compiled.groups}")
    return Rule(compiled, replacement, case)


def parse_rules(texts: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules, in order. Raises MappingRuleError; an empty list is an error too."""
    if not texts:
        raise MappingRuleError("no rules (use [\"DEFAULT\"] for the whole subject)")
    return tuple(parse_rule(t) for t in texts)


def _group_filler(match: re.Match[str]) -> Callable[[re.Match[str]], str]:
    """What `$n` in a replacement stands for: group n of `match` ("" if it did not take part)."""
    def fill(ref: re.Match[str]) -> str:
        return match.group(int(ref.group(1))) or ""
    return fill


def principal_name(rules: tuple[Rule, ...], subject: str) -> str:
    """The principal name of `subject` by the first rule that matches it whole (pure).

    Raises NoRuleMatched (also for an empty result or an over-long subject).
    """
    if len(subject) > MAX_NAME_CHARS:
        raise NoRuleMatched(f"certificate subject longer than {MAX_NAME_CHARS} characters")
    for rule in rules:
        if rule.pattern is None:
            name = subject
        else:
            match = rule.pattern.fullmatch(subject)
            if match is None:
                continue
            name = _GROUP_REF.sub(_group_filler(match), rule.replacement)
            if rule.case == "L":
                name = name.lower()
            elif rule.case == "U":
                name = name.upper()
        if not name:
            raise NoRuleMatched(f"the rule for {subject!r} gives an empty name")
        return name
    raise NoRuleMatched(f"no principal mapping rule matches {subject!r}")


# Attribute names as Java's X500Principal.getName() (RFC 2253) writes them; others by their long name.
SHORT_NAMES = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
               "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
               "userId": "UID"}
_SPECIAL = frozenset(',+"\\<>;=')


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in _SPECIAL else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_name(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """The RFC 4514 string of a certificate subject as `ssl.SSLSocket.getpeercert()` gives it
    (RDNs in certificate order, most general first): most specific first, `CN=alice,O=Example` (pure)."""
    rdns = ["+".join(f"{SHORT_NAMES.get(kind, kind)}={_escape(value)}" for kind, value in rdn)
            for rdn in reversed(subject)]
    return ",".join(rdns)
