"""kafka_protocol: the Kafka wire format as data (sans-IO codecs, no sockets, no event loop).

Modules:
- `kafka_codec`: request/response framing, the hand-written Produce request encoder and the
  library-backed encoders of the other APIs the proxy serves.
- `produce_response_codec`: the ProduceResponse decoder and encoder (v3-v12) used by the proxy.
- `produce_codec` and `produce_request`: the agent's Produce request encoder and response decoder
  (a second codec of the same API, kept beside the first until they are merged).
- `api_names`: API key -> name; `fetch_request`: the Fetch request decoder.
"""
