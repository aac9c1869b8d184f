"""The launch-bound rows as a model meets them: per rung, kernels per layer, GPU µs per layer in an 8-layer
CUDA-graph stack, and one layer call's latency with the host included (`roofline_lib.runs.stack`).

    python -m benchmarks.launch_bound --out OUT        # on a GPU: rows 1-5, every rung, and the whole-layer kernel

Writes one CSV naming the GPU, torch and triton versions, dtype and date, and how the Triton kernels were
launched (`triton_launch`), and prints a table. Run it again with ROOFLINE_PDL=1 to measure programmatic
dependent launch between the Triton kernels (`roofline_lib.kernels.launch`). On the CPU (no CUDA graphs)
the GPU column is left empty, with the reason:

    python -m benchmarks.launch_bound --device cpu --rows s1 --out "$(mktemp -d)"
"""
from __future__ import annotations

import argparse
import sys

from roofline_lib.core.device import environment, resolve_device, resolve_dtype
from roofline_lib.core.shapes import SMOKE_SUITE, SUITE, select_rows
from roofline_lib.present.report import markdown_table, write_results
from roofline_lib.runs.stack import EXTRA_LAYERS, LAYERS, launch_bound_table
from roofline_lib.variants.registry import select_variants

RUNGS = "no_empty_mask,triton_ln,residual_addmm,fused_gemm,whole_layer,fastest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--rows", help="suite rows (default: 1-5 on CUDA, the smoke suite on the CPU)")
    parser.add_argument("--variants", default=RUNGS, help=f"rungs to measure (default: {RUNGS})")
    parser.add_argument("--layers", type=int, default=LAYERS, help=f"layers in the graphed stack (default: {LAYERS})")
    parser.add_argument("--dtype", help="fp16 (default on CUDA), bf16, fp32 (default on the CPU)")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per latency")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
        rows = select_rows(args.rows, SUITE[:5] if device.type == "cuda" else SMOKE_SUITE)
        names = select_variants(args.variants, also=tuple(EXTRA_LAYERS))
        if args.layers < 1:
            raise ValueError(f"--layers must be at least 1, got {args.layers}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = launch_bound_table(rows, names, dtype, device, args.layers, args.budget)
    env = environment(device, dtype)
    path = write_results(table, args.out, "launch_bound", env)
    print(f"\n{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}: per layer, {args.layers}-layer "
          f"graphed stack; latency: one call, host included (the one protocol); Triton kernels: "
          f"{table.triton_launch.iloc[0]}\n")
    print(markdown_table(table[["row", "shape", "variant", "status", "kernels_per_layer", "gpu_us_per_layer",
                                "kernel_us_per_layer", "gap_us_per_layer", "latency_us"]], floatfmt=".1f"))
    print(f"\nwrote {path}")
    return 0 if table.status.isin(["ok", "skipped"]).all() else 1


if __name__ == "__main__":
    sys.exit(main())
