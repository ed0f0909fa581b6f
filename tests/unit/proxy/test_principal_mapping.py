"""Certificate subjects to principal names (proxy/principal_mapping.py), the way Kafka's
ssl.principal.mapping.rules map them; expected names worked out by hand."""

from __future__ import annotations

import pytest

from proxy.principal_mapping import MappingRuleError, NoRuleMatched, parse_rules, principal_name

CASES = [
    # (rules, subject, name)
    (("DEFAULT",), "CN=alice,OU=eng,O=Example", "CN=alice,OU=eng,O=Example"),
    (("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",), "CN=orders-svc,OU=ServiceUsers,O=Example", "orders-svc"),
    (("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$3/L",), "CN=Alice,OU=Eng,O=Example", "alice@example"),
    (("RULE:^CN=(.*?),OU=(.*?)$/$1/U",), "CN=bob,OU=ops", "BOB"),
    # first matching rule wins; DEFAULT as the fallback
    (("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "DEFAULT"), "CN=carol,OU=People", "CN=carol,OU=People"),
    (("RULE:^CN=([^,]*).*$/$1/", "RULE:^(.*)$/never/"), "CN=dave,O=Example", "dave"),
    # the pattern must match the whole subject, not a part of it
    (("RULE:CN=(.*?),OU=x/$1/", "DEFAULT"), "CN=erin,OU=x,O=y", "CN=erin,OU=x,O=y"),
    # an escaped slash inside the pattern and the replacement
    (("RULE:^CN=(.*)\\/(.*)$/$1\\/$2/",), "CN=a/b", "a/b"),
]


@pytest.mark.parametrize(("rules", "subject", "name"), CASES)
def test_principal_name(rules, subject, name):
    assert principal_name(parse_rules(rules), subject) == name


def test_no_rule_matching_refuses_the_client():
    with pytest.raises(NoRuleMatched, match="no principal mapping rule matches 'CN=x,OU=People'"):
        principal_name(parse_rules(("RULE:^CN=(.*?),OU=ServiceUsers$/$1/",)), "CN=x,OU=People")


def test_an_empty_name_is_refused():
    with pytest.raises(NoRuleMatched, match="empty name"):
        principal_name(parse_rules(("RULE:^CN=(.*)$/$1/",)), "CN=")


def test_an_over_long_subject_is_refused_before_any_pattern_runs():
    with pytest.raises(NoRuleMatched, match="longer than"):
        principal_name(parse_rules(("DEFAULT",)), "CN=" + "a" * 2000)


@pytest.mark.parametrize(("rules", "message"), [
    ((), "no rules"),
    (("default",), "a rule is DEFAULT or RULE:"),
    (("RULE:^CN=(.*)$/$1",), "expected RULE:pattern/replacement/"),
    (("RULE:^CN=(.*)$/$1/X",), "expected RULE:pattern/replacement/"),
    (("RULE:^CN=((.*)$/$1/",), "is not a regular expression"),
    (("RULE:^CN=(.*)$/$2/",), r"refers to group \$2, the pattern has 1"),
])
def test_bad_rules_are_refused(rules, message):
    with pytest.raises(MappingRuleError, match=message):
        parse_rules(rules)


def test_subject_name_is_most_specific_first_with_short_names_and_escapes():
    from proxy.principal_mapping import subject_name
    subject = ((("countryName", "US"),), (("organizationName", "Example, Inc."),),
               (("organizationalUnitName", "eng"), ("userId", "42")), (("commonName", " alice"),))
    assert subject_name(subject) == "CN=\\ alice,OU=eng+UID=42,O=Example\\, Inc.,C=US"
