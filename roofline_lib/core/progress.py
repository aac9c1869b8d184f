"""Progress bars for long work: tqdm's (a widget in a notebook, text in a terminal), off where asked.

`ROOFLINE_PROGRESS=0` switches every bar off, as the notebook runner does: a bar saved in an executed
notebook is frozen text that tells a reader nothing. Where stderr is a log file (neither a terminal nor a
notebook), a bar redraws at most every LOG_INTERVAL_S instead of ten times a second, so the log stays
readable: there a new postfix waits for the next redraw instead of forcing one.
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


class _LogBar(tqdm):
    """A bar in a log file: setting its postfix never forces a redraw (tqdm's default would, every time)."""

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        super().set_postfix_str(s, refresh=False)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)


def progress_bar(iterable=None, *, disable: bool = False, **options) -> tqdm:
    """`tqdm(iterable, **options)`, disabled when `disable` or when ROOFLINE_PROGRESS=0, and redrawn at most
    every LOG_INTERVAL_S where it writes to a log file."""
    off = disable or os.environ.get(PROGRESS_ENV, "").strip() == "0"
    if _writes_to_a_log():
        options.setdefault("mininterval", LOG_INTERVAL_S)
        return _LogBar(iterable, disable=off, **options)
    return tqdm(iterable, disable=off, **options)
