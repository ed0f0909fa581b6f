"""Which check each API gets and the Kafka error a refusal gets (proxy/authorize.py), and
the ACL file's and DescribeAcls' bindings (proxy/acl_rules.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core import errors
from proxy import authorize
from proxy.acl import AclBinding, AclSet, Operation, PatternType, Permission, Request, ResourceType
from proxy.acl_rules import AclFileError, bindings_from_describe, parse_acl_file

Op = Operation
ALICE = Request("User:alice", "10.0.0.5")
TOPIC, GROUP, TXN, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER


def rules(*entries: tuple[Operation, ResourceType, str], deny: tuple[tuple[Operation, ResourceType, str], ...] = ()):
    out = [AclBinding("User:alice", "*", op, Permission.ALLOW, rt, PatternType.LITERAL, name) for op, rt, name in entries]
    out += [AclBinding("User:alice", "*", op, Permission.DENY, rt, PatternType.LITERAL, name) for op, rt, name in deny]
    return AclSet.of(out)


def test_produce_refuses_only_the_topics_without_write():
    verdict = authorize.produce(rules((Op.WRITE, TOPIC, "orders"), (Op.DESCRIBE, TOPIC, "payments")), ALICE,
                                ["orders", "payments", "orders", "audit"], None, False)
    assert verdict == authorize.ProduceVerdict(None, frozenset({"payments", "audit"}))


def test_produce_of_everything_allowed_refuses_nothing():
    assert authorize.produce(rules((Op.WRITE, TOPIC, "orders")), ALICE, ["orders"], None, False) == \
        authorize.ProduceVerdict(None, frozenset())


@pytest.mark.parametrize(("acls", "txn_id", "transactional_batches", "whole"), [
    (rules((Op.WRITE, TOPIC, "orders")), "tx-1", True, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (rules((Op.WRITE, TOPIC, "orders")), None, True, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),  # batches say so
    (rules((Op.WRITE, TOPIC, "orders"), (Op.WRITE, TXN, "tx-1")), "tx-1", True, None),
    (rules((Op.WRITE, TOPIC, "orders"), (Op.WRITE, TXN, "tx-2")), "tx-1", True,
     errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
])
def test_transactional_produce_needs_write_on_its_transactional_id(acls, txn_id, transactional_batches, whole):
    assert authorize.produce(acls, ALICE, ["orders"], txn_id, transactional_batches).whole == whole


@pytest.mark.parametrize(("acls", "txn_id", "code"), [
    (rules(), None, errors.CLUSTER_AUTHORIZATION_FAILED),
    (rules((Op.IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster")), None, errors.NONE),
    (rules((Op.WRITE, TOPIC, "orders")), None, errors.NONE),  # KIP-679: WRITE on any topic
    (rules((Op.DESCRIBE, TOPIC, "orders")), None, errors.CLUSTER_AUTHORIZATION_FAILED),
    (rules((Op.WRITE, TOPIC, "orders"), deny=((Op.WRITE, TOPIC, "orders"),)), None, errors.CLUSTER_AUTHORIZATION_FAILED),
    (rules((Op.WRITE, TOPIC, "orders")), "tx-1", errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (rules((Op.WRITE, TXN, "tx-1")), "tx-1", errors.NONE),
    (rules((Op.DESCRIBE, TXN, "tx-1")), "tx-1", errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
])
def test_init_producer_id(acls, txn_id, code):
    assert authorize.init_producer_id(acls, ALICE, txn_id) == code


def test_metadata_refuses_undescribable_topics_and_auto_creation_without_create():
    acls = rules((Op.WRITE, TOPIC, "orders"), (Op.CREATE, TOPIC, "new-ok"), (Op.DESCRIBE, TOPIC, "new-ok"),
                 (Op.DESCRIBE, TOPIC, "new-no"))
    verdict = authorize.metadata(acls, ALICE, ["orders", "payments", "new-ok", "new-no"], allow_auto_create=True)
    assert verdict.denied == {"payments"}
    assert verdict.no_create == {"orders", "new-no"}
    assert authorize.metadata(acls, ALICE, ["orders", "new-no"], allow_auto_create=False).no_create == frozenset()
    with_cluster_create = AclSet.of([*acls.bindings, AclBinding("User:alice", "*", Op.CREATE, Permission.ALLOW, CLUSTER,
                                                                PatternType.LITERAL, "kafka-cluster")])
    assert authorize.metadata(with_cluster_create, ALICE, ["new-no"], True).no_create == frozenset()


def test_a_listing_shows_only_describable_topics():
    acls = rules((Op.WRITE, TOPIC, "orders"), (Op.READ, TOPIC, "audit"))
    assert authorize.describable(acls, ALICE, ["audit", "orders", "payments"]) == ["audit", "orders"]


@pytest.mark.parametrize(("key_type", "key", "code"), [
    (authorize.KEY_GROUP, "g1", errors.NONE),
    (authorize.KEY_GROUP, "g2", errors.GROUP_AUTHORIZATION_FAILED),
    (authorize.KEY_TRANSACTION, "tx-1", errors.NONE),
    (authorize.KEY_TRANSACTION, "tx-2", errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
])
def test_find_coordinator(key_type, key, code):
    acls = rules((Op.READ, GROUP, "g1"), (Op.WRITE, TXN, "tx-1"))  # both imply DESCRIBE
    assert authorize.find_coordinator(acls, ALICE, key_type, key) == code


def test_transaction_apis():
    acls = rules((Op.WRITE, TXN, "tx-1"), (Op.READ, GROUP, "g1"), (Op.WRITE, TOPIC, "orders"), (Op.READ, TOPIC, "orders"))
    assert authorize.transactional_id(acls, ALICE, "tx-1") == errors.NONE
    assert authorize.transactional_id(acls, ALICE, "tx-2") == errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert authorize.add_offsets_to_txn(acls, ALICE, "tx-1", "g1") == errors.NONE
    assert authorize.add_offsets_to_txn(acls, ALICE, "tx-1", "g2") == errors.GROUP_AUTHORIZATION_FAILED
    assert authorize.add_offsets_to_txn(acls, ALICE, "tx-2", "g2") == errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert authorize.add_partitions_to_txn(acls, ALICE, "tx-1", ["orders"]) == (errors.NONE, {})
    assert authorize.add_partitions_to_txn(acls, ALICE, "tx-1", ["orders", "payments"]) == (errors.NONE, {
        "orders": errors.OPERATION_NOT_ATTEMPTED, "payments": errors.TOPIC_AUTHORIZATION_FAILED})
    assert authorize.add_partitions_to_txn(acls, ALICE, "tx-2", ["orders"]) == (
        errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, {})
    assert authorize.txn_offset_commit(acls, ALICE, "tx-1", "g1", ["orders"]) == (errors.NONE, {})
    assert authorize.txn_offset_commit(acls, ALICE, "tx-1", "g1", ["orders", "payments"]) == (errors.NONE, {
        "orders": errors.OPERATION_NOT_ATTEMPTED, "payments": errors.TOPIC_AUTHORIZATION_FAILED})
    assert authorize.txn_offset_commit(acls, ALICE, "tx-1", "g2", ["orders"]) == (errors.GROUP_AUTHORIZATION_FAILED, {})


ACL_FILE = """
[[acl]]
principal = "User:alice"
operation = "Write"
resource_type = "Topic"
name = "orders"

[[acl]]
principal = "User:*"
host = "10.0.0.9"
operation = "IDEMPOTENT_WRITE"
permission = "allow"
resource_type = "cluster"
name = "kafka-cluster"

[[acl]]
principal = "User:alice"
operation = "all"
permission = "Deny"
resource_type = "TransactionalId"
pattern_type = "Prefixed"
name = "tx-"
"""


def test_the_acl_file_gives_its_bindings_with_defaults():
    parsed = parse_acl_file(ACL_FILE, super_users=["User:ops"])
    assert parsed.bindings == (
        AclBinding("User:alice", "*", Op.WRITE, Permission.ALLOW, TOPIC, PatternType.LITERAL, "orders"),
        AclBinding("User:*", "10.0.0.9", Op.IDEMPOTENT_WRITE, Permission.ALLOW, CLUSTER, PatternType.LITERAL,
                   "kafka-cluster"),
        AclBinding("User:alice", "*", Op.ALL, Permission.DENY, TXN, PatternType.PREFIXED, "tx-"),
    )
    assert parsed.super_users == {"User:ops"}


@pytest.mark.parametrize(("text", "message"), [
    ("[[acl]\n", "not valid TOML"),
    ("acls = []\n", r"unknown key\(s\) acls"),
    ("acl = 3\n", "acl: expected"),
    ('[[acl]]\nprincipal = "User:a"\noperation = "Wrte"\nresource_type = "Topic"\nname = "t"\n',
     r"acl\[0\].operation: 'Wrte' is not one of All, Read, Write"),
    ('[[acl]]\nprincipal = "User:a"\noperation = "Write"\nresource_type = "Topik"\nname = "t"\n',
     r"acl\[0\].resource_type: 'Topik' is not one of Topic, Group, Cluster, TransactionalId"),
    ('[[acl]]\nprincipal = "User:a"\noperation = "Write"\nresource_type = "Topic"\n', r"acl\[0\].name: required"),
    ('[[acl]]\nprincipal = "alice"\noperation = "Write"\nresource_type = "Topic"\nname = "t"\n',
     r"acl\[0\]: principal 'alice': expected TYPE:NAME"),
    ('[[acl]]\nprincipal = "User:a"\noperation = "Write"\nresource_type = "Topic"\nname = "t"\nhots = "*"\n',
     r"acl\[0\]: unknown key\(s\) hots"),
    ('[[acl]]\nprincipal = "User:a"\noperation = "Write"\nresource_type = "Topic"\nname = 5\n',
     r"acl\[0\].name: expected a string"),
    ('[[acl]]\nprincipal = "User:a"\noperation = 4\nresource_type = "Topic"\nname = "t"\n',
     r"acl\[0\].operation: 4 is not one of"),
])
def test_a_bad_acl_file_says_what_is_wrong(text, message):
    with pytest.raises(AclFileError, match=message):
        parse_acl_file(text)


def test_describe_acls_bindings_skip_resource_types_the_proxy_never_checks():
    def resource(rtype, name, pattern, *acls):
        return SimpleNamespace(resource_type=rtype, resource_name=name, pattern_type=pattern,
                               acls=[SimpleNamespace(principal=p, host=h, operation=o, permission_type=pt)
                                     for p, h, o, pt in acls])

    bindings, skipped = bindings_from_describe([
        resource(2, "orders", 3, ("User:alice", "*", 4, 3), ("User:bob", "*", 4, 2)),  # topic, literal, write
        resource(5, "tx-", 4, ("User:alice", "*", 2, 3)),  # transactional id, prefixed, all
        resource(6, "token", 3, ("User:alice", "*", 2, 3)),  # delegation token: never checked
        resource(2, "orders", 3, ("User:alice", "*", 99, 3)),  # an operation this proxy does not know
    ])
    assert bindings == [
        AclBinding("User:alice", "*", Op.WRITE, Permission.ALLOW, TOPIC, PatternType.LITERAL, "orders"),
        AclBinding("User:bob", "*", Op.WRITE, Permission.DENY, TOPIC, PatternType.LITERAL, "orders"),
        AclBinding("User:alice", "*", Op.ALL, Permission.ALLOW, TXN, PatternType.PREFIXED, "tx-"),
    ]
    assert skipped == 2
