"""Kafka's ACL semantics (proxy/acl.py), table-tested: each row is a rule set, a request and
the answer Kafka's StandardAuthorizer gives for it, worked out by hand from its rules."""

from __future__ import annotations

import pytest

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
O = Operation
ALICE = Request("User:alice", "10.0.0.5")


def acl(op: Operation, name: str, *, perm: Permission = ALLOW, rtype: ResourceType = TOPIC, pattern: PatternType = LIT,
        principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(principal, host, op, perm, rtype, pattern, name)


CASES = [
    # (why, bindings, operation, resource type, name, allowed)
    ("no rules: denied", [], O.WRITE, TOPIC, "orders", False),
    ("literal allow", [acl(O.WRITE, "orders")], O.WRITE, TOPIC, "orders", True),
    ("literal is exact, not a prefix", [acl(O.WRITE, "orders")], O.WRITE, TOPIC, "orders-eu", False),
    ("another topic", [acl(O.WRITE, "orders")], O.WRITE, TOPIC, "payments", False),
    ("prefixed allow", [acl(O.WRITE, "orders-", pattern=PRE)], O.WRITE, TOPIC, "orders-eu", True),
    ("prefixed needs the prefix", [acl(O.WRITE, "orders-", pattern=PRE)], O.WRITE, TOPIC, "orders", False),
    ("literal '*' is every topic", [acl(O.WRITE, "*")], O.WRITE, TOPIC, "anything", True),
    ("prefixed 'ord' is not '*'", [acl(O.WRITE, "ord", pattern=PRE)], O.WRITE, TOPIC, "*", False),
    ("wildcard principal", [acl(O.WRITE, "orders", principal="User:*")], O.WRITE, TOPIC, "orders", True),
    ("another principal", [acl(O.WRITE, "orders", principal="User:bob")], O.WRITE, TOPIC, "orders", False),
    ("host matches", [acl(O.WRITE, "orders", host="10.0.0.5")], O.WRITE, TOPIC, "orders", True),
    ("host differs", [acl(O.WRITE, "orders", host="10.0.0.6")], O.WRITE, TOPIC, "orders", False),
    ("deny wins over allow", [acl(O.WRITE, "orders"), acl(O.WRITE, "orders", perm=DENY)], O.WRITE, TOPIC, "orders",
     False),
    ("prefixed deny wins over literal allow", [acl(O.WRITE, "orders"), acl(O.WRITE, "ord", perm=DENY, pattern=PRE)],
     O.WRITE, TOPIC, "orders", False),
    ("wildcard deny for everyone", [acl(O.ALL, "*"), acl(O.WRITE, "*", perm=DENY, principal="User:*")], O.WRITE, TOPIC,
     "orders", False),
    ("deny of ALL denies write", [acl(O.WRITE, "orders"), acl(O.ALL, "orders", perm=DENY)], O.WRITE, TOPIC, "orders",
     False),
    ("deny of READ leaves write", [acl(O.WRITE, "orders"), acl(O.READ, "orders", perm=DENY)], O.WRITE, TOPIC, "orders",
     True),
    ("deny of WRITE does not deny describe", [acl(O.DESCRIBE, "orders"), acl(O.WRITE, "orders", perm=DENY)],
     O.DESCRIBE, TOPIC, "orders", True),
    ("allow ALL", [acl(O.ALL, "orders")], O.WRITE, TOPIC, "orders", True),
    ("write implies describe", [acl(O.WRITE, "orders")], O.DESCRIBE, TOPIC, "orders", True),
    ("read implies describe", [acl(O.READ, "orders")], O.DESCRIBE, TOPIC, "orders", True),
    ("delete implies describe", [acl(O.DELETE, "orders")], O.DESCRIBE, TOPIC, "orders", True),
    ("alter implies describe", [acl(O.ALTER, "orders")], O.DESCRIBE, TOPIC, "orders", True),
    ("create does not imply describe", [acl(O.CREATE, "orders")], O.DESCRIBE, TOPIC, "orders", False),
    ("describe does not imply write", [acl(O.DESCRIBE, "orders")], O.WRITE, TOPIC, "orders", False),
    ("alter_configs implies describe_configs", [acl(O.ALTER_CONFIGS, "orders")], O.DESCRIBE_CONFIGS, TOPIC, "orders",
     True),
    ("denying describe_configs is not implied by denying alter_configs",
     [acl(O.DESCRIBE_CONFIGS, "orders"), acl(O.ALTER_CONFIGS, "orders", perm=DENY)], O.DESCRIBE_CONFIGS, TOPIC,
     "orders", True),
    ("the resource type must match", [acl(O.WRITE, "orders", rtype=GROUP)], O.WRITE, TOPIC, "orders", False),
    ("transactional id write", [acl(O.WRITE, "tx-1", rtype=TXN)], O.WRITE, TXN, "tx-1", True),
    ("idempotent write on the cluster", [acl(O.IDEMPOTENT_WRITE, "kafka-cluster", rtype=CLUSTER)],
     O.IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster", True),
    ("a principal named like the wildcard is just a name",
     [acl(O.WRITE, "orders", principal="User:bob")], O.WRITE, TOPIC, "orders", False),
]


@pytest.mark.parametrize(("why", "bindings", "op", "rtype", "name", "allowed"), CASES, ids=[c[0] for c in CASES])
def test_authorize(why, bindings, op, rtype, name, allowed):
    assert AclSet.of(bindings).authorize(ALICE, op, rtype, name) is allowed


def test_super_users_are_allowed_even_against_a_deny():
    rules = AclSet.of([acl(O.ALL, "*", perm=DENY, principal="User:*")], super_users=["User:alice"])
    assert rules.authorize(ALICE, O.WRITE, TOPIC, "orders")
    assert not rules.authorize(Request("User:bob", "10.0.0.5"), O.WRITE, TOPIC, "orders")


def test_the_wildcard_principal_acl_does_not_let_a_star_user_match_others():
    # A client whose name is "*" is principal "User:*"; an ACL for User:bob does not apply to it.
    rules = AclSet.of([acl(O.WRITE, "orders", principal="User:bob")])
    assert not rules.authorize(Request("User:*", "10.0.0.5"), O.WRITE, TOPIC, "orders")


BY_TYPE = [
    # (why, bindings, allowed): may alice WRITE some topic? (Kafka's authorizeByResourceType)
    ("nothing", [], False),
    ("one literal", [acl(O.WRITE, "orders")], True),
    ("one prefixed", [acl(O.WRITE, "orders-", pattern=PRE)], True),
    ("ALL counts", [acl(O.ALL, "orders")], True),
    ("describe does not", [acl(O.DESCRIBE, "orders")], False),
    ("literal denied by the same literal", [acl(O.WRITE, "orders"), acl(O.WRITE, "orders", perm=DENY)], False),
    ("literal denied by a covering prefix", [acl(O.WRITE, "orders"), acl(O.WRITE, "ord", perm=DENY, pattern=PRE)],
     False),
    ("prefix denied by a shorter prefix", [acl(O.WRITE, "orders-", pattern=PRE), acl(O.WRITE, "o", perm=DENY,
                                                                                     pattern=PRE)], False),
    ("prefix not covered by a longer deny prefix",
     [acl(O.WRITE, "orders-", pattern=PRE), acl(O.WRITE, "orders-eu", perm=DENY, pattern=PRE)], True),
    ("one of two denied", [acl(O.WRITE, "orders"), acl(O.WRITE, "audit"), acl(O.WRITE, "orders", perm=DENY)], True),
    ("wildcard allow", [acl(O.WRITE, "*")], True),
    ("wildcard deny beats everything", [acl(O.WRITE, "*"), acl(O.WRITE, "*", perm=DENY)], False),
    ("another principal's allow", [acl(O.WRITE, "orders", principal="User:bob")], False),
    ("another host's allow", [acl(O.WRITE, "orders", host="10.9.9.9")], False),
    ("a group allow is no topic", [acl(O.WRITE, "orders", rtype=GROUP)], False),
]


@pytest.mark.parametrize(("why", "bindings", "allowed"), BY_TYPE, ids=[c[0] for c in BY_TYPE])
def test_authorize_by_resource_type(why, bindings, allowed):
    assert AclSet.of(bindings).authorize_by_resource_type(ALICE, O.WRITE, TOPIC) is allowed


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
        AclBinding(principal, host, O.WRITE, ALLOW, rtype, pattern, name)
