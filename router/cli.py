"""`azsidecar recover`: deliver acknowledged (ack_mode wal) WAL entries that no agent applied.

A proxy does this itself when it restarts (router/recovery.py). Run this when that proxy
will not come back, or for objects `azsidecar gc` reports as HELD. It re-sends, in order,
every unapplied zone share of the writer's objects (all epochs) that holds an entry of a
topic with router.ack_modes "wal", then prints what it did. Exit code 0 when everything was
delivered, 1 when something is still unapplied.
"""

from __future__ import annotations

import argparse
import sys

ALL_EPOCHS = 10**10  # above any registered epoch: every object of the writer is "earlier"


def register(subparsers) -> None:
    p = subparsers.add_parser("recover", help="deliver acknowledged WAL entries no agent applied",
                              description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--config", metavar="FILE", help="the proxy's TOML configuration ([wal], [notify], [router])")
    p.add_argument("--writer-id", help="whose objects (default: proxy.proxy_id of the configuration)")
    p.add_argument("--zone", help="the writer's zone (default: zone of the configuration)")
    p.add_argument("--hmac-key-file", metavar="FILE", help="HMAC keys, one per line (else $AZSIDECAR_NOTIFY_HMAC_KEYS)")
    p.add_argument("--log-format", choices=("text", "json"), default=None)
    p.add_argument("--log-level", default=None)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415 - keep `azsidecar --help` light

    from azsidecar._configload import ConfigError  # noqa: PLC0415
    from azsidecar.config import load_config  # noqa: PLC0415
    from leader_notify.cli import read_keys  # noqa: PLC0415 - one place reads the notification keys

    keys = read_keys(args)
    overrides = {"zone": args.zone, "notify.hmac_keys": list(keys) if keys else None}
    config = load_config(args.config, overrides)
    writer_id = args.writer_id or config.proxy.proxy_id
    if not config.zone:
        raise ConfigError("zone: recover needs the writer's zone (--zone or zone in the config file)")
    if not config.notify.hmac_keys:
        raise ConfigError("notify.hmac_keys: none given (set $AZSIDECAR_NOTIFY_HMAC_KEYS or --hmac-key-file)")
    if "wal" not in config.router.ack_modes.values():
        print("azsidecar recover: no topic has router.ack_modes 'wal'; nothing was acknowledged before its "
              "append, so there is nothing to recover", file=sys.stderr)
        return 0
    return trio.run(_recover, config, writer_id)


async def _recover(config, writer_id: str) -> int:
    from leader_notify.sender import NotifySender  # noqa: PLC0415
    from router.recovery import recover_acknowledged  # noqa: PLC0415
    from spark_audit.records import NullAuditSink  # noqa: PLC0415
    from wal_s3 import make_s3_client  # noqa: PLC0415

    sender = NotifySender(config.notify, config.zone, writer_id, 0, NullAuditSink(), bucket=config.wal.bucket)
    try:
        report = await recover_acknowledged(config.wal, make_s3_client(config.wal), sender, writer_id, ALL_EPOCHS,
                                            lambda topic: config.router.ack_mode(topic) == "wal")
    finally:
        await sender.aclose()
    for line in report.lines():
        print(line, flush=True)
    return 1 if report.failed else 0
