"""Progress bars for long work: tqdm's (a widget in a notebook, text in a terminal), off where asked.

`ROOFLINE_PROGRESS=0` switches every bar off, as the notebook runner does: a bar saved in an executed
notebook is frozen text that tells a reader nothing.
"""
from __future__ import annotations

import os

from tqdm.auto import tqdm

PROGRESS_ENV = "ROOFLINE_PROGRESS"


def progress_bar(iterable=None, *, disable: bool = False, **options) -> tqdm:
    """`tqdm(iterable, **options)`, disabled when `disable` or when ROOFLINE_PROGRESS=0."""
    off = disable or os.environ.get(PROGRESS_ENV, "").strip() == "0"
    return tqdm(iterable, disable=off, **options)
