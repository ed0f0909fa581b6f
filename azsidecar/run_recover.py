"""`azsidecar recover`: deliver acknowledged (ack_mode wal) WAL entries that no agent applied.

A proxy does this itself when it restarts (leader_notify/sender/recovery.py); see
`azsidecar.commands.RECOVER_DESCRIPTION` for when an operator runs it.
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

from azsidecar.commands import HMAC_ENV
from azsidecar.config import Config, load_config, require_wal_location
from azsidecar.logs import setup_logging
from azsidecar.preflight import check_wal_store, startup_errors
from azsidecar.secrets import resolve_secrets
from core.audit import NullAuditSink
from core.configload import ConfigError
from leader_notify.sender.recovery import recover_acknowledged
from leader_notify.sender.sender import NotifySender
from wal_s3.s3 import make_s3_client

ALL_EPOCHS = 10**10  # above any registered epoch: every object of the writer is "earlier"


def main(args: argparse.Namespace) -> int:
    # --writer-id names a proxy's objects: checked as proxy.proxy_id is (non-empty, no "/").
    config = load_config(args.config, {"zone": args.zone, "proxy.proxy_id": args.writer_id,
                                       "log_format": args.log_format, "log_level": args.log_level}, os.environ)
    setup_logging(config.log_format, config.log_level, component="recover", zone=config.zone)
    config = resolve_secrets(config, os.environ, args.hmac_key_file)
    writer_id = config.proxy.proxy_id
    if not config.zone:
        raise ConfigError("zone: recover needs the writer's zone (--zone or zone in the config file)")
    if not config.notify.hmac_keys:
        raise ConfigError(f"notify.hmac_keys: none given (set ${HMAC_ENV}, notify.hmac_key_file or --hmac-key-file)")
    require_wal_location(config, "recover")
    if "wal" not in config.router.ack_modes.values():
        print("azsidecar recover: no topic has router.ack_modes 'wal'; nothing was acknowledged before its "
              "append, so there is nothing to recover", file=sys.stderr)
        return 0
    check_wal_store(config.wal, config.wal.bucket_for(config.zone))
    with startup_errors():
        return trio.run(_recover, config, config.zone, writer_id)


async def _recover(config: Config, zone: str, writer_id: str) -> int:
    bucket = config.wal.bucket_for(zone)  # with S3 Express: the writer zone's directory bucket
    sender = NotifySender(config.notify, zone, writer_id, 0, NullAuditSink(), bucket=bucket)
    try:
        report = await recover_acknowledged(config.wal, make_s3_client(config.wal), sender, writer_id, ALL_EPOCHS,
                                            lambda topic: config.router.ack_mode(topic) == "wal", bucket=bucket)
    finally:
        await sender.aclose()
    for line in report.lines():
        print(line, flush=True)
    return 1 if report.failed else 0
