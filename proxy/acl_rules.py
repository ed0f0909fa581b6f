"""ACL bindings from their two sources, as `AclSet`s (pure): a local TOML file, and a
DescribeAcls answer of the cluster.

The file (`authz.acl_file`, for estates that authorize with IAM instead of Kafka ACLs)
states each binding with Kafka's words, in any case (`Write`, `WRITE`, `IdempotentWrite`,
`IDEMPOTENT_WRITE`, `TransactionalId`):

    [[acl]]
    principal = "User:alice"      # or "User:*"
    host = "*"                    # optional, default "*"
    operation = "Write"           # All, Read, Write, Create, Delete, Alter, Describe, ClusterAction,
                                  # DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens
    permission = "Allow"          # optional, default Allow; or Deny
    resource_type = "Topic"       # Topic, Group, TransactionalId, Cluster
    pattern_type = "Literal"      # optional, default Literal; or Prefixed
    name = "orders"               # a Cluster resource is named "kafka-cluster"

An error names the binding (`acl[2].operation: 'Wrte' is not one of ...`).
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from proxy.acl import AclBinding, AclError, AclSet, Operation, PatternType, Permission, ResourceType

E = TypeVar("E", bound=enum.IntEnum)
KEYS = frozenset({"principal", "host", "operation", "permission", "resource_type", "pattern_type", "name"})


class AclFileError(ValueError):
    """The ACL file cannot be used: its author's fault; the message names the binding."""


def _words(member: enum.IntEnum) -> str:
    return "".join(part.capitalize() for part in member.name.split("_"))


def _enum(kind: type[E], value: object, where: str) -> E:
    if isinstance(value, str):
        wanted = value.replace("_", "").replace("-", "").lower()
        for member in kind:
            if member.name.replace("_", "").lower() == wanted:
                return member
    choices = ", ".join(_words(m) for m in kind)
    raise AclFileError(f"{where}: {value!r} is not one of {choices}")


def _binding(entry: object, where: str) -> AclBinding:
    if not isinstance(entry, Mapping):
        raise AclFileError(f"{where}: expected a table of principal, host, operation, ...")
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise AclFileError(f"{where}: unknown key(s) {', '.join(unknown)}")
    for key in ("principal", "operation", "resource_type", "name"):
        if key not in entry:
            raise AclFileError(f"{where}.{key}: required")
    for key in ("principal", "host", "name"):
        if key in entry and not isinstance(entry[key], str):
            raise AclFileError(f"{where}.{key}: expected a string")
    try:
        return AclBinding(
            principal=entry["principal"], host=entry.get("host", "*"),
            operation=_enum(Operation, entry["operation"], f"{where}.operation"),
            permission=_enum(Permission, entry.get("permission", "Allow"), f"{where}.permission"),
            resource_type=_enum(ResourceType, entry["resource_type"], f"{where}.resource_type"),
            pattern_type=_enum(PatternType, entry.get("pattern_type", "Literal"), f"{where}.pattern_type"),
            name=entry["name"])
    except AclError as exc:
        raise AclFileError(f"{where}: {exc}") from exc


def parse_acl_file(text: str, super_users: Iterable[str] = ()) -> AclSet:
    """The bindings of an ACL file's TOML text. Raises AclFileError naming what is wrong."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AclFileError(f"not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"acl"})
    if unknown:
        raise AclFileError(f"unknown key(s) {', '.join(unknown)} (bindings go in [[acl]] tables)")
    entries = data.get("acl", [])
    if not isinstance(entries, list):
        raise AclFileError("acl: expected [[acl]] tables")
    return AclSet.of((_binding(e, f"acl[{i}]") for i, e in enumerate(entries)), super_users)


# Kafka's codes this proxy does not judge (DelegationToken, User resources; ANY/MATCH/UNKNOWN filters).
_RESOURCE_TYPES = {t.value for t in ResourceType}
_OPERATIONS = {o.value for o in Operation}
_PATTERNS = {p.value for p in PatternType}
_PERMISSIONS = {p.value for p in Permission}


def bindings_from_describe(resources: Iterable[Any]) -> tuple[list[AclBinding], int]:
    """The bindings of a DescribeAclsResponse's `resources` (pure); returns (bindings, number
    skipped). Skipped: resource types, operations or pattern types this proxy never checks
    (DelegationToken, User), which cannot widen any right it checks."""
    out: list[AclBinding] = []
    skipped = 0
    for resource in resources:
        pattern = getattr(resource, "pattern_type", PatternType.LITERAL)
        if resource.resource_type not in _RESOURCE_TYPES or pattern not in _PATTERNS:
            skipped += len(resource.acls)
            continue
        for acl in resource.acls:
            if acl.operation not in _OPERATIONS or acl.permission_type not in _PERMISSIONS:
                skipped += 1
                continue
            try:
                out.append(AclBinding(acl.principal, acl.host, Operation(acl.operation),
                                      Permission(acl.permission_type), ResourceType(resource.resource_type),
                                      PatternType(pattern), resource.resource_name))
            except AclError:
                skipped += 1  # the cluster holds it, but it cannot match anything this proxy asks
    return out, skipped
