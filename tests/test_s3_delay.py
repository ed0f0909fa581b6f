"""The user-space S3 latency injector: delays by method, survives clients that vanish."""

from __future__ import annotations

import socket
import time

import pytest
import trio

from deploy.local.s3_delay import serve

pytestmark = pytest.mark.integration


@pytest.mark.trio
async def test_delays_puts_and_survives_a_reset_connection(moto_server):
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), 200.0, 0.0)

        def vanish() -> None:  # a client that connects, sends half a request and resets
            s = socket.create_connection((host, port))
            s.sendall(b"PUT /x HTTP/1.1\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()

        def timed_put_and_get() -> tuple[float, float]:
            import boto3

            s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
            s3.create_bucket(Bucket="delayed")
            t = time.perf_counter()
            s3.put_object(Bucket="delayed", Key="k", Body=b"v" * 1000)
            put_s = time.perf_counter() - t
            t = time.perf_counter()
            assert s3.get_object(Bucket="delayed", Key="k")["Body"].read() == b"v" * 1000
            return put_s, time.perf_counter() - t

        await trio.to_thread.run_sync(vanish)
        put_s, get_s = await trio.to_thread.run_sync(timed_put_and_get)
        assert put_s >= 0.2  # the injected 200 ms
        assert get_s < 0.2  # GETs were given no delay
        nursery.cancel_scope.cancel()
