"""The §3 float64 truth on sampled rows at long context: its time and the memory it takes beyond the inputs.

    python -m benchmarks.streamed_truth --out results/truth              # N = 100,000 and 1,000,000
    python -m benchmarks.streamed_truth --seq-lens 4096 --device cpu --out "$(mktemp -d)"

`truth.float64_truth` streams over blocks of keys (keys and values recomputed in float64 from the inputs,
block by block), so its memory beyond the inputs and weights stays near its block budget (1 GiB by
default) at any N. Writes one CSV naming the GPU, torch and triton versions, dtype and date; prints a table.
"""
from __future__ import annotations

import argparse
import sys
import time

import pandas as pd
import torch

from roofline_lib.core.checks import parse_lengths
from roofline_lib.core.correctness import random_reference
from roofline_lib.core.device import environment, resolve_device, resolve_dtype, synchronize
from roofline_lib.core.truth import float64_truth, sample_rows
from roofline_lib.present.report import write_results
from roofline_lib.runs.longctx import TRUTH_BLOCK_BYTES, long_shape

GIB = 2**30


def measure(seq_len: int, dtype: torch.dtype, device: torch.device, rows: int = 64) -> dict:
    """Seconds and peak bytes beyond the inputs of one float64 truth on `rows` sampled rows of B1 N d1024 H16."""
    shape = long_shape(seq_len)
    layer = random_reference(shape, 0, dtype, device)
    x = torch.randn(1, seq_len, shape.d_model, device=device, dtype=dtype)
    sampled = sample_rows(seq_len, rows).to(device)
    synchronize(device)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    truth = float64_truth(layer, x, rows=sampled)
    synchronize(device)
    seconds = time.perf_counter() - start
    extra = torch.cuda.max_memory_allocated(device) - before if device.type == "cuda" else float("nan")
    return {"seq_len": seq_len, "shape": shape.label, "rows": rows, "seconds": seconds,
            "inputs_gib": before / GIB if device.type == "cuda" else float("nan"), "extra_gib": extra / GIB,
            "block_budget_gib": TRUTH_BLOCK_BYTES / GIB, "finite": bool(torch.isfinite(truth).all())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--seq-lens", default="100000,1000000", help="comma-separated N (default: 100000,1000000)")
    parser.add_argument("--dtype", help="the inputs' dtype: fp16 (default on CUDA), bf16, fp32")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
        seq_lens = parse_lengths(args.seq_lens, "--seq-lens")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = environment(device, dtype)
    table = pd.DataFrame([measure(n, dtype, device) for n in seq_lens]).assign(**env)
    path = write_results(table, args.out, "streamed_truth", env)
    print(f"\n{env['device']}, torch {env['torch']}, inputs {env['dtype']}, {env['date']}: float64 truth on "
          "sampled rows, streamed over key blocks\n")
    print(table[["shape", "rows", "seconds", "inputs_gib", "extra_gib", "block_budget_gib", "finite"]]
          .to_markdown(index=False, floatfmt=".3g"))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
