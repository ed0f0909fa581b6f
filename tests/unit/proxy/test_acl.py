"""Kafka's ACL semantics (proxy/acl.py), table-tested: each row is a rule set, a request and
the answer Kafka's StandardAuthorizer gives for it, worked out by hand from its rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.acl import (
    AclBinding,
    AclError,
    AclSet,
    Operation,
    PatternType,
    Permission,
    Request,
    ResourceType,
)

ALLOW, DENY = Permission.ALLOW, Permission.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, TXN, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER
Op = Operation
ALICE = Request("User:alice", "10.0.0.5")


def acl(op: Operation, name: str, *, perm: Permission = ALLOW, rtype: ResourceType = TOPIC, pattern: PatternType = LIT,
        principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(principal, host, op, perm, rtype, pattern, name)


CASES = [
    # (why, bindings, operation, resource type, name, allowed)
    ("no rules: denied", [], Op.WRITE, TOPIC, "orders", False),
    ("literal allow", [acl(Op.WRITE, "orders")], Op.WRITE, TOPIC, "orders", True),
    ("literal is exact, not a prefix", [acl(Op.WRITE, "orders")], Op.WRITE, TOPIC, "orders-eu", False),
    ("another topic", [acl(Op.WRITE, "orders")], Op.WRITE, TOPIC, "payments", False),
    ("prefixed allow", [acl(Op.WRITE, "orders-", pattern=PRE)], Op.WRITE, TOPIC, "orders-eu", True),
    ("prefixed needs the prefix", [acl(Op.WRITE, "orders-", pattern=PRE)], Op.WRITE, TOPIC, "orders", False),
    ("literal '*' is every topic", [acl(Op.WRITE, "*")], Op.WRITE, TOPIC, "anything", True),
    ("prefixed 'ord' is not '*'", [acl(Op.WRITE, "ord", pattern=PRE)], Op.WRITE, TOPIC, "*", False),
    ("wildcard principal", [acl(Op.WRITE, "orders", principal="User:*")], Op.WRITE, TOPIC, "orders", True),
    ("another principal", [acl(Op.WRITE, "orders", principal="User:bob")], Op.WRITE, TOPIC, "orders", False),
    ("host matches", [acl(Op.WRITE, "orders", host="10.0.0.5")], Op.WRITE, TOPIC, "orders", True),
    ("host differs", [acl(Op.WRITE, "orders", host="10.0.0.6")], Op.WRITE, TOPIC, "orders", False),
    ("deny wins over allow", [acl(Op.WRITE, "orders"), acl(Op.WRITE, "orders", perm=DENY)], Op.WRITE, TOPIC, "orders",
     False),
    ("prefixed deny wins over literal allow", [acl(Op.WRITE, "orders"), acl(Op.WRITE, "ord", perm=DENY, pattern=PRE)],
     Op.WRITE, TOPIC, "orders", False),
    ("wildcard deny for everyone", [acl(Op.ALL, "*"), acl(Op.WRITE, "*", perm=DENY, principal="User:*")], Op.WRITE, TOPIC,
     "orders", False),
    ("deny of ALL denies write", [acl(Op.WRITE, "orders"), acl(Op.ALL, "orders", perm=DENY)], Op.WRITE, TOPIC, "orders",
     False),
    ("deny of READ leaves write", [acl(Op.WRITE, "orders"), acl(Op.READ, "orders", perm=DENY)], Op.WRITE, TOPIC, "orders",
     True),
    ("deny of WRITE does not deny describe", [acl(Op.DESCRIBE, "orders"), acl(Op.WRITE, "orders", perm=DENY)],
     Op.DESCRIBE, TOPIC, "orders", True),
    ("allow ALL", [acl(Op.ALL, "orders")], Op.WRITE, TOPIC, "orders", True),
    ("write implies describe", [acl(Op.WRITE, "orders")], Op.DESCRIBE, TOPIC, "orders", True),
    ("read implies describe", [acl(Op.READ, "orders")], Op.DESCRIBE, TOPIC, "orders", True),
    ("delete implies describe", [acl(Op.DELETE, "orders")], Op.DESCRIBE, TOPIC, "orders", True),
    ("alter implies describe", [acl(Op.ALTER, "orders")], Op.DESCRIBE, TOPIC, "orders", True),
    ("create does not imply describe", [acl(Op.CREATE, "orders")], Op.DESCRIBE, TOPIC, "orders", False),
    ("describe does not imply write", [acl(Op.DESCRIBE, "orders")], Op.WRITE, TOPIC, "orders", False),
    ("alter_configs implies describe_configs", [acl(Op.ALTER_CONFIGS, "orders")], Op.DESCRIBE_CONFIGS, TOPIC, "orders",
     True),
    ("denying describe_configs is not implied by denying alter_configs",
     [acl(Op.DESCRIBE_CONFIGS, "orders"), acl(Op.ALTER_CONFIGS, "orders", perm=DENY)], Op.DESCRIBE_CONFIGS, TOPIC,
     "orders", True),
    ("the resource type must match", [acl(Op.WRITE, "orders", rtype=GROUP)], Op.WRITE, TOPIC, "orders", False),
    ("transactional id write", [acl(Op.WRITE, "tx-1", rtype=TXN)], Op.WRITE, TXN, "tx-1", True),
    ("idempotent write on the cluster", [acl(Op.IDEMPOTENT_WRITE, "kafka-cluster", rtype=CLUSTER)],
     Op.IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster", True),
    ("a principal named like the wildcard is just a name",
     [acl(Op.WRITE, "orders", principal="User:bob")], Op.WRITE, TOPIC, "orders", False),
]


@pytest.mark.parametrize(("why", "bindings", "op", "rtype", "name", "allowed"), CASES, ids=[c[0] for c in CASES])
def test_authorize(why, bindings, op, rtype, name, allowed):
    assert AclSet.of(bindings).authorize(ALICE, op, rtype, name) is allowed


def test_super_users_are_allowed_even_against_a_deny():
    rules = AclSet.of([acl(Op.ALL, "*", perm=DENY, principal="User:*")], super_users=["User:alice"])
    assert rules.authorize(ALICE, Op.WRITE, TOPIC, "orders")
    assert not rules.authorize(Request("User:bob", "10.0.0.5"), Op.WRITE, TOPIC, "orders")


def test_the_wildcard_principal_acl_does_not_let_a_star_user_match_others():
    # A client whose name is "*" is principal "User:*"; an ACL for User:bob does not apply to it.
    rules = AclSet.of([acl(Op.WRITE, "orders", principal="User:bob")])
    assert not rules.authorize(Request("User:*", "10.0.0.5"), Op.WRITE, TOPIC, "orders")


BY_TYPE = [
    # (why, bindings, allowed): may alice WRITE some topic? (Kafka's authorizeByResourceType)
    ("nothing", [], False),
    ("one literal", [acl(Op.WRITE, "orders")], True),
    ("one prefixed", [acl(Op.WRITE, "orders-", pattern=PRE)], True),
    ("ALL counts", [acl(Op.ALL, "orders")], True),
    ("describe does not", [acl(Op.DESCRIBE, "orders")], False),
    ("literal denied by the same literal", [acl(Op.WRITE, "orders"), acl(Op.WRITE, "orders", perm=DENY)], False),
    ("literal denied by a covering prefix", [acl(Op.WRITE, "orders"), acl(Op.WRITE, "ord", perm=DENY, pattern=PRE)],
     False),
    ("prefix denied by a shorter prefix", [acl(Op.WRITE, "orders-", pattern=PRE), acl(Op.WRITE, "o", perm=DENY,
                                                                                     pattern=PRE)], False),
    ("prefix not covered by a longer deny prefix",
     [acl(Op.WRITE, "orders-", pattern=PRE), acl(Op.WRITE, "orders-eu", perm=DENY, pattern=PRE)], True),
    ("one of two denied", [acl(Op.WRITE, "orders"), acl(Op.WRITE, "audit"), acl(Op.WRITE, "orders", perm=DENY)], True),
    ("wildcard allow", [acl(Op.WRITE, "*")], True),
    ("wildcard deny beats everything", [acl(Op.WRITE, "*"), acl(Op.WRITE, "*", perm=DENY)], False),
    ("another principal's allow", [acl(Op.WRITE, "orders", principal="User:bob")], False),
    ("another host's allow", [acl(Op.WRITE, "orders", host="10.9.9.9")], False),
    ("a group allow is no topic", [acl(Op.WRITE, "orders", rtype=GROUP)], False),
]


@pytest.mark.parametrize(("why", "bindings", "allowed"), BY_TYPE, ids=[c[0] for c in BY_TYPE])
def test_authorize_by_resource_type(why, bindings, allowed):
    assert AclSet.of(bindings).authorize_by_resource_type(ALICE, Op.WRITE, TOPIC) is allowed


@pytest.mark.parametrize(("principal", "host", "rtype", "pattern", "name", "message"), [
    ("alice", "*", TOPIC, LIT, "orders", "expected TYPE:NAME"),
    ("User:", "*", TOPIC, LIT, "orders", "expected TYPE:NAME"),
    ("User:alice", "", TOPIC, LIT, "orders", "host: empty"),
    ("User:alice", "*", TOPIC, LIT, "", "resource name: empty"),
    ("User:alice", "*", TOPIC, PRE, "*", "PREFIXED pattern named '*'"),
    ("User:alice", "*", CLUSTER, LIT, "other", "a Cluster resource is LITERAL 'kafka-cluster'"),
])
def test_invalid_bindings_are_refused(principal, host, rtype, pattern, name, message):
    with pytest.raises(AclError, match=message):
        AclBinding(principal, host, Op.WRITE, ALLOW, rtype, pattern, name)


# Crafted names: whatever a client calls a topic or itself, the check is the plain rule.

NAMES = st.text(min_size=1, max_size=40)  # any characters: '*', ':', '/', control characters, unicode


@given(topic=NAMES)
def test_a_literal_allow_matches_only_its_own_name(topic):
    rules = AclSet.of([acl(Op.WRITE, "orders")])
    assert rules.authorize(ALICE, Op.WRITE, TOPIC, topic) is (topic == "orders")


@given(topic=NAMES)
def test_a_prefixed_allow_matches_exactly_the_names_it_starts(topic):
    rules = AclSet.of([acl(Op.WRITE, "orders.", pattern=PRE)])
    assert rules.authorize(ALICE, Op.WRITE, TOPIC, topic) is topic.startswith("orders.")


@given(user=NAMES, host=NAMES)
def test_a_crafted_principal_gets_only_its_own_or_everyones_rights(user, host):
    rules = AclSet.of([acl(Op.WRITE, "alices", principal="User:alice"),
                       acl(Op.WRITE, "everyones", principal="User:*")])
    who = Request(f"User:{user}", host)
    assert rules.authorize(who, Op.WRITE, TOPIC, "alices") is (user == "alice")
    assert rules.authorize(who, Op.WRITE, TOPIC, "everyones")
    assert not rules.authorize(who, Op.WRITE, TOPIC, "nobodys")
