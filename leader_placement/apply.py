"""Carrying a leader plan out: pure batch steps and checks, and the thin loop that runs them.

Strategy. The moves go in batches of `batch_size` (`batches`). For each batch the loop
re-reads the partitions and stops if the plan no longer fits them (`stale`: the leader
changed, the target left the ISR, the replica set changed), asks for the same replica set
in the new order (AlterPartitionReassignments), waits until no reassignment of the batch is
pending and the replicas read back in the new order, asks for a preferred-leader election,
waits until each partition is led by its target (asking again every REELECT_S), and checks
each partition against its state before the batch (`anomaly`: leader not moved, replica set changed, ISR smaller).
The first anomaly stops the run with the message. Between batches it sleeps `throttle_s`:
a throttle on how fast leadership churns, not a wait for anything.

The cluster is behind `LeaderAdmin` (leader_placement.admin is the Kafka one; tests may
pass another); the clock and the sleep are arguments, so the loop imports no I/O library.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from leader_placement.plan import Move, PartitionKey, PartitionPlacement

REELECT_S = 5.0  # while a batch's targets do not lead yet, ask for the preferred leaders again this often


class LeaderAdmin(Protocol):
    """What the loop needs from the cluster. Each call raises on a refused request."""

    def describe(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, PartitionPlacement]:
        """The partitions' current state (a missing key: the partition does not exist)."""
        ...

    def reassign(self, orders: dict[PartitionKey, tuple[int, ...]]) -> dict[PartitionKey, str]:
        """Ask for these replica orders; returns the partitions the controller refused, with why."""
        ...

    def pending(self, keys: Sequence[PartitionKey]) -> set[PartitionKey]:
        """The keys with a reassignment still in progress."""
        ...

    def elect_preferred(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, str]:
        """Preferred-leader election; returns the partitions whose election failed, with why
        (ELECTION_NOT_NEEDED is not a failure)."""
        ...


def batches(moves: Sequence[Move], batch_size: int) -> list[tuple[Move, ...]]:
    """The moves in plan order, `batch_size` at a time. Raises ValueError if batch_size < 1."""
    if batch_size < 1:
        raise ValueError(f"batch size {batch_size} is below 1")
    return [tuple(moves[i:i + batch_size]) for i in range(0, len(moves), batch_size)]


def stale(move: Move, now: PartitionPlacement | None) -> str | None:
    """Why the planned move no longer fits the partition's state, or None."""
    name = f"{move.topic}-{move.partition}"
    if now is None:
        return f"{name}: no longer exists"
    if now.leader != move.from_broker:
        return f"{name}: led by broker {now.leader}, the plan expected {move.from_broker}; plan again"
    if sorted(now.replicas) != sorted(move.replicas_before):
        return f"{name}: replicas are {list(now.replicas)}, the plan expected {list(move.replicas_before)}; plan again"
    if move.to_broker not in now.isr:
        return f"{name}: broker {move.to_broker} is not in the ISR {list(now.isr)}; not moving the leader there"
    return None


def reordered(move: Move, now: PartitionPlacement | None) -> bool:
    return now is not None and now.replicas == move.replicas_after


def anomaly(move: Move, before: PartitionPlacement, after: PartitionPlacement | None) -> str | None:
    """What is wrong with the partition after its move, or None: it must be led by the
    target, keep its replica set, and have an ISR at least as large as before."""
    name = f"{move.topic}-{move.partition}"
    if after is None:
        return f"{name}: disappeared during the move"
    if after.leader != move.to_broker:
        return f"{name}: led by broker {after.leader} after the election, not {move.to_broker}"
    if sorted(after.replicas) != sorted(before.replicas):
        return f"{name}: replica set changed from {sorted(before.replicas)} to {sorted(after.replicas)}"
    if len(after.isr) < len(before.isr):
        return f"{name}: ISR shrank from {sorted(before.isr)} to {sorted(after.isr)}"
    return None


@dataclass(frozen=True)
class ApplyResult:
    moved: tuple[Move, ...]
    error: str | None = None  # the anomaly that stopped the run

    @property
    def ok(self) -> bool:
        return self.error is None


def apply_moves(admin: LeaderAdmin, moves: Sequence[Move], *, batch_size: int, throttle_s: float, timeout_s: float,
                poll_s: float, clock: Callable[[], float], sleep: Callable[[float], None],
                report: Callable[[str], None]) -> ApplyResult:
    """Carry the moves out batch by batch; stop at the first anomaly (ApplyResult.error).

    `timeout_s` bounds each wait (reassignment done, leaders elected); `poll_s` is the
    interval of reading the cluster's state while waiting. Exceptions of `admin` propagate.
    """
    done: list[Move] = []
    plan = batches(moves, batch_size)
    for n, batch in enumerate(plan, start=1):
        keys = [(m.topic, m.partition) for m in batch]
        before = admin.describe(keys)
        for m in batch:
            why = stale(m, before.get((m.topic, m.partition)))
            if why:
                return ApplyResult(tuple(done), why)
        refused = admin.reassign({(m.topic, m.partition): m.replicas_after for m in batch})
        if refused:
            return ApplyResult(tuple(done), "reassignment refused: " + "; ".join(
                f"{t}-{p}: {why}" for (t, p), why in sorted(refused.items())))
        if not _until(functools.partial(_reassigned, admin, batch), timeout_s, poll_s, clock, sleep):
            return ApplyResult(tuple(done), f"batch {n}: the reassignment did not complete within {timeout_s:.0f} s")
        failed = admin.elect_preferred(keys)
        if failed:
            return ApplyResult(tuple(done), "preferred election failed: " + "; ".join(
                f"{t}-{p}: {why}" for (t, p), why in sorted(failed.items())))
        # Checked on the read that showed the targets leading, not on a new one: each read asks
        # one broker, and another broker's metadata may still lag the election (under load a
        # second read named the old leader and failed a move that had happened).
        after = _until_led(admin, batch, timeout_s, poll_s, clock, sleep)  # the check names what did not happen
        for m in batch:
            why = anomaly(m, before[(m.topic, m.partition)], after.get((m.topic, m.partition)))
            if why:
                return ApplyResult(tuple(done), why)
            done.append(m)
            report(f"moved {m.topic}-{m.partition}: broker {m.from_broker} ({m.from_zone}) -> "
                   f"{m.to_broker} ({m.to_zone}), ISR {sorted(after[(m.topic, m.partition)].isr)}")
        if n < len(plan) and throttle_s > 0:
            sleep(throttle_s)  # throttle between batches
    return ApplyResult(tuple(done))


def _reassigned(admin: LeaderAdmin, batch: tuple[Move, ...]) -> bool:
    keys = [(m.topic, m.partition) for m in batch]
    if admin.pending(keys):
        return False
    now = admin.describe(keys)
    return all(reordered(m, now.get(k)) for m, k in zip(batch, keys))


def _not_led_by_target(batch: tuple[Move, ...], now: Mapping[PartitionKey, PartitionPlacement]) -> list[PartitionKey]:
    return [(m.topic, m.partition) for m in batch
            if (s := now.get((m.topic, m.partition))) is None or s.leader != m.to_broker]


def _until_led(admin: LeaderAdmin, batch: tuple[Move, ...], timeout_s: float, poll_s: float,
               clock: Callable[[], float], sleep: Callable[[float], None]) -> Mapping[PartitionKey, PartitionPlacement]:
    """The batch's partitions as last read: once every one is led by its target, or at the
    deadline. Polls, asking for the preferred leaders again every REELECT_S. Why again: the controller can accept a preferred
    election (or call it not needed) and still leave the leader in place when the target is not
    eligible at that instant (a broker just restarted and not yet unfenced); on a loaded host the
    leader then stayed put for the whole two-minute wait. Asking again is harmless: a partition
    already led by its target answers ELECTION_NOT_NEEDED, and a refusal now is only retried."""
    deadline = clock() + timeout_s
    ask_again_at = clock() + REELECT_S
    keys = [(m.topic, m.partition) for m in batch]
    now = admin.describe(keys)
    while remaining := _not_led_by_target(batch, now):
        if clock() >= deadline:
            return now
        sleep(poll_s)  # reading the cluster's state again, not synchronizing our own work
        if clock() >= ask_again_at:
            admin.elect_preferred(remaining)
            ask_again_at = clock() + REELECT_S
        now = admin.describe(keys)
    return now


def _until(probe: Callable[[], bool], timeout_s: float, poll_s: float, clock: Callable[[], float],
           sleep: Callable[[float], None]) -> bool:
    """Poll the cluster's state until probe() or the deadline; False on timeout."""
    deadline = clock() + timeout_s
    while not probe():
        if clock() >= deadline:
            return False
        sleep(poll_s)  # reading the cluster's state again, not synchronizing our own work
    return True
