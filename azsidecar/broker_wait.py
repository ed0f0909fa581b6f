"""Start-up: wait for the zone's brokers to answer instead of exiting.

After an availability-zone outage the sidecars of the returning zone often start before its
brokers do. A process that exits at once then depends on its supervisor's restart back-off
(Kubernetes doubles it up to 5 minutes), so the zone can stay off the WAL path long after
its brokers are back. Kafka's own clients keep retrying the bootstrap servers; so does the
sidecar, for up to `upstream.startup_wait_s` (default: indefinitely), alive and not ready
meanwhile, with the reason in /readyz and in the log.

What is waited for is that some bootstrap address takes a connection and, on a plaintext
listener (PLAINTEXT, SASL_PLAINTEXT), answers an ApiVersions request: Kafka binds its
listener before it processes requests (it first catches up with the cluster's metadata), so
a restarting broker accepts connections seconds before it answers them, longer than a
component's connect timeout. On a TLS listener the connection alone is waited for. A broker
that answers and then refuses (wrong TLS CA, wrong SASL password) is not retried: the
component's own start fails at once with the broker's reason, since waiting cannot fix it.
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


def _api_versions(host: str, port: int, timeout_s: float) -> None:
    """Connect and wait for the answer to ApiVersions v0 (allowed before SASL), encoded and
    decoded by kafka-python's protocol parser. Raises OSError (TimeoutError: no answer)."""
    from kafka.errors import KafkaError  # noqa: PLC0415 - the proxy imports kafka-python anyway
    from kafka.protocol.metadata import ApiVersionsRequest  # noqa: PLC0415
    from kafka.protocol.parser import KafkaProtocol  # noqa: PLC0415

    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        protocol = KafkaProtocol(client_id="azsidecar-startup")
        protocol.send_request(ApiVersionsRequest[0]())
        conn.sendall(protocol.send_bytes())
        while True:
            conn.settimeout(max(0.001, deadline - time.monotonic()))
            data = conn.recv(65536)
            if not data:
                raise ConnectionResetError(104, "closed before answering ApiVersions")
            try:
                if protocol.receive_bytes(data):
                    return
            except KafkaError as exc:
                raise ConnectionError(f"not a Kafka answer to ApiVersions: {exc}") from exc


def probe_for(security_protocol: str) -> Callable[[Sequence[str], float], list[str]]:
    """The probe for a listener: an ApiVersions round trip on a plaintext one, a connection on TLS."""
    connect = _connect if security_protocol in ("SSL", "SASL_SSL") else _api_versions
    return lambda addresses, timeout_s: refusals(addresses, timeout_s, connect)


def refusals(addresses: Sequence[str], timeout_s: float,
             connect: Callable[[str, int, float], None] = _connect) -> list[str]:
    """[] as soon as one address passes `connect`; else why each did not, in order."""
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
    """Return True once some address answers `probe` (at once when one does), False if
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
            raise StartupFailure(f"upstream.bootstrap_servers: no broker of {list(addresses)} answered"
                                 + (f" within {wait_s:g} s (upstream.startup_wait_s)" if wait_s else "")
                                 + f": {detail}")
        on_waiting(f"waiting for a broker to answer ({waited:.0f} s so far): {detail}")
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
