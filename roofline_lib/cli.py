"""`python -m roofline_lib run …`: the headless sweep of variants × suite."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .device import resolve_device, resolve_dtype
from .plots import plot_speedups
from .report import slug, summary_markdown
from .shapes import SMOKE_SUITE, SUITE, select_rows
from .sweep import run_sweep
from .variants import select_variants
from .correctness import PADDINGS


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", help="rows, e.g. '1-13', '1,6,9', 'smoke' (default: the full suite on "
                                       "CUDA, the smoke suite on the CPU)")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    parser.add_argument("--dtype", help="fp16, bf16, fp32 or fp64 (default: fp16 on CUDA, fp32 on CPU)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m roofline_lib",
                                     description="Verify, time and profile the Transformer-layer ladder.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="sweep variants × shapes: verify, time, write CSV, table and plot")
    _add_common(run)
    run.add_argument("--variants", help=f"comma-separated (default: all of {', '.join(select_variants(None))})")
    run.add_argument("--padding", default="none", choices=PADDINGS, help="padding pattern of the inputs")
    run.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per row")
    run.add_argument("--out", default="results", help="folder for the CSV and markdown summary")
    run.add_argument("--figures", default="figures", help="folder for the speedup plot")
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    rows = select_rows(args.rows, SUITE if device.type == "cuda" else SMOKE_SUITE)
    names = select_variants(args.variants)
    results = run_sweep(rows, names, dtype, device, padding=args.padding, seed=args.seed, budget_s=args.budget)
    first = results.iloc[0]
    stem = f"run_{slug(first['device'])}_{first['dtype']}_{first['date']}"
    out, figures = Path(args.out), Path(args.figures)
    out.mkdir(parents=True, exist_ok=True)
    figures.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / f"{stem}.csv", index=False)
    summary = summary_markdown(results)
    (out / f"{stem}.md").write_text(summary)
    plot_speedups(results).savefig(figures / f"{stem}_speedup.png", dpi=120)
    print(summary)
    print(f"wrote {out / stem}.csv, {out / stem}.md and {figures / stem}_speedup.png")
    return 0 if results.status.isin(["ok", "infeasible", "skipped"]).all() else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"run": cmd_run}[args.command](args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
