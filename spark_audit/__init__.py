"""spark_audit: the audit record contract, the record writer, and the Spark audit jobs.

Components import only the pure parts, which do not import pyspark:
- `core.audit`: KINDS, SCHEMA_VERSION, AuditSink, NullAuditSink, MemoryAuditSink;
- `spark_audit.writer.AuditWriter(config.audit, zone, component)`: the production sink.
The jobs live in `spark_audit.jobs` (pure DataFrame transformations), `spark_audit.run`
(the thin main behind `azsidecar audit` and `spark_audit/submit.py`), `spark_audit.report`
(text summary and HTML) and `spark_audit._io` (reading, staging, writing).
See docs/audit-records.md.
"""

from core.audit import SCHEMA_VERSION, AuditSink, MemoryAuditSink, NullAuditSink
from spark_audit.writer import AuditWriter, WriterStats

__all__ = ["SCHEMA_VERSION", "AuditSink", "AuditWriter", "MemoryAuditSink", "NullAuditSink", "WriterStats"]
