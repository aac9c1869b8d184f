r"""Attention alone at long context: full-sequence SDPA per backend against each chunk strategy × chunk size.

    python -m benchmarks.chunked_attention --out results

q, k and v are views of one (B, N, 3, H, hd) buffer, as the layer makes them. Each full-sequence
backend runs SDPA(is_causal) over the whole sequence; each chunk strategy (see
`roofline_lib.variants.chunk_attention`) that passes its self-check runs the chunk loop (queries
[s, e) against keys [0, e)) into a preallocated output. For each: the error against exact float64
attention on 64 sampled query rows, the first call's wall time (it includes building a kernel plan per
new chunk shape), the median time with p20/p80, and TFLOP/s over the causal attention FLOPs
(2·B·N²·d). Writes one CSV naming the GPU, torch and triton versions, dtype and date, and prints a table.

A smoke run of the same path on the CPU (tiny sizes):

    python -m benchmarks.chunked_attention --device cpu --seq-len 300 --heads 2 --head-dim 16 \
        --chunk-sizes 64,100 --budget 0.01 --out "$(mktemp -d)"
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from roofline_lib.core.device import environment, resolve_device, resolve_dtype, synchronize
from roofline_lib.core.outcome import first_line
from roofline_lib.core.shapes import Shape
from roofline_lib.core.truth import sample_rows
from roofline_lib.measure.roofline import op_costs
from roofline_lib.measure.timing import benchmark
from roofline_lib.present.report import slug
from roofline_lib.runs.backends import random_qkv
from roofline_lib.runs.longctx import grid_strategies
from roofline_lib.variants.chunk_attention import STRATEGIES, exact_attention, self_check
from roofline_lib.variants.sdpa import SDPA_BACKENDS, sdpa_attention


def sampled_error(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> float:
    """Relative Frobenius error of `out` (B, H, N, hd) against exact attention on query `rows`."""
    num = den = 0.0
    for r in rows.tolist():
        want = exact_attention(q[:, :, r:r + 1], k[:, :, :r + 1], v[:, :, :r + 1], r)  # (B, H, 1, hd)
        num += float(((out[:, :, r:r + 1].double() - want) ** 2).sum())
        den += float((want ** 2).sum())
    return (num / den) ** 0.5


def chunk_loop(name: str, chunk_size: int, q, k, v, out) -> Callable[[], torch.Tensor]:
    """The chunked attention of the whole sequence with strategy `name`, written into `out`."""
    attend = STRATEGIES[name].attend
    N = q.size(2)

    def run() -> torch.Tensor:
        for start in range(0, N, chunk_size):
            end = min(start + chunk_size, N)
            out[:, :, start:end] = attend(q[:, :, start:end], k[:, :, :end], v[:, :, :end], start, None)
        return out
    return run


def full_sequence(backend: str | None, q, k, v) -> Callable[[], torch.Tensor]:
    """SDPA(is_causal) over the whole sequence, restricted to `backend` (None: SDPA's own choice)."""
    return partial(sdpa_attention, q, k, v, None, backend=backend)


def measure(fn: Callable[[], torch.Tensor], q, k, v, rows, device, flops: float, budget_s: float) -> dict:
    """First-call time and sampled-row error from one call, then the timing."""
    start = time.perf_counter()
    try:
        out = fn()
        synchronize(device)
    except (RuntimeError, ValueError) as exc:  # e.g. a backend that does not run these inputs
        return {"status": "error", "reason": first_line(exc, 200)}
    first = time.perf_counter() - start
    err = sampled_error(out, q, k, v, rows)
    del out
    t = benchmark(fn, device, budget_s=budget_s)
    return {"status": "ok", "err": err, "first_call_s": first, "median_ms": t.median_ms, "p20_ms": t.p20_ms,
            "p80_ms": t.p80_ms, "reps": t.reps, "tflops": flops / (t.median_ms * 1e-3) / 1e12}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--chunk-sizes", default="2048,4096,8192,16384")
    parser.add_argument("--attention", default="all", help="comma-separated strategies or 'all'")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timed calls per measurement")
    parser.add_argument("--device")
    parser.add_argument("--dtype")
    parser.add_argument("--out", default="results")
    args = parser.parse_args()
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    B, N, H, hd = args.batch, args.seq_len, args.heads, args.head_dim
    flops = float(op_costs(Shape("attn", B, N, H * hd, H), dtype).loc["attention", "flops"])
    q, k, v = random_qkv(B, N, H, hd, dtype, device)
    rows = sample_rows(N)
    out = torch.empty(B, H, N, hd, dtype=dtype, device=device)  # (B, H, N, hd)
    backends = ["default", *SDPA_BACKENDS] if device.type == "cuda" else ["default"]
    records = []
    for backend in tqdm(backends, desc="full-sequence SDPA"):
        fn = full_sequence(None if backend == "default" else backend, q, k, v)
        records.append({"kind": "full", "name": backend, **measure(fn, q, k, v, rows, device, flops, args.budget)})
    configs = [(s, c) for s in grid_strategies(args.attention, device) for c in map(int, args.chunk_sizes.split(","))]
    for name, chunk_size in tqdm(configs, desc="chunk strategies"):
        record = {"kind": "chunked", "name": name, "chunk_size": chunk_size}
        reason = self_check(name, device, dtype, hd)
        if reason is not None:
            records.append({**record, "status": "skipped", "reason": reason})
            continue
        fn = chunk_loop(name, chunk_size, q, k, v, out)
        records.append({**record, **measure(fn, q, k, v, rows, device, flops, args.budget)})
    env = environment(device, dtype)
    table = pd.DataFrame.from_records(records).assign(seq_len=N, batch=B, heads=H, head_dim=hd, **env)
    path = Path(args.out) / f"chunked_attention_{slug(env['device'])}_{env['dtype']}_{env['date']}_N{N}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    print(f"{env['device']}, torch {env['torch']}, triton {env['triton']}, {env['dtype']}, {env['date']}; "
          f"attention alone, B{B} N{N} H{H} hd{hd}, causal\n")
    cols = [c for c in ["kind", "name", "chunk_size", "status", "err", "first_call_s", "median_ms", "p20_ms",
                        "p80_ms", "tflops"] if c in table]
    print(table[cols].to_markdown(index=False, floatfmt=".4g"))
    for r in table[table.status != "ok"].itertuples():
        print(f"{r.name} {getattr(r, 'chunk_size', '')}: {r.status}: {r.reason}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
