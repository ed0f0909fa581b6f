"""NotifySender against peers that misbehave (real sockets, trio servers written here)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import trio

from azsidecar.config import load_config
from core.audit import MemoryAuditSink
from leader_notify import protocol as p
from leader_notify.sender.sender import NotifyError, NotifySender

KEY = "sender-test-key-0123456789"


@dataclass(frozen=True)
class Share:
    offset: int
    length: int
    entries: tuple


@dataclass(frozen=True)
class Ref:
    topic: str = "t"
    partition: int = 0
    offset: int = 100
    length: int = 10
    crc32c: int = 1
    record_count: int = 1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass(frozen=True)
class Flushed:
    key: str
    zones: dict


def notify_config(port: int, **more):
    return load_config(None, {"wal.bucket": "bkt", "wal.region": "us-east-1", "notify.hmac_keys": [KEY], "notify.agents": {"az2": f"127.0.0.1:{port}"},
                              "notify.max_attempts": 3, "notify.backoff_initial_s": 0.01,
                              "notify.backoff_max_s": 0.02, "notify.timeout_s": 5.0, **more}).notify


async def answer_hello(stream, channel: p.Channel) -> None:
    """The agent's side of the HELLO exchange: the proxy's HELLO in, ours (its version) out."""
    while not channel.established:
        data = await stream.receive_some(65536)
        if not data:
            raise trio.BrokenResourceError("the proxy closed before its HELLO")
        channel.receive_data(data)
        assert channel.next_frame() is None
    await stream.send_all(channel.hello())


async def serve(answer, task_status=trio.TASK_STATUS_IGNORED):
    """A peer that decodes each request and replies with answer(request) -> signed(payload)."""
    requests = []

    async def handler(stream):
        channel = p.Channel(p.Keyring([KEY.encode()]), p.Role.AGENT, os.urandom(p.CHALLENGE_BYTES))
        async with stream:
            await answer_hello(stream, channel)
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                channel.receive_data(data)
                while (frame := channel.next_frame()) is not None:
                    req = p.decode_request(frame.payload)
                    requests.append(req)
                    await stream.send_all(respond(channel, answer(req, len(requests))))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started((listeners[0].socket.getsockname()[1], requests))
    await trio.serve_listeners(handler, listeners)


def signed(payload: bytes, key: str = KEY) -> tuple[bytes, str]:
    """An answer: the response payload and the key to sign it with on the connection."""
    return payload, key


def respond(channel: p.Channel, answer: tuple[bytes, str] | None) -> bytes:
    if answer is None:
        return b""  # a peer that reads and never answers
    payload, key = answer
    if key == KEY:
        return channel.send(p.MessageType.RESPONSE, payload)
    agent_c, proxy_c = channel.challenges  # an impostor's frame, right in every respect but the key
    return p.encode_frame(p.Keyring([key.encode()]), p.MessageType.RESPONSE, payload, 1,
                          agent_challenge=agent_c, proxy_challenge=proxy_c)


FLUSHED = Flushed("wal/k", {"az2": Share(100, 10, (Ref(),))})


@pytest.mark.trio
async def test_response_signed_with_another_key_is_not_believed(nursery):
    ok = p.encode_response(p.NotifyResponse(1, p.RequestStatus.OK, "", (p.EntryResult(0, 5),)))
    port, requests = await nursery.start(serve, lambda req, n: signed(ok, "impostor-key-0123456789"))
    audit = MemoryAuditSink()
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, audit, bucket="bkt")
    with pytest.raises(NotifyError) as info:
        await sender.notify(FLUSHED, "az2")
    await sender.aclose()
    assert info.value.retriable and len(requests) == 3
    assert [(r["status"], r["attempts"]) for r in audit.of("notification")] == [("failed", 3)]


@pytest.mark.trio
async def test_retriable_entry_error_is_resent_same_request_id_until_ok(nursery):
    def answer(req, n):
        result = p.EntryResult(7) if n == 1 else p.EntryResult(0, 42)  # REQUEST_TIMED_OUT first, then appended
        return signed(p.encode_response(p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", (result,))))

    port, requests = await nursery.start(serve, answer)
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt")
    results = await sender.notify(FLUSHED, "az2")
    await sender.aclose()
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 42)]
    assert [r.request_id for r in requests] == [1, 1]
    assert requests[0].entries == (p.NotifyEntry("t", 0, 100, 10, 1, 1, -1, -1, -1),)
    assert (requests[0].bucket, requests[0].key, requests[0].zone_offset, requests[0].zone_length) == (
        "bkt", "wal/k", 100, 10)


@pytest.mark.trio
async def test_last_attempt_returns_the_retriable_error_codes(nursery):
    def answer(req, n):
        return signed(p.encode_response(p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", (p.EntryResult(7),))))

    port, requests = await nursery.start(serve, answer)
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt")
    results = await sender.notify(FLUSHED, "az2")
    await sender.aclose()
    assert [r.error_code for r in results] == [7] and len(requests) == 3


@pytest.mark.trio
async def test_silent_agent_times_out_and_unknown_zone_is_not_retriable(nursery):
    port, requests = await nursery.start(serve, lambda req, n: None)  # reads, never answers
    sender = NotifySender(notify_config(port, **{"notify.timeout_s": 0.2, "notify.max_attempts": 2}),
                          "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt")
    with pytest.raises(NotifyError) as info:
        await sender.notify(FLUSHED, "az2")
    assert info.value.retriable and "TooSlowError" in str(info.value) and len(requests) == 2
    with pytest.raises(NotifyError) as info:
        await sender.notify(FLUSHED, "az9")
    assert not info.value.retriable
    await sender.aclose()


def answer_ok(req, n):
    return signed(p.encode_response(p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", (p.EntryResult(0, n),))))


@pytest.mark.trio
async def test_start_writes_the_frame_at_once_and_notify_takes_the_answer(nursery):
    import trio.testing

    port, requests = await nursery.start(serve, answer_ok)
    audit = MemoryAuditSink()
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, audit, bucket="bkt")
    assert sender.start(FLUSHED, "az2") is None  # no idle connection yet: notify does it all
    await sender.notify(FLUSHED, "az2")
    second = Flushed("wal/k2", FLUSHED.zones)
    started = sender.start(second, "az2")
    assert started is not None and started.unsent == b""
    await trio.testing.wait_all_tasks_blocked()  # the agent has read it, no notify() running yet
    assert [r.key for r in requests] == ["wal/k", "wal/k2"]
    results = await sender.notify(second, "az2", started=started)
    await sender.aclose()
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 2)]
    assert len(requests) == 2  # not sent a second time
    assert [(r["key"], r["status"], r["attempts"]) for r in audit.of("notification")] == [
        ("wal/k", "ok", 1), ("wal/k2", "ok", 1)]


@pytest.mark.trio
async def test_a_start_on_a_connection_the_agent_closed_is_sent_again_on_a_new_one(nursery):
    requests: list = []

    async def answer_once_then_close(stream):
        channel = p.Channel(p.Keyring([KEY.encode()]), p.Role.AGENT, os.urandom(p.CHALLENGE_BYTES))
        async with stream:
            await answer_hello(stream, channel)
            while (frame := channel.next_frame()) is None:
                channel.receive_data(await stream.receive_some(65536))
            req = p.decode_request(frame.payload)
            requests.append(req.key)
            await stream.send_all(respond(channel, answer_ok(req, len(requests))))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, answer_once_then_close, listeners)
    audit = MemoryAuditSink()
    sender = NotifySender(notify_config(listeners[0].socket.getsockname()[1]), "az1", "proxy", 1, audit,
                          bucket="bkt")
    await sender.notify(FLUSHED, "az2")  # its connection is idle now, and closed by the agent
    second = Flushed("wal/k2", FLUSHED.zones)
    started = sender.start(second, "az2")  # writes into a closed connection (or finds it broken)
    results = await sender.notify(second, "az2", started=started)
    await sender.aclose()
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 2)]
    assert requests == ["wal/k", "wal/k2"]
    assert [(r["key"], r["attempts"]) for r in audit.of("notification")] == [("wal/k", 1), ("wal/k2", 2)]


@pytest.mark.trio
async def test_aclose_closes_the_connection_of_a_start_no_notify_took(nursery):
    port, _requests = await nursery.start(serve, answer_ok)
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt")
    await sender.notify(FLUSHED, "az2")
    started = sender.start(Flushed("wal/k2", FLUSHED.zones), "az2")
    assert started is not None
    await sender.aclose()
    assert started.conn.stream.socket.fileno() == -1
    assert sender.start(FLUSHED, "az2") is None  # closed: nothing more is started


@pytest.mark.trio
async def test_on_answer_gets_the_results_before_the_sender_records_the_notification(nursery):
    port, _requests = await nursery.start(serve, answer_ok)
    audit = MemoryAuditSink()
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, audit, bucket="bkt")
    seen: list = []
    results = await sender.notify(FLUSHED, "az2", on_answer=lambda r: seen.append((r, len(audit.of("notification")))))
    await sender.aclose()
    assert seen == [(results, 0)] and [(r.error_code, r.base_offset) for r in results] == [(0, 1)]
    assert len(audit.of("notification")) == 1


def answer_ok_until_hung(state: dict):
    """An agent's answers for `serve`: OK until state["hang"], then none (it reads and stays
    silent, as when it is SIGSTOPped: connected, never answering)."""
    def answer(req, n):
        if state["hang"]:
            return None
        return signed(p.encode_response(p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", (p.EntryResult(0, n),))))
    return answer


@pytest.mark.trio
async def test_a_hanging_agent_is_abandoned_at_the_gray_deadline_then_probed(nursery):
    # 20 quick answers give the zone its history; then the agent stops answering (as when it
    # is SIGSTOPped: connected, silent). With notify.timeout_s 5 s and 3 attempts the old
    # sender waited 15 s; now an attempt is abandoned at the floor (0.3 s), hedged once, and
    # while the zone stays gray other notifications fail at once. The agent recovers: the
    # next probe succeeds and the zone is no longer gray.
    state = {"hang": False}
    port, requests = await nursery.start(serve, answer_ok_until_hung(state))
    sender = NotifySender(notify_config(port, **{"notify.gray_floor_s": 0.3}), "az1", "proxy", 1,
                          MemoryAuditSink(), bucket="bkt")
    reported: list[tuple[str, int]] = []
    sender.on_gray = lambda zone, agent: reported.append((zone, agent))
    for _ in range(20):
        await sender.notify(FLUSHED, "az2")
    state["hang"] = True
    started = trio.current_time()
    with trio.fail_after(5), pytest.raises(NotifyError) as info:
        await sender.notify(FLUSHED, "az2")
    assert 0.6 <= trio.current_time() - started < 2.0  # two attempts of 0.3 s and a backoff of 10 ms
    assert info.value.retriable and "gray deadline" in str(info.value) and len(requests) == 22
    assert reported == [("az2", 0), ("az2", 0)]  # zone, agent index
    started = trio.current_time()
    with pytest.raises(NotifyError) as refused:
        await sender.notify(FLUSHED, "az2")  # the probe just ended: not sent at all
    assert "not sent" in str(refused.value) and trio.current_time() - started < 0.1 and len(requests) == 22
    assert sender.start(FLUSHED, "az2") is None  # nothing is written ahead to a gray zone
    state["hang"] = False
    sender.guard("az2").probe_interval_s = 0.0  # the next probe may go now
    results = await sender.notify(FLUSHED, "az2")
    assert results[0].error_code == 0 and not sender.guard("az2").gray
    await sender.aclose()


@pytest.mark.trio
async def test_an_agent_hung_after_four_answers_is_abandoned_at_the_cold_deadline(nursery):
    # As a proxy saw in a loaded CI run: the agent had answered it only 4 times (a gray
    # deadline needs 5), then hung. Before, attempt and hedge each waited notify.timeout_s
    # (10 s here); now each ends at 3 x notify.gray_max_s (0.5 s -> 1.5 s), 3 s together.
    state = {"hang": False}
    port, requests = await nursery.start(serve, answer_ok_until_hung(state))
    sender = NotifySender(notify_config(port, **{"notify.timeout_s": 10.0, "notify.gray_floor_s": 0.3,
                                                 "notify.gray_max_s": 0.5}),
                          "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt")
    for _ in range(4):
        await sender.notify(FLUSHED, "az2")
    state["hang"] = True
    started = trio.current_time()
    with trio.fail_after(8), pytest.raises(NotifyError) as info:
        await sender.notify(FLUSHED, "az2")
    assert 3.0 <= trio.current_time() - started < 4.5  # two attempts of 1.5 s and a backoff of 10 ms
    assert "gray deadline" in str(info.value) and len(requests) == 6
    await sender.aclose()


@pytest.mark.trio
async def test_a_new_connection_to_a_hung_agent_is_bounded_by_the_gray_deadline(nursery):
    # A hung (SIGSTOPped) agent's kernel still accepts connections, but no HELLO comes. Here
    # the agent drops its connections and then hangs: the pooled connection fails at once,
    # the next attempt opens a new one, and the wait for its HELLO is part of the attempt:
    # it ends at the gray deadline (0.3 s), not at notify.timeout_s (5 s).
    state = {"hang": False}
    streams: list = []

    async def handler(stream):
        streams.append(stream)
        channel = p.Channel(p.Keyring([KEY.encode()]), p.Role.AGENT, os.urandom(p.CHALLENGE_BYTES))
        async with stream:
            try:
                if state["hang"]:
                    while await stream.receive_some(65536):
                        pass  # connected, silent: no HELLO, no answer
                    return
                await answer_hello(stream, channel)
                while data := await stream.receive_some(65536):
                    channel.receive_data(data)
                    while (frame := channel.next_frame()) is not None:
                        req = p.decode_request(frame.payload)
                        await stream.send_all(respond(channel, answer_ok(req, 1)))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return  # closed by the test: the agent dropping its connections

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, handler, listeners)
    port = listeners[0].socket.getsockname()[1]
    sender = NotifySender(notify_config(port, **{"notify.gray_floor_s": 0.3}), "az1", "proxy", 1,
                          MemoryAuditSink(), bucket="bkt")
    # Five answers make the history the gray deadline is computed from; the first is a first
    # contact (a partition new to the agent), whose round trip is not kept: six.
    for _ in range(6):
        await sender.notify(FLUSHED, "az2")
    state["hang"] = True
    for stream in streams:
        await stream.aclose()
    started = trio.current_time()
    with trio.fail_after(5), pytest.raises(NotifyError) as info:
        await sender.notify(FLUSHED, "az2")
    assert trio.current_time() - started < 2.0 and "gray deadline" in str(info.value)
    await sender.aclose()


@pytest.mark.trio
async def test_an_agent_of_version_3_is_reconnected_to_in_its_version_and_remembered(nursery):
    # A version-3 agent as that release behaves: its HELLO (as 3) at accept, then the proxy's
    # HELLO read, and the connection closed if it is not version 3. This one also closes
    # each connection after one answer, so every notification needs a new connection.
    offers: list[int] = []
    keyring = p.Keyring([KEY.encode()])

    async def legacy_agent(stream):
        challenge = os.urandom(p.CHALLENGE_BYTES)
        async with stream:
            await stream.send_all(p.encode_frame(keyring, p.MessageType.HELLO_AGENT, challenge, 0, version=3))
            hello = b""
            while len(hello) < p.HELLO_FRAME_BYTES:
                data = await stream.receive_some(p.HELLO_FRAME_BYTES - len(hello))
                if not data:
                    return
                hello += data
            offers.append(hello[4])  # the version byte of the proxy's HELLO
            if hello[4] != 3:
                return  # "unsupported protocol version 4; closing"
            # From here on a version-3 connection: one request frame in, one response out.
            agent_c, proxy_c = challenge, hello[p.FRAME_OVERHEAD_BYTES - p.MAC_BYTES:-p.MAC_BYTES]
            buf = b""
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
                if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    break
            assert buf[4] == 3  # the request frame's version byte
            req = p.decode_request(buf[4 + 14:-p.MAC_BYTES])  # after u32 length and the 14-byte header
            payload = p.encode_response(p.NotifyResponse(req.request_id, p.RequestStatus.OK, "",
                                                         (p.EntryResult(0, 9),)))
            await stream.send_all(p.encode_frame(keyring, p.MessageType.RESPONSE, payload, 1, version=3,
                                                 agent_challenge=agent_c, proxy_challenge=proxy_c))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, legacy_agent, listeners)
    sender = NotifySender(notify_config(listeners[0].socket.getsockname()[1]), "az1", "proxy", 1,
                          MemoryAuditSink(), bucket="bkt")
    try:
        first = await sender.notify(FLUSHED, "az2")
        assert offers == [4, 3]  # offered 4, refused, reconnected offering 3
        second = await sender.notify(Flushed("wal/k2", FLUSHED.zones), "az2")
    finally:
        await sender.aclose()
    assert [(r.error_code, r.base_offset) for r in first + second] == [(0, 9), (0, 9)]
    # The second notification's pooled connection had been closed: its new one offered 3 at once.
    assert offers == [4, 3, 3]
    assert not sender.pipelining_allowed("az2", 0)
    assert sender.metrics.value("azsidecar_notify_protocol_connections_total", dest_zone="az2", protocol_version="3") == 2


@pytest.mark.trio
async def test_an_agent_with_no_version_in_common_fails_the_attempts_with_one_log_line(nursery, caplog):
    # An agent two releases ahead: it answers only in version 5, above anything this proxy speaks.
    keyring = p.Keyring([KEY.encode()])

    async def future_agent(stream):
        async with stream:
            hello = b""
            while len(hello) < p.HELLO_FRAME_BYTES:
                data = await stream.receive_some(p.HELLO_FRAME_BYTES - len(hello))
                if not data:
                    return
                hello += data
            await stream.send_all(p.encode_frame(keyring, p.MessageType.HELLO_AGENT, os.urandom(16), 0, version=5))
            while await stream.receive_some(65536):
                pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, future_agent, listeners)
    sender = NotifySender(notify_config(listeners[0].socket.getsockname()[1]), "az1", "proxy", 1,
                          MemoryAuditSink(), bucket="bkt")
    try:
        with caplog.at_level("WARNING", logger="leader_notify.sender.sender"), pytest.raises(NotifyError) as caught:
            await sender.notify(FLUSHED, "az2")
    finally:
        await sender.aclose()
    assert caught.value.retriable  # the router's fallback takes it, as for an agent that is down
    assert "after 3 attempts" in str(caught.value) and "upgrade the proxy" in str(caught.value)
    lines = [r.getMessage() for r in caplog.records if "upgrade the proxy" in r.getMessage()]
    assert len(lines) == 1, lines  # three attempts, one line
    assert "the agent speaks notify protocol v5 and later; this proxy speaks v3..v4" in lines[0]



@pytest.mark.trio
async def test_not_leader_is_returned_after_one_attempt_for_the_router_to_re_route(nursery):
    """NOT_LEADER_OR_FOLLOWER from an agent: it has retried its own zone's leaders already, so
    the sender returns the code after one attempt (the router re-routes the batch to the new
    leader's zone) instead of asking the same agent twice more."""
    def answer(req, n):
        return signed(p.encode_response(p.NotifyResponse(req.request_id, p.RequestStatus.OK, "", (p.EntryResult(6),))))

    port, requests = await nursery.start(serve, answer)
    sender = NotifySender(notify_config(port), "az1", "proxy", 1, MemoryAuditSink(), bucket="bkt")
    results = await sender.notify(FLUSHED, "az2")
    await sender.aclose()
    assert [r.error_code for r in results] == [6] and len(requests) == 1
