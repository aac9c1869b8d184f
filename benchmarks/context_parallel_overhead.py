"""What the context-parallel machinery costs on one GPU: the ring layer at P = 1 (NCCL, the same code path as
on P GPUs) against the chunked layer, interleaved, at long context.

    python -m benchmarks.context_parallel_overhead --out results/context_parallel   # N = 100,000 and 1,000,000

Both are checked by §3 on the sampled rows against the float64 truth first. Writes one CSV naming the GPU,
torch and triton versions, dtype and date, and prints a table (ratio > 1: the ring layer is slower).
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
import torch.distributed as dist

from roofline_lib.core.catalog import DEFAULT_CHUNK_SIZE
from roofline_lib.core.checks import parse_lengths
from roofline_lib.core.correctness import Case, section3_judgement
from roofline_lib.core.device import environment, free_memory, resolve_device, resolve_dtype
from roofline_lib.measure.timing import Comparison, peak_memory, time_layer_calls
from roofline_lib.present.report import write_results
from roofline_lib.runs.context_parallel import init
from roofline_lib.runs.longctx import long_shape, timing_options
from roofline_lib.variants.context_parallel import ContextParallelLayer, gather_rows
from roofline_lib.variants.registry import build_variant


def measure(seq_len: int, dtype: torch.dtype, device: torch.device, reps: int) -> dict:
    """§3 verdicts of both layers, their peak memory, and their interleaved times on B1 N d1024 H16."""
    case = Case(long_shape(seq_len), dtype, device)
    chunked = build_variant("chunked", case.layer, chunk_size=DEFAULT_CHUNK_SIZE, attention="auto")
    ring = ContextParallelLayer(case.layer, chunk_size=DEFAULT_CHUNK_SIZE)
    calls = {"chunked": lambda: chunked(case.x), "ring": lambda: ring(case.x, seq_len=seq_len)}
    record = {"seq_len": seq_len, "shape": case.shape.label, "chunked_attention": chunked.attention_name,
              "ring_kernel": ring.kernel_name, "bound": section3_judgement(0.0, case.ref_err).bound}
    for name, call in calls.items():
        got = call()
        if name == "ring":  # the rows the check compares, in sequence order (at P = 1 the shard is the sequence)
            got = gather_rows(got, case.rows if case.rows is not None else torch.arange(seq_len), seq_len)
        err = case.error(got) if name == "chunked" or case.rows is None else case.rows_error(got)
        del got
        judged = section3_judgement(err, case.ref_err)
        record |= {f"{name}_err_ratio": judged.ratio, f"{name}_passed": judged.passed,
                   f"{name}_peak_gib": peak_memory(call, device)[0] / 2**30}
        free_memory(device)
    samples = time_layer_calls(calls, device, **timing_options(0.0, reps))
    ratio = Comparison.from_samples(samples["ring"], samples["chunked"])  # ring / chunked time
    return record | {"chunked_ms": float(pd.Series(samples["chunked"]).median()),
                     "ring_ms": float(pd.Series(samples["ring"]).median()), "reps": reps,
                     **ratio.as_record(("ring_over_chunked", "ratio_p20", "ratio_p80", "verdict"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--seq-lens", default="100000,1000000", help="comma-separated N (default: 100000,1000000)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved timed rounds (default: 3)")
    parser.add_argument("--dtype", help="fp16 (default on CUDA), bf16, fp32")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
        seq_lens = parse_lengths(args.seq_lens, "--seq-lens", minimum=2)
        if args.reps < 1:
            raise ValueError("--reps must be at least 1")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = init(device)
    try:
        env = environment(device, dtype)
        table = pd.DataFrame([measure(n, dtype, device, args.reps) for n in seq_lens]).assign(
            backend=dist.get_backend(), **env)
    finally:
        dist.destroy_process_group()
    path = write_results(table, args.out, "context_parallel_overhead", env)
    print(f"\n{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}: the ring layer at P = 1 "
          f"({table.backend.iloc[0]}) against the chunked layer, {args.reps} interleaved rounds\n")
    print(table[["shape", "chunked_attention", "ring_kernel", "chunked_err_ratio", "ring_err_ratio", "chunked_ms",
                 "ring_ms", "ring_over_chunked", "ratio_p20", "ratio_p80", "chunked_peak_gib", "ring_peak_gib"]]
          .to_markdown(index=False, floatfmt=".4g"))
    print(f"\nwrote {path}")
    return 0 if (table.chunked_passed & table.ring_passed).all() else 1


if __name__ == "__main__":
    sys.exit(main())
