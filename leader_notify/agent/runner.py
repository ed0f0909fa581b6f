"""Wire an Agent from the validated Config: wal_s3 reader and checkpoints, Kafka appender.

Kept apart from the CLI so tests and the benchmark start a real agent in-process with the
same wiring the command uses.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from core.audit import AuditSink
from core.msk_iam import MskIamTokens
from core.tls import client_context, upstream_sasl_password
from core.upstream_settings import UpstreamSettings
from leader_notify.agent._limits import ListenerLimits
from leader_notify.agent._msk_iam import AiokafkaMskIamTokens
from leader_notify.agent._wal_bridge import WalZoneReader, wal_checkpoint
from leader_notify.agent.agent import Agent, AgentSettings
from leader_notify.agent.appender import KafkaAppender
from leader_notify.agent.checkpoints import Checkpoint
from leader_notify.config import AgentConfig
from leader_notify.metrics import AgentMetrics
from wal_s3.config import WalConfig
from wal_s3.gc import Checkpoints
from wal_s3.reader import WalReader
from wal_s3.s3 import S3Client
from wal_s3.s3 import make_s3_client as wal_make_s3_client


class AgentProcessConfig(Protocol):
    """The sections of the one validated Config (azsidecar/config.py) an agent is built from."""

    @property
    def wal(self) -> WalConfig: ...

    @property
    def agent(self) -> AgentConfig: ...

    @property
    def upstream(self) -> UpstreamSettings: ...

    @property
    def router(self) -> _BrokerZones: ...


class _BrokerZones(Protocol):
    @property
    def broker_zones(self) -> Mapping[str, str]: ...


def aiokafka_security(upstream: UpstreamSettings, msk_tokens: MskIamTokens | None = None) -> dict[str, Any]:
    """AIOKafkaClient arguments for `upstream`'s TLS and SASL settings (the agent's own identity).

    The password is `upstream.sasl_password` (filled by the CLI) or the first line of
    `upstream.sasl_password_file`. With OAUTHBEARER the tokens are MSK IAM tokens signed by
    `msk_tokens` (default: the config's region and role, AWS credential chain).
    Raises ConfigError if a file cannot be read.
    """
    out: dict[str, Any] = {"security_protocol": upstream.security_protocol}
    if upstream.tls:
        out["ssl_context"] = client_context(upstream.tls_ca_file, upstream.tls_check_hostname)
    if upstream.msk_iam:
        tokens = msk_tokens or MskIamTokens(upstream.aws_msk_iam_region, role_arn=upstream.aws_msk_iam_role_arn)
        out.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=AiokafkaMskIamTokens(tokens))
    elif upstream.sasl_mechanism:
        out.update(sasl_mechanism=upstream.sasl_mechanism, sasl_plain_username=upstream.sasl_username,
                   sasl_plain_password=upstream.sasl_password or upstream_sasl_password(upstream, {}))
    return out


def make_s3_client(wal: WalConfig) -> S3Client:
    """boto3 S3 client for the WAL config, built by wal_s3 (botocore retries off: wal_s3 retries)."""
    return wal_make_s3_client(wal)


@contextlib.asynccontextmanager
async def running_agent(config: AgentProcessConfig, zone: str, keys: tuple[bytes, ...], *, audit: AuditSink,
                        host: str | None = None, port: int | None = None,
                        checkpoint: Checkpoint | None | bool = True,
                        metrics: AgentMetrics | None = None) -> AsyncIterator[tuple[Agent, int]]:
    """Start an agent for `zone`; yields (agent, bound port). Raises KafkaAppendUnavailable."""
    s3 = make_s3_client(config.wal)
    reader = WalZoneReader(WalReader(config.wal, s3, audit, zone))
    settings = AgentSettings(
        zone=zone, bucket=config.wal.bucket, prefix=config.wal.prefix, keys=keys,
        max_concurrent_reads=config.agent.max_concurrent_reads,
        max_in_flight_appends=config.agent.max_in_flight_appends,
        applied_cache_entries=config.agent.applied_cache_entries,
        checkpoint_interval_s=config.agent.checkpoint_interval_ms / 1000,
        checkpoint_max_keys=config.agent.checkpoint_max_keys,
        limits=ListenerLimits(
            max_connections=config.agent.max_connections,
            max_connections_per_source=config.agent.max_connections_per_source,
            max_unauthenticated_connections=config.agent.max_unauthenticated_connections,
            request_timeout_s=config.agent.request_timeout_s, idle_timeout_s=config.agent.idle_timeout_s),
        bucket_for_zone=config.wal.bucket_for if config.wal.storage_class == "express" else None)
    if checkpoint is True:
        checkpoint = wal_checkpoint(Checkpoints(config.wal, s3))
    security = aiokafka_security(config.upstream)
    if isinstance(security.get("sasl_oauth_token_provider"), AiokafkaMskIamTokens):
        await security["sasl_oauth_token_provider"].check()  # no credentials: one line, before any connection
    async with KafkaAppender(config.upstream.bootstrap_servers, client_id=f"azsidecar-agent-{zone}",
                             max_attempts=config.agent.max_append_attempts,
                             produce_timeout_ms=config.agent.produce_timeout_ms,
                             requests_in_flight=config.agent.requests_in_flight_per_leader,
                             max_request_bytes=config.agent.max_request_bytes,
                             request_timeout_ms=int(config.upstream.request_timeout_s * 1000),
                             home_zone=zone, broker_zones=config.router.broker_zones,
                             security=security) as appender:
        agent = Agent(settings, reader, appender, checkpoint=checkpoint or None, metrics=metrics, audit=audit)
        _, bound = await agent.start(config.agent.listen_host if host is None else host,
                                     config.agent.listen_port if port is None else port)
        try:
            yield agent, bound
        finally:
            await agent.close()
