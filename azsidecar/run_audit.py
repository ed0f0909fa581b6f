"""`azsidecar audit <job> --input URI --output URI [--prices FILE] ...`: the Spark jobs."""

from __future__ import annotations

import argparse

from core.prices_file import load_prices
from spark_audit.cli import compute_overrides
from spark_audit.report_options import load_report_options
from spark_audit.run import load_framing, run


def main(args: argparse.Namespace) -> int:
    return run(args.job, args.input, args.output, load_prices(args.prices),
               master=args.master, s3_endpoint_url=args.s3_endpoint_url, table_formats=args.tables,
               storage_class=args.storage_class,
               framing=load_framing(args.prices, args.path_mtu, args.link_header_bytes),
               report_options=load_report_options(args.prices, args.teams, args.min_projection_hours,
                                                  compute_overrides(args)))
