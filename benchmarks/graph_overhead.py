"""Where a CUDA-graph replay's time goes on the launch-bound rows: host time per piece, GPU time per replay.

    python -m benchmarks.graph_overhead --out results/graph_overhead

For each row (default 1, 2 and 4), `residual_addmm` eager and in a `CudaGraphLayer` is called back to back
many times (`roofline_lib.runs.stack.graph_costs`); each piece of the replay path (the whole call, the replay
alone, the input copy, the output clone) is timed on the host clock without a sync (host µs per call, what
the CPU spends), and with the final sync (wall µs per call: the larger of host and GPU time). The GPU time
of one replay is measured with CUDA events around replays queued behind a sleep kernel, so no host time
shows in it (warm L2). Writes one CSV naming the GPU, torch and
triton versions, dtype and date, and prints a table. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch

from roofline_lib import SUITE
from roofline_lib.core.device import environment, resolve_dtype
from roofline_lib.core.shapes import select_rows
from roofline_lib.present.report import write_results
from roofline_lib.runs.stack import graph_costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--rows", default="1,2,4", help="suite rows (default: 1,2,4)")
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed piece")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this benchmark times CUDA-graph replays and needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    try:
        dtype = resolve_dtype(args.dtype, device)
        rows = select_rows(args.rows, SUITE)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = environment(device, dtype)
    results = pd.concat([graph_costs("residual_addmm", shape, dtype, device, args.calls) for shape in rows],
                        ignore_index=True).assign(**env)
    path = write_results(results, args.out, "graph_overhead", env)
    print(f"\n{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}: µs per call\n")
    print(results[["row", "shape", "piece", "host_us", "wall_us", "gpu_us"]]
          .to_markdown(index=False, floatfmt=".1f"))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
