"""The cluster side of leader placement: kafka-python's Admin API behind `LeaderAdmin`.

Strategy. One `KafkaAdminClient` per run, with the upstream's own security (TLS, SASL
PLAIN/SCRAM with the sidecar's identity, or MSK IAM tokens: `kafka_python_security`).
Reads are Metadata (placement, ISR), DescribeCluster (broker racks, the cluster id) and
ListPartitionReassignments; writes are AlterPartitionReassignments with the same replica set
in a new order (or a null target, cancelling) and ElectLeaders (preferred). kafka-python's errors become `LeaderAdminError` here, the adapter that owns
this I/O; a partition-level refusal is returned, not raised, so the loop can name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.structs import TopicPartition

from core.errors import SidecarError
from core.msk_iam import MskIamError, MskIamTokens
from core.tls import client_context
from core.upstream_settings import UpstreamSettings
from leader_placement.apply import Reassignment
from leader_placement.plan import PartitionKey, PartitionPlacement, Placement

ELECTION_NOT_NEEDED = 84  # the preferred replica already leads: the election's goal is met
REQUEST_TIMEOUT_MS = 30_000


class LeaderAdminError(SidecarError, RuntimeError):
    """The cluster could not be reached or refused a request (the message says which)."""


class _MskIamTokenProvider(AbstractTokenProvider):  # type: ignore[misc]  # kafka-python is untyped
    """kafka-python asks for a token synchronously at each authentication; signing blocks
    briefly (credential chain), which a one-shot command can afford."""

    def __init__(self, tokens: MskIamTokens) -> None:
        super().__init__()
        self._tokens = tokens

    def token(self) -> str:
        return self._tokens.token().value


def kafka_python_security(upstream: UpstreamSettings, msk_tokens: MskIamTokens | None = None) -> dict[str, Any]:
    """KafkaAdminClient arguments for `upstream` (an UpstreamConfig with its password filled
    in, azsidecar.secrets.apply_secrets): TLS context, SASL mechanism and identity, or MSK IAM
    tokens. Raises ConfigError if the CA file cannot be read."""
    out: dict[str, Any] = {"security_protocol": upstream.security_protocol}
    if upstream.tls:
        out["ssl_context"] = client_context(upstream.tls_ca_file, upstream.tls_check_hostname)
    if upstream.msk_iam:
        tokens = msk_tokens or MskIamTokens(upstream.aws_msk_iam_region, role_arn=upstream.aws_msk_iam_role_arn)
        out.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=_MskIamTokenProvider(tokens))
    elif upstream.sasl_mechanism:
        out.update(sasl_mechanism=upstream.sasl_mechanism, sasl_plain_username=upstream.sasl_username,
                   sasl_plain_password=upstream.sasl_password)
    return out


class KafkaLeaderAdmin:
    """`leader_placement.apply.LeaderAdmin` over a KafkaAdminClient. Close it (or use `with`)."""

    def __init__(self, bootstrap_servers: Sequence[str], security: Mapping[str, Any] | None = None,
                 client_id: str = "azsidecar-leader-placement") -> None:
        try:
            self._client = KafkaAdminClient(bootstrap_servers=list(bootstrap_servers), client_id=client_id,
                                            request_timeout_ms=REQUEST_TIMEOUT_MS, **dict(security or {}))
        except (KafkaError, MskIamError, OSError) as exc:
            raise LeaderAdminError(f"cannot reach {','.join(bootstrap_servers)}: {exc}") from exc

    def __enter__(self) -> KafkaLeaderAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def placement(self, topics: Sequence[str]) -> tuple[Placement, list[str]]:
        """The topics' partitions and every broker's rack; also the topics the cluster does not know."""
        try:
            brokers = self._client.describe_cluster()["brokers"]
            described = self._client.describe_topics(list(topics))
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"describing the cluster: {exc}") from exc
        zones = {int(b.get("broker_id", b.get("node_id"))): b.get("rack") or "" for b in brokers}
        parts, unknown = _partitions(described)
        return Placement(tuple(sorted(parts.values(), key=lambda p: p.key)), zones), unknown

    def describe(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, PartitionPlacement]:
        try:
            described = self._client.describe_topics(sorted({t for t, _ in keys}))
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"describing {sorted({t for t, _ in keys})}: {exc}") from exc
        parts, _ = _partitions(described)
        return {k: parts[k] for k in keys if k in parts}

    def reassign(self, orders: dict[PartitionKey, tuple[int, ...]]) -> dict[PartitionKey, str]:
        try:
            answer = self._client.alter_partition_reassignments(
                {TopicPartition(t, p): list(r) for (t, p), r in orders.items()}, timeout_ms=REQUEST_TIMEOUT_MS)
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"AlterPartitionReassignments: {exc}") from exc
        return {(tp.topic, tp.partition): err.__name__ for tp, err in answer.items() if err is not None}

    def cluster_id(self) -> str:
        """The cluster's id (DescribeCluster): a saved plan names the cluster it was made for."""
        try:
            return str(self._client.describe_cluster().get("cluster_id") or "")
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"describing the cluster: {exc}") from exc

    def reassignments(self, keys: Sequence[PartitionKey] | None = None) -> dict[PartitionKey, Reassignment]:
        try:
            ongoing = self._client.list_partition_reassignments(None if keys is None else _by_topic(keys),
                                                                timeout_ms=REQUEST_TIMEOUT_MS)
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"ListPartitionReassignments: {exc}") from exc
        return {(tp.topic, tp.partition): Reassignment(tuple(r["replicas"]), tuple(r["adding_replicas"]),
                                                       tuple(r["removing_replicas"])) for tp, r in ongoing.items()}

    def cancel(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, str]:
        try:
            answer = self._client.alter_partition_reassignments({TopicPartition(t, p): None for t, p in keys},
                                                                timeout_ms=REQUEST_TIMEOUT_MS)
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"AlterPartitionReassignments (cancel): {exc}") from exc
        return {(tp.topic, tp.partition): err.__name__ for tp, err in answer.items() if err is not None}

    def elect_preferred(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, str]:
        try:
            answer = self._client.elect_leaders(0, _by_topic(keys), timeout_ms=REQUEST_TIMEOUT_MS, raise_errors=False)
        except (KafkaError, MskIamError) as exc:
            raise LeaderAdminError(f"ElectLeaders: {exc}") from exc
        if getattr(answer, "error_code", 0):
            return {k: f"error {answer.error_code}" for k in keys}
        failed: dict[PartitionKey, str] = {}
        for result in answer.replica_election_results:
            for part in result.partition_result:
                if part.error_code not in (0, ELECTION_NOT_NEEDED):
                    failed[(result.topic, part.partition_id)] = f"error {part.error_code}: {part.error_message}"
        return failed


def _by_topic(keys: Sequence[PartitionKey]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in keys:
        by_topic.setdefault(t, []).append(p)
    return by_topic


def _partitions(described: list[dict[str, Any]]) -> tuple[dict[PartitionKey, PartitionPlacement], list[str]]:
    parts: dict[PartitionKey, PartitionPlacement] = {}
    unknown: list[str] = []
    for t in described:
        if t.get("error_code", 0) != 0:
            unknown.append(t["name"])
            continue
        for p in t["partitions"]:
            part = PartitionPlacement(t["name"], int(p["partition_index"]), tuple(p["replica_nodes"]),
                                      int(p["leader_id"]), tuple(p["isr_nodes"]))
            parts[part.key] = part
    return parts, unknown
