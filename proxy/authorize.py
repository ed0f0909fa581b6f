"""Which ACL check each API the proxy serves needs, and the Kafka error a refusal gets (pure).

Strategy: one function per API, each taking the decoded request's fields, the client's
`Request` (principal, host) and the `AclSet` in force, and returning what to refuse -
never acting. The proxy (proxy/server.py) answers refusals in the protocol, like a broker,
and lets the rest of the request through. The checks are Kafka's own (KafkaApis):

| API | check | refusal |
|---|---|---|
| Produce | a transactional request: WRITE on its TransactionalId | TRANSACTIONAL_ID_AUTHORIZATION_FAILED, every partition |
|  | WRITE on each topic | TOPIC_AUTHORIZATION_FAILED on that topic's partitions; the others proceed |
| InitProducerId | with a transactional id: WRITE on it | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
|  | idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679) | CLUSTER_AUTHORIZATION_FAILED |
| Metadata | DESCRIBE on each topic; a listing of all topics leaves the others out | TOPIC_AUTHORIZATION_FAILED per topic asked for |
|  | auto-creation of a missing topic: CREATE on the cluster or the topic | the topic is not created; TOPIC_AUTHORIZATION_FAILED |
| FindCoordinator | DESCRIBE on the group / the transactional id, per key | GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| AddPartitionsToTxn | WRITE on the TransactionalId; WRITE on each topic | TRANSACTIONAL_ID_...; TOPIC_... on refused topics and OPERATION_NOT_ATTEMPTED on the others |
| AddOffsetsToTxn | WRITE on the TransactionalId; READ on the group | TRANSACTIONAL_ID_...; GROUP_AUTHORIZATION_FAILED |
| EndTxn | WRITE on the TransactionalId | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| TxnOffsetCommit | WRITE on the TransactionalId; READ on the group; READ on each topic | TRANSACTIONAL_ID_...; GROUP_...; TOPIC_... (the request is then not forwarded) |

ApiVersions and SASL need no right (as at a broker). APIs passed through to brokers
(`proxy.broker_listeners`) are not checked here: with authorization on, pass-through is off
(proxy/config.py refuses it), so they are not served at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core import errors
from proxy.acl import CLUSTER_NAME, AclSet, Operation, Request, ResourceType

KEY_GROUP, KEY_TRANSACTION = 0, 1  # FindCoordinator key types


@dataclass(frozen=True)
class ProduceVerdict:
    """`whole`: an error for every partition (None: checked per topic); `denied_topics`: the
    topics answered TOPIC_AUTHORIZATION_FAILED."""

    whole: int | None
    denied_topics: frozenset[str]


def produce(acls: AclSet, who: Request, topics: Iterable[str], transactional_id: str | None,
            has_transactional_batches: bool) -> ProduceVerdict:
    """Kafka's Produce checks (pure): a request with transactional batches needs a
    transactional id the client may WRITE; each topic needs WRITE."""
    if (transactional_id or has_transactional_batches) and not (
            transactional_id and acls.authorize(who, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)):
        return ProduceVerdict(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, frozenset())
    denied = frozenset(t for t in set(topics) if not acls.authorize(who, Operation.WRITE, ResourceType.TOPIC, t))
    return ProduceVerdict(None, denied)


def init_producer_id(acls: AclSet, who: Request, transactional_id: str | None) -> int:
    """The error an InitProducerId gets, or NONE (pure)."""
    if transactional_id:
        if acls.authorize(who, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return errors.NONE
        return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if acls.authorize(who, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) or \
            acls.authorize_by_resource_type(who, Operation.WRITE, ResourceType.TOPIC):
        return errors.NONE
    return errors.CLUSTER_AUTHORIZATION_FAILED


@dataclass(frozen=True)
class MetadataVerdict:
    """`visible`: topics asked for (or, for a listing, None) that the client may DESCRIBE;
    `denied`: asked for but not describable; `no_create`: visible topics the client may
    not auto-create (asked for upstream without auto-creation)."""

    denied: frozenset[str]
    no_create: frozenset[str]


def metadata(acls: AclSet, who: Request, requested: Iterable[str] | None, allow_auto_create: bool) -> MetadataVerdict:
    """Which topics of a Metadata request are refused, and which may not be created (pure).
    A listing of every topic (`requested` None) is filtered afterwards with `describable`."""
    if requested is None:
        return MetadataVerdict(frozenset(), frozenset())
    names = set(requested)
    denied = frozenset(t for t in names if not acls.authorize(who, Operation.DESCRIBE, ResourceType.TOPIC, t))
    no_create: frozenset[str] = frozenset()
    if allow_auto_create and not acls.authorize(who, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        no_create = frozenset(t for t in names - denied
                              if not acls.authorize(who, Operation.CREATE, ResourceType.TOPIC, t))
    return MetadataVerdict(denied, no_create)


def describable(acls: AclSet, who: Request, topics: Iterable[str]) -> list[str]:
    """The topics of a listing the client may see (pure): Kafka leaves the others out."""
    return [t for t in topics if acls.authorize(who, Operation.DESCRIBE, ResourceType.TOPIC, t)]


def find_coordinator(acls: AclSet, who: Request, key_type: int, key: str) -> int:
    """The error one FindCoordinator key gets, or NONE (pure). Unknown key types: NONE (the
    broker judges them)."""
    if key_type == KEY_GROUP and not acls.authorize(who, Operation.DESCRIBE, ResourceType.GROUP, key):
        return errors.GROUP_AUTHORIZATION_FAILED
    if key_type == KEY_TRANSACTION and not acls.authorize(who, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return errors.NONE


def transactional_id(acls: AclSet, who: Request, txn_id: str) -> int:
    """WRITE on the transactional id (EndTxn, and first for the other transaction APIs)."""
    if acls.authorize(who, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return errors.NONE
    return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def add_offsets_to_txn(acls: AclSet, who: Request, txn_id: str, group_id: str) -> int:
    code = transactional_id(acls, who, txn_id)
    if code == errors.NONE and not acls.authorize(who, Operation.READ, ResourceType.GROUP, group_id):
        return errors.GROUP_AUTHORIZATION_FAILED
    return code


def add_partitions_to_txn(acls: AclSet, who: Request, txn_id: str,
                          topics: Iterable[str]) -> tuple[int, dict[str, int]]:
    """(error for the whole request or NONE, per-topic error codes when some topic is refused:
    TOPIC_AUTHORIZATION_FAILED, and OPERATION_NOT_ATTEMPTED for the allowed ones, as Kafka
    answers; empty when every topic is allowed) (pure)."""
    code = transactional_id(acls, who, txn_id)
    if code != errors.NONE:
        return code, {}
    names = list(dict.fromkeys(topics))
    denied = {t for t in names if not acls.authorize(who, Operation.WRITE, ResourceType.TOPIC, t)}
    if not denied:
        return errors.NONE, {}
    return errors.NONE, {t: errors.TOPIC_AUTHORIZATION_FAILED if t in denied else errors.OPERATION_NOT_ATTEMPTED
                         for t in names}


def txn_offset_commit(acls: AclSet, who: Request, txn_id: str, group_id: str,
                      topics: Iterable[str]) -> tuple[int, dict[str, int]]:
    """(error for every partition or NONE, per-topic errors when some topic may not be READ)."""
    code = add_offsets_to_txn(acls, who, txn_id, group_id)
    if code != errors.NONE:
        return code, {}
    names = list(dict.fromkeys(topics))
    denied = {t for t in names if not acls.authorize(who, Operation.READ, ResourceType.TOPIC, t)}
    if not denied:
        return errors.NONE, {}
    return errors.NONE, {t: errors.TOPIC_AUTHORIZATION_FAILED if t in denied else errors.OPERATION_NOT_ATTEMPTED
                         for t in names}
