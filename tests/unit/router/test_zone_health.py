"""router/zone_health.py: which cause a signal points to, and how the zone circuit follows it."""

from __future__ import annotations

import pytest

from router.zone_health import Cause, Signal, ZoneCircuit, allows, at, cause_of, observe, signal_of_result

LISTED, GONE, UNKNOWN = True, False, None  # the zone's brokers in the last Metadata


@pytest.mark.parametrize(("signal", "listed", "cause"), [
    (Signal.DEADLINE, LISTED, Cause.AGENT_SLOW),
    (Signal.DEADLINE, UNKNOWN, Cause.AGENT_SLOW),
    (Signal.DEADLINE, GONE, Cause.ZONE_PARTITIONED),
    (Signal.REFUSED, LISTED, Cause.AGENT_GONE),
    (Signal.REFUSED, GONE, Cause.AGENT_GONE),  # something answered from that zone: not cut off
    (Signal.NO_ANSWER, LISTED, Cause.AGENT_GONE),
    (Signal.NO_ANSWER, GONE, Cause.ZONE_PARTITIONED),
    (Signal.S3_FAILED, LISTED, Cause.S3_UNREACHABLE),
    (Signal.S3_FAILED, GONE, Cause.S3_UNREACHABLE),
    (Signal.LEADER_MOVED, LISTED, None),
    (Signal.LEADER_MOVED, GONE, None),
    (Signal.OK, GONE, None),
    (Signal.REACHABLE, GONE, None),
])
def test_cause_of_each_signal(signal, listed, cause):
    assert cause_of(signal, listed) == cause


# (signals in order, the zone's brokers listed, expected state, cause, failures)
@pytest.mark.parametrize(("signals", "listed", "state", "cause", "failures"), [
    ([Signal.DEADLINE] * 2, LISTED, "closed", Cause.AGENT_SLOW, 2),
    ([Signal.DEADLINE] * 3, LISTED, "open", Cause.AGENT_SLOW, 3),
    ([Signal.REFUSED], LISTED, "closed", Cause.AGENT_GONE, 1),
    ([Signal.REFUSED] * 2, LISTED, "open", Cause.AGENT_GONE, 2),
    ([Signal.NO_ANSWER], GONE, "open", Cause.ZONE_PARTITIONED, 1),
    ([Signal.DEADLINE], GONE, "open", Cause.ZONE_PARTITIONED, 1),
    ([Signal.S3_FAILED] * 2, LISTED, "closed", Cause.S3_UNREACHABLE, 2),
    ([Signal.S3_FAILED] * 3, LISTED, "open", Cause.S3_UNREACHABLE, 3),
    ([Signal.LEADER_MOVED] * 10, LISTED, "closed", Cause.HEALTHY, 0),
    ([Signal.DEADLINE, Signal.DEADLINE, Signal.OK, Signal.DEADLINE], LISTED, "closed", Cause.AGENT_SLOW, 1),
    ([Signal.DEADLINE, Signal.LEADER_MOVED, Signal.DEADLINE, Signal.DEADLINE], LISTED, "open", Cause.AGENT_SLOW, 3),
    # the last failure's cause decides the threshold: 2 slow answers, then a refusal (2nd failure of agent_gone's 2)
    ([Signal.DEADLINE, Signal.REFUSED], LISTED, "open", Cause.AGENT_GONE, 2),
])
def test_circuit_follows_the_signals(signals, listed, state, cause, failures):
    circuit = ZoneCircuit()
    for t, signal in enumerate(signals):
        circuit = observe(circuit, signal, float(t), listed)
    assert (circuit.state, circuit.cause, circuit.failures) == (state, cause, failures)


def test_open_turns_half_open_after_open_s_and_one_failure_reopens_one_success_closes():
    circuit = observe(ZoneCircuit(), Signal.NO_ANSWER, 100.0, GONE, "connect timed out")
    assert circuit.state == "open" and circuit.opened_at == 100.0 and not allows(at(circuit, 109.9))
    assert circuit.reason() == "open: zone_partitioned after 1 failure(s) (connect timed out)"
    half = at(circuit, 110.0)
    assert half.state == "half_open" and allows(half)
    reopened = observe(circuit, Signal.DEADLINE, 110.5, LISTED)  # the try fails: open again, at once
    assert (reopened.state, reopened.opened_at, reopened.cause) == ("open", 110.5, Cause.AGENT_SLOW)
    closed = observe(circuit, Signal.OK, 110.5, GONE)
    assert closed == ZoneCircuit() and closed.reason() == "closed"


def test_failures_while_open_keep_the_opening_time():
    circuit = observe(ZoneCircuit(), Signal.NO_ANSWER, 5.0, GONE)
    again = observe(circuit, Signal.NO_ANSWER, 8.0, GONE)
    assert (again.state, again.opened_at, again.failures) == ("open", 5.0, 2)


@pytest.mark.parametrize(("message", "leader", "signal"), [
    ("WAL write: S3 PUT failed after 3 attempts", False, Signal.S3_FAILED),
    ("notify: notify k -> az2 failed: OSError: all attempts to connect to 10.0.0.2:9400 failed", False,
     Signal.NO_ANSWER),
    ("notify: ConnectionRefusedError: [Errno 111] Connection refused", False, Signal.REFUSED),
    ("notify: notify k -> az2 abandoned after 3 attempts: TooSlowError: no answer within 1.50 s", False,
     Signal.DEADLINE),
    (None, True, Signal.LEADER_MOVED),
    ("notify: anything", True, Signal.LEADER_MOVED),
])
def test_signal_of_a_failed_batch(message, leader, signal):
    assert signal_of_result(message, leader) is signal


@pytest.mark.parametrize(("cause_signal", "listed", "after"), [
    (Signal.REFUSED, LISTED, "half_open"),  # agent_gone: it is back, try now
    (Signal.NO_ANSWER, GONE, "half_open"),  # zone_partitioned: healed
    (Signal.S3_FAILED, LISTED, "open"),  # our S3: the agent answering changes nothing
])
def test_a_reachable_agent_half_opens_a_circuit_opened_for_its_absence(cause_signal, listed, after):
    circuit = ZoneCircuit()
    for t in range(3):
        circuit = observe(circuit, cause_signal, float(t), listed)
    assert circuit.state == "open"
    assert observe(circuit, Signal.REACHABLE, 3.0, LISTED).state == after


def test_reachable_does_not_half_open_a_slow_agent_or_touch_a_closed_circuit():
    slow = ZoneCircuit()
    for t in range(3):
        slow = observe(slow, Signal.DEADLINE, float(t), LISTED)
    assert observe(slow, Signal.REACHABLE, 3.0, LISTED).state == "open"
    assert observe(ZoneCircuit(), Signal.REACHABLE, 0.0, LISTED) == ZoneCircuit()
