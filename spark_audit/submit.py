"""Entry script for `spark-submit`: the same jobs and arguments as `azsidecar audit`.

    spark-submit --master yarn --py-files azsidecar-audit.zip spark_audit/submit.py \
        savings --input s3://bucket/audit/ --output s3://bucket/audit-results/

The master and resources come from spark-submit; the zip must hold the packages
spark_audit and core (docs/audit-records.md shows how to build it).
"""

from __future__ import annotations

import argparse
import logging
import sys

from core.configload import ConfigError
from core.prices_file import load_prices
from spark_audit.cli import add_job_arguments, compute_overrides
from spark_audit.report_options import load_report_options
from spark_audit.run import load_framing, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="submit.py", description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        prices = load_prices(args.prices)
        framing = load_framing(args.prices, args.path_mtu, args.link_header_bytes)
        options = load_report_options(args.prices, args.teams, args.min_projection_hours, compute_overrides(args))
    except ConfigError as exc:
        print(f"submit.py: configuration error: {exc}", file=sys.stderr)
        return 2
    return run(args.job, args.input, args.output, prices, master=None, s3_endpoint_url=args.s3_endpoint_url,
               table_formats=args.tables, storage_class=args.storage_class, framing=framing,
               report_options=options)


if __name__ == "__main__":
    sys.exit(main())
