"""Where a CUDA-graph replay's time goes on the launch-bound rows: host time per piece, GPU time per replay.

    python -m benchmarks.graph_overhead --out results/graph_overhead

For each row (default 1, 2 and 4), `fastest` (after its choice) and a `CudaGraphLayer` of
`residual_addmm` are called back to back many times; each piece of the replay path (the whole call, the
replay alone, the input copy, the output clone) is timed on the host clock without a sync (host µs per
call, what the CPU spends), and with the final sync (wall µs per call: the larger of host and GPU
time). The GPU time of one replay is measured with CUDA events around replays queued behind a
`torch.cuda._sleep`, so no host time shows in it (warm L2). Writes one CSV naming the GPU, torch and
triton versions, dtype and date, and prints a table. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from roofline_lib import SUITE, Case
from roofline_lib.device import environment, resolve_dtype
from roofline_lib.report import slug
from roofline_lib.shapes import select_rows
from roofline_lib.variants.fastest import fastest
from roofline_lib.variants.graphed import CudaGraphLayer
from roofline_lib.variants.residual_addmm import residual_addmm


def host_and_wall_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(host µs per call without a sync, wall µs per call including the final sync) over `calls` calls."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return host / calls * 1e6, wall / calls * 1e6


def gpu_us_per_replay(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """GPU µs per replay: replays queued behind a sleep kernel, so the events see no host time."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(5e7))  # tens of ms of GPU work: the host queues everything below meanwhile
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays * 1e3


def measure_row(shape, dtype: torch.dtype, calls: int) -> list[dict]:
    case = Case(shape, dtype, torch.device("cuda"))
    x = case.x
    best = fastest(case.layer)
    best(x)
    graphed = CudaGraphLayer(residual_addmm(case.layer))
    graphed(x)
    (cap,) = graphed._captures.values()
    pieces = {"fastest(x)": lambda: best(x), "graph layer(x)": lambda: graphed(x), "replay": cap.graph.replay,
              "input copy": lambda: cap.x.copy_(x), "output clone": lambda: cap.out.clone()}
    base = {"row": shape.row, "shape": shape.label, "fastest_chose": best.detail.split("→ ")[-1]}
    records = [{**base, "piece": name, **dict(zip(("host_us", "wall_us"), host_and_wall_us(fn, calls)))}
               for name, fn in pieces.items()]
    records.append({**base, "piece": "replay, GPU only", "gpu_us": gpu_us_per_replay(cap.graph, min(calls, 200))})
    return records


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
    results = pd.DataFrame([r for shape in rows for r in measure_row(shape, dtype, args.calls)]).assign(**env)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"graph_overhead_{slug(env['device'])}_{env['dtype']}_{env['date']}.csv"
    results.to_csv(path, index=False)
    print(f"\n{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}: µs per call\n")
    print(results[["row", "shape", "fastest_chose", "piece", "host_us", "wall_us", "gpu_us"]]
          .to_markdown(index=False, floatfmt=".1f"))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
