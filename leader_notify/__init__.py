"""leader_notify: the cross-zone notification protocol, the proxy's sender, the zone agent.

Modules:
- `protocol`: sans-IO frames, messages, HMAC keyring, per-connection `Channel` (docs/notify-protocol.md).
- `owners`: which agent of a zone owns a partition (rendezvous hashing); `_limits`: the
  agent listener's connection limits.
- `sender` (trio, in the proxy): `NotifySender`, `await sender.notify(flushed, dest_zone)`;
  `notifier`: one `ZoneNotifier` per destination agent, in object order, with prefetch and re-sends.
- `agent` (asyncio) and `_run.running_agent(config, zone, keys, audit=...)`; `azsidecar agent` runs it.
- `recovery`: re-deliver acknowledged (ack_mode wal) shares of earlier epochs.
Nothing is imported here, so the proxy (trio) does not import aiokafka.
"""
