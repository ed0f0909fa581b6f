"""azsidecar/broker_wait.py: start-up waits for a broker to answer, on a fake clock."""

import math
import socket

import pytest

from azsidecar.broker_wait import backoff_s, refusals, wait_for_brokers
from azsidecar.failures import StartupFailure
from azsidecar.health import AgentHealth, ProxyHealth

ADDRESSES = ["10.0.2.10:9092", "10.0.2.11:9092"]


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert 0 < seconds <= 0.25
        self.now += seconds


class Brokers:
    """Refuse until `up_at` (fake seconds), then accept; each round costs `round_s`."""

    def __init__(self, time: FakeTime, up_at: float, round_s: float = 0.0) -> None:
        self.time, self.up_at, self.round_s = time, up_at, round_s
        self.rounds: list[float] = []

    def probe(self, addresses, timeout_s):
        assert timeout_s == 2.0  # connect_timeout_s 5 capped at 2
        self.rounds.append(self.time.now)
        self.time.now += self.round_s
        if self.time.now >= self.up_at:
            return []
        return [f"{a}: Connection refused" for a in addresses]


def test_backoff_doubles_from_half_a_second_to_five():
    assert [backoff_s(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert backoff_s(10_000) == 5.0


def test_returns_at_once_when_a_broker_accepts():
    t = FakeTime()
    brokers = Brokers(t, up_at=0)
    waits: list[str] = []
    assert wait_for_brokers(ADDRESSES, math.inf, 5.0, on_waiting=waits.append, probe=brokers.probe,
                            sleep=t.sleep, clock=t.clock)
    assert brokers.rounds == [100.0] and waits == []


def test_waits_with_backoff_until_the_brokers_are_back():
    t = FakeTime()
    brokers = Brokers(t, up_at=111.0)
    waits: list[str] = []
    assert wait_for_brokers(ADDRESSES, math.inf, 5.0, on_waiting=waits.append, probe=brokers.probe,
                            sleep=t.sleep, clock=t.clock)
    # rounds at 100, then after 0.5, 1, 2, 4, 5 s pauses: 100.5, 101.5, 103.5, 107.5, 112.5 (up at 111)
    assert brokers.rounds == pytest.approx([100.0, 100.5, 101.5, 103.5, 107.5, 112.5])
    assert len(waits) == 5
    assert waits[0] == ("waiting for a broker to answer (0 s so far): "
                        "10.0.2.10:9092: Connection refused; 10.0.2.11:9092: Connection refused")
    assert waits[-1].startswith("waiting for a broker to answer (8 s so far): ")


def test_gives_up_after_startup_wait_s_naming_every_address():
    t = FakeTime()
    brokers = Brokers(t, up_at=math.inf, round_s=1.0)
    with pytest.raises(StartupFailure) as failure:
        wait_for_brokers(ADDRESSES, 10.0, 5.0, probe=brokers.probe, sleep=t.sleep, clock=t.clock)
    assert str(failure.value) == (
        "upstream.bootstrap_servers: no broker of ['10.0.2.10:9092', '10.0.2.11:9092'] answered "
        "within 10 s (upstream.startup_wait_s): 10.0.2.10:9092: Connection refused; "
        "10.0.2.11:9092: Connection refused")
    # rounds at 100 (1 s each), pauses 0.5, 1, 2: rounds at 100, 101.5, 103.5, 106.5; the next pause (4 s)
    # would end past 110
    assert brokers.rounds == pytest.approx([100.0, 101.5, 103.5, 106.5])
    assert t.now == pytest.approx(107.5)


def test_zero_wait_is_one_round():
    t = FakeTime()
    brokers = Brokers(t, up_at=math.inf)
    with pytest.raises(StartupFailure, match=r"answered: 10\.0\.2\.10:9092: Connection refused"):
        wait_for_brokers(ADDRESSES, 0.0, 5.0, probe=brokers.probe, sleep=t.sleep, clock=t.clock)
    assert brokers.rounds == [100.0]


def test_a_shutdown_while_waiting_ends_the_wait():
    t = FakeTime()
    brokers = Brokers(t, up_at=math.inf)
    stop_at = 102.0
    assert not wait_for_brokers(ADDRESSES, math.inf, 5.0, probe=brokers.probe, sleep=t.sleep, clock=t.clock,
                                stopped=lambda: t.now >= stop_at)
    assert t.now == pytest.approx(102.0)  # noticed within one 0.25 s step
    assert brokers.rounds == pytest.approx([100.0, 100.5, 101.5])


def test_refusals_name_each_address_and_stop_at_the_first_that_accepts():
    tried = []

    def connect(host, port, timeout_s):
        tried.append((host, port, timeout_s))
        if port == 1:
            raise ConnectionRefusedError(111, "Connection refused")
        if port == 2:
            raise TimeoutError
        if port == 3:
            raise socket.gaierror(-2, "Name or service not known")

    assert refusals(["a:1", "b:2", "c:3"], 2.0, connect) == [
        "a:1: Connection refused", "b:2: no answer within 2 s", "c:3: Name or service not known"]
    tried.clear()
    assert refusals(["a:1", "[::1]:4", "c:3"], 2.0, connect) == []
    assert tried == [("a", 1, 2.0), ("::1", 4, 2.0)]



def test_health_while_waiting_is_live_and_not_ready():
    proxy, agent = ProxyHealth("direct"), AgentHealth()
    detail = "waiting for a broker to answer (12 s so far): 10.0.2.10:9092: Connection refused"
    proxy.waiting_for_brokers(detail)
    agent.waiting_for_brokers(detail)
    assert proxy.live().ok and proxy.live().detail == "starting: waiting for the upstream brokers"
    assert agent.live().ok
    assert proxy.checks()["upstream"].ok is False
    assert proxy.checks()["upstream"].detail == f"upstream Metadata: {detail}"
    assert agent.checks()["brokers"].ok is False
    assert agent.checks()["brokers"].detail == f"zone's brokers Metadata: {detail}"
    proxy.brokers_reachable()
    assert proxy.live().detail == "event loop turning"
