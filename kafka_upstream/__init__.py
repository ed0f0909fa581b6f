"""kafka_upstream: the proxy's client of the upstream Kafka cluster (trio).

Modules:
- `config`: `UpstreamConfig`, the `[upstream]` settings (brokers, timeouts, TLS, SASL).
- `upstream`: `UpstreamCluster`, its pipelined connections to the brokers, `open_upstream`.
- `errors`: `UpstreamError`, `UpstreamTimeout` (small on purpose: the start-up checks of both
  processes import them without the client).
- `metadata`: `MetadataCache`, the cluster's topics and leaders with their racks.
- `coordinators`: FindCoordinator answers and the transactional requests forwarded upstream.
- `tail_read`: reads a partition's log tail (is a batch the leader called a duplicate there?).
- `direct`: `DirectBackend`, which forwards Produce batches to each partition's leader; it also
  holds the front door's Produce validation and answer assembly (`validate_produce`,
  `encode_produce_answer`), moved here with it.
The router (above) and the proxy's front door (above) use it; it imports neither.
"""
