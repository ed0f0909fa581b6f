"""`azsidecar` command line: one subcommand per process the product runs.

The composition root: nothing imports this package. `azsidecar/commands.py` defines the
arguments; the chosen subcommand's runner module (`azsidecar/run_*.py`, `demo.py`) is
imported only then, wires the components from the one validated Config and runs them.
The runners and `azsidecar/secrets.py` are the only code that reads the environment
(`AZSIDECAR__SECTION__KEY` config variables, secrets such as HMAC keys). Here logging is set up, and a failed start becomes one line
on stderr: ConfigError exit code 2, StartupFailure (credentials, bucket, brokers) 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from azsidecar import __version__
from azsidecar.commands import RUNNERS, register_all
from azsidecar.failures import EXIT_CONFIG, EXIT_ENVIRONMENT, StartupFailure
from azsidecar.logs import setup_logging
from azsidecar.runtime import tune_allocator, tune_gc
from core.configload import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="azsidecar",
        description="AZ-aware Kafka producer proxy: cross-zone payload goes through S3.",
    )
    parser.add_argument("--version", action="version", version=f"azsidecar {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    register_all(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    setup_logging(getattr(args, "log_format", None) or "text", getattr(args, "log_level", None) or "INFO",
                  component=args.command)
    tune_gc()
    tune_allocator(agent=args.command == "agent")
    # a subcommand's own form (`plan leaders`) names its runner with set_defaults(runner=...)
    module_name, _, function = (getattr(args, "runner", None) or RUNNERS[args.command]).partition(":")
    run = getattr(importlib.import_module(module_name), function)
    try:
        return int(run(args) or 0)
    except ConfigError as exc:
        print(f"azsidecar: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StartupFailure as exc:
        print(f"azsidecar: cannot start: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
