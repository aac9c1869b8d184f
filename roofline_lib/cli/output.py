"""Where a command writes: the default runs/ folder, folders checked creatable before any work, result files
never overwritten without --overwrite, and folders made for a run removed again if it leaves them empty."""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
from pathlib import Path

from .parser import PROG

RUNS = Path("runs")  # the default parent of every output folder, relative to the current folder (git-ignored)
CHECKPOINT = "run_partial.csv"  # a stopped run's finished rows, in its --out folder


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def output_folders(args: argparse.Namespace, device_slug: str, dtype: str) -> tuple[Path, Path]:
    """--out and --figures, or the default runs/DEVICE_DTYPE_STAMP/ for both; each checked creatable."""
    out = Path(args.out) if args.out is not None else RUNS / f"{device_slug}_{dtype}_{_stamp()}"
    figures = Path(getattr(args, "figures", None) or out)
    _creatable("--out", out)
    _creatable("--figures", figures)
    return out, figures


def _creatable(flag: str, path: Path) -> None:
    """ValueError unless `path` is a writable folder or could be made one (without making it)."""
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{flag} {path}: exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {path}: the folder is not writable")
        return
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: cannot create it, {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: cannot create it, {parent} is not writable")


def refuse_overwrite(paths: list[Path], overwrite: bool) -> None:
    """ValueError naming the first of `paths` that exists, unless --overwrite."""
    existing = [p for p in paths if p.exists()]
    if existing and not overwrite:
        more = f" (and {len(existing) - 1} more of its files)" if len(existing) > 1 else ""
        raise ValueError(f"{existing[0]} exists{more}: pass --overwrite to replace it, or choose another --out")


def refuse_stale_checkpoint(out: Path, args: argparse.Namespace, checkpoint: str = CHECKPOINT) -> None:
    """ValueError if `out` holds a stopped run (its `checkpoint`) that this command would neither resume nor
    overwrite."""
    if (out / checkpoint).exists() and not args.resume and not args.overwrite:
        raise ValueError(f"{out / checkpoint} exists (a run stopped part-way): pass --resume to continue it, "
                         "or --overwrite to start again")


def make_folders(*folders: Path) -> list[Path]:
    """Make `folders` (and their missing parents); return those made, deepest first, for `remove_empty`."""
    made = []
    for folder in folders:
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        made = missing + made
    return sorted(set(made), key=lambda p: len(p.absolute().parts), reverse=True)


def remove_empty(made: list[Path]) -> None:
    """Remove the folders of `made` (from `make_folders`) that are still empty, deepest first."""
    for folder in made:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

def resume_command(argv: list[str], out: Path) -> str:
    """`argv` as a command that resumes the run in `out`: without --resume, --overwrite and --out, then with
    `--resume --out OUT`."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif word not in ("--resume", "--overwrite") and not word.startswith("--out="):
            kept.append(word)
    return shlex.join([PROG, *kept, "--resume", "--out", str(out)])
