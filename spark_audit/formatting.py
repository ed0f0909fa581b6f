"""Numbers as a reader of a cost report writes them: dollars, percentages, bytes, durations."""

from __future__ import annotations


def usd(x: float | None) -> str:
    """Dollars as a person writes them: $1,234.56, $0.0123, $0.000035 (never 3.5e-05)."""
    if x is None:
        return "n/a"
    sign = "-" if x < 0 else ""
    a = abs(x)
    if a >= 1:
        return f"{sign}${a:,.2f}"
    if a == 0:
        return "$0.00"
    if a >= 0.01:
        return f"{sign}${a:.4f}"
    decimals = min(10, 2 - int(f"{a:e}".split("e")[1]))  # three significant digits
    return f"{sign}${a:.{decimals}f}"


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
