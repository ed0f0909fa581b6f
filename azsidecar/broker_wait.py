"""Start-up: wait for the zone's brokers to accept a connection instead of exiting.

After an availability-zone outage the sidecars of the returning zone often start before its
brokers do. A process that exits at once then depends on its supervisor's restart back-off
(Kubernetes doubles it up to 5 minutes), so the zone can stay off the WAL path long after
its brokers are back. Kafka's own clients keep retrying the bootstrap servers; so does the
sidecar, for up to `upstream.startup_wait_s` (default: indefinitely), alive and not ready
meanwhile, with the reason in /readyz and in the log.

What is waited for is only that some bootstrap address accepts a TCP connection: a broker
that is down or unreachable. A broker that answers and then refuses (wrong TLS CA, wrong
SASL password) is not retried: the component's own start fails at once with the broker's
reason, since waiting cannot fix it.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence

from azsidecar.failures import StartupFailure

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.5  # the first pause between rounds of connection attempts
BACKOFF_MAX_S = 5.0  # the longest pause: a broker back is noticed within this (plus a round)
LOG_EVERY_S = 30.0  # while waiting, one warning this often (the first failure is logged at once)
PROBE_TIMEOUT_CAP_S = 2.0  # one address's connect attempt, at most (a silent zone drops packets)


def backoff_s(attempt: int) -> float:
    """The pause after the `attempt`-th failed round (0-based): 0.5, 1, 2, 4, 5, 5, ... seconds."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * float(1 << min(attempt, 16)))


def _connect(host: str, port: int, timeout_s: float) -> None:
    socket.create_connection((host, port), timeout=timeout_s).close()


def refusals(addresses: Sequence[str], timeout_s: float,
             connect: Callable[[str, int, float], None] = _connect) -> list[str]:
    """[] as soon as one address accepts a TCP connection; else why each did not, in order."""
    reasons = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            connect(host.strip("[]"), int(port), timeout_s)
        except TimeoutError:
            reasons.append(f"{address}: no answer within {timeout_s:g} s")
        except OSError as exc:
            reasons.append(f"{address}: {exc.strerror or exc}")
        else:
            return []
    return reasons


def wait_for_brokers(addresses: Sequence[str], wait_s: float, connect_timeout_s: float, *,
                     on_waiting: Callable[[str], None] = lambda detail: None,
                     stopped: Callable[[], bool] = lambda: False,
                     probe: Callable[[Sequence[str], float], list[str]] = refusals,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> bool:
    """Return True once some address accepts a connection (at once when one does), False if
    `stopped()` turned true while waiting (a shutdown signal). `on_waiting(detail)` after each
    failed round, for readiness. Raises StartupFailure, naming every address's reason, when
    none accepted within `wait_s` (0: one round only)."""
    timeout_s = min(connect_timeout_s, PROBE_TIMEOUT_CAP_S)
    started = clock()
    logged_at: float | None = None
    attempt = 0
    while True:
        reasons = probe(addresses, timeout_s)
        if not reasons:
            if attempt:
                log.info("upstream brokers reachable after %.1f s of waiting", clock() - started)
            return True
        waited = clock() - started
        detail = "; ".join(reasons)
        if waited + backoff_s(attempt) > wait_s:
            raise StartupFailure(f"upstream.bootstrap_servers: no broker of {list(addresses)} accepted a connection"
                                 + (f" within {wait_s:g} s (upstream.startup_wait_s)" if wait_s else "")
                                 + f": {detail}")
        on_waiting(f"waiting for a broker to accept a connection ({waited:.0f} s so far): {detail}")
        if logged_at is None or clock() - logged_at >= LOG_EVERY_S:
            log.warning("no upstream broker reachable yet, retrying (upstream.startup_wait_s = %g): %s",
                        wait_s, detail)
            logged_at = clock()
        pause = backoff_s(attempt)
        deadline = clock() + pause
        while clock() < deadline:  # short steps: a shutdown signal ends the wait promptly
            if stopped():
                return False
            sleep(min(0.25, deadline - clock()))
        if stopped():
            return False
        attempt += 1
