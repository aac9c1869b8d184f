"""Context parallel over the GPUs of one host: strong and weak scaling of the ring layer, against PyTorch's own
`context_parallel` around the full-sequence layer's SDPA.

    torchrun --nproc-per-node P -m benchmarks.context_parallel_scaling --out OUT      # strong: N = 1M and 4M
    torchrun --nproc-per-node P -m benchmarks.context_parallel_scaling --out OUT --seq-lens none --per-rank 1000000
    python -m benchmarks.context_parallel_scaling --summarize OUT --figures FIGURES   # the scaling table

One run is one P (without torchrun, P = 1, the same code path). For every N it measures, on B1 N d1024 H16:
`ring` (`roofline_lib.variants.context_parallel`, zigzag layout), `torch_cp` (`no_empty_mask` inside
`torch.distributed.tensor.experimental.context_parallel`, which replaces SDPA by its ring attention), and at
P = 1 also `chunked`, the single-GPU layer the efficiency is measured against. Each is checked by §3 on the
sampled rows against the float64 truth first, then timed over `--reps` calls of all ranks together, with
the largest per-rank peak memory. `--profile` adds, on the largest N, one profiled ring call per rank:
GPU time in compute kernels and in NCCL kernels, and the call's span, so the exposed communication and the
load imbalance between ranks can be read off.

Each run writes `OUT/context_parallel_scaling_P<P>_<device>_<dtype>_<date>.csv`; `--summarize` joins
the runs of a folder: efficiency = TFLOP/s per GPU at P ÷ the `chunked` layer's on one GPU at the same N
(strong) or at N / P (weak), so 1 is perfect scaling.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from roofline_lib.core.catalog import DEFAULT_CHUNK_SIZE
from roofline_lib.core.checks import parse_lengths
from roofline_lib.core.correctness import Case, section3_judgement
from roofline_lib.core.device import environment, free_memory, memory_capacity, resolve_device, resolve_dtype
from roofline_lib.core.outcome import guarded
from roofline_lib.core.shapes import Shape
from roofline_lib.measure.profiler import kernel_timeline
from roofline_lib.measure.roofline import layer_flops
from roofline_lib.measure.timing import peak_memory, time_interleaved
from roofline_lib.present.report import write_results
from roofline_lib.runs.context_parallel import init, measure_ring
from roofline_lib.runs.longctx import estimated_bytes, long_shape, measure_layer, timing_options
from roofline_lib.variants.context_parallel import ContextParallelLayer, shard
from roofline_lib.variants.registry import build_variant

ROOT = Path(__file__).resolve().parents[1]  # the folder `-m benchmarks.…` runs from
STEM = "context_parallel_scaling"
COLUMNS = ["layer", "scaling", "ranks", "seq_len", "status", "err_ratio", "median_ms", "tflops_per_gpu",
           "peak_gib_per_rank", "reason"]
PROFILE_COLUMNS = ["ranks", "seq_len", "kernel", "compute_us_mean", "compute_us_min", "compute_us_max", "nccl_us_mean",
                   "span_us_max", "exposed_comm_us", "imbalance"]


def _max_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def ring_record(shape: Shape, dtype: torch.dtype, device: torch.device, reps: int) -> dict:
    """The ring layer on this group: §3 on the sampled rows, time, peak memory per rank."""
    r = measure_ring(shape, dtype, device, reps=reps, chunk_size=DEFAULT_CHUNK_SIZE)
    return {"layer": "ring", "status": r["status"], "err_ratio": r["err_ratio"],
            "median_ms": _max_over_ranks(r["median_ms"], device),  # the slowest rank's, as for the peer
            "peak_gib_per_rank": r["peak_gib_per_rank"], "kernel": r["kernel"], "reason": ""}


def chunked_record(shape: Shape, dtype: torch.dtype, device: torch.device, reps: int) -> dict:
    """The single-GPU chunked layer (P = 1 only): what P GPUs are measured against."""
    case = Case(shape, dtype, device)
    module = build_variant("chunked", case.layer, chunk_size=DEFAULT_CHUNK_SIZE, attention="auto")
    r = measure_layer(case, "chunked", module, {}, timing_options(0.0, reps))
    return {"layer": "chunked", "status": r["status"], "err_ratio": r.get("err_ratio", np.nan),
            "median_ms": r.get("median_ms", np.nan), "peak_gib_per_rank": r.get("peak_gib", np.nan),
            "kernel": module.attention_name, "reason": "" if r["status"] == "ok" else r.get("reason", "")}


def peer_unavailable(shape: Shape, dtype: torch.dtype, device: torch.device, world: int) -> str:
    """Why PyTorch's context_parallel cannot run this case here ("" when it can)."""
    if device.type != "cuda":
        return "PyTorch's context_parallel replaces only the CUDA SDPA kernels (flash, efficient, cuDNN)"
    if shape.seq_len % (2 * world):
        return f"its load balancer needs N divisible by 2P = {2 * world}"
    local = Shape("", shape.batch, shape.seq_len // world, shape.d_model, shape.n_heads)
    need = (estimated_bytes("no_empty_mask", local, dtype)
            + 2 * shape.seq_len * shape.d_model * shape.batch * dtype.itemsize)
    if need > memory_capacity(device):
        return f"needs ≈{need / 2**30:,.0f} GiB per GPU"
    return ""


def peer_record(shape: Shape, dtype: torch.dtype, device: torch.device, reps: int) -> dict:
    """`no_empty_mask` inside PyTorch's `context_parallel` over this group: each rank's share of the input is
    sharded by PyTorch's load balancer, SDPA becomes its ring attention; the output is unsharded for §3."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard

    world = dist.get_world_size()
    record = {"layer": "torch_cp", "kernel": "torch ring SDPA", "reason": ""}
    why = peer_unavailable(shape, dtype, device, world)
    if why:
        return record | {"status": "skipped", "reason": why}
    mesh = init_device_mesh(device.type, (world,))
    case = Case(shape, dtype, device)
    layer = build_variant("no_empty_mask", case.layer)
    x = case.x.clone()  # (B, N, C), sharded in place to (B, N/P, C) inside the context
    with context_parallel(mesh, buffers=[x], buffer_seq_dims=[1], no_restore_buffers={x}):
        call = lambda: layer(x)  # noqa: E731
        (out_local,) = [call()]
        out = context_parallel_unshard(mesh, [out_local], [1])[0]  # (B, N, C), in sequence order
        err = case.error(out)
        del out, out_local
        sizes = peak_memory(call, device)
        ms = time_interleaved({"peer": call}, device, budget_s=0.0, min_reps=reps, max_reps=reps, warmup=1)["peer"]
    free_memory(device)
    judged = section3_judgement(err, case.ref_err)
    return record | {"status": "ok" if judged.passed else "fail", "err_ratio": judged.ratio,
                     "median_ms": _max_over_ranks(float(np.median(ms)), device),
                     "peak_gib_per_rank": _max_over_ranks(sizes[0], device) / 2**30}


def where_time_goes(shape: Shape, dtype: torch.dtype, device: torch.device) -> dict:
    """One profiled ring call on every rank: GPU µs in compute and in NCCL kernels and the call's span, as the
    mean, least and most over ranks. Exposed communication ≈ span − compute; imbalance = most ÷ mean compute."""
    world, rank = dist.get_world_size(), dist.get_rank()
    case = Case(shape, dtype, device)
    layer = ContextParallelLayer(case.layer, chunk_size=DEFAULT_CHUNK_SIZE)
    x_local = shard(case.x, world, rank)
    timeline = kernel_timeline(lambda x, kpm: layer(x, kpm, seq_len=shape.seq_len), x_local, warmup=1)
    comm = timeline.name.str.contains("nccl", case=False)
    mine = torch.tensor([timeline.duration_us[~comm].sum(), timeline.duration_us[comm].sum(),
                         timeline.end_us.max() if len(timeline) else 0.0], dtype=torch.float64, device=device)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    compute, nccl, span = torch.stack(every).T.cpu().numpy()
    return {"layer": "ring profile", "status": "ok", "kernel": layer.kernel_name, "reason": "",
            "compute_us_mean": compute.mean(), "compute_us_min": compute.min(), "compute_us_max": compute.max(),
            "nccl_us_mean": nccl.mean(), "span_us_max": span.max(),
            "exposed_comm_us": max(span.max() - compute.max(), 0.0), "imbalance": compute.max() / compute.mean()}


def guarded_step(step, layer: str, shape: Shape, dtype: torch.dtype, device: torch.device, reps: int) -> dict:
    """One step's record, or status "oom" where this rank ran out of memory; every rank ends with the same
    status (a rank that ran out makes the step "oom" on all), so none waits for a collective that never comes."""
    record, oom = guarded(lambda: step(shape, dtype, device, reps), device)
    failed = torch.tensor([float(oom is not None)], device=device)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    if failed.item():
        return {"layer": layer, "status": "oom", "reason": oom or "another rank ran out of memory"}
    return record


def run(seq_lens: list[int], per_rank: int | None, dtype: torch.dtype, device: torch.device, reps: int,
        d_model: int, n_heads: int, peer: bool, profile: bool, save=lambda table: None) -> pd.DataFrame:
    """Every record of this P, in the order measured; rank 0 prints each as it is done and `save`s the table
    so far, so a run stopped part-way keeps what it measured."""
    world, rank = dist.get_world_size(), dist.get_rank()
    cases = [("strong", n) for n in seq_lens] + ([("weak", per_rank * world)] if per_rank else [])
    if world == 1 and per_rank:  # the weak baseline: the chunked layer on N / P tokens, at P = 1
        cases += [("weak", per_rank)] if per_rank not in {n for _, n in cases} else []
    records = []
    for scaling, n in cases:
        shape = long_shape(n, 1, d_model, n_heads)
        steps = {"ring": ring_record} | ({"chunked": chunked_record} if world == 1 else {}) | (
            {"torch_cp": peer_record} if peer else {})
        for layer, step in steps.items():
            record = {"scaling": scaling, "ranks": world, "seq_len": n} | guarded_step(step, layer, shape, dtype,
                                                                                        device, reps)
            record["tflops_per_gpu"] = layer_flops(shape) / (record.get("median_ms", np.nan) * 1e-3) / 1e12 / (
                world if record["layer"] != "chunked" else 1)
            records.append(record)
            free_memory(device)
            save(pd.DataFrame(records))
            if rank == 0:
                print(f"  {record['layer']} P={world} N={n:,}: {record['status']}, "
                      f"{record.get('median_ms', float('nan')):,.4g} ms {record['reason']}".rstrip(), flush=True)
    if profile:
        n = max(n for _, n in cases)
        records.append({"scaling": "profile", "ranks": world, "seq_len": n} | guarded_step(
            lambda shape, dtype, device, _: where_time_goes(shape, dtype, device), "ring profile",
            long_shape(n, 1, d_model, n_heads), dtype, device, reps))
        save(pd.DataFrame(records))
    return pd.DataFrame(records)


def run_stem(world: int, seq_lens: list[int], per_rank: int | None) -> str:
    """A run's file stem: P and what it measured, so strong and weak runs at one P do not overwrite each other."""
    modes = ([f"N{'-'.join(map(str, seq_lens))}"] if seq_lens else []) + ([f"per-rank{per_rank}"] if per_rank else [])
    return f"{STEM}_P{world}_{'_'.join(modes)}"


def summarize(folder: Path) -> pd.DataFrame:
    """Every run in `folder` joined: TFLOP/s per GPU and efficiency against the one-GPU chunked layer (at the
    same N for strong scaling, at N / P for weak), and the ring layer's time ÷ PyTorch's context_parallel's."""
    files = sorted(folder.glob(f"{STEM}_P*.csv"))
    if not files:
        raise ValueError(f"no {STEM}_P*.csv in {folder}: run the benchmark with --out {folder} first")
    runs = pd.concat([pd.read_csv(f, keep_default_na=False, na_values=["", "nan"]) for f in files], ignore_index=True)
    runs["reason"] = runs.reason.fillna("")
    runs = runs[runs.scaling != "profile"]
    base = runs[(runs.layer == "chunked") & (runs.status == "ok")].groupby("seq_len").tflops_per_gpu.median()
    runs["tokens_per_gpu"] = runs.seq_len // runs.ranks
    baseline_n = runs.tokens_per_gpu.where(runs.scaling == "weak", runs.seq_len)
    table = runs[runs.layer != "chunked"].assign(efficiency=lambda t: t.tflops_per_gpu / baseline_n[t.index].map(base))
    peer = table[table.layer == "torch_cp"].set_index(["scaling", "ranks", "seq_len"]).median_ms
    ring = table.layer == "ring"
    table.loc[ring, "ring_over_torch_cp"] = [
        row.median_ms / peer.get((row.scaling, row.ranks, row.seq_len), np.nan) for row in table[ring].itertuples()]
    return table.sort_values(["layer", "scaling", "seq_len", "ranks"])


def plot(table: pd.DataFrame, path: Path) -> Path:
    """Efficiency against P per N and layer (1 = perfect scaling)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ok = table[table.status == "ok"].assign(series=lambda t: t.tokens_per_gpu.where(t.scaling == "weak", t.seq_len))
    for (layer, scaling, n), t in ok.groupby(["layer", "scaling", "series"]):
        ax.plot(t.ranks, t.efficiency, marker="o",
                label=f"{layer}, {scaling}, " + (f"{n:,} tokens per GPU" if scaling == "weak" else f"N = {n:,}"))
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="GPUs (P)", ylabel="TFLOP/s per GPU ÷ one GPU's chunked layer",
           title="Context parallel: efficiency against P")
    ax.set_xticks(sorted(table.ranks.unique()), [str(p) for p in sorted(table.ranks.unique())])
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.savefig(path, bbox_inches="tight", dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="folder for this run's CSV")
    parser.add_argument("--summarize", metavar="FOLDER", help="join the runs in FOLDER into the scaling table")
    parser.add_argument("--figures", help="with --summarize: folder for the efficiency figure")
    parser.add_argument("--seq-lens", default="1000000,4000000", help="strong scaling: comma-separated N, or "
                                                                      "'none' (default: 1000000,4000000)")
    parser.add_argument("--per-rank", type=int, help="weak scaling: tokens per GPU (N = P × this)")
    parser.add_argument("--reps", type=int, default=2, help="timed calls per layer (default: 2)")
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--n-heads", type=int, default=16)
    parser.add_argument("--no-peer", action="store_true", help="skip PyTorch's context_parallel")
    parser.add_argument("--profile", action="store_true", help="also profile one ring call per rank")
    parser.add_argument("--dtype", help="fp16 (default on CUDA), bf16, fp32")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    args = parser.parse_args(argv)
    try:
        if args.summarize:
            table = summarize(Path(args.summarize))
            print(table[[c for c in COLUMNS + ["efficiency", "ring_over_torch_cp"] if c in table]]
                  .to_markdown(index=False, floatfmt=".3g"))
            if args.figures:
                Path(args.figures).mkdir(parents=True, exist_ok=True)
                print(f"wrote {plot(table, Path(args.figures) / f'{STEM}.png')}")
            return 0
        if not args.out:
            raise ValueError("give --out FOLDER for the run's CSV (or --summarize FOLDER)")
        seq_lens = [] if args.seq_lens == "none" else parse_lengths(args.seq_lens, "--seq-lens", minimum=2)
        if not seq_lens and not args.per_rank:
            raise ValueError("nothing to run: give --seq-lens, --per-rank or both")
        if (args.per_rank is not None and args.per_rank < 2) or args.reps < 1:
            raise ValueError("--per-rank must be at least 2 and --reps at least 1")
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = init(device)
    try:
        env = environment(device, dtype)
        stem = run_stem(dist.get_world_size(), seq_lens, args.per_rank)
        save = (lambda t: write_results(t.assign(**env), args.out, stem, env)) if dist.get_rank() == 0 else (
            lambda t: None)
        table = run(seq_lens, args.per_rank, dtype, device, args.reps, args.d_model, args.n_heads,
                    not args.no_peer, args.profile, save).assign(**env)
        if dist.get_rank() != 0:
            return 0
        path = write_results(table, args.out, stem, env)
    finally:
        dist.destroy_process_group()
    print(f"\n{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}, P = {table.ranks.iloc[0]}\n")
    print(table[[c for c in COLUMNS if c in table]].to_markdown(index=False, floatfmt=".4g"))
    if args.profile:
        print("\nOne profiled ring call, µs over ranks:\n")
        print(table[table.scaling == "profile"][PROFILE_COLUMNS].to_markdown(index=False, floatfmt=".4g"))
    print(f"\nwrote {path}")
    return 0 if not table.status.isin(["fail", "error"]).any() else 1


if __name__ == "__main__":
    sys.exit(main())
