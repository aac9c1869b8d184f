"""SDPA's attention backends on every suite row: what `fastest` measures before it picks one per shape.

    python -m benchmarks.attention_backends --out results/attention_backends

For each row, causal attention over q, k, v of the row's shape (views of one (B, N, 3, H, hd) buffer,
the layout of the fused projection) is timed, interleaved, for SDPA's own pick and for each backend
forced (`roofline_lib.runs.backends.backend_records` around `choose_backend`, the very function `fastest`
uses);
backends that refuse the inputs are listed with their reason. Reports median ms with p20/p80, TFLOP/s
over the causal attention FLOPs (2·B·N²·d) and the fraction of the matmul ceiling, and which backend
is kept: a forced one only where it beats SDPA's pick beyond noise. Writes one CSV naming the GPU,
torch and triton versions, dtype and date, and prints a table. On the CPU, the smoke suite:

    python -m benchmarks.attention_backends --device cpu --budget 0.01 --out "$(mktemp -d)"
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd
from tqdm.auto import tqdm

from roofline_lib.core.device import environment, resolve_device, resolve_dtype
from roofline_lib.core.shapes import SMOKE_SUITE, SUITE, select_rows
from roofline_lib.measure.ceilings import measure_ceilings
from roofline_lib.present.report import write_results
from roofline_lib.runs.backends import backend_records, backend_summary


def print_table(results: pd.DataFrame) -> None:
    first = results.iloc[0]
    print(f"\n{first['device']}, torch {first['torch']}, {first['dtype']}, {first['date']}: "
          "causal attention, median ms (TFLOP/s)\n")
    print(backend_summary(results).to_markdown(index=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--rows", help="suite rows (default: 1-13 on CUDA, the smoke suite on the CPU)")
    parser.add_argument("--dtype", help="fp16 (default on CUDA), bf16, fp32 (default on the CPU)")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of interleaved timing per row")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
        rows = select_rows(args.rows, SUITE[:13] if device.type == "cuda" else SMOKE_SUITE)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ceilings = measure_ceilings(device, dtype)
    records = [r for shape in tqdm(rows, desc="attention backends")
               for r in backend_records(shape, dtype, device, args.budget, ceilings.matmul_tflops)]
    env = environment(device, dtype)
    results = pd.DataFrame(records).assign(**env, ceiling_tflops=ceilings.matmul_tflops, ceiling_source=ceilings.source)
    path = write_results(results, args.out, "attention_backends", env)
    print_table(results)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
