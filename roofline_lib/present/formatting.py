"""How numbers read in tables, sentences and figures: three significant digits, no exponent, µs or ms,
thousands separators; MISSING where nothing was measured. Three digits, a measured value and a ratio with its band
are `core.numbers`'s, re-exported here, since the §3 and keep-or-revert rules below `present` write them too."""
from __future__ import annotations

import numpy as np

from ..core.numbers import MISSING, as_shown, measured, three_digits, with_band

__all__ = ["MISSING", "clipped", "format_number", "format_us", "line_speedup", "measured", "percent", "three_digits",
           "tick_number", "with_band"]


def format_us(us: float) -> str:
    """Microseconds with 3 significant digits and no exponent, as µs below 1 ms, else as ms ("1.00 ms",
    "4,890 ms"); MISSING where nothing was measured."""
    if not np.isfinite(us):
        return MISSING
    value, unit = (us, "µs") if abs(as_shown(us)) < 1000 else (us / 1e3, "ms")
    return f"{three_digits(value)} {unit}"


def format_number(x: float) -> str:
    """A table cell as a reader wants it: a whole number below 10⁷ (a count or a size: 16,384 tokens) in full with
    thousands separators, any other value `measured`. A table whose measured column can hold a whole number (an
    error ratio of exactly 1, a peak of 14 MiB) formats that column with `measured` itself."""
    if x == x and float(x).is_integer() and 1 <= abs(x) < 1e7:
        return f"{x:,.0f}"
    return measured(x)


def percent(share: float) -> str:
    """A share as a percentage with at most 3 significant digits ("51.1%", "1.45%", "0.0900%")."""
    return f"{three_digits(100 * share)}%"


def tick_number(x: float) -> str:
    """A log axis's tick as a reader writes it: "0.001", "0.02", "1", "30", "10,000", no trailing zeros (three
    digits would read 0.100 for 0.1) and no exponent."""
    if not np.isfinite(x):
        return ""
    rounded = as_shown(x)  # ticks fall on round numbers; this keeps float noise out
    if rounded.is_integer():
        return f"{rounded:,.0f}"
    return np.format_float_positional(rounded, trim="-") if abs(rounded) < 1000 else f"{rounded:,.0f}"


def clipped(text: str, width: int) -> str:
    """`text` cut to at most `width` characters, with an ellipsis where it was cut (long kernel names)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def line_speedup(line, against: bool = False) -> str:
    """A sweep line's speedup with its p20–p80 band (`with_band`): over the reference, or, with `against`, over
    the rung it was timed against (`vs_speedup`)."""
    if against:
        return with_band(line["vs_speedup"], line["vs_p20"], line["vs_p80"])
    return with_band(line["speedup"], line["speedup_p20"], line["speedup_p80"])
