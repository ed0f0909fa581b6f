"""azsidecar: an AZ-aware Kafka producer proxy.

The top-level packages are the architecture: `proxy/` (Kafka wire protocol, trio),
`router/` (pure routing decisions), `wal_s3/` (WAL objects in S3), `leader_notify/`
(cross-zone notifications and the agent), `spark_audit/` (savings audit). This package
holds only what ties them together: the configuration object and the command line.
"""

__version__ = "0.1.0"
