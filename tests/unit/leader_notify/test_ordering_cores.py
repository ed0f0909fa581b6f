"""The two pure cores of pipelined notifications, table-tested with hand-written sequences:
the proxy's OrderedWindow (what to send, accept or re-send serially) and the agent's
OrderedRuns (which ordered run is held after a failure)."""

from __future__ import annotations

import pytest

from leader_notify.agent.ordered_runs import OrderedRuns
from leader_notify.sender.ordered_window import Accept, OrderedWindow, Serial

# ---------------------------------------------------------------- OrderedWindow
# A sequence is a list of events; each event is applied and the expected outcome written
# beside it: ("send", key) -> can_send() before it; ("ok"/"fail", key) -> None;
# ("step",) -> next_step(); ("done", key) -> serial_done; ("can",) -> can_send().

WINDOW_CASES = {
    "all ok, answers in order": (2, [
        ("can",), True, ("send", "k1"), True, ("send", "k2"), True, ("can",), False,
        ("ok", "k1"), None, ("step",), Accept("k1"), ("can",), True, ("step",), None,
        ("ok", "k2"), None, ("step",), Accept("k2"), ("step",), None,
    ]),
    "a later answer first waits for the head": (3, [
        ("send", "k1"), True, ("send", "k2"), True, ("ok", "k2"), None,
        ("step",), None, ("ok", "k1"), None, ("step",), Accept("k1"), ("step",), Accept("k2"),
    ]),
    "failure of the head: sends stop, the rest is answered first, then serial in order": (3, [
        ("send", "k1"), True, ("send", "k2"), True, ("send", "k3"), True,
        ("fail", "k1"), None, ("can",), False,
        ("step",), None,  # k2 and k3 still in flight: the re-send of k1 must not pass them
        ("fail", "k2"), None, ("step",), None,
        ("ok", "k3"), None,
        ("step",), Serial("k1"), ("step",), None, ("can",), False, ("done", "k1"), None,
        ("step",), Serial("k2"), ("done", "k2"), None,
        ("step",), Accept("k3"),  # k3 had no failed partition: its answer stands
        ("can",), True, ("step",), None,
    ]),
    "failure of a later object stops sends but accepts the ok head": (3, [
        ("send", "k1"), True, ("send", "k2"), True, ("fail", "k2"), None, ("can",), False,
        ("ok", "k1"), None, ("step",), Accept("k1"), ("step",), Serial("k2"),
        ("can",), False, ("done", "k2"), None, ("can",), True,
    ]),
    "an object sent unordered (gray agent) is delivered serially at its turn": (4, [
        ("send", "k1"), True, ("send_serial", "k2"), True, ("can",), False,
        ("step",), None, ("ok", "k1"), None, ("step",), Accept("k1"),
        ("step",), Serial("k2"), ("done", "k2"), None, ("can",), True,
    ]),
    "retries: a serial re-send that fails again still ends the recovery": (2, [
        ("send", "k1"), True, ("fail", "k1"), None, ("step",), Serial("k1"),
        ("done", "k1"), None, ("can",), True, ("send", "k2"), True, ("ok", "k2"), None,
        ("step",), Accept("k2"),
    ]),
    "depth 1 is one at a time": (1, [
        ("send", "k1"), True, ("can",), False, ("ok", "k1"), None, ("can",), False,  # answered, not settled
        ("step",), Accept("k1"), ("can",), True,
    ]),
}


def _apply(window: OrderedWindow, event: tuple) -> object:
    kind = event[0]
    if kind == "can":
        return window.can_send()
    if kind == "send":
        before = window.can_send()
        window.sent(event[1])
        return before
    if kind == "send_serial":
        before = window.can_send()
        window.sent(event[1], ordered=False)
        return before
    if kind in ("ok", "fail"):
        return window.answered(event[1], ok=kind == "ok")
    if kind == "step":
        return window.next_step()
    if kind == "done":
        return window.serial_done(event[1])
    raise AssertionError(event)


@pytest.mark.parametrize("name", list(WINDOW_CASES))
def test_ordered_window_sequences(name):
    depth, script = WINDOW_CASES[name]
    window = OrderedWindow(depth)
    got = []
    for event in script[::2]:
        got.append(_apply(window, event))
    assert got == script[1::2]


def test_depth_one_frees_its_slot_only_when_the_object_is_settled():
    window = OrderedWindow(1)
    window.sent("k1")
    window.answered("k1", ok=True)
    assert window.can_send() is False  # answered, not yet settled (its waiters not handed it)
    assert window.next_step() == Accept("k1")
    assert window.can_send() is True


def test_window_refuses_misuse():
    window = OrderedWindow(1)
    window.sent("k1")
    with pytest.raises(RuntimeError):
        window.sent("k2")  # full
    with pytest.raises(KeyError):
        window.answered("k9", ok=True)  # never sent
    window.answered("k1", ok=False)
    with pytest.raises(KeyError):
        window.answered("k1", ok=True)  # answered twice
    with pytest.raises(KeyError):
        window.serial_done("k1")  # no Serial step handed out yet
    with pytest.raises(ValueError):
        OrderedWindow(0)


# ---------------------------------------------------------------- OrderedRuns
# ("turn", proxy, partition, ordered) -> None (append) or the code it is failed with;
# ("finished", proxy, partition, ordered, code) -> None.

P0 = ("proxy-a", "t", 0)
P1 = ("proxy-a", "t", 1)
Q0 = ("proxy-b", "t", 0)

RUNS_CASES = {
    "nothing failed: every run appends": [
        ("turn", P0, True), None, ("finished", P0, True, 0), None, ("turn", P0, True), None,
    ],
    "an ordered failure holds that partition's later ordered runs, only of that proxy": [
        ("turn", P0, True), None, ("finished", P0, True, 6), None,
        ("turn", P0, True), 6,  # k+1's run of t-0: refused unappended, with the same code
        ("finished", P0, True, 6), None,
        ("turn", P1, True), None,  # another partition goes on
        ("turn", Q0, True), None,  # another proxy's producer: no order between them
        ("turn", P0, True), 6,  # still held: nothing ordered overtakes the re-send
    ],
    "the proxy's unordered re-send ends the hold and is appended": [
        ("finished", P0, True, 7), None, ("turn", P0, False), None, ("finished", P0, False, 0), None,
        ("turn", P0, True), None,
    ],
    "an unordered failure holds nothing (its sender waits for the answer)": [
        ("turn", P0, False), None, ("finished", P0, False, 6), None, ("turn", P0, True), None,
    ],
    "a re-send that fails again, then a later ordered failure holds again": [
        ("finished", P0, True, 6), None, ("turn", P0, False), None, ("finished", P0, False, 6), None,
        ("turn", P0, True), None, ("finished", P0, True, 19), None, ("turn", P0, True), 19,
    ],
}


@pytest.mark.parametrize("name", list(RUNS_CASES))
def test_ordered_runs_sequences(name):
    script = RUNS_CASES[name]
    runs = OrderedRuns()
    got = []
    for event in script[::2]:
        if event[0] == "turn":
            got.append(runs.turn(event[1], ordered=event[2]))
        else:
            got.append(runs.finished(event[1], ordered=event[2], error_code=event[3]))
    assert got == script[1::2]


def test_ordered_runs_are_bounded_oldest_dropped_first():
    runs = OrderedRuns(max_keys=2)
    for partition in range(3):
        runs.finished(("p", "t", partition), ordered=True, error_code=6)
    assert len(runs) == 2
    assert runs.held(("p", "t", 0)) is None
    assert runs.held(("p", "t", 2)) == 6
