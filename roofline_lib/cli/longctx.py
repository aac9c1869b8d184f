"""`roofline longctx`: the chunked layer against the full-sequence one at long context, or (with
--context-parallel, under torchrun) the layer with its sequence split over the ranks; their result files."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from ..core.catalog import DEFAULT_CHUNK_SIZE
from ..core.device import environment, resolve_device, resolve_dtype
from ..core.shapes import Shape
from ..present.report import longctx_markdown, slug
from ..runs import context_parallel
from ..runs.longctx import grid_strategies, long_shape, run_longctx
from ..variants.chunk_attention import resolve
from ..variants.context_parallel import pieces
from .output import make_folders, output_folders, refuse_overwrite
from .parser import CPU_SEQ_LEN, CUDA_SEQ_LEN
from .selection import check_device


def longctx_chunk_sizes(sizes: list[int] | None, seq_len: int, cuda: bool) -> list[int]:
    """--chunk-sizes, or its default: DEFAULT_CHUNK_SIZE on CUDA; on the CPU N/4 and N/2 (at least 1), so that
    the chunked layer really runs more than one chunk at the CPU's short default length."""
    if sizes is not None:
        return sizes
    if cuda:
        return [DEFAULT_CHUNK_SIZE]
    return sorted({max(1, seq_len // 4), max(1, seq_len // 2)})


def _device_and_shape(args: argparse.Namespace) -> tuple[torch.device, torch.dtype, Shape]:
    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    seq_len = args.seq_len if args.seq_len is not None else (CUDA_SEQ_LEN if device.type == "cuda" else CPU_SEQ_LEN)
    return device, dtype, long_shape(seq_len, args.batch, args.d_model, args.n_heads)


def cmd_longctx(args: argparse.Namespace, argv: list[str]) -> int:
    if args.context_parallel:
        return cmd_context_parallel(args)
    device, dtype, shape = _device_and_shape(args)
    chunk_sizes = longctx_chunk_sizes(args.chunk_sizes, shape.seq_len, device.type == "cuda")
    strategies = grid_strategies(args.attention, device)
    env = environment(device, dtype)
    stem = f"longctx_{slug(env['device'])}_{env['dtype']}_{env['date']}_N{shape.seq_len}"
    out, _ = output_folders(args, slug(env["device"]), env["dtype"])
    refuse_overwrite([out / f"{stem}.csv", out / f"{stem}.md"], args.overwrite)

    print(f"longctx: {shape.label} on {env['device']} ({env['dtype']}); chunk sizes "
          f"{', '.join(map(str, chunk_sizes))}; attention {', '.join(strategies)} → {out}/", flush=True)
    results = run_longctx(shape, dtype, device, chunk_sizes, strategies, memory_cap_gib=args.memory_cap_gib,
                          padding=args.padding, seed=args.seed, budget_s=args.budget, reps=args.reps)
    auto, passed_over = resolve("auto", device, dtype, shape.head_dim)
    first = results.iloc[0]
    summary = (f"{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['dtype']}, "
               f"{first['date']}; {shape.label}, padding {args.padding}. err_ratio: error / the reference's error "
               f"on the sampled rows (§3 passes up to 2); memory in GiB; ratio_vs_full: chunked / full-sequence "
               f"time, interleaved, uncapped. Attention 'auto' is {auto} here"
               + (f" (passed over: {'; '.join(passed_over)})" if passed_over else "") + ".\n\n"
               + longctx_markdown(results) + "\n")
    make_folders(out)
    write_table_results(results, summary, out / stem)
    for r in results[results.status.isin(["skipped", "oom", "fail", "error"])].itertuples():
        print(f"{r.variant} {r.attention} chunk {r.chunk_size} cap {r.memory_cap_gib}: {r.status}: {r.reason}")
    return 1 if results.status.isin(["fail", "error"]).any() else 0


def write_table_results(results: pd.DataFrame, summary: str, stem: Path) -> None:
    """STEM.csv (the results) and STEM.md (`summary`, printed too)."""
    results.to_csv(f"{stem}.csv", index=False)
    Path(f"{stem}.md").write_text(summary)
    print(summary)
    print(f"wrote {stem}.csv and {stem}.md")


def cmd_context_parallel(args: argparse.Namespace) -> int:
    device, dtype, shape = _device_and_shape(args)
    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's; checked before the ranks meet
    try:
        pieces(shape.seq_len, world)
    except ValueError as exc:
        raise ValueError(f"--seq-len {shape.seq_len}: {exc}") from None
    device = context_parallel.init(device)
    try:
        rank = dist.get_rank()
        env = environment(device, dtype)
        stem = f"context_parallel_{slug(env['device'])}_{env['dtype']}_{env['date']}_N{shape.seq_len}_P{world}"
        out, _ = output_folders(args, slug(env["device"]), env["dtype"])
        refuse_overwrite([out / f"{stem}.csv", out / f"{stem}.md"], args.overwrite)  # on every rank: none waits
        if rank == 0:
            print(f"longctx --context-parallel: {shape.label} over {world} rank(s) on {env['device']} "
                  f"({env['dtype']}) → {out}/", flush=True)
        chunk_size = args.chunk_sizes[0] if args.chunk_sizes else DEFAULT_CHUNK_SIZE
        record = context_parallel.measure_ring(shape, dtype, device, padding=args.padding, seed=args.seed,
                                               reps=args.reps or 3, chunk_size=chunk_size)
        if rank != 0:
            return 0 if record["passed"] else 1
        results = pd.DataFrame([record]).assign(**env)
        columns = ["ranks", "backend", "kernel", "seq_len", "padding", "status", "err_ratio", "rows_checked",
                   "median_ms", "peak_gib_per_rank"]
        summary = (f"{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}; {shape.label} over "
                   f"{world} rank(s). err_ratio: error / the reference's error on the sampled rows (§3 passes up "
                   "to 2).\n\n" + results[columns].to_markdown(index=False, floatfmt=".4g") + "\n")
        make_folders(out)
        write_table_results(results, summary, out / stem)
        return 0 if record["passed"] else 1
    finally:
        dist.destroy_process_group()
