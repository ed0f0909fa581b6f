"""The seam of the local route's forward path: a Produce request sent on whole, as the
client's bytes, and how its answer comes back.

The front door (proxy/request_handler.py) scans a Produce request lightly
(kafka_protocol/produce_scan.py) and offers it to a `ProduceForwarder` (the router's
RoutingBackend) before decoding it. The forwarder takes it only when every partition goes
the local route to one leader with nothing else to wait for, sends the client's bytes
there with a new request header, and later calls the `ForwardedAnswer` once: with the
leader's answer as bytes when every partition succeeded, or with per-partition results,
settled as the decoding path settles them (a refusal by a moved leader sent again, a
duplicate checked, a failure), when anything else happened.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from core.produce import ProduceContext, Results
from kafka_protocol.produce_scan import ScannedAnswer, ScannedProduce


class ForwardedAnswer(Protocol):
    """Where a forwarded request's outcome goes (exactly one call, in the step it is known)."""

    def answer_bytes(self, frame: bytes, answer: ScannedAnswer) -> None:
        """Every partition succeeded: `frame` is the leader's answer (size prefix removed),
        `answer` its light reading (answer.plain is True)."""
        ...

    def answer_results(self, results: Results) -> None:
        """Anything else: each partition's result, as the decoding path would give it."""
        ...


@runtime_checkable
class ProduceForwarder(Protocol):
    """A produce backend that can forward a scanned request whole."""

    async def forward(self, request: ScannedProduce, ctx: ProduceContext, body: memoryview,
                      answer: ForwardedAnswer) -> bool:
        """Send `body` (the client's request body, of version ctx.client_version) to the one
        leader of its partitions if each of them takes the local route now, and return True:
        `answer` will be called. False, having changed nothing, otherwise: the caller takes
        the decoding path. Raises nothing."""
        ...
