"""Numbers as a reader of a cost report writes them: dollars, percentages, bytes, durations."""

from __future__ import annotations

from spark_audit.rounding import CENT, usd_decimal


def usd(x: float | None) -> str:
    """Dollars as a person writes them, rounded by `spark_audit.rounding`: $1,234.57, $0.50,
    $0.00003494 (4 significant digits below a cent, never 3.5e-05)."""
    if x is None:
        return "n/a"
    d = usd_decimal(x)
    sign = "-" if d < 0 else ""
    return f"{sign}${abs(d):,.2f}" if abs(d) >= CENT or d == 0 else f"{sign}${abs(d):f}"


def pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f} %"


def si_bytes(n: float | None) -> str:
    """Bytes in SI units (as AWS bills them: 1 GB = 10^9 bytes)."""
    if n is None:
        return "n/a"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} days"


def iec_bytes(n: float | None) -> str:
    """Sizes of things made in powers of two (WAL objects): 512 KiB, 8 MiB."""
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" or float(n).is_integer() else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n}"
