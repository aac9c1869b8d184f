"""Context parallel measured: the ring-attention layer (`variants.context_parallel`) on a process group,
checked by §3 on sampled rows and timed, and the processes that run it (torchrun, or spawned on the CPU).
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..core.catalog import DEFAULT_CHUNK_SIZE
from ..core.correctness import Case, section3_judgement
from ..core.shapes import Shape
from ..core.truth import sample_rows
from ..measure.timing import peak_memory, time_interleaved
from ..variants.context_parallel import ContextParallelLayer, gather_rows, shard

PROCESS_GROUP_BACKENDS = ("gloo", "nccl")
TIMEOUT = datetime.timedelta(seconds=60)  # a rank that dies or hangs stops the others within this


def measure_ring(shape: Shape, dtype: torch.dtype, device: torch.device, padding: str = "none", seed: int = 0,
                 reps: int = 3, kernel: str | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> dict:
    """One record, the same on every rank of the default group: the ring layer on `shape`, checked by §3 on
    the sampled rows (the reference's error from the proxy row, as `longctx` does), timed over `reps`
    calls of every rank together, with the largest peak memory of any rank."""
    world, rank = dist.get_world_size(), dist.get_rank()
    case = Case(shape, dtype, device, padding, seed)
    rows = case.rows if case.rows is not None else sample_rows(shape.seq_len).to(device)
    layer = ContextParallelLayer(case.layer, kernel=kernel, chunk_size=chunk_size)
    x_local = shard(case.x, world, rank)

    def call() -> torch.Tensor:
        return layer(x_local, case.key_padding_mask, seq_len=shape.seq_len)

    sizes = peak_memory(call, device)
    got = gather_rows(call(), rows, shape.seq_len)
    truth = case.truth if case.rows is not None else case.truth[:, rows]
    valid = case.valid() if case.rows is not None else (
        torch.ones(shape.batch, len(rows), dtype=torch.bool, device=device) if case.key_padding_mask is None
        else case.key_padding_mask[:, rows])
    err = float(torch.linalg.norm(got[valid].double() - truth[valid]) / torch.linalg.norm(truth[valid]))
    ms = time_interleaved({"cp": call}, device, budget_s=0.0, min_reps=reps, max_reps=reps, warmup=1)["cp"]
    peak = torch.tensor([sizes[0]], dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    judged = section3_judgement(err, case.ref_err)
    return {"kind": "context_parallel", "ranks": world, "backend": dist.get_backend(), "kernel": layer.kernel_name,
            "chunk_size": chunk_size, "seq_len": shape.seq_len, "batch": shape.batch, "d_model": shape.d_model,
            "n_heads": shape.n_heads, "padding": padding, "status": "ok" if judged.passed else "fail", "err": err,
            "ref_err": case.ref_err, "err_ratio": judged.ratio, "bound": judged.bound, "passed": judged.passed,
            "rows_checked": len(rows), "median_ms": float(np.median(ms)), "reps": len(ms),
            "peak_gib_per_rank": float(peak) / 2**30}


def init(device: torch.device, backend: str | None = None, timeout: datetime.timedelta = TIMEOUT) -> torch.device:
    """Join the default process group and return this rank's device: gloo on the CPU, NCCL on GPUs (one per
    rank, LOCAL_RANK), or `backend`. Under torchrun the group comes from the environment it sets; without
    it, this process is a group of one (P = 1, the same code path)."""
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if backend not in PROCESS_GROUP_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(PROCESS_GROUP_BACKENDS)}")
    if backend == "nccl" and device.type != "cuda":
        raise ValueError("the nccl backend needs CUDA GPUs: use gloo on the CPU")
    if "WORLD_SIZE" not in os.environ:  # not started by torchrun: a group of one
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timeout)
    return device


def _local_rank(rank: int, world: int, port: int, shape: Shape, dtype: torch.dtype, padding: str, out: str) -> None:
    """One process of `run_local`: join the gloo group, measure, and (rank 0) write the record."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=TIMEOUT)
    try:
        torch.set_num_threads(1)
        record = measure_ring(shape, dtype, torch.device("cpu"), padding=padding, reps=1)
        if rank == 0:
            Path(out).write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


def run_local(world: int, shape: Shape, dtype: torch.dtype = torch.float32, padding: str = "none") -> dict:
    """`measure_ring` on `world` fresh gloo processes on this machine's CPU (started with spawn, so it can be called
    from a notebook whose process holds a GPU); returns rank 0's record."""
    if world < 1:
        raise ValueError(f"world must be at least 1, got {world}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "record.json")
        mp.start_processes(_local_rank, args=(world, port, shape, dtype, padding, out), nprocs=world,
                           start_method="spawn")
        return json.loads(Path(out).read_text())
