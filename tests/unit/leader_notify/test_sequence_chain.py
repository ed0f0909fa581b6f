"""sequence_chain: which batch may follow another in flight. Batches from aiokafka's builder."""

from __future__ import annotations

from leader_notify.agent.sequence_chain import SequenceChain, follows, may_send_ahead, producer_run_key
from tests.integration.leader_notify.idempotent_batches import idempotent_batch

MAX_SEQUENCE = (1 << 31) - 1


def test_the_key_names_producer_epoch_and_the_sequence_after_the_batch():
    assert producer_run_key(idempotent_batch(42, 3, 10, [b"a", b"b", b"c"])) == (42, 3, 10, 13)


def test_the_sequence_wraps_past_int32_max():
    assert producer_run_key(idempotent_batch(42, 0, MAX_SEQUENCE - 1, [b"a", b"b"])) == (42, 0, MAX_SEQUENCE - 1, 0)
    assert follows(idempotent_batch(42, 0, MAX_SEQUENCE, [b"a"]), idempotent_batch(42, 0, 0, [b"b"]))


def test_batches_that_are_not_an_idempotent_producers_have_no_key():
    assert producer_run_key(idempotent_batch(-1, -1, -1, [b"a"])) is None  # no producer id
    assert producer_run_key(idempotent_batch(42, 0, 0, [b"a"], transactional=True)) is None
    assert producer_run_key(b"\x00" * 56) is None  # shorter than a header
    legacy = bytearray(idempotent_batch(42, 0, 0, [b"a"]))
    legacy[16] = 1  # magic 1
    assert producer_run_key(bytes(legacy)) is None


def test_follows_needs_same_producer_same_epoch_next_sequence():
    first = idempotent_batch(42, 0, 0, [b"a", b"b"])  # sequences 0-1
    assert follows(first, idempotent_batch(42, 0, 2, [b"c"]))
    assert not follows(first, idempotent_batch(42, 0, 3, [b"c"]))  # a gap
    assert not follows(first, idempotent_batch(42, 0, 1, [b"c"]))  # overlaps
    assert not follows(first, idempotent_batch(43, 0, 2, [b"c"]))  # another producer
    assert not follows(first, idempotent_batch(42, 1, 2, [b"c"]))  # another epoch
    assert not follows(idempotent_batch(-1, -1, -1, [b"a"]), idempotent_batch(-1, -1, -1, [b"b"]))


def test_may_send_ahead_only_behind_a_confirmed_predecessor():
    run = [idempotent_batch(42, 0, i, [b"x"]) for i in range(5)]
    assert not may_send_ahead(run, 0, 0, 1)  # nothing of the run confirmed: the leader may not know the producer
    assert may_send_ahead(run, 0, 1, 2)  # run[0] appended, run[1] in flight, run[2] follows
    assert may_send_ahead(run, 0, 1, 3)  # run[1], run[2] in flight
    assert not may_send_ahead(run, 2, 2, 3)  # a run that starts at 2 has confirmed nothing yet
    assert not may_send_ahead(run, 0, 1, 1)  # nothing in flight: not "ahead"
    assert not may_send_ahead(run, 0, 4, 5)  # past the end
    gap = [run[0], run[1], idempotent_batch(42, 0, 3, [b"x"])]
    assert not may_send_ahead(gap, 0, 1, 2)
    other = [run[0], idempotent_batch(43, 0, 1, [b"x"]), idempotent_batch(43, 0, 2, [b"x"])]
    assert not may_send_ahead(other, 0, 1, 2)  # run[1] is not the confirmed batch's successor


def test_the_chain_answers_as_the_function_for_every_ask_in_any_order():
    """SequenceChain memoizes `follows` per pair: over a run with a gap, another producer, a
    batch without producer id and a new epoch, every (first, confirmed, sent) asked in
    forward then reverse order on one chain gives may_send_ahead's answer."""
    run = ([idempotent_batch(42, 0, i, [b"x"]) for i in range(4)]  # 0-3 in sequence
           + [idempotent_batch(42, 0, 5, [b"x"]), idempotent_batch(42, 0, 6, [b"x"])]  # a gap before 4
           + [idempotent_batch(43, 0, 7, [b"x"]), idempotent_batch(-1, -1, -1, [b"x"])]
           + [idempotent_batch(42, 1, 0, [b"x"]), idempotent_batch(42, 1, 1, [b"x"])])
    asks = [(f, c, s) for f in range(len(run) + 1) for c in range(len(run) + 1) for s in range(len(run) + 2)]
    chain = SequenceChain(run)
    for ask in asks + asks[::-1]:
        assert chain.may_send_ahead(*ask) == may_send_ahead(run, *ask), ask
    # Hand-checked: 1-3 follow 0, 4 does not follow 3 (a gap), 6 is another producer's, 7 has
    # no producer id.
    assert [chain.may_send_ahead(0, 1, s) for s in (2, 3, 4)] == [True, True, False]
    assert chain.may_send_ahead(0, 2, 3) is True
    assert chain.may_send_ahead(4, 5, 6) is False
    assert chain.may_send_ahead(6, 7, 8) is False
