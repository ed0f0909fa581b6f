"""Kafka's ACL semantics, sans-IO: is this principal, from this host, allowed this operation on this resource?

Strategy: the rules are Kafka's `StandardAuthorizer`'s, re-stated as pure functions over an
immutable `AclSet`, so the proxy answers a client exactly as the brokers would answer it
directly.

* An ACL binding names a principal (`User:alice`, or the wildcard `User:*`), a host (an
  address, or `*`), an operation, a permission (ALLOW or DENY) and a resource pattern:
  type (Topic, Group, TransactionalId, Cluster), pattern type (LITERAL or PREFIXED) and
  name. A LITERAL pattern named `*` matches every resource of its type.
* DENY wins: any matching DENY binding for the operation (or ALL) refuses, whatever ALLOWs.
* ALLOW: a matching binding for the operation or ALL; DESCRIBE is also implied by READ,
  WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS (implications apply to ALLOW
  only, as in Kafka).
* No matching ALLOW: refused (Kafka's `allow.everyone.if.no.acl.found` is not offered: a
  shared gateway denies by default). Super users are allowed everything.
* `authorize_by_resource_type` is Kafka's check "may this principal do `op` on SOME
  resource of this type" (KIP-679: InitProducerId of an idempotent producer is allowed with
  IdempotentWrite on the cluster OR Write on any topic).

Nothing here touches a socket, a clock or a file.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

WILDCARD_RESOURCE = "*"  # a LITERAL pattern of this name matches every resource of its type
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name, as Kafka names it


class ResourceType(enum.IntEnum):
    """Kafka's resource type codes (org.apache.kafka.common.resource.ResourceType)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    """Kafka's pattern type codes (PatternType)."""

    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    """Kafka's ACL operation codes (AclOperation)."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    """Kafka's permission type codes (AclPermissionType)."""

    DENY = 2
    ALLOW = 3


# Operations whose ALLOW also allows the key (Kafka: AclEntry.supportedOperations / StandardAuthorizerData).
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


class AclError(ValueError):
    """A binding that is not a valid Kafka ACL (the rule's author's fault)."""


@dataclass(frozen=True)
class AclBinding:
    principal: str  # "User:alice" or WILDCARD_PRINCIPAL
    host: str  # an address or WILDCARD_HOST
    operation: Operation
    permission: Permission
    resource_type: ResourceType
    pattern_type: PatternType
    name: str

    def __post_init__(self) -> None:
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise AclError(f"principal {self.principal!r}: expected TYPE:NAME, e.g. User:alice")
        if not self.host:
            raise AclError("host: empty (use '*' for any host)")
        if not self.name:
            raise AclError("resource name: empty")
        if self.resource_type == ResourceType.CLUSTER and (
                self.pattern_type != PatternType.LITERAL or self.name != CLUSTER_NAME):
            raise AclError(f"a Cluster resource is LITERAL {CLUSTER_NAME!r}, not {self.pattern_type.name} {self.name!r}")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD_RESOURCE:
            raise AclError("a PREFIXED pattern named '*' is not valid (use LITERAL '*' for every resource)")

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD_RESOURCE
        return name.startswith(self.name)

    def matches_identity(self, principal: str, host: str) -> bool:
        return (self.principal == principal or self.principal == WILDCARD_PRINCIPAL) and \
            (self.host == host or self.host == WILDCARD_HOST)


@dataclass(frozen=True)
class Request:
    """Who asks (a principal `User:<name>`, and the client's address)."""

    principal: str
    host: str


@dataclass(frozen=True)
class AclSet:
    """The bindings in force, indexed by resource type; `super_users` may do anything."""

    bindings: tuple[AclBinding, ...] = ()
    super_users: frozenset[str] = frozenset()
    _by_type: dict[ResourceType, tuple[AclBinding, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in self.bindings:
            by_type.setdefault(b.resource_type, []).append(b)
        object.__setattr__(self, "_by_type", {t: tuple(bs) for t, bs in by_type.items()})

    @classmethod
    def of(cls, bindings: Iterable[AclBinding], super_users: Iterable[str] = ()) -> AclSet:
        return cls(tuple(bindings), frozenset(super_users))

    def _relevant(self, who: Request, resource_type: ResourceType) -> list[AclBinding]:
        return [b for b in self._by_type.get(resource_type, ()) if b.matches_identity(who.principal, who.host)]

    def authorize(self, who: Request, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """May `who` do `operation` on the resource (`resource_type`, `name`)? (pure)"""
        if who.principal in self.super_users:
            return True
        allowed_by = {operation, Operation.ALL, *IMPLIED_BY.get(operation, ())}
        allowed = False
        for b in self._relevant(who, resource_type):
            if not b.matches_resource(resource_type, name):
                continue
            if b.permission == Permission.DENY:
                if b.operation in (operation, Operation.ALL):
                    return False  # DENY wins; implications never widen a DENY
            elif b.operation in allowed_by:
                allowed = True
        return allowed

    def authorize_by_resource_type(self, who: Request, operation: Operation, resource_type: ResourceType) -> bool:
        """May `who` do `operation` on at least one resource of `resource_type`? Kafka's
        `Authorizer.authorizeByResourceType`: some ALLOW pattern not covered by a DENY (a
        LITERAL DENY of the same name, a PREFIXED DENY that is a prefix of it); a LITERAL DENY
        of '*' refuses everything (pure)."""
        if who.principal in self.super_users:
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[AclBinding] = []
        wildcard_allow = False
        for b in self._relevant(who, resource_type):
            if b.operation not in (operation, Operation.ALL):
                continue
            if b.permission == Permission.DENY:
                if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if b.pattern_type == PatternType.LITERAL else deny_prefixed).add(b.name)
            elif b.pattern_type == PatternType.LITERAL and b.name == WILDCARD_RESOURCE:
                wildcard_allow = True
            else:
                allow.append(b)
        if wildcard_allow:
            return True
        for b in allow:
            if b.pattern_type == PatternType.LITERAL and b.name in deny_literal:
                continue
            if any(b.name[:n] in deny_prefixed for n in range(1, len(b.name) + 1)):
                continue
            return True
        return False


class AclProvider(Protocol):
    """Where the rules in force come from (proxy/acl_source.py): read once per request."""

    def current(self) -> AclSet: ...
