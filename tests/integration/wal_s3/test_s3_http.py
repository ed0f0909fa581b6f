"""The event-loop transport of WAL PUTs and ranged GETs (wal_s3/_s3_http.py).

Against moto with signature checking on (a wrong secret must be refused, so the SigV4 of
an UNSIGNED-PAYLOAD request is really verified), read back with boto3; and against a
scripted keep-alive HTTP server on a real socket for what moto cannot show (moto closes
every connection after its answer): the exact request on the wire, connection reuse, and
a pooled connection the server dropped. Faults on real sockets: test_fault_proxy.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
from pathlib import Path

import boto3
import h11
import pytest
import trio
from botocore.credentials import Credentials

from core.configload import ConfigError
from deploy.local.processes import start_moto
from wal_s3._s3_http import S3Http, bucket_url_of, http_transport
from wal_s3.config import WalConfig
from wal_s3.s3 import S3NotFound, S3PermanentError, S3PreconditionFailed, S3TransientError, make_s3_client

pytestmark = pytest.mark.integration

BODY = b"123456789"
BODY_CRC32C_B64 = "4waSgw=="  # CRC-32C of "123456789" is 0xE3069283, the standard check value


@pytest.fixture(scope="module")
def signed_moto(tmp_path_factory):
    """A moto server that checks signatures, and the credentials of a user allowed everything."""
    mp = pytest.MonkeyPatch()
    mp.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "4")  # the four set-up calls below go unchecked
    try:
        with start_moto(log_dir=tmp_path_factory.mktemp("moto-auth")) as moto:
            kw = {"endpoint_url": moto.endpoint_url, "region_name": "us-east-1",
                  "aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
            boto3.client("s3", **kw).create_bucket(Bucket="wal")
            iam = boto3.client("iam", **kw)
            iam.create_user(UserName="wal")
            key = iam.create_access_key(UserName="wal")["AccessKey"]
            iam.put_user_policy(UserName="wal", PolicyName="all", PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
            yield moto, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        mp.undo()


@pytest.fixture
def signed_env(signed_moto, monkeypatch):
    """(config, boto3 client, S3Http) for the signature-checking moto."""
    moto, key_id, secret = signed_moto
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    config = WalConfig(bucket="wal", region="us-east-1", endpoint_url=moto.endpoint_url, s3_transport="http")
    client = make_s3_client(config)
    http = http_transport(client, config)
    assert http is not None
    return config, client, http


def test_put_is_accepted_by_a_signature_check_and_reads_back_through_boto3(signed_env):
    config, client, http = signed_env

    async def main():
        await http.put("dir/obj-1", BODY, {"If-None-Match": "*", "x-amz-meta-zones": "use1-az2,use1-az3"})
    trio.run(main)
    got = client.get_object(Bucket="wal", Key="dir/obj-1", ChecksumMode="ENABLED")
    assert got["Body"].read() == BODY
    assert got["Metadata"] == {"zones": "use1-az2,use1-az3"}
    assert got["ChecksumCRC32C"] == BODY_CRC32C_B64


def test_a_wrong_secret_is_refused(signed_env, monkeypatch):
    config, client, _http = signed_env
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    wrong = http_transport(client, config)  # credentials are read when the transport is made

    async def main():
        with pytest.raises(S3PermanentError, match="403 SignatureDoesNotMatch"):
            await wrong.put("dir/never", BODY, {})
    trio.run(main)


def test_ranged_gets_conditions_and_missing_objects(signed_env):
    _config, client, http = signed_env
    client.put_object(Bucket="wal", Key="ranges", Body=b"0123456789" * 100)  # 1,000 bytes

    async def main():
        assert await http.get_range("ranges", 0, 10) == b"0123456789"
        assert await http.get_range("ranges", 993, 4) == b"3456"
        assert await http.get_range("ranges", 995, 10) == b"56789"  # the object ends first
        with pytest.raises(S3PermanentError, match="416 InvalidRange"):
            await http.get_range("ranges", 1000, 5)
        with pytest.raises(S3NotFound, match="404 NoSuchKey"):
            await http.get_range("missing", 0, 5)
        await http.put("once", b"first", {"If-None-Match": "*"})
        with pytest.raises(S3PreconditionFailed, match="412 PreconditionFailed"):
            await http.put("once", b"second", {"If-None-Match": "*"})
    trio.run(main)
    assert client.get_object(Bucket="wal", Key="once")["Body"].read() == b"first"


def test_large_body_in_chunks_and_the_asyncio_loop(signed_env):
    """3 MiB + 5: several send chunks and a checksum computed in a worker thread; then the
    same transport used from an asyncio loop (the agent's) after a trio one."""
    _config, client, http = signed_env
    body = bytearray(bytes(range(256)) * (3 * 4096) + b"tail!")

    async def put():
        await http.put("big", body, {"If-None-Match": "*"})
    trio.run(put)
    assert client.get_object(Bucket="wal", Key="big")["Body"].read() == bytes(body)

    async def read():
        return await http.get_range("big", 3 * 1024 * 1024, 5)
    assert asyncio.run(read()) == b"tail!"


def test_bucket_url_follows_botocore(signed_env, monkeypatch):
    _config, client, _http = signed_env
    assert bucket_url_of(client, "wal") == client.meta.endpoint_url + "/wal/"  # an IP endpoint: path style
    aws = boto3.client("s3", region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b")
    assert bucket_url_of(aws, "my-wal") == "https://my-wal.s3.eu-west-1.amazonaws.com/"


def test_transport_choice(signed_env, monkeypatch):
    config, client, _http = signed_env
    boto = WalConfig(bucket="wal", region="us-east-1", endpoint_url=config.endpoint_url, s3_transport="boto3")
    auto = WalConfig(bucket="wal", region="us-east-1", endpoint_url=config.endpoint_url, s3_transport="auto")
    assert http_transport(client, boto) is None
    assert isinstance(http_transport(client, auto), S3Http)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")  # botocore honours it; this transport does not
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert http_transport(client, auto) is None
    assert isinstance(http_transport(client, config), S3Http)  # "http": always
    with pytest.raises(ValueError, match="wal.s3_transport"):
        WalConfig(bucket="wal", s3_transport="curl")


# ---- a scripted keep-alive server ------------------------------------------------------------

class KeepAliveServer:
    """HTTP/1.1 on a real socket, one thread per connection: answers PUT 200 and GET 206
    (body b"xyz"), keeps connections open, and drops a connection without a word after
    its `drop_after`-th answer (as a server timing out an idle keep-alive does)."""

    def __init__(self, drop_after: int | None = None, get_status: int = 206) -> None:
        self.drop_after = drop_after
        self.get_status = get_status
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.dropped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        conn = h11.Connection(h11.SERVER)
        answered = 0
        with sock:
            method = target = ""
            headers: dict[str, str] = {}
            body = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = sock.recv(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                elif isinstance(event, h11.Request):
                    method, target = event.method.decode(), event.target.decode()
                    headers = {k.decode(): v.decode() for k, v in event.headers}
                    body = b""
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    self.requests.append((method, target, headers, body))
                    payload = b"xyz" if method == "GET" else b""
                    status = self.get_status if method == "GET" else 200
                    sock.sendall(conn.send(h11.Response(status_code=status, headers=[("Content-Length", str(len(payload)))]))
                                 + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage()))
                    answered += 1
                    if answered == self.drop_after:
                        sock.close()
                        self.dropped.set()
                        return
                    conn.start_next_cycle()
                else:
                    return


@pytest.fixture
def keepalive():
    servers: list[KeepAliveServer] = []

    def make(drop_after: int | None = None, receive_buffer_bytes: int = 0,
             get_status: int = 206) -> tuple[KeepAliveServer, S3Http]:
        server = KeepAliveServer(drop_after, get_status)
        servers.append(server)
        http = S3Http(bucket_url=f"http://127.0.0.1:{server.port}/wal/", region="us-east-1",
                      credentials=Credentials("AKIDEXAMPLE", "secret"), connect_timeout_s=2, request_timeout_s=2,
                      max_idle=4, receive_buffer_bytes=receive_buffer_bytes)
        return server, http
    yield make
    for s in servers:
        s.close()


def test_the_request_on_the_wire(keepalive):
    server, http = keepalive()

    async def main():
        await http.put("dir/a key+1", BODY, {"If-None-Match": "*", "x-amz-meta-zones": "use1-az2"})
        await http.aclose()
    trio.run(main)
    [(method, target, headers, body)] = server.requests
    assert (method, target, body) == ("PUT", "/wal/dir/a%20key%2B1", BODY)
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["content-length"] == "9"
    assert headers["if-none-match"] == "*"
    assert headers["x-amz-meta-zones"] == "use1-az2"
    assert headers["x-amz-checksum-crc32c"] == BODY_CRC32C_B64
    assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/s3/aws4_request, SignedHeaders=" in headers["authorization"]
    signed = headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "if-none-match", "x-amz-checksum-crc32c", "x-amz-content-sha256", "x-amz-date",
            "x-amz-meta-zones"} <= set(signed)
    assert "user-agent" not in signed
    assert headers["x-amz-sdk-checksum-algorithm"] == "CRC32C"


def test_a_checksum_the_caller_has_is_sent_as_given(keepalive):
    """The WAL writer hands over the CRC-32C its encoder computed; the transport sends it and
    does not checksum the body again (a value no pass over this body gives shows that)."""
    server, http = keepalive()

    async def main():
        await http.put("k", BODY, {"If-None-Match": "*"}, body_crc32c=0x01020304)
        await http.aclose()
    trio.run(main)
    [(method, _target, headers, body)] = server.requests
    assert (method, body) == ("PUT", BODY)
    assert headers["x-amz-checksum-crc32c"] == "AQIDBA=="  # base64 of 01 02 03 04
    assert headers["x-amz-sdk-checksum-algorithm"] == "CRC32C"


def test_keepalive_reuse_and_a_dropped_idle_connection(keepalive):
    server, http = keepalive(drop_after=3)

    async def main():
        assert await http.get_range("k", 0, 3) == b"xyz"
        await http.put("k2", b"v", {})
        assert await http.get_range("k", 0, 3) == b"xyz"
        assert server.connections == 1  # three requests on one connection
        # The server dropped it after the third answer: the pool notices, no request fails.
        await trio.to_thread.run_sync(lambda: server.dropped.wait(5))
        assert await http.get_range("k", 0, 3) == b"xyz"
        assert server.connections == 2
        await http.aclose()
    trio.run(main)
    assert [r[0] for r in server.requests] == ["GET", "PUT", "GET", "GET"]


def test_a_ranged_get_answered_with_another_2xx_is_a_transient_s3_error(keepalive):
    # S3 answers a ranged GET 206 (or 200 with the whole object); an S3-compatible store or a
    # proxy in between might answer 203: the caller's retry policy must see an S3 error.
    _server, http = keepalive(get_status=203)

    async def main():
        with pytest.raises(S3TransientError, match="GET k \\[0\\+3\\].*203"):
            await http.get_range("k", 0, 3)
        await http.aclose()
    trio.run(main)


@pytest.mark.parametrize("requested", [1024 * 1024, 0])
def test_connections_get_the_configured_receive_buffer(keepalive, requested):
    # Linux doubles what SO_RCVBUF asks for (bookkeeping overhead) and caps the request at
    # net.core.rmem_max; 0 leaves the socket at the OS default (tcp_rmem's middle value).
    _server, http = keepalive(receive_buffer_bytes=requested)
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    tcp_rmem_default = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[1])
    expected = 2 * min(requested, rmem_max) if requested else tcp_rmem_default

    async def main():
        assert await http.get_range("k", 0, 3) == b"xyz"
        [conn] = http._idle  # the pooled connection the GET used
        return conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    assert asyncio.run(main()) == expected


def test_the_transport_takes_the_receive_buffer_from_the_config(signed_env):
    config, client, _http = signed_env
    assert config.receive_buffer_bytes == 4 * 1024 * 1024  # the default
    http = http_transport(client, dataclasses.replace(config, receive_buffer_bytes=2 * 1024 * 1024))
    assert http._receive_buffer_bytes == 2 * 1024 * 1024


@pytest.mark.parametrize("size", [1000, 64 * 1024 - 1, 257 * 1024 * 1024])
def test_receive_buffer_bounds(size):
    with pytest.raises(ConfigError, match="wal.receive_buffer_bytes"):
        WalConfig(bucket="wal", receive_buffer_bytes=size)
