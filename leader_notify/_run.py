"""Wire an Agent from the validated Config: boto3 client, S3 reader, Kafka appender, checkpoints.

Kept apart from the CLI so tests and the benchmark start a real agent in-process with the
same wiring the command uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from leader_notify._kafka import KafkaAppender
from leader_notify._s3read import S3ZoneReader
from leader_notify.agent import Agent, AgentSettings, Checkpoint
from leader_notify.metrics import AgentMetrics

log = logging.getLogger(__name__)


def make_s3_client(wal: Any) -> Any:
    """boto3 S3 client for the WAL config (credentials from boto3's usual chain)."""
    import boto3  # noqa: PLC0415
    from botocore.config import Config as BotoConfig  # noqa: PLC0415

    return boto3.session.Session().client(
        "s3", endpoint_url=wal.endpoint_url, region_name=wal.region,
        config=BotoConfig(retries={"max_attempts": 3, "mode": "standard"},
                          connect_timeout=getattr(wal, "connect_timeout_s", 5.0),
                          read_timeout=getattr(wal, "request_timeout_s", 30.0),
                          max_pool_connections=32))


def wal_checkpoint(config: Any, s3_client: Any) -> Checkpoint | None:
    """wal_s3's `mark_applied(key, zone)` as an async callable, if wal_s3.gc provides it."""
    try:
        gc = importlib.import_module("wal_s3.gc")
    except ModuleNotFoundError:
        return None
    mark_applied: Callable | None = getattr(gc, "mark_applied", None)
    if mark_applied is None:
        return None

    async def checkpoint(key: str, zone: str) -> None:
        await asyncio.to_thread(mark_applied, config.wal, s3_client, key, zone)

    return checkpoint


@contextlib.asynccontextmanager
async def running_agent(config: Any, zone: str, keys: tuple[bytes, ...], *, audit: Any,
                        host: str | None = None, port: int | None = None,
                        checkpoint: Checkpoint | None | bool = True,
                        metrics: AgentMetrics | None = None) -> AsyncIterator[tuple[Agent, int]]:
    """Start an agent for `zone`; yields (agent, bound port). Raises KafkaAppendUnavailable."""
    s3 = make_s3_client(config.wal)
    reader = S3ZoneReader(s3, config.wal.bucket, zone=zone, audit=audit, cache_bytes=config.wal.cache_bytes)
    settings = AgentSettings(
        zone=zone, bucket=config.wal.bucket, prefix=config.wal.prefix, keys=keys,
        replay_window_s=config.notify.replay_window_s, max_nonces=config.notify.max_nonces,
        max_concurrent_reads=config.agent.max_concurrent_reads,
        max_in_flight_appends=config.agent.max_in_flight_appends,
        applied_cache_entries=config.agent.applied_cache_entries)
    if checkpoint is True:
        checkpoint = wal_checkpoint(config, s3)
    async with KafkaAppender(config.upstream.bootstrap_servers, client_id=f"azsidecar-agent-{zone}",
                             max_attempts=config.agent.max_append_attempts,
                             produce_timeout_ms=config.agent.produce_timeout_ms,
                             request_timeout_ms=int(config.upstream.request_timeout_s * 1000)) as appender:
        agent = Agent(settings, reader, appender, checkpoint=checkpoint or None, metrics=metrics)
        _, bound = await agent.start(config.agent.listen_host if host is None else host,
                                     config.agent.listen_port if port is None else port)
        try:
            yield agent, bound
        finally:
            await agent.close()
