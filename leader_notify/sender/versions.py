"""Which protocol version a proxy offers each agent (pure: the caller passes the time).

Strategy: a new connection offers this release's version (`protocol.PROTOCOL_VERSION`).
An agent of the previous release predates negotiation: it answers with a HELLO of its
own version and closes the connection, and the proxy opens another offering that version
(protocol.proxy_outcome -> Reconnect). That costs a connection, and a `bad_frame` count
and a rate-limited log line on the old agent, so for `recheck_s` after it the proxy
offers that agent the old version straight away; then it offers the new one again, which
is how it finds the agent upgraded (an upgraded agent also answers an old offer, in the
old version: only an offer of the newest version can tell). Pipelining needs version 4
(`protocol.ordered_allowed`): while an agent is known to speak less, its objects go one
at a time.
"""

from __future__ import annotations

from leader_notify import protocol as p

RECHECK_S = 300.0  # one extra connection per agent of the previous release per 5 minutes, at most


class AgentVersions:
    """The newest version each agent address is known to speak, for `recheck_s` seconds."""

    def __init__(self, recheck_s: float = RECHECK_S) -> None:
        self._recheck_s = recheck_s
        self._older: dict[str, tuple[int, float]] = {}  # address -> (version, offer the newest again from)

    def offer(self, address: str, now: float) -> int:
        """The version to offer a new connection to `address`."""
        known = self._older.get(address)
        if known is None:
            return p.PROTOCOL_VERSION
        version, until = known
        if now >= until:
            del self._older[address]
            return p.PROTOCOL_VERSION
        return version

    def answered(self, address: str, offered: int, version: int, now: float) -> None:
        """A connection to `address` that offered `offered` speaks `version` (after a
        Reconnect: the version the agent asked for). Only an offer of the newest version
        teaches anything: an older offer gets an answer in that version from old and new
        agents alike."""
        if offered != p.PROTOCOL_VERSION:
            return
        if version < p.PROTOCOL_VERSION:
            self._older[address] = (version, now + self._recheck_s)
        else:
            self._older.pop(address, None)

    def pipelining_allowed(self, address: str, now: float) -> bool:
        """False while `address` is known to speak a version without ordered requests."""
        return p.ordered_allowed(self.offer(address, now))
