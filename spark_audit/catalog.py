"""The audit jobs, the tables each one writes, and the table file formats (no pyspark here)."""

JOBS = ("savings", "cache", "latency", "consumers", "placement", "report", "all")
TABLES_OF_JOB = {
    "savings": ("savings", "break_even", "writer_drops"),
    "cache": ("cache_agent", "cache_metadata"),
    "latency": ("latency",),
    "consumers": ("passthrough_bytes", "fetch_bytes"),
    "placement": ("leader_traffic", "last_apply"),
    "report": ("savings", "break_even", "cache_agent", "cache_metadata", "latency", "writer_drops",
               "passthrough_bytes", "fetch_bytes", "leader_traffic", "last_apply", "zone_trouble", "topic_traffic", "agents"),
}
# What `report` and `all` compute from the tables above (no Spark), written as CSV beside them:
# the net savings lines with their projection, and the split by topic and (with --teams) team.
REPORT_TABLES = ("net_savings", "topic_savings", "team_savings")
TABLES_OF_JOB["all"] = TABLES_OF_JOB["report"]

TABLE_FORMATS = ("csv", "parquet")
