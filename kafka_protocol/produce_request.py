"""aiokafka's ProduceRequest with its body and answer done by kafka_protocol/produce_codec.py.

The appender sends these through aiokafka's client as any request (version negotiation,
correlation, timeouts stay aiokafka's); only the body encoding and the answer decoding are
replaced, for the copies and the CPU produce_codec.py explains.
"""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.produce import ProduceRequest

from kafka_protocol.produce_codec import (
    MAX_RESPONSE_VERSION,
    PartitionAnswer,
    decode_produce_response,
    encode_produce_body,
)


class RawProduceRequest(ProduceRequest):
    """aiokafka's ProduceRequest whose negotiated struct encodes with `encode_produce_body`
    and whose answer (v0-v7) is a ProduceAnswer read by `decode_produce_response`.

    Same constructor, same negotiation (client.send picks the version); `response.topics`
    has the shape the appender reads from aiokafka's ProduceResponse.
    """

    def build(self, request_struct_class: type[Any]) -> Any:
        struct_class = _raw_struct_class(request_struct_class)
        built = super().build(struct_class)
        built._raw_body = encode_produce_body(  # noqa: SLF001 - our own subclass's field
            request_struct_class.API_VERSION, self._transactional_id, self._required_acks, self._timeout,
            self._topics)
        return built


_RAW_STRUCTS: dict[type[Any], type[Any]] = {}


class ProduceAnswer:
    """What aiokafka's connection hands back for a RawProduceRequest: `topics` as
    decode_produce_response gives it (the shape of aiokafka's ProduceResponse.topics, first
    three fields per partition)."""

    __slots__ = ("topics",)

    def __init__(self, topics: list[tuple[str, list[PartitionAnswer]]]) -> None:
        self.topics = topics

    def __repr__(self) -> str:
        return f"ProduceAnswer({self.topics!r})"


def _raw_struct_class(base: type[Any]) -> type[Any]:
    """A subclass of aiokafka's request struct `base` whose encode() returns the prepared body
    and whose RESPONSE_TYPE decodes with decode_produce_response."""
    cls = _RAW_STRUCTS.get(base)
    if cls is None:
        version = base.API_VERSION

        def encode(self: Any) -> bytes:
            body: bytes = self._raw_body
            return body

        def decode(data: Any) -> ProduceAnswer:  # aiokafka passes a BytesIO after the response header
            body = data.read() if hasattr(data, "read") else data
            return ProduceAnswer(decode_produce_response(version, body))

        attributes: dict[str, Any] = {"encode": encode}
        if version <= MAX_RESPONSE_VERSION:
            response_type = type(f"Raw{base.RESPONSE_TYPE.__name__}", (), {"decode": staticmethod(decode)})
            attributes["RESPONSE_TYPE"] = response_type
        cls = _RAW_STRUCTS[base] = type(f"Raw{base.__name__}", (base,), attributes)
    return cls
