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
from spark_audit.cli import add_job_arguments
from spark_audit.run import load_prices, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="submit.py", description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        prices = load_prices(args.prices)
    except ConfigError as exc:
        print(f"submit.py: configuration error: {exc}", file=sys.stderr)
        return 2
    return run(args.job, args.input, args.output, prices, master=None, s3_endpoint_url=args.s3_endpoint_url,
               table_formats=args.tables, storage_class=args.storage_class)


if __name__ == "__main__":
    sys.exit(main())
