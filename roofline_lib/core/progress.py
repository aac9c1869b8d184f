"""Progress bars for long work: tqdm's (a widget in a notebook, text in a terminal), off where asked.

`ROOFLINE_PROGRESS=0` switches every bar off, as the notebook runner does: a bar saved in an executed
notebook is frozen text that tells a reader nothing. Where stderr is a log file (neither a terminal nor a
notebook), a bar redraws every LOG_INTERVAL_S instead of ten times a second, so the log stays readable.
"""
from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm

PROGRESS_ENV = "ROOFLINE_PROGRESS"
LOG_INTERVAL_S = 30.0  # seconds between a bar's redraws in a log file


def _writes_to_a_log() -> bool:
    """Whether bars would land in a file: stderr is no terminal, and no notebook kernel draws them as widgets."""
    isatty = getattr(sys.stderr, "isatty", None)
    return "ipykernel" not in sys.modules and not (isatty and isatty())


def progress_bar(iterable=None, *, disable: bool = False, **options) -> tqdm:
    """`tqdm(iterable, **options)`, disabled when `disable` or when ROOFLINE_PROGRESS=0, and redrawn every
    LOG_INTERVAL_S where it writes to a log file."""
    off = disable or os.environ.get(PROGRESS_ENV, "").strip() == "0"
    if _writes_to_a_log():
        options.setdefault("mininterval", LOG_INTERVAL_S)
    return tqdm(iterable, disable=off, **options)
