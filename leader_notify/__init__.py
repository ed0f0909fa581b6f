"""leader_notify: the cross-zone notification protocol, split by the process that runs each side.

- `protocol` (shared): sans-IO frames, messages, HMAC keyring, per-connection `Channel`
  (docs/notify-protocol.md); `config`: `NotifyConfig` and the agent's settings; `metrics`: the
  sender's and the agent's Prometheus metrics.
- `leader_notify.sender` (trio, in the proxy): the sender, the per-agent notifiers, partition
  owners, recovery of acknowledged shares.
- `leader_notify.agent` (asyncio, in the zone agent): the agent, its Kafka appender and runner.
The two sides never import each other (import-linter contract). Nothing is imported here, so
the proxy (trio) does not import aiokafka.
"""
