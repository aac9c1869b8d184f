"""How a number reads in any message or table: three significant digits, and a ratio with its p20–p80 band. Here,
below every layer, because the keep-or-revert rule (`decision`) writes its reason with them as the tables and
sentences of `present` do."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

MISSING = "—"  # what a sentence or table cell shows where nothing was measured


def as_shown(x: float) -> float:
    """`x` rounded to the 3 significant digits `three_digits` writes, as a number: the one place for that rule (a
    count below 10⁷ in a table is written in full, by `present.formatting.format_number`)."""
    return float(f"{x:.3g}")


def three_digits(x: float) -> str:
    """`x` with 3 significant digits, no exponent and thousands separators ("1.00", "29.8", "4,890", "159,000"); a
    number of four digits or more is rounded too, so no figure reads more precise than it was measured. MISSING for
    a value that is not a finite number (nothing measured)."""
    if not np.isfinite(x):
        return MISSING
    if x == 0:
        return "0"
    places = 2 - int(np.floor(np.log10(abs(as_shown(x)))))  # of x rounded: 999.7 reads "1,000"
    return f"{x:,.{places}f}" if places >= 0 else f"{round(x, places):,.0f}"


def measured(x: float) -> str:
    """A measured value (never a count) with 3 significant digits, trailing zeros kept ("1.00", "14.0"): without an
    exponent between 0.001 and 10⁶ (`three_digits`: "0.0471", "159,000"), with one elsewhere ("5.80e+10" FLOPs,
    "2.70e-07" errors); "" where nothing was measured (NaN), MISSING for an infinite value."""
    if x != x:
        return ""
    if not np.isfinite(x) or x == 0 or 1e-3 <= abs(x) < 1e6:
        return three_digits(x)
    return f"{x:#.3g}" if abs(x) < 1e6 else f"{x:.2e}"


def _band_edge(x: float) -> str:
    """A band's edge (or the ratio inside it) in three digits, or with as many more as tell it from 1 where three
    read "1.00" (up to six places): a verdict of "faster" rests on p20 > 1, and "[1.00–1.29]" would read as if the
    band held 1; the ratio takes the same digits, so "1.00× [1.002–1.003]" does not read as outside its band."""
    text, places = three_digits(x), 2
    while x != 1 and places < 6 and text == f"{1:.{places}f}":
        places += 1
        text = f"{x:.{places}f}"
    return text


def with_band(ratio: float, p20: float, p80: float) -> str:
    """A ratio (a speedup: the median of the per-round ratios) with its p20–p80 band of per-round ratios,
    "1.73× [1.70–1.77]"; the ratio alone where no band was measured; "" where nothing was."""
    if not np.isfinite(ratio):
        return ""
    if not (np.isfinite(p20) and np.isfinite(p80)):
        return f"{three_digits(ratio)}×"
    return f"{_band_edge(ratio)}× [{_band_edge(p20)}–{_band_edge(p80)}]"


def row_list(rows: Iterable) -> str:
    """"row 3" or "rows 1, 2": suite rows as a sentence names them."""
    rows = [str(row) for row in rows]
    return ("row " if len(rows) == 1 else "rows ") + ", ".join(rows)
