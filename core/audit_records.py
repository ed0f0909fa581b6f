"""The audit record kinds of core/audit.py as types. GENERATED: do not edit; regenerate with
`.venv/bin/python -m core.audit_records_gen --write core/audit_records.py`.

Fields are optional (total=False): the writer fills a missing one with null, adds
schema_version and kind, and ts_ms and zone when the emitter left them out; a name or a
type the schema does not have is a type error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypedDict, overload


class ProduceBatchRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    proxy_id: str
    leader_zone: str
    topic: str
    partition: int
    route: str
    reason: str
    bytes: int
    records: int
    wire_bytes: int
    error_code: int
    latency_ms: float
    queue_ms: float
    s3_put_ms: float
    notify_rtt_ms: float
    leader_append_ms: float
    wal_key: str
    linger_wait_ms: float
    producer_wait_ms: float
    shadow_route: str
    shadow_reason: str
    principal: str


class WalFlushRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    writer_id: str
    epoch: int
    sequence: int
    key: str
    bytes: int
    entries: int
    zones: str
    reason: str
    put_ms: float
    attempts: int
    put_requests: int
    ok: bool
    put_wait_ms: float
    s3_request_ms: float


class AgentReadRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    source_zone: str
    key: str
    bytes: int
    gets: int
    cache_hits: int
    cache_misses: int
    bytes_from_cache: int
    latency_ms: float
    get_ms: float


class AgentApplyRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    source_zone: str
    key: str
    entries: int
    status: str
    read_ms: float
    append_ms: float
    handle_ms: float


class CheckpointWriteRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    keys: int
    wal_keys: str
    put_ms: float
    status: str


class NotificationRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    dest_zone: str
    key: str
    entries: int
    request_bytes: int
    response_bytes: int
    rtt_ms: float
    status: str
    attempts: int


class S3RequestRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    operation: str
    purpose: str
    requests: int


class PassthroughBytesRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    proxy_id: str
    broker_id: int
    broker_zone: str
    api_key: int
    requests: int
    request_bytes: int
    response_bytes: int
    interval_ms: int


class FetchBytesRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    proxy_id: str
    broker_id: int
    broker_zone: str
    topic: str
    partition: int
    bytes: int
    from_leader: bool
    interval_ms: int


class LeaderMoveRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    topic: str
    partition: int
    from_broker: int
    from_zone: str
    to_broker: int
    to_zone: str
    plan_id: str


class MetadataLookupRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    topic: str
    partition: int
    leader_zone: str
    cache: str


class ProduceSummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    proxy_id: str
    leader_zone: str
    topic: str
    partition: int
    route: str
    reason: str
    error_code: int
    principal: str
    shadow_route: str
    shadow_reason: str
    batches: int
    bytes: int
    records: int
    wire_bytes: int
    latency_ms_sum: float
    queue_ms_sum: float
    s3_put_ms_sum: float
    notify_rtt_ms_sum: float
    leader_append_ms_sum: float
    linger_wait_ms_sum: float
    producer_wait_ms_sum: float
    latency_max_ms: float
    latency_hist: str
    first_ts_ms: int
    last_ts_ms: int
    interval_ms: int


class MetadataSummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    topic: str
    partition: int
    leader_zone: str
    cache: str
    lookups: int
    interval_ms: int


class WalFlushSummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    writer_id: str
    zones: str
    reason: str
    ok: bool
    size_class: int
    objects: int
    bytes: int
    entries: int
    attempts: int
    put_requests: int
    put_ms_sum: float
    put_wait_ms_sum: float
    s3_request_ms_sum: float
    put_max_ms: float
    put_hist: str
    first_ts_ms: int
    last_ts_ms: int
    interval_ms: int


class NotificationSummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    dest_zone: str
    status: str
    size_class: int
    notifications: int
    entries: int
    attempts: int
    request_bytes: int
    response_bytes: int
    path_mtu: int
    request_packets: int
    response_packets: int
    request_messages: int
    response_messages: int
    entries_squared_sum: int
    entries_bytes_sum: int
    rtt_ms_sum: float
    rtt_max_ms: float
    rtt_hist: str
    first_ts_ms: int
    last_ts_ms: int
    interval_ms: int


class AgentReadSummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    source_zone: str
    reads: int
    bytes: int
    gets: int
    cache_hits: int
    cache_misses: int
    bytes_from_cache: int
    latency_ms_sum: float
    get_ms_sum: float
    latency_max_ms: float
    latency_hist: str
    first_ts_ms: int
    last_ts_ms: int
    interval_ms: int


class AgentApplySummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    source_zone: str
    status: str
    applies: int
    entries: int
    read_ms_sum: float
    append_ms_sum: float
    handle_ms_sum: float
    handle_max_ms: float
    handle_hist: str
    first_ts_ms: int
    last_ts_ms: int
    interval_ms: int


class CheckpointSummaryRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    source_zone: str
    status: str
    manifests: int
    keys: int
    manifest_puts: float
    put_ms_sum: float
    first_ts_ms: int
    last_ts_ms: int
    interval_ms: int


class AuditDropRecord(TypedDict, total=False):
    ts_ms: int
    zone: str
    dropped_kind: str
    dropped: int
    reason: str
    salvaged: int
    torn_bytes: int


class AuditSink(Protocol):
    """Where components put audit records. `emit` never blocks the data path."""

    @overload
    def emit(self, kind: Literal["produce_batch"], fields: ProduceBatchRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["wal_flush"], fields: WalFlushRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["agent_read"], fields: AgentReadRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["agent_apply"], fields: AgentApplyRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["checkpoint_write"], fields: CheckpointWriteRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["notification"], fields: NotificationRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["s3_request"], fields: S3RequestRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["passthrough_bytes"], fields: PassthroughBytesRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["fetch_bytes"], fields: FetchBytesRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["leader_move"], fields: LeaderMoveRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["metadata_lookup"], fields: MetadataLookupRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["produce_summary"], fields: ProduceSummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["metadata_summary"], fields: MetadataSummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["wal_flush_summary"], fields: WalFlushSummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["notification_summary"], fields: NotificationSummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["agent_read_summary"], fields: AgentReadSummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["agent_apply_summary"], fields: AgentApplySummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["checkpoint_summary"], fields: CheckpointSummaryRecord) -> None: ...

    @overload
    def emit(self, kind: Literal["audit_drop"], fields: AuditDropRecord) -> None: ...

    def emit(self, kind: str, fields: Mapping[str, Any]) -> None: ...
