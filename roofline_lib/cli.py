"""`python -m roofline_lib run …` (the headless sweep of variants × suite), `… profile …` (where the time goes)
and `… longctx …` (the chunked layer at long context)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .ceilings import datasheet_ceilings, measure_ceilings
from .device import environment, resolve_device, resolve_dtype, set_memory_cap
from .longctx import grid_strategies, long_shape, run_longctx, summary_table
from .plots import plot_category_breakdown, plot_mask_share, plot_roofline, plot_speedups
from .profiling import mask_share_table, profile_suite
from .report import slug, summary_markdown, versus_table
from .roofline import add_roofline, fraction_table
from .shapes import SMOKE_SUITE, SUITE, select_rows
from .shards import merge_shards, run_shards, split_rows
from .sweep import run_sweep
from .variants import select_variants
from .variants.chunk_attention import resolve
from .variants.chunked import DEFAULT_CHUNK_SIZE
from .correctness import PADDINGS, reference_feasible


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
    run.add_argument("--resume", action="store_true", help="a run stopped part-way (OUT/run_partial.csv): "
                                                           "keep its finished rows, sweep the rest")
    run.add_argument("--against", help="also compare every variant with this one of --variants "
                                       "(e.g. compile_best), interleaved like the reference")
    run.add_argument("--out", default="results", help="folder for the CSV and markdown summary")
    run.add_argument("--figures", default="figures", help="folder for the speedup plot")
    run.add_argument("--gpus", type=int, default=1, help="split the rows over this many GPUs of this host, "
                                                        "one process each (logs and shares in OUT/gpuI/)")
    _add_memory_cap(run)
    run.add_argument("--chunk-size", type=int,
                     help=f"chunk size of the 'chunked' variant (default {DEFAULT_CHUNK_SIZE})")
    prof = commands.add_parser("profile", help="torch.profiler per op, kernel and category; the share spent on masks")
    _add_common(prof)
    prof.add_argument("--variants", help="comma-separated (default: all)")
    prof.add_argument("--wait", type=int, default=1, help="calls skipped before the profiler starts")
    prof.add_argument("--warmup", type=int, default=2, help="calls traced but discarded")
    prof.add_argument("--active", type=int, default=3, help="calls recorded (times are their mean)")
    prof.add_argument("--out", default="results", help="folder for the CSV tables")
    prof.add_argument("--figures", default="figures", help="folder for the breakdown and mask-share plots")
    long = commands.add_parser("longctx", help="chunked vs full-sequence layer at long context: error on sampled "
                                               "rows, time, TFLOP/s, memory, attention strategy × chunk size")
    long.add_argument("--seq-len", type=int, default=100_000, help="tokens (e.g. 100000 or 1000000)")
    long.add_argument("--batch", type=int, default=1)
    long.add_argument("--d-model", type=int, default=1024)
    long.add_argument("--n-heads", type=int, default=16)
    long.add_argument("--chunk-sizes", default=str(DEFAULT_CHUNK_SIZE), help="comma-separated chunk sizes")
    long.add_argument("--attention", default="all", help="comma-separated strategies, 'auto', or 'all' (default)")
    _add_memory_cap(long)
    long.add_argument("--padding", default="none", choices=PADDINGS, help="padding pattern of the inputs")
    long.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per measurement")
    long.add_argument("--reps", type=int, help="exactly this many timed calls instead of --budget (e.g. 3 at 1M)")
    long.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    long.add_argument("--dtype", help="fp16, bf16, fp32 or fp64 (default: fp16 on CUDA, fp32 on CPU)")
    long.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    long.add_argument("--out", default="results", help="folder for the CSV and markdown table")
    return parser


def _add_memory_cap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-cap-gib", type=float, help="cap this process's GPU memory (emulates a smaller "
                                                             "GPU); out-of-memory is reported, not fatal")


def cmd_run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    rows = select_rows(args.rows, SUITE if device.type == "cuda" else SMOKE_SUITE)
    names = select_variants(args.variants)
    if args.memory_cap_gib is not None:
        set_memory_cap(device, args.memory_cap_gib)
    options = {"chunked": {"chunk_size": args.chunk_size}} if args.chunk_size is not None else None
    out, figures = Path(args.out), Path(args.figures)
    out.mkdir(parents=True, exist_ok=True)
    figures.mkdir(parents=True, exist_ok=True)
    if args.gpus > 1:
        if device.type != "cuda":
            raise ValueError(f"--gpus {args.gpus} needs --device cuda")
        shards = split_rows(rows, args.gpus)
        results = merge_shards(run_shards(_shard_args(args, names), shards, out), rows)
    else:
        results = run_sweep(rows, names, dtype, device, padding=args.padding, seed=args.seed, options=options,
                            budget_s=args.budget, checkpoint=out / "run_partial.csv", against=args.against,
                            resume=args.resume)
        (out / "run_partial.csv").unlink()
    results = results.assign(memory_cap_gib=args.memory_cap_gib)
    ceilings = measure_ceilings(device, dtype)
    results = add_roofline(results, ceilings)
    first = results.iloc[0]
    stem = f"run_{slug(first['device'])}_{first['dtype']}_{first['date']}"
    if args.memory_cap_gib is not None:
        stem += f"_cap{args.memory_cap_gib:g}GiB"
    results.to_csv(out / f"{stem}.csv", index=False)
    summary = summary_markdown(results)
    (out / f"{stem}.md").write_text(summary)
    roofline = (f"Fraction of the roofline floor (floor_ms / median_ms); ceilings {ceilings.matmul_tflops:,.4g} "
                f"TFLOP/s, {ceilings.copy_gbps:,.4g} GB/s ({ceilings.source}).\n\n"
                + fraction_table(results).to_markdown(index=False, floatfmt=".3g") + "\n")
    (out / f"{stem}_roofline.md").write_text(roofline)
    plot_speedups(results).savefig(figures / f"{stem}_speedup.png", dpi=120)
    plot_roofline(results, ceilings, datasheet_ceilings(first["device"], dtype)).savefig(
        figures / f"{stem}_roofline.png", dpi=120)
    print(summary)
    print(roofline)
    if args.against is not None:
        versus = versus_table(results).to_markdown(index=False) + "\n"
        (out / f"{stem}_vs_{args.against}.md").write_text(versus)
        print(versus)
    print(f"wrote {out / stem}.csv, {out / stem}.md, {out / stem}_roofline.md, {figures / stem}_speedup.png "
          f"and {figures / stem}_roofline.png")
    expected = ["ok", "infeasible", "skipped"] + (["oom"] if args.memory_cap_gib is not None else [])
    return 0 if results.status.isin(expected).all() else 1


def _shard_args(args: argparse.Namespace, names: list[str]) -> list[str]:
    """The `run` options each GPU's process gets (its rows, folders and device are added per shard)."""
    options = {"--dtype": args.dtype, "--seed": args.seed, "--variants": ",".join(names), "--padding": args.padding,
               "--budget": args.budget, "--against": args.against, "--memory-cap-gib": args.memory_cap_gib,
               "--chunk-size": args.chunk_size}
    flags = [item for key, value in options.items() if value is not None for item in (key, str(value))]
    return flags + (["--resume"] if args.resume else [])


def cmd_profile(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    default = (tuple(s for s in SUITE if reference_feasible(s, dtype, device)) if device.type == "cuda"
               else SMOKE_SUITE)
    rows = select_rows(args.rows, default)
    names = select_variants(args.variants)
    suite = profile_suite(rows, names, dtype, device, seed=args.seed, wait=args.wait, warmup=args.warmup,
                          active=args.active)
    env = environment(device, dtype)
    stem = f"profile_{slug(env['device'])}_{env['dtype']}_{env['date']}"
    out, figures = Path(args.out), Path(args.figures)
    out.mkdir(parents=True, exist_ok=True)
    figures.mkdir(parents=True, exist_ok=True)
    shares = mask_share_table(suite.categories)
    tables = {"runs": suite.runs, "ops": suite.ops, "kernels": suite.kernels, "categories": suite.categories,
              "mask_share": shares}
    written = []
    for name, table in tables.items():
        if not table.empty:
            table.to_csv(out / f"{stem}_{name}.csv", index=False)
            written.append(str(out / f"{stem}_{name}.csv"))
    if not suite.categories.empty:
        plot_category_breakdown(suite.categories).savefig(figures / f"{stem}_breakdown.png", dpi=120)
        plot_mask_share(shares).savefig(figures / f"{stem}_mask_share.png", dpi=120)
        written += [str(figures / f"{stem}_breakdown.png"), str(figures / f"{stem}_mask_share.png")]
        wide = shares.pivot(index="row", columns="variant", values="mask_share").reindex(
            index=list(dict.fromkeys(shares.row)), columns=list(dict.fromkeys(shares.variant)))
        source = "GPU kernel time" if device.type == "cuda" else "CPU op time"
        print(f"{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}. "
              f"Share of {source} spent building and applying masks:\n")
        print((100 * wide).to_markdown(floatfmt=".1f") + "\n")
    failed = suite.runs[~suite.runs.status.isin(["ok", "infeasible", "skipped"])]
    for r in failed.itertuples():
        print(f"row {r.row} {r.variant}: {r.status}: {r.reason}", file=sys.stderr)
    print("wrote " + ", ".join(written))
    return 1 if len(failed) else 0


def cmd_longctx(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    shape = long_shape(args.seq_len, args.batch, args.d_model, args.n_heads)
    chunk_sizes = [int(c) for c in args.chunk_sizes.split(",") if c.strip()]
    results = run_longctx(shape, dtype, device, chunk_sizes, grid_strategies(args.attention, device),
                          memory_cap_gib=args.memory_cap_gib, padding=args.padding, seed=args.seed,
                          budget_s=args.budget, reps=args.reps)
    auto, passed_over = resolve("auto", device, dtype, shape.head_dim)
    first = results.iloc[0]
    stem = f"longctx_{slug(first['device'])}_{first['dtype']}_{first['date']}_N{shape.seq_len}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / f"{stem}.csv", index=False)
    summary = (f"{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['dtype']}, "
               f"{first['date']}; {shape.label}, padding {args.padding}. err_ratio: error / the reference's error "
               f"on the sampled rows (§3 passes up to 2); memory in GiB; ratio_vs_full: chunked / full-sequence "
               f"time, interleaved, uncapped. Attention 'auto' is {auto} here"
               + (f" (passed over: {'; '.join(passed_over)})" if passed_over else "") + ".\n\n"
               + summary_table(results) + "\n")
    (out / f"{stem}.md").write_text(summary)
    print(summary)
    for r in results[results.status.isin(["skipped", "oom", "fail", "error"])].itertuples():
        print(f"{r.variant} {r.attention} chunk {r.chunk_size} cap {r.memory_cap_gib}: {r.status}: {r.reason}")
    print(f"wrote {out / stem}.csv and {out / stem}.md")
    return 1 if results.status.isin(["fail", "error"]).any() else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"run": cmd_run, "profile": cmd_profile, "longctx": cmd_longctx}[args.command](args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
