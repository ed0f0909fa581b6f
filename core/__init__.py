"""core: the base layer every component builds on; it imports nothing of the project.

- `configload`: ConfigError and the dataclass builder behind the one validated Config.
- `errors`: Kafka error codes (Kafka's numbering) and which are retriable.
- `record_batch`: the sans-IO record batch header codec (magic 2, CRC-32C, producer id).
- `produce`: partition batches in, partition results out, the ProduceBackend / ProduceCompletion seam.
- `audit`: the audit record contract (kinds, fields, schema version) and the AuditSink seam.
- `prices`: the list-price table (per storage class) of the cost policy, the planner and the audit;
  `prices_file`: a price table read from a TOML file.
- `framing`: bytes on the wire (TCP/IP headers at a path MTU; a direct produce at least, a notification at most), for the audit.
- `zones`: which zone a partition's leader is in (overrides, broker zones, racks): router and agent agree.
- `tls`: TLS contexts and secret files shared by the proxy's and the agent's connections.
- `msk_iam`: MSK IAM tokens for SASL/OAUTHBEARER, and when to refresh them and re-authenticate (KIP-368).
- `duplicates`: sans-IO search of a partition's tail for a batch the leader called a duplicate.
"""
