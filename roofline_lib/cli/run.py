"""`roofline run`: the headless sweep of variants × rows; its result files; a Ctrl-C that keeps what finished."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch

from ..core.catalog import LADDER
from ..core.device import environment, resolve_device, resolve_dtype, set_memory_cap
from ..core.shapes import SMOKE_SUITE, SUITE
from ..measure.ceilings import Ceilings, datasheet_ceilings, measure_ceilings
from ..measure.roofline import add_roofline, fraction_table
from ..present.plots import plot_roofline, plot_speedups
from ..present.report import markdown_table, slug, summary_markdown, versus_table
from ..runs.shards import merge_shards, run_shards, split_rows
from ..runs.sweep import run_sweep, settings_file
from .output import (
    CHECKPOINT,
    make_folders,
    output_folders,
    refuse_overwrite,
    refuse_stale_checkpoint,
    remove_empty,
    resume_command,
)
from .parser import INTERRUPTED, PROG
from .selection import check_device, pick_rows, refuse_long_cpu_run

RUN_CALLS = 16  # calls per variant and row: check, peak memory, cold call, the timer's warm-up and fewest rounds


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    rows = pick_rows(args.rows, SUITE if device.type == "cuda" else SMOKE_SUITE)
    names = args.variants or list(LADDER)
    refuse_long_cpu_run(args, device, rows, len(names), RUN_CALLS, dtype)
    env = environment(device, dtype)
    stem = f"run_{slug(env['device'])}_{env['dtype']}_{env['date']}"
    if args.memory_cap_gib is not None:
        stem += f"_cap{args.memory_cap_gib:g}GiB"
    out, figures = output_folders(args, slug(env["device"]), env["dtype"])
    files = result_files(out, figures, stem, args.against)
    refuse_overwrite(list(files.values()), args.overwrite)
    shards = split_rows(rows, args.gpus) if args.gpus > 1 else []
    if shards and not args.resume:  # each share's folder, written by its child process
        folders = [out / f"gpu{i}" for i in range(len(shards))]
        refuse_overwrite([f / name for f in folders for name in ("log.txt", CHECKPOINT)]
                         + [f / p.name for f in folders for p in files.values()], args.overwrite)
    if not shards:
        refuse_stale_checkpoint(out, args)

    print(f"run: {len(rows)} row(s) × {len(names)} variant(s) on {env['device']} ({env['dtype']})"
          + (f" over {args.gpus} GPUs" if shards else "") + f" → {out}/", flush=True)
    if args.memory_cap_gib is not None:
        set_memory_cap(device, args.memory_cap_gib)
    options = {"chunked": {"chunk_size": args.chunk_size}} if args.chunk_size is not None else None
    made = make_folders(out, figures)
    try:
        if shards:  # the checks above cover the shares' folders, so the children may overwrite them
            results = merge_shards(run_shards(_shard_args(args, names) + ["--overwrite"], shards, out), rows)
        else:
            results = run_sweep(rows, names, dtype, device, padding=args.padding, seed=args.seed, options=options,
                                budget_s=args.budget, checkpoint=out / CHECKPOINT, against=args.against,
                                resume=args.resume)
    except KeyboardInterrupt:
        return _interrupted(argv, out, made)
    for path in (out / CHECKPOINT, settings_file(out / CHECKPOINT)):
        path.unlink(missing_ok=True)
    ceilings = measure_ceilings(device, dtype)
    results = add_roofline(results.assign(memory_cap_gib=args.memory_cap_gib), ceilings)
    write_run_results(results, ceilings, datasheet_ceilings(env["device"], dtype), files)
    expected = ["ok", "infeasible", "skipped"] + (["oom"] if args.memory_cap_gib is not None else [])
    return 0 if results.status.isin(expected).all() else 1


def result_files(out: Path, figures: Path, stem: str, against: str | None) -> dict[str, Path]:
    """The files a finished run writes, by what they hold."""
    files = {"csv": out / f"{stem}.csv", "summary": out / f"{stem}.md", "roofline": out / f"{stem}_roofline.md",
             "speedup_png": figures / f"{stem}_speedup.png", "roofline_png": figures / f"{stem}_roofline.png"}
    if against is not None:
        files["versus"] = out / f"{stem}_vs_{against}.md"
    return files


def write_run_results(results: pd.DataFrame, ceilings: Ceilings, datasheet: Ceilings | None,
                      files: dict[str, Path]) -> None:
    """The CSV, the markdown tables (printed too) and the figures of a finished run."""
    results.to_csv(files["csv"], index=False)
    summary = summary_markdown(results)
    files["summary"].write_text(summary)
    roofline = (f"Fraction of the roofline floor (floor_ms / median_ms); ceilings {ceilings.matmul_tflops:,.4g} "
                f"TFLOP/s, {ceilings.copy_gbps:,.4g} GB/s ({ceilings.source}); — where a variant has no time "
                "(the table above gives its status; the CSV's `reason` column says why).\n\n"
                + markdown_table(fraction_table(results), floatfmt=".3g") + "\n")
    files["roofline"].write_text(roofline)
    plot_speedups(results).savefig(files["speedup_png"], dpi=120)
    plot_roofline(results, ceilings, datasheet).savefig(files["roofline_png"], dpi=120)
    print(summary)
    print(roofline)
    if "versus" in files:
        versus = versus_table(results).to_markdown(index=False) + "\n"
        files["versus"].write_text(versus)
        print(versus)
    print("wrote " + ", ".join(str(p) for p in files.values()))


def _interrupted(argv: list[str], out: Path, made: list[Path]) -> int:
    """Ctrl-C: one line naming the rows kept (the checkpoints) and the command that resumes them."""
    checkpoints = [p for p in (out / CHECKPOINT, *sorted(out.glob(f"gpu*/{CHECKPOINT}"))) if p.exists()]
    kept = list(dict.fromkeys(r for p in checkpoints for r in pd.read_csv(p, dtype={"row": str}).row))
    remove_empty(made)
    if not kept:
        print(f"interrupted before a row finished; nothing kept. Run again with: {shlex.join([PROG, *argv])}",
              file=sys.stderr)
    else:
        print(f"interrupted: kept row(s) {', '.join(kept)} in {out}/; resume with: {resume_command(argv, out)}",
              file=sys.stderr)
    return INTERRUPTED




def _shard_args(args: argparse.Namespace, names: list[str]) -> list[str]:
    """The `run` options each GPU's process gets (its rows, folders and device are added per shard)."""
    options = {"--dtype": args.dtype, "--seed": args.seed, "--variants": ",".join(names), "--padding": args.padding,
               "--budget": args.budget, "--against": args.against, "--memory-cap-gib": args.memory_cap_gib,
               "--chunk-size": args.chunk_size}
    flags = [item for key, value in options.items() if value is not None for item in (key, str(value))]
    return flags + (["--resume"] if args.resume else []) + (["--force"] if args.force else [])
