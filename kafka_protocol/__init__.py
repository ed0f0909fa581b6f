"""kafka_protocol: the Kafka wire format as data (sans-IO codecs, no sockets, no event loop).

Modules:
- `produce`: the Produce API v0-v12, requests and responses in both directions, one set of
  types for the proxy and the agent.
- `kafka_codec`: request framing and headers, and the library-backed decoders and encoders
  of the other APIs the proxy serves.
- `_wire`: the primitive encodings (strings, arrays, varints, tagged fields) and ProtocolError.
- `api_names`: API key -> name; `fetch_request`: the Fetch request decoder.
"""
