"""The one adapter between wal_s3 and boto3: worker threads, a limiter, mapped errors.

Strategy: boto3 is blocking, so every call runs in a worker thread behind one
CapacityLimiter shared by a process's writer, reader and GC. Threads are started through
anyio, so the same store serves trio (proxy, GC: pass a trio.CapacityLimiter) and asyncio
(the agent's reader, which thus needs no bridge to a trio loop: pass an
anyio.CapacityLimiter, or none for a fresh one of `default_threads`). botocore's own retries are
switched off (one attempt per call): the callers retry with their own backoff and audit
every attempt. botocore and urllib3 exceptions never leave this module; they become
S3TransientError (worth retrying), S3PreconditionFailed (a conditional write lost),
S3NotFound, or S3PermanentError.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import anyio
import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    ResponseStreamingError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from urllib3.exceptions import HTTPError as Urllib3Error

from core.errors import SidecarError
from wal_s3.config import WalConfig

if TYPE_CHECKING:
    import trio

    from wal_s3._s3_http import S3Http

T = TypeVar("T")

# A boto3 S3 client: boto3 builds its clients at run time and ships no type information
# (boto3-stubs is no dependency), so what crosses this boundary is Any.
S3Client: TypeAlias = Any
# What bounds a store's requests in flight: trio's (the proxy's writer) or anyio's (either loop).
Limiter: TypeAlias = "trio.CapacityLimiter | anyio.CapacityLimiter"


def _would_block() -> tuple[type[Exception], ...]:
    """What acquire_nowait of a full limiter raises: anyio's WouldBlock (on either loop), or
    trio's for a trio.CapacityLimiter (the WAL writer's). Only a process that runs trio holds
    one, so trio is not imported here: the agent, on asyncio, never loads it (~0.1 s of its start)."""
    trio = sys.modules.get("trio")
    return (anyio.WouldBlock,) if trio is None else (anyio.WouldBlock, trio.WouldBlock)


# Error codes S3 documents as "retry later". ConditionalRequestConflict (409) means another
# conditional write on the key is in progress; retrying gives a definite answer.
_TRANSIENT_CODES = frozenset({
    "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling",
    "ThrottlingException", "RequestLimitExceeded", "ConditionalRequestConflict", "OperationAborted",
})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
DELETE_BATCH_KEYS = 1000  # DeleteObjects accepts at most 1000 keys per request


class S3Error(SidecarError):
    """An S3 call failed; `retriable` says whether trying again may succeed."""

    retriable = False


class S3TransientError(S3Error):
    retriable = True


class S3GrayError(S3TransientError):
    """A request abandoned at its gray deadline, or not sent while S3 is gray (wal_s3/latency.py).

    `retriable` is per instance: False once the one retry (hedge) is spent or a probe is out.
    """

class S3PreconditionFailed(S3Error):
    """A conditional request's condition did not hold (PUT If-None-Match: the key exists)."""


class S3NotFound(S3Error):
    pass


class S3PermanentError(S3Error):
    pass


_SESSIONS: dict[tuple[tuple[str, str], ...], boto3.session.Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _session() -> boto3.session.Session:
    """One boto3 session per process (per AWS_* environment, which selects the credentials):
    a process makes two or three S3 clients (preflight, writer or reader, recovery), and each
    new session loads and parses S3's service model again (0.17 CPU-s against 0.03 for a
    second client of the same session, 2026-11-30). Sessions are not thread-safe: clients are
    made under _SESSIONS_LOCK (the clients themselves are)."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    session = _SESSIONS.get(key)
    if session is None:
        session = _SESSIONS[key] = boto3.session.Session()
    return session


def make_s3_client(config: WalConfig) -> S3Client:
    """A boto3 S3 client for config's endpoint and region, credentials from boto3's chain.

    botocore retries are off (we retry ourselves); timeouts and pool size come from config.
    PUTs carry botocore's default x-amz-checksum-crc32 header, which S3 checks, so a body
    damaged or cut short on the way is rejected rather than stored.
    """
    with _SESSIONS_LOCK:
        client = _session().client(
            "s3",
            endpoint_url=config.endpoint_url,
            region_name=config.region,
            config=Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=config.connect_timeout_s,
                read_timeout=config.request_timeout_s,
                max_pool_connections=config.max_s3_threads,
                # Readers verify their own CRC-32Cs; botocore's whole-object checksum check would
                # turn a damaged object into an opaque transport error instead of WalFormatError.
                response_checksum_validation="when_required",
            ),
        )
    if config.expected_bucket_owner:
        client.meta.events.register("before-sign.s3", functools.partial(_expect_owner, config.expected_bucket_owner),
                                    unique_id="azsidecar-expected-bucket-owner")
    return client


EXPECTED_OWNER_HEADER = "x-amz-expected-bucket-owner"


def _expect_owner(owner: str, request: Any, **_kwargs: Any) -> None:
    """botocore `before-sign` handler: every request of the client names the bucket's owner
    (signed with the rest), whatever the operation; S3 answers 403 if another account owns it."""
    request.headers[EXPECTED_OWNER_HEADER] = owner


def classify_error(status: int, code: str, message: str, what: str) -> S3Error:
    """The S3Error for an S3 error answer (HTTP status, error Code, Message); both transports use it."""
    msg = f"{what}: {status} {code} {message}".rstrip()
    if status == 412 or code == "PreconditionFailed":
        return S3PreconditionFailed(msg)
    if code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket"):
        return S3NotFound(msg)
    if status >= 500 or code in _TRANSIENT_CODES:
        return S3TransientError(msg)
    return S3PermanentError(msg)


def _map_exception(exc: BaseException, what: str) -> S3Error:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return classify_error(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0),
                              str(err.get("Code", "")), str(err.get("Message", "")), what)
    # A body that fails botocore's checksum check was damaged on the way: fetching again may work.
    if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError, ResponseStreamingError,
                        FlexibleChecksumError, Urllib3Error, OSError)):
        return S3TransientError(f"{what}: {type(exc).__name__}: {exc}")
    if isinstance(exc, BotoCoreError):
        return S3PermanentError(f"{what}: {type(exc).__name__}: {exc}")
    raise TypeError(f"not an S3 exception: {exc!r}") from exc


def _mapped(what: str, fn: Callable[[], T]) -> T:
    """Run fn in the worker thread; map botocore/urllib3 failures to S3Error."""
    try:
        return fn()
    except (BotoCoreError, ClientError, Urllib3Error, OSError) as exc:
        raise _map_exception(exc, what) from exc


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int
    last_modified_s: float  # epoch seconds


class S3Store:
    """Async S3 operations on one bucket. Every method raises S3Error subclasses only."""

    def __init__(self, client: S3Client, bucket: str, limiter: Limiter | None = None, *, default_threads: int = 16,
                 http: S3Http | None = None) -> None:
        """limiter: a trio.CapacityLimiter under trio, an anyio.CapacityLimiter under either;
        None: an anyio one of `default_threads`, made on first use (it needs the event loop).
        The limiter bounds this store's S3 requests in flight, threads or not.
        http: a wal_s3._s3_http.S3Http for `put_if_absent` and `get_range` on the event loop
        (the WAL's latency path); None: boto3 in worker threads for every call."""
        self.client = client
        self.bucket = bucket
        self.limiter = limiter
        self.http = http
        self._default_threads = default_threads

    async def aclose(self) -> None:
        """Close the event-loop transport's idle connections (boto3's pool closes with its client)."""
        if self.http is not None:
            await self.http.aclose()

    def _limiter(self) -> Limiter:
        if self.limiter is None:
            self.limiter = anyio.CapacityLimiter(self._default_threads)
        return self.limiter

    def _thread_limiter(self) -> anyio.CapacityLimiter:
        # anyio types the limiter of to_thread.run_sync as its own; under trio its backend
        # hands the limiter to trio.to_thread.run_sync as is, so a trio.CapacityLimiter works.
        return cast(anyio.CapacityLimiter, self._limiter())

    async def _request_slot(self) -> Limiter:
        """Take a place among the requests in flight; returns the limiter to release.

        Without a checkpoint when a place is free (the usual case): the request then leaves
        in the caller's scheduler step instead of after every other runnable task's.
        """
        limiter = self._limiter()
        try:
            limiter.acquire_nowait()
        except _would_block():
            await limiter.acquire()
        return limiter

    async def _run(self, what: str, fn: Callable[[], T], timing: list[float] | None = None) -> T:
        """fn in a worker thread. `timing`, if given, gets the request's own seconds appended,
        measured in the thread (S3's service time as any boto3 caller sees it, without the
        wait for a thread and the hand-back to trio), failed requests included."""
        if timing is None:
            return await anyio.to_thread.run_sync(functools.partial(_mapped, what, fn), limiter=self._thread_limiter())

        def timed() -> T:
            started = time.perf_counter()
            try:
                return _mapped(what, fn)
            finally:
                timing.append(time.perf_counter() - started)
        return await anyio.to_thread.run_sync(timed, limiter=self._thread_limiter())

    async def put_if_absent(self, key: str, body: bytes | bytearray | memoryview, metadata: Mapping[str, str] | None = None, *,
                            body_crc32c: int | None = None, timing: list[float] | None = None) -> None:
        """PUT with If-None-Match: * ; raises S3PreconditionFailed if the key exists.

        `body_crc32c`: the body's CRC-32C when the caller has it (an encoded WAL object's), for
        the event-loop transport's checksum header; boto3 computes its own.

        Pass large bodies as a bytearray: botocore wraps `bytes` in a BytesIO that http.client
        sends 8 KiB at a time, retaking the GIL for every chunk (1,024 times per 8 MiB), while
        a bytearray goes out in one sendall.
        """
        if self.http is not None:
            headers = {"If-None-Match": "*", **{f"x-amz-meta-{k}": v for k, v in (metadata or {}).items()}}
            limiter = await self._request_slot()
            try:
                await self.http.put(key, body, headers, body_crc32c=body_crc32c, timing=timing)
            finally:
                limiter.release()
            return
        if isinstance(body, memoryview):  # botocore takes bytes, bytearray or a file, not a view
            body = bytearray(body)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body, "IfNoneMatch": "*"}
        if metadata:
            kwargs["Metadata"] = dict(metadata)
        await self._run(f"PUT {key}", lambda: self.client.put_object(**kwargs), timing)

    async def put(self, key: str, body: bytes) -> None:
        await self._run(f"PUT {key}", lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=body))

    async def get(self, key: str) -> bytes:
        def call() -> bytes:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return body
        return await self._run(f"GET {key}", call)

    async def get_range(self, key: str, start: int, length: int, *, timing: list[float] | None = None) -> bytes:
        """Bytes [start, start+length) of key; fewer if the object is shorter (caller checks).
        `timing` as in `_run`."""
        if length <= 0:
            raise ValueError(f"range length must be > 0, got {length}")
        if self.http is not None:
            limiter = await self._request_slot()
            try:
                return await self.http.get_range(key, start, length, timing=timing)
            finally:
                limiter.release()

        def call() -> bytes:
            resp = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
            body: bytes = resp["Body"].read()
            return body
        return await self._run(f"GET {key} [{start}+{length}]", call, timing)

    async def head_metadata(self, key: str) -> dict[str, str]:
        resp = await self._run(f"HEAD {key}", lambda: self.client.head_object(Bucket=self.bucket, Key=key))
        return dict(resp.get("Metadata", {}))

    async def list_objects(self, prefix: str) -> list[ListedObject]:
        def call() -> list[ListedObject]:
            out: list[ListedObject] = []
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    out.append(ListedObject(obj["Key"], obj["Size"], obj["LastModified"].timestamp()))
            return out
        return await self._run(f"LIST {prefix}", call)

    async def delete_many(self, keys: list[str]) -> None:
        """Delete keys in batches; raises S3Error if any key could not be deleted."""
        for i in range(0, len(keys), DELETE_BATCH_KEYS):
            batch = keys[i:i + DELETE_BATCH_KEYS]

            def call(batch: list[str] = batch) -> dict[str, Any]:  # a boto3 response
                answer: dict[str, Any] = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
                return answer
            resp = await self._run(f"DELETE {len(batch)} keys", call)
            errors = resp.get("Errors", [])
            if errors:
                first = errors[0]
                raise S3TransientError(f"DELETE {first.get('Key')}: {first.get('Code')} {first.get('Message', '')} "
                                       f"({len(errors)} keys failed)")
