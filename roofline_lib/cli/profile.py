"""`roofline profile`: torch.profiler per op, kernel and category over variants × rows; its result files."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from ..core.catalog import LADDER
from ..core.device import environment, resolve_device, resolve_dtype
from ..core.reference import reference_fits
from ..core.shapes import SMOKE_SUITE, SUITE
from ..measure.profile_analysis import mask_share_table
from ..present.plots import plot_mask_share
from ..present.plots_profile import plot_category_breakdown
from ..present.report import slug
from ..runs.profile_suite import SuiteProfile, profile_suite
from .output import make_folders, output_folders, refuse_overwrite
from .selection import check_device, pick_rows, refuse_long_cpu_run

TABLES = ("runs", "ops", "kernels", "categories", "mask_share")
FIGURES = ("breakdown", "mask_share")


def cmd_profile(args: argparse.Namespace, argv: list[str]) -> int:
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # else kineto prints profiler_start / _stop lines per profile
    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    default = (tuple(s for s in SUITE if reference_fits(s, dtype, device)) if device.type == "cuda"
               else SMOKE_SUITE)
    rows = pick_rows(args.rows, default)
    names = args.variants or list(LADDER)
    refuse_long_cpu_run(args, device, rows, len(names), 1 + args.wait + args.warmup + args.active, dtype)
    env = environment(device, dtype)
    stem = f"profile_{slug(env['device'])}_{env['dtype']}_{env['date']}"
    out, figures = output_folders(args, slug(env["device"]), env["dtype"])
    refuse_overwrite([out / f"{stem}_{name}.csv" for name in TABLES]
                     + [figures / f"{stem}_{name}.png" for name in FIGURES], args.overwrite)

    print(f"profile: {len(rows)} row(s) × {len(names)} variant(s) on {env['device']} ({env['dtype']}) → {out}/",
          flush=True)
    suite = profile_suite(rows, names, dtype, device, seed=args.seed, wait=args.wait, warmup=args.warmup,
                          active=args.active)
    make_folders(out, figures)
    source = "GPU kernel time" if device.type == "cuda" else "CPU op time"
    write_profile_results(suite, out / stem, figures / stem,
                          f"{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}", source)
    failed = suite.runs[~suite.runs.status.isin(["ok", "infeasible", "skipped"])]
    for r in failed.itertuples():
        print(f"row {r.row} {r.variant}: {r.status}: {r.reason}", file=sys.stderr)
    return 1 if len(failed) else 0


def write_profile_results(suite: SuiteProfile, tables: Path, figures: Path, context: str, source: str) -> None:
    """The tables (CSV) and figures of a profile, named `tables`_NAME.csv and `figures`_NAME.png; the mask
    share printed as a table."""
    shares = mask_share_table(suite.categories)
    frames = dict(zip(TABLES, (suite.runs, suite.ops, suite.kernels, suite.categories, shares)))
    written = []
    for name, table in frames.items():
        if not table.empty:
            table.to_csv(f"{tables}_{name}.csv", index=False)
            written.append(f"{tables}_{name}.csv")
    if not suite.categories.empty:
        plot_category_breakdown(suite.categories).savefig(f"{figures}_breakdown.png", dpi=120)
        plot_mask_share(shares).savefig(f"{figures}_mask_share.png", dpi=120)
        written += [f"{figures}_breakdown.png", f"{figures}_mask_share.png"]
        wide = shares.pivot(index="row", columns="variant", values="mask_share").reindex(
            index=list(dict.fromkeys(shares.row)), columns=list(dict.fromkeys(shares.variant)))
        print(f"{context}. Share of {source} spent building and applying masks:\n")
        print((100 * wide).to_markdown(floatfmt=".1f") + "\n")
    print("wrote " + ", ".join(written))
