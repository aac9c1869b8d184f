"""How a number reads in any message or table: three significant digits, and a ratio with its p20–p80 band,
the band alone where the ratio of the medians falls outside it. Here, below every layer, because the
keep-or-revert rule (`decision`) writes its reason with them as the tables and sentences of `present` do."""
from __future__ import annotations

import numpy as np

MISSING = "—"  # what a sentence or table cell shows where nothing was measured


def three_digits(x: float) -> str:
    """`x` with 3 significant digits, no exponent and thousands separators ("1.00", "29.8", "4,890", "159,000"); a
    number of four digits or more is rounded too, so no figure reads more precise than it was measured. MISSING for
    a value that is not a finite number (nothing measured)."""
    if not np.isfinite(x):
        return MISSING
    if x == 0:
        return "0"
    places = 2 - int(np.floor(np.log10(abs(float(f"{x:.3g}")))))  # of x rounded: 999.7 reads "1,000"
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


BAND_ONLY = "(p20–p80; the ratio of the medians lies outside)"  # what follows a band shown without its ratio


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
    """A ratio (a speedup) with its p20–p80 band of per-round ratios: "1.73× [1.70–1.77]"; where the ratio of the
    medians lies outside its own band (a few rounds at another clock can do that) the band alone,
    "1.70–1.77× (p20–p80; …)", so that no ratio is ever read outside its band; the ratio alone where no band was
    measured; "" where nothing was."""
    if not np.isfinite(ratio):
        return ""
    if not (np.isfinite(p20) and np.isfinite(p80)):
        return f"{three_digits(ratio)}×"
    if p20 <= ratio <= p80:
        return f"{_band_edge(ratio)}× [{_band_edge(p20)}–{_band_edge(p80)}]"
    return f"{_outside_band(ratio, p20, p80)}× {BAND_ONLY}"


def _outside_band(ratio: float, p20: float, p80: float) -> str:
    """A band that its ratio lies outside, "1.59–1.67", each edge with more digits (up to six places) where its
    ratio would read as the nearer edge itself ("1.590–1.670" for a ratio of 1.671), never fewer than
    `_band_edge` gives it (an edge just off 1 keeps the digits that tell it from 1)."""
    nearest = p80 if ratio > p80 else p20
    if _band_edge(ratio) != _band_edge(nearest):
        return f"{_band_edge(p20)}–{_band_edge(p80)}"
    places = 0
    while places < 6 and f"{ratio:.{places}f}" == f"{nearest:.{places}f}":
        places += 1

    def edge(x: float) -> str:
        own = _band_edge(x)
        return f"{x:,.{max(places, len(own.split('.')[1]) if '.' in own else 0)}f}"
    return f"{edge(p20)}–{edge(p80)}"


def ratio_label(ratio: float, p20: float, p80: float) -> str:
    """A ratio as a figure labels it, short: "1.73×", or its band alone, "11.8–13.6×", where the ratio of the medians
    lies outside it (`with_band`'s rule, without the words a figure has no room for)."""
    if np.isfinite(ratio) and np.isfinite(p20) and np.isfinite(p80) and not p20 <= ratio <= p80:
        return f"{_outside_band(ratio, p20, p80)}×"
    return f"{three_digits(ratio)}×" if np.isfinite(ratio) else ""
