"""One sweep over several GPUs of one host: the rows dealt out, one `run` process per GPU, one result.

Rows are independent (each builds its own layer and inputs), so a sweep splits by row. Each GPU runs
`python -m roofline_lib run` on its share in a child process that sees only that GPU
(`CUDA_VISIBLE_DEVICES`), writing to its own folder `OUT/gpuI/` (with its log and checkpoint, so
`--resume` continues each share). The shares' CSVs are then stacked in the suite's row order.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..core.shapes import Shape
from ..measure.roofline import layer_flops


def split_rows(rows: Sequence[Shape], n_shards: int) -> list[list[Shape]]:
    """`rows` dealt into at most `n_shards` lists of about equal estimated work, each in suite order.

    A row's work is estimated as one unit of fixed cost (setup, checks, compiles) plus its FLOPs in
    TFLOP; the costliest row goes first onto the least loaded shard. Deterministic, so a resumed run
    gives every GPU the same rows again.
    """
    if n_shards < 1:
        raise ValueError(f"need at least one shard, got {n_shards}")
    cost = {shape.row: 1 + layer_flops(shape) / 1e12 for shape in rows}
    shards: list[list[Shape]] = [[] for _ in range(min(n_shards, len(rows)))]
    loads = [0.0] * len(shards)
    for shape in sorted(rows, key=lambda s: cost[s.row], reverse=True):
        i = loads.index(min(loads))
        shards[i].append(shape)
        loads[i] += cost[shape.row]
    order = {shape.row: i for i, shape in enumerate(rows)}
    return [sorted(shard, key=lambda s: order[s.row]) for shard in shards]


def visible_gpus(n: int) -> list[str]:
    """The ids to put in each child's CUDA_VISIBLE_DEVICES: the first `n` of this process's GPUs."""
    import torch
    available = torch.cuda.device_count()
    if n > available:
        raise ValueError(f"--gpus {n} asked for, but {available} CUDA GPU(s) are visible")
    inherited = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return inherited[:n] if inherited else [str(i) for i in range(n)]


def run_shards(child_args: Sequence[str], shards: Sequence[Sequence[Shape]], out: Path,
               poll_s: float = 10.0) -> list[Path]:
    """Run `python -m roofline_lib run CHILD_ARGS --rows … --out OUT/gpuI --figures OUT/gpuI` for each
    shard on its own GPU, print progress as rows finish, and return the shard folders."""
    gpus = visible_gpus(len(shards))
    folders, procs = [], []
    for i, (gpu, shard) in enumerate(zip(gpus, shards)):
        folder = out / f"gpu{i}"
        folder.mkdir(parents=True, exist_ok=True)
        rows = ",".join(shape.row for shape in shard)
        command = [sys.executable, "-m", "roofline_lib", "run", *child_args, "--device", "cuda", "--rows", rows,
                   "--out", str(folder), "--figures", str(folder)]
        log = open(folder / "log.txt", "w")
        procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                      env=os.environ | {"CUDA_VISIBLE_DEVICES": gpu, "PYTHONUNBUFFERED": "1"}))
        log.close()
        folders.append(folder)
        print(f"gpu{i} (CUDA device {gpu}): rows {rows} → {folder / 'log.txt'}", flush=True)
    try:
        _follow(procs, folders, shards, poll_s)
    finally:  # stopped (Ctrl-C): stop the children too; their checkpoints keep the rows they finished
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
    return folders


def _follow(procs: Sequence[subprocess.Popen], folders: Sequence[Path], shards: Sequence[Sequence[Shape]],
            poll_s: float) -> None:
    """Wait for every child, printing a line whenever one finishes a row or exits."""
    start = time.monotonic()
    rows_seen, exit_seen = [0] * len(procs), [False] * len(procs)
    while True:
        running = [p.poll() is None for p in procs]
        for i, folder in enumerate(folders):
            done = _rows_done(folder, running[i])
            exited = not running[i] and not exit_seen[i]
            if exited or (done is not None and done > rows_seen[i]):
                rows_seen[i], exit_seen[i] = max(rows_seen[i], done or 0), not running[i]
                state = "running" if running[i] else f"exited with {procs[i].returncode}"
                print(f"gpu{i}: {rows_seen[i]}/{len(shards[i])} rows done, {state} "
                      f"({time.monotonic() - start:.0f} s)", flush=True)
        if not any(running):
            return
        time.sleep(poll_s)


def _rows_done(folder: Path, running: bool) -> int | None:
    """Rows a shard has finished: its checkpoint while it runs, its results file once it is done."""
    files = [folder / "run_partial.csv"] if running else sorted(folder.glob("run_*.csv"))
    files = [f for f in files if f.exists()]
    try:
        return pd.read_csv(files[-1], dtype={"row": str})["row"].nunique() if files else 0
    except (pd.errors.EmptyDataError, pd.errors.ParserError, KeyError):  # caught mid-write: ask again later
        return None


def merge_shards(folders: Sequence[Path], rows: Sequence[Shape]) -> pd.DataFrame:
    """The shards' results stacked in the order of `rows` (ValueError naming any shard that left none)."""
    frames, missing = [], []
    for folder in folders:
        files = sorted(p for p in folder.glob("run_*.csv") if p.name != "run_partial.csv")
        if files:
            frames.append(pd.read_csv(files[-1], dtype={"row": str}))
        else:
            missing.append(str(folder / "log.txt"))
    if missing:
        raise ValueError(f"{len(missing)} shard(s) left no results; see {', '.join(missing)} "
                         "(run again with --resume to keep the rows they finished)")
    merged = pd.concat(frames, ignore_index=True)
    env = ["device", "torch", "triton", "dtype"]
    mixed = [key for key in env if merged[key].nunique() > 1]
    if mixed:
        raise ValueError(f"the shards differ in {', '.join(mixed)}: not one sweep")
    order = {shape.row: i for i, shape in enumerate(rows)}
    return merged.sort_values("row", key=lambda col: col.map(order), kind="stable").reset_index(drop=True)
