"""The command line: `roofline run …` (the headless sweep of variants × suite), `roofline profile …` (where the
time goes) and `roofline longctx …` (the chunked layer at long context); `python -m roofline_lib …` is the same.

Building the parser imports no torch, pandas, matplotlib or triton (names come from `catalog`), so `--help`
and `--version` are fast; each `cmd_*` imports what it needs in one block at its top. Every argument is
checked before any work starts, and nothing is written until then: a bad argument, or a result file that
would be overwritten without `--overwrite`, exits with status 2 and one line `error: …` on stderr.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import sys
from pathlib import Path

from ..core.catalog import ATTENTION_STRATEGIES, DEFAULT_CHUNK_SIZE, DTYPE_NAMES, LADDER, PADDINGS, PEERS

PROG = "roofline"
RUNS = Path("runs")  # the default parent of every output folder, relative to the current folder (git-ignored)
CPU_SEQ_LEN = 2048  # longctx's default sequence length on the CPU (100,000 on CUDA)
CUDA_SEQ_LEN = 100_000
DEFAULT_OUT = "runs/DEVICE_DTYPE_YYYYmmdd-HHMMSS/ in the current folder, UTC time, git-ignored"
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


# ---------------------------------------------------------------------------------------------- parser


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: …)" to each option's help, unless the help says its default in words already
    or there is nothing to show (a flag, or a default that depends on the machine)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("(default" in text or action.default is None or action.default is False
                or action.default is argparse.SUPPRESS or not action.option_strings):
            return text
        return super()._get_help_string(action)


def device_arg(text: str) -> str:
    """`--device`: 'cpu', 'cuda' or 'cuda:N' (argparse reports anything else in one line)."""
    name = text.strip()
    if not _DEVICE.fullmatch(name):
        raise argparse.ArgumentTypeError(f"invalid device {text!r}: use cpu, cuda or cuda:N (e.g. cuda:1)")
    return name


def version() -> str:
    """This package's version: `roofline_lib.__version__`, else the installed distribution's."""
    package = sys.modules.get(__package__ or "roofline_lib")
    found = getattr(package, "__version__", None)
    if found:
        return str(found)
    from importlib.metadata import PackageNotFoundError, version as dist_version
    try:
        return dist_version("roofline_lib")
    except PackageNotFoundError:
        return "unknown"


def _names(items: tuple[str, ...]) -> str:
    return ", ".join(items)


VARIANTS_HELP = (f"comma-separated variants: the ladder ({_names(LADDER)}) and the torch.compile peers "
                 f"({_names(PEERS)})")


def _add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=device_arg, metavar="{cpu,cuda,cuda:N}",
                        help="where to run (default: cuda when a GPU is visible, else cpu)")
    parser.add_argument("--dtype", choices=DTYPE_NAMES,
                        help="floating-point type of weights and inputs (default: fp16 on CUDA, fp32 on the CPU)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")


def _add_rows(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--rows", help=f"rows of the suite, e.g. '1-13', '1,6,9', 's1', 'smoke' or 'suite' "
                                       f"(default: {default})")


def _add_output(parser: argparse.ArgumentParser, what: str, figures: bool = True) -> None:
    parser.add_argument("--out", help=f"folder for {what} (default: {DEFAULT_OUT})")
    if figures:
        parser.add_argument("--figures", help="folder for the figures (default: the --out folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of an earlier run in the same folder (refused without it)")


def _add_memory_cap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-cap-gib", type=float, metavar="GIB",
                        help="cap this process's GPU memory at GIB (emulates a smaller GPU; CUDA only); "
                             "out-of-memory is reported, not fatal (default: no cap)")


def _add_padding(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--padding", default="none", choices=PADDINGS, help="padding pattern of the inputs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_HelpFormatter,
        description="Verify, time and profile the Transformer-layer ladder. "
                    f"Run as `{PROG} COMMAND …` or `python -m roofline_lib COMMAND …`.",
        epilog=f"`{PROG} COMMAND --help` lists a command's options and their defaults.")
    parser.add_argument("--version", action="version", version=f"roofline_lib {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", formatter_class=_HelpFormatter,
                              help="sweep variants × shapes: verify, time, write CSV, tables and plots",
                              description="Sweep variants × shapes: verify each against the float64 truth "
                                          "(§3), time it interleaved with the reference, and write a CSV, "
                                          "markdown tables and plots.")
    _add_rows(run, "the full suite on CUDA, the smoke suite on the CPU")
    run.add_argument("--variants", help=f"{VARIANTS_HELP} (default: the whole ladder)")
    _add_device(run)
    _add_padding(run)
    run.add_argument("--budget", type=float, default=1.0,
                     help="seconds of timed calls per row; 0 gives the fewest rounds the timer allows")
    run.add_argument("--against", metavar="VARIANT",
                     help="also compare every variant with this one of --variants (e.g. compile_kept), "
                          "interleaved like the reference (default: only against the reference)")
    run.add_argument("--chunk-size", type=int, metavar="N",
                     help=f"chunk size of the 'chunked' variant (default: {DEFAULT_CHUNK_SIZE})")
    _add_memory_cap(run)
    run.add_argument("--gpus", type=int, default=1,
                     help="split the rows over this many GPUs of this host, one process each; their logs and "
                          "shares go to OUT/gpuI/")
    _add_output(run, "the CSV, markdown tables and figures")
    run.add_argument("--resume", action="store_true",
                     help="continue a run stopped part-way in --out (OUT/run_partial.csv): keep its finished "
                          "rows, sweep the rest; needs an explicit --out")

    prof = commands.add_parser("profile", formatter_class=_HelpFormatter,
                               help="torch.profiler per op, kernel and category; the share spent on masks",
                               description="Profile each variant on each row with torch.profiler: time per op, "
                                           "kernel and category, and the share spent building and applying "
                                           "masks.")
    _add_rows(prof, "the suite rows where the reference fits on CUDA, the smoke suite on the CPU")
    prof.add_argument("--variants", help=f"{VARIANTS_HELP} (default: the whole ladder)")
    _add_device(prof)
    prof.add_argument("--wait", type=int, default=1, help="calls skipped before the profiler starts")
    prof.add_argument("--warmup", type=int, default=2, help="calls traced but discarded")
    prof.add_argument("--active", type=int, default=3, help="calls recorded; times are their mean")
    _add_output(prof, "the CSV tables and figures")

    long = commands.add_parser("longctx", formatter_class=_HelpFormatter,
                               help="chunked vs full-sequence layer at long context: error on sampled rows, "
                                    "time, TFLOP/s, memory, attention strategy × chunk size",
                               description="The chunked layer against the full-sequence layer at long context: "
                                           "§3 error on sampled rows, time, TFLOP/s and memory for every "
                                           "attention strategy × chunk size, under an optional memory cap.")
    long.add_argument("--seq-len", type=int, metavar="N",
                      help=f"tokens per sequence, e.g. 100000 or 1000000 (default: {CUDA_SEQ_LEN} on CUDA, "
                           f"{CPU_SEQ_LEN} on the CPU)")
    long.add_argument("--batch", type=int, default=1, help="sequences per call")
    long.add_argument("--d-model", type=int, default=1024, help="model width (a multiple of --n-heads)")
    long.add_argument("--n-heads", type=int, default=16, help="attention heads")
    long.add_argument("--chunk-sizes", metavar="SIZES",
                      help=f"comma-separated chunk sizes of the chunked layer (default: {DEFAULT_CHUNK_SIZE} on "
                           f"CUDA; on the CPU N/4 and N/2 for --seq-len N, so that it really chunks)")
    long.add_argument("--attention", default="all",
                      help=f"comma-separated chunk-attention strategies ({_names(ATTENTION_STRATEGIES)}), "
                           f"'auto' (the one the chunked layer picks here), or 'all' (every strategy that can "
                           f"run on the device; on CUDA all but split_math)")
    _add_memory_cap(long)
    _add_padding(long)
    long.add_argument("--budget", type=float, default=1.0,
                      help="seconds of timed calls per measurement; 0 gives the fewest rounds the timer allows")
    long.add_argument("--reps", type=int, help="exactly this many timed calls instead of --budget, e.g. 3 at "
                                               "1M tokens (default: as many as --budget allows)")
    long.add_argument("--context-parallel", action="store_true",
                      help="the context-parallel layer instead: the sequence split over the processes that "
                           "torchrun starts (`torchrun --nproc-per-node P -m roofline_lib longctx "
                           "--context-parallel …`; gloo on the CPU, NCCL on GPUs; without torchrun, P = 1), "
                           "checked on sampled rows and timed over --reps calls (default 3); rank 0 writes; the first "
                           "of --chunk-sizes is the query chunk of the pairs the causal mask cuts")
    _add_device(long)
    _add_output(long, "the CSV and markdown table", figures=False)
    return parser


# ---------------------------------------------------------------------------------------------- checks
# Each raises ValueError with one line; main() prints it as `error: …` and exits with status 2.


def _at_least(flag: str, value: float | None, low: float) -> None:
    if value is not None and not (math.isfinite(value) and value >= low):
        bound = f"at least {low:g}" if low > 0 else "0 or more"
        raise ValueError(f"{flag} must be {bound}, got {value:g}")


def _positive(flag: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be a positive number, got {value:g}")


def _int_list(flag: str, text: str) -> list[int]:
    """Comma-separated distinct positive integers."""
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"\d+", p) and int(p) >= 1 for p in parts):
        raise ValueError(f"{flag} {text!r}: use comma-separated positive integers, e.g. 4096,8192")
    values = [int(p) for p in parts]
    _no_duplicates(flag, text, values)
    return values


def _no_duplicates(flag: str, text: str | None, values: list) -> None:
    repeated = list(dict.fromkeys(v for v in values if values.count(v) > 1))
    if repeated:
        raise ValueError(f"{flag} {text!r} names {', '.join(map(str, repeated))} more than once")


def _attention(text: str) -> str:
    """The --attention spec, checked: 'all', or distinct names of strategies and 'auto'."""
    if text.strip() == "all":
        return "all"
    names = [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in ATTENTION_STRATEGIES and n != "auto"]
    if unknown:
        what = ("an empty name" if "" in unknown else "'all' stands alone" if "all" in unknown
                else f"unknown strategy {', '.join(map(repr, unknown))}")
        raise ValueError(f"--attention {text!r}: {what}; use 'all', 'auto' or some of "
                         f"{_names(ATTENTION_STRATEGIES)}")
    _no_duplicates("--attention", text, names)
    return ",".join(names)


def check_args(args: argparse.Namespace) -> None:
    """The checks that need only the arguments (no torch): numbers, lists and their combinations."""
    if args.command == "run":
        _at_least("--gpus", args.gpus, 1)
        _at_least("--budget", args.budget, 0)
        _at_least("--chunk-size", args.chunk_size, 1)
        _positive("--memory-cap-gib", args.memory_cap_gib)
        if args.resume and args.out is None:
            raise ValueError("--resume continues the run in an existing folder: name it with --out")
    elif args.command == "profile":
        _at_least("--wait", args.wait, 0)
        _at_least("--warmup", args.warmup, 0)
        _at_least("--active", args.active, 1)
    elif args.command == "longctx":
        for flag in ("--seq-len", "--batch", "--d-model", "--n-heads"):
            _at_least(flag, getattr(args, flag[2:].replace("-", "_")), 1)
        if args.d_model % args.n_heads:
            raise ValueError(f"--d-model {args.d_model} is not divisible by --n-heads {args.n_heads}")
        if args.chunk_sizes is not None:
            _int_list("--chunk-sizes", args.chunk_sizes)
        _attention(args.attention)
        _at_least("--reps", args.reps, 1)
        _at_least("--budget", args.budget, 0)
        _positive("--memory-cap-gib", args.memory_cap_gib)


def check_device(args: argparse.Namespace, device, gpu_count: int) -> None:
    """Whether the resolved `device` (a torch.device) can take this run, `gpu_count` CUDA GPUs being visible."""
    if device.type == "cuda" and device.index is not None and device.index >= gpu_count:
        raise ValueError(f"--device {args.device} asked for, but {gpu_count} CUDA GPU(s) are visible")
    if getattr(args, "memory_cap_gib", None) is not None and device.type != "cuda":
        raise ValueError("a memory cap needs a CUDA device (--memory-cap-gib emulates a smaller GPU)")
    gpus = getattr(args, "gpus", 1)
    if gpus > 1:
        if device.type != "cuda":
            raise ValueError(f"--gpus {gpus} needs --device cuda")
        if device.index is not None:
            raise ValueError(f"--gpus {gpus} uses the first {gpus} GPUs: give --device cuda, not {args.device}")
        if gpus > gpu_count:
            raise ValueError(f"--gpus {gpus} asked for, but {gpu_count} CUDA GPU(s) are visible")


def check_rows(spec: str | None, rows: list) -> list:
    """`rows` (select_rows of `spec`), unless it is empty or names a row twice."""
    if not rows:
        raise ValueError(f"--rows {spec!r} names no rows: use e.g. '1-13', '1,6,9', 's1' or 'smoke'")
    _no_duplicates("--rows", spec, [s.row for s in rows])
    return rows


def check_variants(args: argparse.Namespace, names: list[str]) -> list[str]:
    """`names` (select_variants of --variants), unless empty, repeated, or --against / --chunk-size do not fit."""
    if not names:
        raise ValueError(f"--variants {args.variants!r} names no variant: use some of {_names(LADDER + PEERS)}")
    _no_duplicates("--variants", args.variants, names)
    against = getattr(args, "against", None)
    if against is not None and against not in names:
        raise ValueError(f"--against {against} is not one of --variants ({', '.join(names)})")
    if against is not None and len(names) == 1:
        raise ValueError(f"--against {against} is the only variant: add another to --variants to compare with")
    if getattr(args, "chunk_size", None) is not None and "chunked" not in names:
        raise ValueError("--chunk-size sets the 'chunked' variant's chunks, but 'chunked' is not among --variants")
    return names


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


def _refuse_overwrite(paths: list[Path], overwrite: bool) -> None:
    """ValueError naming the first of `paths` that exists, unless --overwrite."""
    existing = [p for p in paths if p.exists()]
    if existing and not overwrite:
        more = f" (and {len(existing) - 1} more of its files)" if len(existing) > 1 else ""
        raise ValueError(f"{existing[0]} exists{more}: pass --overwrite to replace it, or choose another --out")


def _refuse_stale_checkpoint(checkpoint: Path, args: argparse.Namespace) -> None:
    if checkpoint.exists() and not args.resume and not args.overwrite:
        raise ValueError(f"{checkpoint} exists (a run stopped part-way): pass --resume to continue it, "
                         f"or --overwrite to start again")


def _start(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    import torch

    from ..measure.ceilings import datasheet_ceilings, measure_ceilings
    from ..core.device import environment, resolve_device, resolve_dtype, set_memory_cap
    from ..present.plots import plot_roofline, plot_speedups
    from ..variants.registry import select_variants
    from ..present.report import markdown_table, slug, summary_markdown, versus_table
    from ..measure.roofline import add_roofline, fraction_table
    from ..core.shapes import SMOKE_SUITE, SUITE, select_rows
    from ..runs.shards import merge_shards, run_shards, split_rows
    from ..runs.sweep import run_sweep

    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    rows = check_rows(args.rows, select_rows(args.rows, SUITE if device.type == "cuda" else SMOKE_SUITE))
    names = check_variants(args, select_variants(args.variants))
    env = environment(device, dtype)
    stem = f"run_{slug(env['device'])}_{env['dtype']}_{env['date']}"
    if args.memory_cap_gib is not None:
        stem += f"_cap{args.memory_cap_gib:g}GiB"
    out, figures = output_folders(args, slug(env["device"]), env["dtype"])
    results_files = [out / f"{stem}.csv", out / f"{stem}.md", out / f"{stem}_roofline.md",
                     figures / f"{stem}_speedup.png", figures / f"{stem}_roofline.png"]
    if args.against is not None:
        results_files.append(out / f"{stem}_vs_{args.against}.md")
    _refuse_overwrite(results_files, args.overwrite)
    shards = split_rows(rows, args.gpus) if args.gpus > 1 else []
    if shards and not args.resume:  # each share's folder, written by its child process
        folders = [out / f"gpu{i}" for i in range(len(shards))]
        _refuse_overwrite([f / name for f in folders for name in ("log.txt", "run_partial.csv")]
                          + [f / p.name for f in folders for p in results_files], args.overwrite)
    if not shards:
        _refuse_stale_checkpoint(out / "run_partial.csv", args)

    _start(f"run: {len(rows)} row(s) × {len(names)} variant(s) on {env['device']} ({env['dtype']})"
           + (f" over {args.gpus} GPUs" if shards else "") + f" → {out}/")
    if args.memory_cap_gib is not None:
        set_memory_cap(device, args.memory_cap_gib)
    options = {"chunked": {"chunk_size": args.chunk_size}} if args.chunk_size is not None else None
    out.mkdir(parents=True, exist_ok=True)
    figures.mkdir(parents=True, exist_ok=True)
    if shards:  # the checks above cover the shares' folders, so the children may overwrite them
        results = merge_shards(run_shards(_shard_args(args, names) + ["--overwrite"], shards, out), rows)
    else:
        results = run_sweep(rows, names, dtype, device, padding=args.padding, seed=args.seed, options=options,
                            budget_s=args.budget, checkpoint=out / "run_partial.csv", against=args.against,
                            resume=args.resume)
        (out / "run_partial.csv").unlink()
    results = results.assign(memory_cap_gib=args.memory_cap_gib)
    ceilings = measure_ceilings(device, dtype)
    results = add_roofline(results, ceilings)
    first = results.iloc[0]
    results.to_csv(out / f"{stem}.csv", index=False)
    summary = summary_markdown(results)
    (out / f"{stem}.md").write_text(summary)
    fractions = fraction_table(results)
    roofline = (f"Fraction of the roofline floor (floor_ms / median_ms); ceilings {ceilings.matmul_tflops:,.4g} "
                f"TFLOP/s, {ceilings.copy_gbps:,.4g} GB/s ({ceilings.source}); — where a variant has no time "
                "(the table above says why).\n\n"
                + markdown_table(fractions, floatfmt=".3g") + "\n")
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
    import torch

    from ..core.device import environment, resolve_device, resolve_dtype
    from ..present.plots import plot_mask_share
    from ..present.plots_profile import plot_category_breakdown
    from ..measure.profile_analysis import mask_share_table
    from ..runs.profile_suite import profile_suite
    from ..core.reference import reference_fits
    from ..variants.registry import select_variants
    from ..present.report import slug
    from ..core.shapes import SMOKE_SUITE, SUITE, select_rows

    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    default = (tuple(s for s in SUITE if reference_fits(s, dtype, device)) if device.type == "cuda"
               else SMOKE_SUITE)
    rows = check_rows(args.rows, select_rows(args.rows, default))
    names = check_variants(args, select_variants(args.variants))
    env = environment(device, dtype)
    stem = f"profile_{slug(env['device'])}_{env['dtype']}_{env['date']}"
    out, figures = output_folders(args, slug(env["device"]), env["dtype"])
    tables = ("runs", "ops", "kernels", "categories", "mask_share")
    _refuse_overwrite([out / f"{stem}_{name}.csv" for name in tables]
                      + [figures / f"{stem}_{name}.png" for name in ("breakdown", "mask_share")], args.overwrite)

    _start(f"profile: {len(rows)} row(s) × {len(names)} variant(s) on {env['device']} ({env['dtype']}) → {out}/")
    suite = profile_suite(rows, names, dtype, device, seed=args.seed, wait=args.wait, warmup=args.warmup,
                          active=args.active)
    out.mkdir(parents=True, exist_ok=True)
    figures.mkdir(parents=True, exist_ok=True)
    shares = mask_share_table(suite.categories)
    frames = dict(zip(tables, (suite.runs, suite.ops, suite.kernels, suite.categories, shares)))
    written = []
    for name, table in frames.items():
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


def longctx_chunk_sizes(spec: str | None, seq_len: int, cuda: bool) -> list[int]:
    """--chunk-sizes, or its default: DEFAULT_CHUNK_SIZE on CUDA; on the CPU N/4 and N/2 (at least 1), so that
    the chunked layer really runs more than one chunk at the CPU's short default length."""
    if spec is not None:
        return _int_list("--chunk-sizes", spec)
    if cuda:
        return [DEFAULT_CHUNK_SIZE]
    return sorted({max(1, seq_len // 4), max(1, seq_len // 2)})


def cmd_longctx(args: argparse.Namespace) -> int:
    if args.context_parallel:
        return cmd_context_parallel(args)
    import torch

    from ..core.device import environment, resolve_device, resolve_dtype
    from ..runs.longctx import grid_strategies, long_shape, run_longctx
    from ..present.report import longctx_markdown, slug
    from ..variants.chunk_attention import resolve

    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    cuda = device.type == "cuda"
    seq_len = args.seq_len if args.seq_len is not None else (CUDA_SEQ_LEN if cuda else CPU_SEQ_LEN)
    shape = long_shape(seq_len, args.batch, args.d_model, args.n_heads)
    chunk_sizes = longctx_chunk_sizes(args.chunk_sizes, seq_len, cuda)
    strategies = grid_strategies(_attention(args.attention), device)
    env = environment(device, dtype)
    stem = f"longctx_{slug(env['device'])}_{env['dtype']}_{env['date']}_N{shape.seq_len}"
    out, _ = output_folders(args, slug(env["device"]), env["dtype"])
    _refuse_overwrite([out / f"{stem}.csv", out / f"{stem}.md"], args.overwrite)

    _start(f"longctx: {shape.label} on {env['device']} ({env['dtype']}); chunk sizes "
           f"{', '.join(map(str, chunk_sizes))}; attention {', '.join(strategies)} → {out}/")
    results = run_longctx(shape, dtype, device, chunk_sizes, strategies, memory_cap_gib=args.memory_cap_gib,
                          padding=args.padding, seed=args.seed, budget_s=args.budget, reps=args.reps)
    auto, passed_over = resolve("auto", device, dtype, shape.head_dim)
    first = results.iloc[0]
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / f"{stem}.csv", index=False)
    summary = (f"{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['dtype']}, "
               f"{first['date']}; {shape.label}, padding {args.padding}. err_ratio: error / the reference's error "
               f"on the sampled rows (§3 passes up to 2); memory in GiB; ratio_vs_full: chunked / full-sequence "
               f"time, interleaved, uncapped. Attention 'auto' is {auto} here"
               + (f" (passed over: {'; '.join(passed_over)})" if passed_over else "") + ".\n\n"
               + longctx_markdown(results) + "\n")
    (out / f"{stem}.md").write_text(summary)
    print(summary)
    for r in results[results.status.isin(["skipped", "oom", "fail", "error"])].itertuples():
        print(f"{r.variant} {r.attention} chunk {r.chunk_size} cap {r.memory_cap_gib}: {r.status}: {r.reason}")
    print(f"wrote {out / stem}.csv and {out / stem}.md")
    return 1 if results.status.isin(["fail", "error"]).any() else 0


def cmd_context_parallel(args: argparse.Namespace) -> int:
    import pandas as pd
    import torch
    import torch.distributed as dist

    from ..runs.context_parallel import init, measure_ring as measure
    from ..core.device import environment, resolve_device, resolve_dtype
    from ..runs.longctx import long_shape
    from ..present.report import slug

    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    seq_len = args.seq_len if args.seq_len is not None else (CUDA_SEQ_LEN if device.type == "cuda" else CPU_SEQ_LEN)
    shape = long_shape(seq_len, args.batch, args.d_model, args.n_heads)
    device = init(device)
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        env = environment(device, dtype)
        stem = f"context_parallel_{slug(env['device'])}_{env['dtype']}_{env['date']}_N{seq_len}_P{world}"
        out, _ = output_folders(args, slug(env["device"]), env["dtype"])
        if rank == 0:
            _refuse_overwrite([out / f"{stem}.csv", out / f"{stem}.md"], args.overwrite)
            _start(f"longctx --context-parallel: {shape.label} over {world} rank(s) on {env['device']} "
                   f"({env['dtype']}) → {out}/")
        chunk_size = int(args.chunk_sizes.split(",")[0]) if args.chunk_sizes else DEFAULT_CHUNK_SIZE
        record = measure(shape, dtype, device, padding=args.padding, seed=args.seed, reps=args.reps or 3,
                         chunk_size=chunk_size)
        if rank != 0:
            return 0 if record["passed"] else 1
        results = pd.DataFrame([record]).assign(**env)
        out.mkdir(parents=True, exist_ok=True)
        results.to_csv(out / f"{stem}.csv", index=False)
        columns = ["ranks", "backend", "kernel", "seq_len", "padding", "status", "err_ratio", "rows_checked",
                   "median_ms", "peak_gib_per_rank"]
        summary = (f"{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}; {shape.label} over "
                   f"{world} rank(s). err_ratio: error / the reference's error on the sampled rows (§3 passes up "
                   "to 2).\n\n" + results[columns].to_markdown(index=False, floatfmt=".4g") + "\n")
        (out / f"{stem}.md").write_text(summary)
        print(summary)
        print(f"wrote {out / stem}.csv and {out / stem}.md")
        return 0 if record["passed"] else 1
    finally:
        dist.destroy_process_group()


COMMANDS = {"run": cmd_run, "profile": cmd_profile, "longctx": cmd_longctx}


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (argparse exits with status 2 on a malformed option), check it, run the command.
    A ValueError, from the checks or from the library, ends it with one line `error: …` and status 2."""
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
        return COMMANDS[args.command](args)
    except ValueError as exc:
        print(f"error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return 2
