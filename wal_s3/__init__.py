"""wal_s3: write-ahead-log objects in S3 - format, batching writer, range reader, checkpoints, GC.

`format`, `checkpoint_manifest` and `gc_plan` are pure (no event loop, no boto3); the rest
are I/O shells around them: the writer on trio, the reader, checkpoints and GC on anyio
(trio in the proxy and `azsidecar gc`, asyncio in the agent), `s3` the boto3 adapter and
`_s3_http` the event-loop PUT/GET. Nothing is imported here, so importing `wal_s3.format`
imports neither trio nor boto3.
"""
