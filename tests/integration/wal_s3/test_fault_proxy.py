"""Real socket faults: a small trio TCP proxy on loopback in front of moto.

The botocore hooks in test_faults.py raise the exceptions botocore would raise; here the
sockets really misbehave, so the whole stack (urllib3, botocore, our adapter's mapping)
is exercised: a connection reset by the peer, a server that never answers (botocore's
read timeout fires), a slow answer, and a GET response cut off mid-body. Each request
gets its own connection (a hook adds `Connection: close`; moto closes every connection
after its answer anyway), so faults are scripted per request: the proxy takes the next
fault from `faults` for every new connection. Every test runs with both transports of WAL
PUTs and ranged GETs: boto3 in worker threads, and h11 on the event loop (wal_s3/_s3_http.py).
"""

from __future__ import annotations

import collections
import dataclasses
import socket
import struct

import pytest
import trio

from core.audit import MemoryAuditSink
from wal_s3.format import WalEntry, parse_object
from wal_s3.reader import WalReader, WalReadError
from wal_s3.writer import WalWriteError, WalWriter

pytestmark = [pytest.mark.integration, pytest.mark.trio]

SLOW_S = 0.3  # "slow" answers wait this long: well under the 1 s read timeout below


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.faults: collections.deque[str] = collections.deque()
        self.connections = 0
        self.port = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        fault = self.faults.popleft() if self.faults else "pass"
        try:
            if fault == "reset":
                await client.receive_some(65536)
                # SO_LINGER 0: close sends RST, the client sees "connection reset by peer".
                client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if fault == "hang":
                while await client.receive_some(65536):
                    pass  # never answer; the client's read timeout ends this
                return
            if fault == "slow":
                await trio.sleep(SLOW_S)
            limit = 600 if fault == "cut" else None  # "cut": the response stops mid-body
            upstream = await trio.open_tcp_stream(*self.upstream)
            async with upstream, trio.open_nursery() as n:
                n.start_soon(self._pump, client, upstream, None, None)
                await self._pump(upstream, client, limit, n.cancel_scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await client.aclose()

    @staticmethod
    async def _pump(src, dst, limit: int | None, done: trio.CancelScope | None) -> None:
        sent = 0
        try:
            while True:
                data = await src.receive_some(65536)
                if not data:
                    return
                if limit is not None and sent + len(data) >= limit:
                    await dst.send_all(data[:limit - sent])
                    return
                await dst.send_all(data)
                sent += len(data)
        finally:
            if done is not None:
                done.cancel()


# What each transport says when the server never answers.
NO_ANSWER = {"boto3": "ReadTimeoutError", "http": "no progress within 1 s"}


@pytest.fixture(params=["boto3", "http"])
async def proxied(request, wal_env, moto_server, nursery):
    make_config, make_client = wal_env
    proxy = FaultProxy(moto_server.host, moto_server.port)
    await nursery.start(proxy.serve)
    config = make_config(endpoint_url=f"http://127.0.0.1:{proxy.port}", request_timeout_s=1.0,
                         connect_timeout_s=1.0, linger_ms=5, max_attempts=4, s3_transport=request.param)
    client = make_client(config)

    def one_request_per_connection(request, **_kwargs):
        request.headers["Connection"] = "close"
    client.meta.events.register("before-send.s3", one_request_per_connection)
    # Checks go straight to moto: a blocking call through the proxy would stall the trio
    # loop the proxy runs in.
    return proxy, config, client, moto_server.client()


async def test_reset_hang_slow_then_success(proxied):
    proxy, config, client, direct = proxied
    audit = MemoryAuditSink()
    writer = WalWriter(config, "az1", "p1", client, audit)
    await writer.register_epoch()
    proxy.faults.extend(["reset", "hang", "slow"])
    async with writer.running():
        with trio.fail_after(30):
            p = await writer.append(WalEntry("t", 0, 1, 0, 0, 1, b"payload"), "az2")
    [flush] = audit.of("wal_flush")
    assert (flush["ok"], flush["attempts"]) == (True, 3)
    assert flush["put_ms"] >= SLOW_S * 1000
    data = direct.get_object(Bucket=config.bucket, Key=p.key)["Body"].read()
    assert bytes(parse_object(data).zones["az2"][0].batch) == b"payload"


async def test_put_that_never_gets_an_answer_fails_cleanly(proxied):
    proxy, config, client, direct = proxied
    writer = WalWriter(dataclasses.replace(config, max_attempts=2), "az1", "p1", client, MemoryAuditSink())
    await writer.register_epoch()
    proxy.faults.extend(["hang"] * 2)
    async with writer.running():
        with trio.fail_after(30):
            with pytest.raises(WalWriteError) as failed:
                await writer.append(WalEntry("t", 0, 1, 0, 0, 1, b"payload"), "az2")
    assert failed.value.retriable
    assert NO_ANSWER[config.s3_transport] in str(failed.value) and "after 2 attempts" in str(failed.value)
    listed = direct.list_objects_v2(Bucket=config.bucket).get("Contents", [])
    assert [o["Key"] for o in listed if "/wal/" in o["Key"]] == []


async def test_get_cut_off_mid_body_is_retried_never_accepted(proxied):
    proxy, config, client, direct = proxied
    async with WalWriter(config, "az1", "p1", client, MemoryAuditSink()).running() as writer:
        p = await writer.append(WalEntry("t", 0, 1, 0, 0, 1, b"z" * 5000), "az2")
    audit = MemoryAuditSink()
    reader = WalReader(config, client, audit, "az2")
    proxy.faults.extend(["cut", "slow"])
    with trio.fail_after(30):
        entries = await reader.read_zone(p.key, p.zone_offset, p.zone_length)
    assert bytes(entries[0].batch) == b"z" * 5000
    assert [r["gets"] for r in audit.of("agent_read")] == [2]
    reader2 = WalReader(config, client, MemoryAuditSink(), "az2")
    proxy.faults.extend(["cut"] * 4)
    with trio.fail_after(30), pytest.raises(WalReadError) as failed:
        await reader2.read_zone(p.key, p.zone_offset, p.zone_length)
    assert failed.value.retriable and reader2.cache.bytes == 0
