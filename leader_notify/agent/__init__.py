"""leader_notify.agent: the zone agent's side of the notification protocol (asyncio, its own process).

Modules:
- `agent`: `Agent`, the listener that reads notified WAL shares and answers in order.
- `appender`: `KafkaAppender`, appends the batches to their leaders (aiokafka connections);
  `produce_channel`: its Produce requests on aiokafka's connection; `sequence_chain` and
  `append_slots`: which batches may be in flight together (pure).
- `ordered_runs`: which pipelined runs are held after a failed one (pure).
- `runner`: `running_agent(...)`, the agent assembled (`azsidecar agent` runs it); `_limits`: the
  listener's connection limits; `_msk_iam`: MSK IAM tokens for aiokafka; `_wal_bridge`: WAL reads.
Nothing is imported here. Never imports `leader_notify.sender` (import-linter contract).
"""
