"""Carrying a leader plan out: pure batch steps and checks, and the thin loop that runs them.

Strategy. Before anything is asked the loop refuses when the cluster has reassignments in
progress (someone else's, or a run that died: ours would queue behind or replace them) and
when any planned partition no longer is as the plan saw it (`stale`: leader moved, replica
set or order changed, target out of the ISR), naming every one (`preflight`). The moves then
go in batches of `batch_size` (`batches`). For each batch the loop re-reads the partitions
and stops if the plan no longer fits them, asks for the same replica set in the new order
(AlterPartitionReassignments), waits until no reassignment of the batch is pending and the
replicas read back in the new order (on a timeout it cancels the batch's pending
reassignments and stops, saying so), asks for a preferred-leader election, waits until each
partition is led by its target (asking again every REELECT_S), and checks each partition
against its state before the batch (`anomaly`: leader not moved, replica set changed, ISR
smaller). Each partition that passes is handed to `record` (the audit's leader_move). The
first anomaly stops the run with the message. Between batches it sleeps `throttle_s`: a
throttle on how fast leadership churns, not a wait for anything.

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


@dataclass(frozen=True)
class Reassignment:
    """A partition reassignment in progress, as ListPartitionReassignments names it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    def __str__(self) -> str:
        return (f"replicas {list(self.replicas)}, adding {list(self.adding)}, "
                f"removing {list(self.removing)}")


class LeaderAdmin(Protocol):
    """What the loop needs from the cluster. Each call raises on a refused request."""

    def describe(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, PartitionPlacement]:
        """The partitions' current state (a missing key: the partition does not exist)."""
        ...

    def reassign(self, orders: dict[PartitionKey, tuple[int, ...]]) -> dict[PartitionKey, str]:
        """Ask for these replica orders; returns the partitions the controller refused, with why."""
        ...

    def reassignments(self, keys: Sequence[PartitionKey] | None = None) -> dict[PartitionKey, Reassignment]:
        """The reassignments in progress among `keys` (None: on the whole cluster)."""
        ...

    def cancel(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, str]:
        """Cancel the keys' reassignments (a null target); returns those the controller refused, with why."""
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
    """Why the planned move no longer fits the partition as the plan saw it, or None: the
    partition must still exist, keep the replica set and order the plan saw, be led by the
    broker it saw leading, and have the target in its ISR. A partition already led by the
    target is named as such (applied before, or moved by someone else)."""
    name = f"{move.topic}-{move.partition}"
    if now is None:
        return f"{name}: no longer exists"
    if sorted(now.replicas) != sorted(move.replicas_before):
        return f"{name}: replica set changed: replicas are {list(now.replicas)}, the plan saw {list(move.replicas_before)}"
    if now.leader == move.to_broker:
        return f"{name}: leader already moved: led by broker {now.leader}, the plan's target; the plan saw {move.from_broker}"
    if now.leader != move.from_broker:
        return f"{name}: leader moved: led by broker {now.leader}, the plan saw {move.from_broker}"
    if now.replicas != move.replicas_before:
        return f"{name}: replica order changed: {list(now.replicas)}, the plan saw {list(move.replicas_before)}"
    if move.to_broker not in now.isr:
        return f"{name}: broker {move.to_broker} is not in the ISR {list(now.isr)}; not moving the leader there"
    return None


def preflight(moves: Sequence[Move], now: Mapping[PartitionKey, PartitionPlacement],
              in_progress: Mapping[PartitionKey, Reassignment]) -> str | None:
    """Why the apply must not start, or None: reassignments already in progress on the
    cluster (every one named), or planned partitions the cluster no longer shows as the plan
    saw them (every one named)."""
    if in_progress:
        return ("reassignments already in progress on the cluster: "
                + "; ".join(f"{t}-{p} ({r})" for (t, p), r in sorted(in_progress.items()))
                + "; let them finish (kafka-reassign-partitions --verify) or cancel them, then apply")
    why = [w for m in moves if (w := stale(m, now.get((m.topic, m.partition))))]
    if why:
        return "the cluster no longer matches the plan: " + "; ".join(why) + "; plan again and review"
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
    error: str | None = None  # the refusal or anomaly that stopped the run
    started: bool = True  # False: refused before anything was asked of the cluster

    @property
    def ok(self) -> bool:
        return self.error is None


def apply_moves(admin: LeaderAdmin, moves: Sequence[Move], *, batch_size: int, throttle_s: float, timeout_s: float,
                poll_s: float, clock: Callable[[], float], sleep: Callable[[float], None],
                report: Callable[[str], None], record: Callable[[Move], None]) -> ApplyResult:
    """Carry the moves out batch by batch; stop at the first anomaly (ApplyResult.error).

    Refuses to start (ApplyResult.error, nothing asked) when `preflight` says so. `timeout_s`
    bounds each wait (reassignment done, leaders elected); a batch whose reassignment is
    still pending at its deadline is cancelled. `poll_s` is the interval of reading the
    cluster's state while waiting. `record` gets each move once its batch was verified.
    Exceptions of `admin` propagate.
    """
    why = preflight(moves, admin.describe([(m.topic, m.partition) for m in moves]), admin.reassignments())
    if why:
        return ApplyResult((), why, started=False)
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
            return ApplyResult(tuple(done), _cancel_pending(admin, keys, n, timeout_s))
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
            record(m)
            report(f"moved {m.topic}-{m.partition}: broker {m.from_broker} ({m.from_zone}) -> "
                   f"{m.to_broker} ({m.to_zone}), ISR {sorted(after[(m.topic, m.partition)].isr)}")
        if n < len(plan) and throttle_s > 0:
            sleep(throttle_s)  # throttle between batches
    return ApplyResult(tuple(done))


def _cancel_pending(admin: LeaderAdmin, keys: Sequence[PartitionKey], n: int, timeout_s: float) -> str:
    """Cancel what is still pending of a batch whose reassignment timed out; the message that stops the run.
    A reassignment left running would hold the partitions (a later one is refused) and could
    finish unobserved, after the operator has moved on."""
    pending = sorted(admin.reassignments(keys))
    late = f"batch {n}: the reassignment did not complete within {timeout_s:.0f} s"
    if not pending:
        return f"{late} (none pending, but the replicas did not read back in the new order); stopped"
    names = ", ".join(f"{t}-{p}" for t, p in pending)
    refused = admin.cancel(pending)
    if refused:
        return (f"{late} ({names} pending); cancelling failed for "
                + "; ".join(f"{t}-{p}: {why}" for (t, p), why in sorted(refused.items()))
                + "; see kafka-reassign-partitions --list; stopped")
    return f"{late}; cancelled the reassignment of {names} (AlterPartitionReassignments with no target); stopped"


def _reassigned(admin: LeaderAdmin, batch: tuple[Move, ...]) -> bool:
    keys = [(m.topic, m.partition) for m in batch]
    if admin.reassignments(keys):
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
