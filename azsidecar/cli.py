"""`azsidecar` command line: one subcommand per component.

Each component package exposes `cli.register(subparsers)` that adds its subcommand and
sets `func(args) -> int`. This module is the only place that reads the environment
(secrets such as HMAC keys) and sets up logging; it turns ConfigError into a readable
message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from azsidecar import __version__
from azsidecar._configload import ConfigError
from azsidecar.logs import setup_logging
from azsidecar.runtime import tune_gc

# Modules that provide `register(subparsers)`; imported lazily so `azsidecar --help`
# does not import pyspark or aiokafka.
SUBCOMMAND_MODULES = (
    "proxy.cli",
    "leader_notify.cli",
    "wal_s3.cli",
    "router.cli",
    "spark_audit.cli",
    "azsidecar.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="azsidecar",
        description="AZ-aware Kafka producer proxy: cross-zone payload goes through S3.",
    )
    parser.add_argument("--version", action="version", version=f"azsidecar {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # component not built yet
                continue
            raise
        module.register(sub)
    return parser


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags every long-running subcommand shares."""
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--zone", help="this host's availability zone id, e.g. use1-az1")
    parser.add_argument("--log-format", choices=("text", "json"), default=None,
                        help="stderr log format (default text)")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    setup_logging(getattr(args, "log_format", None) or "text", getattr(args, "log_level", None) or "INFO")
    tune_gc()
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"azsidecar: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
