"""A Kafka fault front: forwards a broker's connections and refuses chosen ProduceRequests.

    python -m deploy.local.kafka_faults --upstream HOST:PORT [--listen HOST:PORT]
                                        --refuse-produce N:CODE[,N:CODE...] [--topic T]

The Nth ProduceRequest through the front (counted from 1 over all its connections; with
--topic, only the requests that carry a batch of topic T count) is not forwarded: the front answers it itself, every partition with error CODE, as a broker that
refuses the batches without appending them (NOT_ENOUGH_REPLICAS, say). Everything else
goes to the broker unchanged, and each connection's answers come back in request order,
the refused one in its place. Used where librdkafka's mock cluster cannot stand in for
Kafka: the mock does not refuse an idempotent producer's batch that arrives out of
sequence, Tansu and Kafka do. The broker must advertise the front's address (start_tansu's
`advertised_port`), or clients go around the front after their first Metadata.

Prints `listening=HOST:PORT` once serving, and on stderr a line per counted ProduceRequest
("forwarded produce #N" or "refused produce #N with CODE"); stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import struct
import sys
import traceback
from collections.abc import Mapping

import trio

from kafka_protocol.kafka_codec import ProtocolError, decode_produce_request, parse_request_frame
from kafka_protocol.produce_response_codec import PartitionAnswer, encode_produce_response

PRODUCE_API_KEY = 0
MAX_FRAME_BYTES = 256 * 1024 * 1024
MAX_PENDING_ANSWERS = 1024  # requests of one connection awaiting their answers
_SIZE = struct.Struct(">i")


def produce_topics(frame: bytes) -> list[str]:
    """The topics a ProduceRequest `frame` (size prefix removed) carries batches of.
    Raises ProtocolError for a malformed request."""
    request = parse_request_frame(frame)
    return [topic.name for topic in decode_produce_request(request.body, request.api_version).topic_data]


def refusal_answer(frame: bytes, code: int) -> bytes:
    """The framed ProduceResponse refusing every partition of the request `frame` (size
    prefix removed) with `code`. Raises ProtocolError for a frame that is not a Produce
    request, ValueError for a version the response codec does not write."""
    request = parse_request_frame(frame)
    if request.api_key != PRODUCE_API_KEY:
        raise ProtocolError(f"api key {request.api_key} is not Produce")
    body = decode_produce_request(request.body, request.api_version)
    answers = [PartitionAnswer(topic.name, partition.index, code)
               for topic in body.topic_data for partition in topic.partition_data]
    return encode_produce_response(answers, request.correlation_id, request.api_version)


def parse_refusals(text: str) -> dict[int, int]:
    """"N:CODE,..." -> {N: CODE}. Raises ValueError with what is wrong."""
    out: dict[int, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        number, sep, code = item.partition(":")
        if not sep or not number.isdigit() or int(number) < 1 or not code.lstrip("-").isdigit():
            raise ValueError(f"--refuse-produce: {item!r} is not N:CODE with N >= 1")
        out[int(number)] = int(code)
    return out


class Front:
    def __init__(self, upstream: tuple[str, int], refusals: Mapping[int, int], topic: str | None = None) -> None:
        self.upstream = upstream
        self.refusals = dict(refusals)
        self.topic = topic
        self.produces = 0  # ProduceRequests counted, over all connections

    async def serve(self, client: trio.SocketStream) -> None:
        """One client connection and its own connection to the broker; a failure ends only
        this connection (logged), never the front."""
        try:
            await self._serve(client)
        except Exception:  # noqa: BLE001 - a test tool: log it, keep serving the others
            traceback.print_exc()

    async def _serve(self, client: trio.SocketStream) -> None:
        async with client:
            try:
                broker = await trio.open_tcp_stream(*self.upstream)
            except OSError:
                return
            async with broker:
                # In request order: None (the broker's answer comes next) or the front's own.
                send, receive = trio.open_memory_channel[bytes | None](MAX_PENDING_ANSWERS)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._requests, client, broker, send, nursery.cancel_scope)
                    nursery.start_soon(self._answers, client, broker, receive, nursery.cancel_scope)

    async def _requests(self, client: trio.SocketStream, broker: trio.SocketStream,
                        answers: trio.MemorySendChannel[bytes | None], scope: trio.CancelScope) -> None:
        try:
            async with answers:
                while (frame := await read_frame(client)) is not None:
                    own = self._refusal(frame)
                    if own is None:
                        await broker.send_all(_SIZE.pack(len(frame)) + frame)
                    await answers.send(own)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError, ValueError):
            scope.cancel()

    async def _answers(self, client: trio.SocketStream, broker: trio.SocketStream,
                       answers: trio.MemoryReceiveChannel[bytes | None], scope: trio.CancelScope) -> None:
        try:
            async for own in answers:
                if own is None:
                    frame = await read_frame(broker)
                    if frame is None:
                        break
                    own = _SIZE.pack(len(frame)) + frame
                await client.send_all(own)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError):
            pass
        scope.cancel()

    def _refusal(self, frame: bytes) -> bytes | None:
        """The front's answer to this request, or None: forward it."""
        if len(frame) < 2 or _API_KEY.unpack_from(frame)[0] != PRODUCE_API_KEY:
            return None
        if self.topic is not None and self.topic not in produce_topics(frame):
            return None
        self.produces += 1
        code = self.refusals.get(self.produces)
        if code is None:
            print(f"forwarded produce #{self.produces}", file=sys.stderr, flush=True)
            return None
        print(f"refused produce #{self.produces} with {code}", file=sys.stderr, flush=True)
        return refusal_answer(frame, code)


_API_KEY = struct.Struct(">h")


async def read_frame(stream: trio.SocketStream) -> bytes | None:
    """One size-prefixed frame without its prefix; None at a clean end of stream. Raises
    ProtocolError for a size out of bounds or a stream that ends inside a frame."""
    head = await _read_exactly(stream, 4)
    if head is None:
        return None
    (size,) = _SIZE.unpack(head)
    if not 0 < size <= MAX_FRAME_BYTES:
        raise ProtocolError(f"frame size {size}")
    body = await _read_exactly(stream, size)
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    return body


async def _read_exactly(stream: trio.SocketStream, n: int) -> bytes | None:
    parts = bytearray()
    while len(parts) < n:
        chunk = await stream.receive_some(n - len(parts))
        if not chunk:
            if parts:
                raise ProtocolError("stream ended inside a frame")
            return None
        parts += chunk
    return bytes(parts)


async def main_async(args: argparse.Namespace) -> None:
    host, _, port = args.upstream.rpartition(":")
    front = Front((host, int(port)), parse_refusals(args.refuse_produce), args.topic)
    listen_host, _, listen_port = args.listen.rpartition(":")
    listeners = await trio.open_tcp_listeners(int(listen_port), host=listen_host)
    bound = listeners[0].socket.getsockname()
    print(f"listening={bound[0]}:{bound[1]}", flush=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, front.serve, listeners)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="the broker, HOST:PORT")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: any free one)")
    ap.add_argument("--refuse-produce", default="", help="N:CODE,...: refuse the Nth ProduceRequest with CODE")
    ap.add_argument("--topic", default=None, help="count only the ProduceRequests with a batch of this topic")
    args = ap.parse_args(argv)
    try:
        parse_refusals(args.refuse_produce)
    except ValueError as exc:
        ap.error(str(exc))
    trio.run(main_async, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
