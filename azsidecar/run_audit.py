"""`azsidecar audit <job> --input URI --output URI [--prices FILE] ...`: the Spark jobs."""

from __future__ import annotations

import argparse

from spark_audit.run import load_prices, run


def main(args: argparse.Namespace) -> int:
    return run(args.job, args.input, args.output, load_prices(args.prices),
               master=args.master, s3_endpoint_url=args.s3_endpoint_url, table_formats=args.tables,
               storage_class=args.storage_class)
