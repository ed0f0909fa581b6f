"""How the report's figures are rounded where a person reads them: the CSV tables and the page.

The rule, one for both:
- US dollars of a cent or more to the cent (12.35); below a cent to 4 significant digits
  (0.00003494, trailing zeros dropped), so a short test run's figures do not all read 0.00;
- bytes and request counts to whole numbers (a WAL PUT shared by two zones counts 0.5 to
  each in the sums, and 1 where it is written);
- ratios (`*_rate`, `*_ratio`, `*_share`) to 4 decimals; milliseconds to 3 (a microsecond).
Halves round away from zero (0.125 -> 0.13), as an invoice does, on the decimal that Python
prints for the float (12.350000000000001 -> 12.35), not on its binary value.

Rounding happens once, where a value is written: every sum behind a figure is taken over the
unrounded values, so a column's rounded rows may add up to a cent more or less than its
rounded total. Parquet tables keep full precision: programs read them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

CENT = Decimal("0.01")
SIGNIFICANT_BELOW_A_CENT = 4
RATIO_DECIMALS = 4
MS_DECIMALS = 3


def _decimal(x: float) -> Decimal:
    return Decimal(repr(float(x)))


def _drop_trailing_zeros(d: Decimal) -> Decimal:
    text = f"{d:f}"
    return Decimal(text.rstrip("0").rstrip(".")) if "." in text else d


def usd_decimal(x: float) -> Decimal:
    """`x` dollars rounded by the rule: to the cent from a cent up, else 4 significant digits."""
    d = _decimal(x)
    if d == 0:
        return Decimal("0.00")
    if abs(d) >= CENT:
        return d.quantize(CENT, ROUND_HALF_UP)
    # adjusted() is the exponent of the first significant digit: 3.49e-05 -> -5
    q = d.quantize(Decimal(1).scaleb(d.adjusted() - SIGNIFICANT_BELOW_A_CENT + 1), ROUND_HALF_UP)
    if abs(q) >= CENT:  # 0.0099996 rounds up to a cent: then it is written as one
        return q.quantize(CENT, ROUND_HALF_UP)
    return _drop_trailing_zeros(q)


def usd_text(x: float) -> str:
    """Dollars as a CSV cell: 1234.57, -0.50, 0.00003494, 0.00."""
    return f"{usd_decimal(x):f}"


def whole_text(x: float) -> str:
    """A count of bytes or requests: the nearest whole number, halves away from zero."""
    return f"{_decimal(x).quantize(Decimal(1), ROUND_HALF_UP):f}"


def decimals_text(x: float, decimals: int) -> str:
    return f"{_decimal(x).quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_UP):f}"


def is_usd_column(name: str) -> bool:
    return "usd" in name.split("_")


def _is_count_column(name: str) -> bool:
    return name == "bytes" or name.endswith(("bytes", "requests")) or name.startswith("bytes_")


def _is_ratio_column(name: str) -> bool:
    return name.endswith(("_rate", "_ratio", "_share")) or name.startswith("share_")


def cell_writer(column: str) -> Callable[[float], str] | None:
    """How a float of `column` is written, by the column's name; None: as Python prints it."""
    if is_usd_column(column):
        return usd_text
    if _is_count_column(column):
        return whole_text
    if _is_ratio_column(column):
        return lambda x: decimals_text(x, RATIO_DECIMALS)
    if column.endswith("_ms"):
        return lambda x: decimals_text(x, MS_DECIMALS)
    return None


def cell(column: str, value: Any) -> Any:
    """One value as written to a CSV cell: floats by `cell_writer`, the rest unchanged
    (None is an empty cell, integers and strings as they are)."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)  # nan/inf: nothing to round, and csv would write them anyway
        writer = cell_writer(column)
        return writer(value) if writer is not None else repr(value)
    return value


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A table as CSV text (header first, `\\r\\n` line ends as the csv module writes them),
    every float rounded by the rule above."""
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(columns)
    for row in rows:
        out.writerow([cell(c, v) for c, v in zip(columns, row)])
    return buf.getvalue()
