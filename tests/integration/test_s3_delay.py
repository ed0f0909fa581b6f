"""The user-space S3 latency injector: delays by method, survives clients that vanish, and
(keepalive mode) keeps client connections open across requests although moto closes its own."""

from __future__ import annotations

import functools
import http.client
import socket
import time

import boto3
import h11
import pytest
import trio

from deploy.local.s3_delay import PROFILES, profile_delay_s, serve

pytestmark = pytest.mark.integration

PUT_DELAY_MS = 2000.0


@pytest.mark.trio
@pytest.mark.parametrize("mode", ["keepalive", "transparent"])
async def test_delays_puts_and_survives_a_reset_connection(moto_server, mode):
    async with trio.open_nursery() as nursery:
        # A PUT delay far above what a request takes on a loaded host (a GET took up to 0.48 s
        # on a test worker at low CPU priority), so "not delayed" needs no timing margin.
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), PUT_DELAY_MS, 0.0,
                                         mode)

        def vanish() -> None:  # a client that connects, sends half a request and resets
            s = socket.create_connection((host, port))
            s.sendall(b"PUT /x HTTP/1.1\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()

        def timed_put_and_get() -> tuple[float, float]:
            import boto3

            s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
            s3.create_bucket(Bucket=f"delayed-{mode}")
            t = time.perf_counter()
            s3.put_object(Bucket=f"delayed-{mode}", Key="k", Body=b"v" * 1000)
            put_s = time.perf_counter() - t
            t = time.perf_counter()
            assert s3.get_object(Bucket=f"delayed-{mode}", Key="k")["Body"].read() == b"v" * 1000
            return put_s, time.perf_counter() - t

        await trio.to_thread.run_sync(vanish)
        put_s, get_s = await trio.to_thread.run_sync(timed_put_and_get)
        assert put_s >= PUT_DELAY_MS / 1000  # the injected delay
        assert get_s < PUT_DELAY_MS / 1000  # GETs were given none: a delayed one takes at least as long
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_keepalive_mode_answers_several_requests_on_one_connection(moto_server):
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), 0.0, 0.0)

        def requests_on_one_connection() -> list[tuple[int, bytes, str | None]]:
            import boto3

            boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                         aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket="keepalive")
            # Unsigned requests (moto takes them; the objects are public-read so GETs pass).
            conn = http.client.HTTPConnection(host, port, timeout=10)
            seen = []
            big = bytes(range(256)) * 8192  # 2 MiB, sent after "100 Continue"
            for method, path, body, headers in [
                ("PUT", "/keepalive/small", b"hello", {"x-amz-acl": "public-read"}),
                ("PUT", "/keepalive/big", big, {"Expect": "100-continue", "x-amz-acl": "public-read"}),
                ("GET", "/keepalive/small", None, {}),
                ("HEAD", "/keepalive/big", None, {}),
                ("GET", "/keepalive/big", None, {"Range": "bytes=1-3"}),
                ("GET", "/keepalive/absent", None, {}),
            ]:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                seen.append((response.status, response.read(), response.getheader("Connection")))
                assert conn.sock is not None, f"{method} {path}: the proxy closed the connection"
            conn.close()
            return seen

        seen = await trio.to_thread.run_sync(requests_on_one_connection)
        assert [status for status, _, _ in seen] == [200, 200, 200, 200, 206, 404]
        assert seen[2][1] == b"hello"
        assert seen[3][1] == b""  # HEAD: no body, the connection still usable after it
        assert seen[4][1] == b"\x01\x02\x03"
        assert b"NoSuchKey" in seen[5][1]
        assert all(connection is None for _, _, connection in seen)  # moto's "Connection: close" stays upstream
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_hold_answer_stores_at_once_and_answers_after_the_delay(moto_server):
    async with trio.open_nursery() as nursery:
        # The answer's delay is PUT_DELAY_MS, far above a HEAD's time on a loaded host: with 300 ms a
        # loaded CI worker's polling HEAD came back 0.07 s after the client had its answer.
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), PUT_DELAY_MS,
                                         0.0, "keepalive", "answer")

        def put_through_proxy_and_watch_moto() -> tuple[float, float]:
            import threading

            import boto3

            direct = boto3.client("s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1",
                                  aws_access_key_id="testing", aws_secret_access_key="testing")
            delayed = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
            direct.create_bucket(Bucket="held")
            started = time.perf_counter()
            answered: list[float] = []
            put = threading.Thread(target=lambda: (delayed.put_object(Bucket="held", Key="k", Body=b"v"),
                                                   answered.append(time.perf_counter())))
            put.start()
            stored_at = None
            while stored_at is None and time.perf_counter() - started < 5:  # poll moto, bounded
                try:
                    direct.head_object(Bucket="held", Key="k")
                    stored_at = time.perf_counter()
                except direct.exceptions.ClientError:
                    pass
            put.join(10)
            assert stored_at is not None and answered
            return stored_at - started, answered[0] - started

        stored_s, answered_s = await trio.to_thread.run_sync(put_through_proxy_and_watch_moto)
        assert answered_s >= PUT_DELAY_MS / 1000  # the injected delay, on the answer
        assert stored_s < answered_s  # moto had the object while the client still waited
        nursery.cancel_scope.cancel()


UPSTREAM_WORK_S = 0.4  # the slow upstream's own time per request, equal to the injected delay


async def _slow_upstream(stream: trio.SocketStream) -> None:
    """An HTTP/1.1 server that takes UPSTREAM_WORK_S to answer each request (as moto on a loaded host)."""
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
        await trio.sleep(UPSTREAM_WORK_S)  # the upstream's work, not synchronization
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"2"),
                                                                              (b"connection", b"close")])))
        await stream.send_all(conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))


@pytest.mark.trio
async def test_hold_answer_counts_the_upstreams_own_time_in_the_delay():
    # Delay 400 ms, upstream 400 ms: the answer comes ~400 ms after the request, not ~800 ms
    # (the profile is S3's whole latency; the upstream's work happens within it).
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, _slow_upstream, 0, host="127.0.0.1"))
        upstream_port = listeners[0].socket.getsockname()[1]
        host, port = await nursery.start(serve, ("127.0.0.1", 0), ("127.0.0.1", upstream_port),
                                         UPSTREAM_WORK_S * 1000, 0.0, "keepalive", "answer")
        client = h11.Connection(h11.CLIENT)
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            started = trio.current_time()
            await stream.send_all(client.send(h11.Request(method="PUT", target="/b/k", headers=[
                (b"host", b"x"), (b"content-length", b"1")])) + client.send(h11.Data(data=b"v"))
                + client.send(h11.EndOfMessage()))
            with trio.fail_after(5):
                while not isinstance(event := client.next_event(), h11.EndOfMessage):
                    if event is h11.NEED_DATA:
                        client.receive_data(await stream.receive_some(65536))
                    elif isinstance(event, h11.Response):
                        assert event.status_code == 200
            elapsed = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert UPSTREAM_WORK_S <= elapsed < 1.75 * UPSTREAM_WORK_S  # held until the delay, not delay + upstream


@pytest.mark.trio
async def test_hold_answer_needs_keepalive_mode():
    with pytest.raises(ValueError, match="keepalive"):
        await serve(("127.0.0.1", 0), ("127.0.0.1", 9), 1.0, 1.0, "transparent", "answer")


@pytest.mark.parametrize("profile,method,headers,expected_s", [
    # Standard PUT of 1 MiB: 25 ms + 10 ms; of 0 bytes: 25 ms.
    ("standard", b"PUT", {b"content-length": b"1048576"}, 0.035),
    ("standard", b"PUT", {}, 0.025),
    # Standard ranged GET of 512 KiB (bytes=0-524287): 15 ms + 5 ms.
    ("standard", b"GET", {b"range": b"bytes=0-524287"}, 0.020),
    ("standard", b"GET", {}, 0.015),  # no Range: the first byte only
    # Express PUT of 8 MiB: 4 ms + 16 ms; GET of 1 MiB at offset 1 MiB: 3 ms + 2 ms.
    ("express", b"PUT", {b"content-length": b"8388608"}, 0.020),
    ("express", b"GET", {b"range": b"bytes=1048576-2097151"}, 0.005),
    ("express", b"DELETE", {}, 0.0),
])
def test_profile_delays_grow_with_the_bytes_moved(profile, method, headers, expected_s):
    assert profile_delay_s(PROFILES[profile], method, headers) == pytest.approx(expected_s)


@pytest.mark.trio
async def test_standard_profile_holds_a_put_by_its_size(moto_server):
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(functools.partial(
            serve, ("127.0.0.1", 0), ("127.0.0.1", moto_server.port), 0.0, 0.0, profile="standard"))

        def timed_put() -> float:
            s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
            s3.create_bucket(Bucket="profiled")
            started = time.perf_counter()
            s3.put_object(Bucket="profiled", Key="k", Body=b"v" * (4 * 1024 * 1024))
            return time.perf_counter() - started

        put_s = await trio.to_thread.run_sync(timed_put)
        nursery.cancel_scope.cancel()
    assert put_s >= 0.065  # 25 ms + 4 MiB * 10 ms: the size-dependent part was held too
