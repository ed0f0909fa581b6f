"""aiokafka's ProduceRequest with its body and answer done by kafka_protocol.produce.

The appender sends these through aiokafka's client.send where the direct channel
(produce_channel.py) is not available: version negotiation, correlation and timeouts stay
aiokafka's; only the body encoding (the batches copied once, not four times by aiokafka's
generic Schema) and the answer decoding (a ProduceAnswer) are replaced. This adapter,
not the codec, is what depends on aiokafka's request classes.
"""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.produce import ProduceRequest

from kafka_protocol.produce import (
    ProduceAnswer,
    decode_produce_response_body,
    encode_produce_body_parts,
    produce_request,
)

MAX_VERSION = 7  # aiokafka's last ProduceRequest class (0.14)


class RawProduceRequest(ProduceRequest):
    """aiokafka's ProduceRequest whose negotiated struct encodes with kafka_protocol.produce
    and whose answer is a ProduceAnswer. Same constructor, same negotiation (client.send
    picks the version)."""

    def build(self, request_struct_class: type[Any]) -> Any:
        struct_class = _raw_struct_class(request_struct_class)
        built = super().build(struct_class)
        request = produce_request(self._required_acks, self._timeout, self._topics, self._transactional_id)
        built._raw_body = b"".join(  # noqa: SLF001 - our own subclass's field
            encode_produce_body_parts(request, request_struct_class.API_VERSION))
        return built


_RAW_STRUCTS: dict[type[Any], type[Any]] = {}


def _raw_struct_class(base: type[Any]) -> type[Any]:
    """A subclass of aiokafka's request struct `base` whose encode() returns the prepared body
    and whose RESPONSE_TYPE decodes with decode_produce_response_body."""
    cls = _RAW_STRUCTS.get(base)
    if cls is None:
        version = base.API_VERSION
        if version > MAX_VERSION:
            raise ValueError(f"aiokafka ProduceRequest v{version} is newer than this adapter")

        def encode(self: Any) -> bytes:
            body: bytes = self._raw_body
            return body

        def decode(data: Any) -> ProduceAnswer:  # aiokafka passes a BytesIO after the response header
            body = data.read() if hasattr(data, "read") else data
            return decode_produce_response_body(body, version)

        response_type = type(f"Raw{base.RESPONSE_TYPE.__name__}", (), {"decode": staticmethod(decode)})
        cls = _RAW_STRUCTS[base] = type(f"Raw{base.__name__}", (base,), {"encode": encode,
                                                                       "RESPONSE_TYPE": response_type})
    return cls
