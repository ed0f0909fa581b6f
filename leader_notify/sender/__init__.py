"""leader_notify.sender: the proxy's side of the notification protocol (trio, in the proxy process).

Modules:
- `sender`: `NotifySender`, `await sender.notify(flushed, dest_zone)`: one connection per agent.
- `notifier`: one `ZoneNotifier` per destination agent, in object order, with prefetch and re-sends.
- `pipeline`: several ordered notifications in flight to one agent on one connection;
  `ordered_window`: what the notifier sends, accepts or re-sends serially (pure).
- `owners`: which agent of a zone owns a partition (`AgentMap`, rendezvous hashing or by leader).
- `outcome`: an agent's answer classified (pure).
- `recovery`: re-deliver acknowledged (ack_mode wal) shares of earlier epochs.
Nothing is imported here. Never imports `leader_notify.agent` (import-linter contract).
"""
