"""Raw Kafka requests over real sockets for the proxy's wire tests (kafka-python's classes encode).

Nothing here comes from the proxy: requests are built and responses decoded with
kafka-python's protocol classes only, so the tests judge the proxy by the library.
"""

from __future__ import annotations

import struct

import trio
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

READ_TIMEOUT_S = 10.0


def record_batch(values: list[bytes], producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1) -> bytes:
    """One uncompressed magic-2 batch holding `values` (the library computes the CRC)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 24)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(correlation_id: int, version: int, acks: int,
                    partitions: dict[tuple[str, int], bytes], timeout_ms: int = 10_000) -> bytes:
    """A framed Produce request carrying `partitions` {(topic, partition): records}."""
    by_topic: dict[str, list] = {}
    for (topic, partition), records in partitions.items():
        by_topic.setdefault(topic, []).append(
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records))
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=t, partition_data=ps) for t, ps in by_topic.items()])
    return encode(request, correlation_id, version)


def encode(request, correlation_id: int, version: int, client_id: str = "wire-test") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def api_versions_request(correlation_id: int, version: int = 3) -> bytes:
    return encode(ApiVersionsRequest(client_software_name="wire-test", client_software_version="1"),
                  correlation_id, version)


class Wire:
    """A client connection: send bytes, read whole response frames."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buf = bytearray()

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> Wire:
        return cls(await trio.open_tcp_stream(host, port))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_frame(self) -> bytes | None:
        """The next response frame without its size prefix; None when the peer closed."""
        with trio.fail_after(READ_TIMEOUT_S):
            while True:
                if len(self._buf) >= 4:
                    (size,) = struct.unpack_from(">i", self._buf, 0)
                    if len(self._buf) >= 4 + size:
                        frame = bytes(self._buf[4 : 4 + size])
                        del self._buf[: 4 + size]
                        return frame
                try:
                    chunk = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return None  # reset by the peer: closed as well
                if not chunk:
                    return None
                self._buf += chunk

    async def read_response(self, response_class, version: int):
        """(correlation_id, decoded response). Fails the test if the connection closed."""
        frame = await self.read_frame()
        assert frame is not None, "the proxy closed the connection instead of answering"
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        return correlation_id, response_class.decode(frame, version=version, header=True)

    async def expect_closed(self) -> None:
        """Assert the proxy closes this connection without answering."""
        frame = await self.read_frame()
        assert frame is None, f"expected the connection closed, got a {len(frame)}-byte response"

    async def aclose(self) -> None:
        await self.stream.aclose()


async def assert_serves(port: int) -> None:
    """A fresh connection gets a complete ApiVersions answer with error 0."""
    wire = await Wire.connect(port)
    try:
        await wire.send(api_versions_request(4242))
        correlation_id, response = await wire.read_response(ApiVersionsResponse, 3)
        assert correlation_id == 4242
        assert response.error_code == 0
    finally:
        await wire.aclose()
