"""Results recorded on a GPU that the package ships (package data), so a notebook can show them next to
live ones anywhere — in Colab too — without reading the network.

`roofline_lib/data/` mirrors a few files of the repository's `results/` (same relative paths, same
bytes: a test keeps them equal).
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pandas as pd

from .catalog import RENAMED_VARIANTS

DATA = Path(str(files("roofline_lib") / "data"))  # the shipped copies, as <results subfolder>/<file>


def recorded_path(path: str) -> Path:
    """The shipped copy of `results/<path>` (`path` may start with "results/"); ValueError if none ships."""
    relative = path.removeprefix("results/")
    shipped = DATA / relative
    if not shipped.is_file():
        have = ", ".join(str(p.relative_to(DATA)) for p in sorted(DATA.rglob("*.csv")))
        raise ValueError(f"results/{relative} is not shipped with the package (shipped: {have})")
    return shipped


def recorded_results(path: str) -> pd.DataFrame:
    """A recorded results CSV (`results/…` in the repository), read from the package's own copy, with variants
    renamed since it was written under their names now (`catalog.RENAMED_VARIANTS`)."""
    frame = pd.read_csv(recorded_path(path), dtype={"row": str})
    names = [column for column in ("variant", "against") if column in frame]
    return frame.replace({column: RENAMED_VARIANTS for column in names}) if names else frame
