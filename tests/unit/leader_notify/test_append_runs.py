"""The appender's accumulator without I/O (leader_notify/agent/append_runs.py): which queued
runs' batches go in a leader's next request, and what an answer does to each run, by hand.
Batches here are plain bytes without a producer id, so none may go ahead of an answer."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.structs import TopicPartition

from leader_notify.agent.append_runs import Run, next_request, settle_answer

NETWORK_EXCEPTION, NOT_LEADER, UNKNOWN_TOPIC_OR_PARTITION = 13, 6, 3
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def run(loop, tp: TopicPartition, sizes: list[int]) -> Run:
    return Run(tp, [b"x" * n for n in sizes], 0, loop.create_future(), now=0.0)


def test_one_batch_per_partition_in_queue_order(loop):
    a, b, c = run(loop, T0, [10, 10]), run(loop, T0, [10]), run(loop, T1, [10])
    taken, live = next_request([a, b, c], {}, max_request_bytes=100)
    assert taken == {T0: a, T1: c}  # b waits behind a: the same partition
    assert live == [a, b, c]


def test_a_partition_in_flight_takes_nothing_more_without_a_chain(loop):
    a, c = run(loop, T0, [10, 10]), run(loop, T1, [10])
    a.sent = 1  # its first batch is in flight
    taken, live = next_request([a, c], {T0: a}, max_request_bytes=100)
    assert taken == {T1: c} and live == [a, c]


def test_a_full_request_holds_back_every_later_run(loop):
    a, b, c = run(loop, T0, [60]), run(loop, T1, [60]), run(loop, TopicPartition("t", 2), [10])
    taken, live = next_request([a, b, c], {}, max_request_bytes=100)
    assert taken == {T0: a}  # b does not fit; c is small but must not overtake b
    assert live == [a, b, c]


def test_a_batch_larger_than_the_limit_goes_alone(loop):
    big = run(loop, T0, [500])
    taken, _live = next_request([big], {}, max_request_bytes=100)
    assert taken == {T0: big}


def test_done_runs_are_dropped(loop):
    a, b = run(loop, T0, [10]), run(loop, T1, [10])
    a.done.cancel()  # its caller went away
    taken, live = next_request([a, b], {}, max_request_bytes=100)
    assert taken == {T1: b} and live == [b]


def test_an_answer_appends_or_stops_each_run_and_frees_its_partition(loop):
    a, c = run(loop, T0, [10, 10]), run(loop, T1, [10])
    busy = {T0: a, T1: c}
    for r in (a, c):
        r.sent, r.in_flight = 1, 1
    settle_answer([(a, 0), (c, 0)], {("t", 0): (0, 41), ("t", 1): (NOT_LEADER, -1)}, None, busy, now=2.0)
    assert (a.offsets, a.next, a.done.done()) == ([41], 1, False)  # one more batch to go
    assert (c.failure, c.done.done()) == (NOT_LEADER, True)
    assert busy == {}


def test_a_failed_request_stops_every_run_in_it_and_a_missing_partition_is_unknown(loop):
    a, c = run(loop, T0, [10]), run(loop, T1, [10])
    for r in (a, c):
        r.sent, r.in_flight = 1, 1
    settle_answer([(a, 0)], {}, NETWORK_EXCEPTION, {T0: a}, now=1.0)
    assert a.failure == NETWORK_EXCEPTION
    settle_answer([(c, 0)], {}, None, {T1: c}, now=1.0)
    assert c.failure == UNKNOWN_TOPIC_OR_PARTITION
