"""Context parallel on the CPU: P gloo processes on one host, checked against the float64 truth (§3)."""
import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from roofline_lib import Case, Shape
from roofline_lib.core.correctness import section3_judgement
from roofline_lib.variants.context_parallel import ContextParallelLayer, gather, pieces, rank_positions, schedule, shard
from roofline_lib.variants.registry import build_variant

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, shape: Shape, dtype: str, padding: str, out: str,
            chunk_size: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        case = Case(shape, DTYPES[dtype], torch.device("cpu"), padding, seed=3)
        layer = ContextParallelLayer(case.layer, chunk_size=chunk_size)
        local = layer(shard(case.x, world, rank), case.key_padding_mask, seq_len=shape.seq_len)
        full = gather(local, shape.seq_len)
        if rank == 0:
            chunked = build_variant("chunked", case.layer, chunk_size=7)(case.x, case.key_padding_mask)
            valid = case.valid()
            gap = float((full - chunked)[valid].abs().max())
            with open(out, "w") as f:
                json.dump({"err": case.error(full), "ref_err": case.ref_err, "gap_to_chunked": gap}, f)
    finally:
        dist.destroy_process_group()


def run(world: int, shape: Shape, dtype: str, padding: str, tmp_path, chunk_size: int = 16384) -> dict:
    out = tmp_path / f"cp_{world}_{dtype}_{padding}_{chunk_size}.json"
    mp.start_processes(_worker, args=(world, free_port(), shape, dtype, padding, str(out), chunk_size), nprocs=world,
                       start_method="fork")
    return json.loads(out.read_text())


SHAPE = Shape("cp", 2, 37, 48, 4)  # 37 tokens: not divisible by 2P for P = 2, 3, 4


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("padding", ["none", "left", "holes"])
def test_context_parallel_is_exact_in_float64(world, padding, tmp_path):
    result = run(world, SHAPE, "fp64", padding, tmp_path)
    assert result["err"] < 1e-12, result
    assert result["gap_to_chunked"] < 1e-12, result  # P = 1 included: the chunked layer's function


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("padding", ["none", "holes"])
def test_pairs_the_causal_mask_cuts_are_attended_chunk_by_chunk_exactly(world, padding, tmp_path):
    result = run(world, SHAPE, "fp64", padding, tmp_path, chunk_size=3)  # pieces of 9-19 tokens: several chunks
    assert result["err"] < 1e-12 and result["gap_to_chunked"] < 1e-12, result


def test_a_bad_chunk_size_is_refused():
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        ContextParallelLayer(Case(SHAPE, torch.float32, torch.device("cpu")).layer, chunk_size=0)


@pytest.mark.parametrize("world", [2, 3])
def test_context_parallel_passes_section_3_in_float32(world, tmp_path):
    result = run(world, SHAPE, "fp32", "holes", tmp_path)
    assert section3_judgement(result["err"], result["ref_err"]).passed, result


def test_zigzag_pieces_cover_the_sequence_and_balance_the_causal_work():
    for n, world in ((37, 2), (37, 3), (100, 4), (8, 4)):
        cut = pieces(n, world)
        assert cut[0][0] == 0 and cut[-1][1] == n and all(a[1] == b[0] for a, b in zip(cut, cut[1:]))
        held = torch.cat([rank_positions(n, world, r) for r in range(world)])
        assert sorted(held.tolist()) == list(range(n))
    work = {}
    for row in schedule(4096, 4):
        if row["work"] != "skipped":
            work[row["rank"]] = work.get(row["rank"], 0) + (1 if row["work"] == "full" else 0.5)
    assert max(work.values()) - min(work.values()) <= 0.5  # zigzag: no rank idles while another computes
    assert any(r["work"] == "skipped" for r in schedule(4096, 4))


def test_a_sequence_too_short_for_the_ranks_is_refused():
    with pytest.raises(ValueError, match="too short for 4 ranks"):
        pieces(7, 4)


def _faulty_worker(rank: int, world: int, port: int, fault: str, out: str) -> None:
    import datetime
    import os
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=10))
    case = Case(SHAPE, torch.float32, torch.device("cpu"), seed=3)
    layer = ContextParallelLayer(case.layer)
    x = shard(case.x, world, rank)
    if rank == 1 and fault == "shape":
        x = x[:, :-1]  # one token short of its share
    if rank == 1 and fault == "dtype":
        x = x.double()
    if rank == 1 and fault == "dies":
        os._exit(3)
    try:
        layer(x, seq_len=SHAPE.seq_len)
        message = "no error"
    except (ValueError, RuntimeError) as exc:
        message = f"{type(exc).__name__}: {exc}"
    with open(f"{out}.{rank}", "w") as f:
        f.write(message)


@pytest.mark.parametrize("fault, match", [("shape", "rank(s) 1 hold an input that does not match"),
                                          ("dtype", "rank(s) 1 hold an input that does not match"),
                                          ("dies", "another rank stopped or did not answer in time")])
def test_a_bad_or_dead_rank_stops_every_other_rank_with_a_clear_error(fault, match, tmp_path):
    out = str(tmp_path / "fault")
    world = 3
    port = free_port()
    ranks = [mp.get_context("fork").Process(target=_faulty_worker, args=(r, world, port, fault, out))
             for r in range(world)]  # plain processes: one that dies must not take the others down with it
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(timeout=60)
    assert not any(p.is_alive() for p in ranks), "a rank hung"
    survivors = [r for r in range(world) if not (fault == "dies" and r == 1)]
    for rank in survivors:
        message = (tmp_path / f"fault.{rank}").read_text()
        assert match in message, (rank, message)


def test_unknown_kernel_and_backend_are_refused(tmp_path):
    from roofline_lib.runs.context_parallel import init
    with pytest.raises(ValueError, match="unknown backend 'mpi2'"):
        init(torch.device("cpu"), "mpi2")


@pytest.mark.slow
def test_torchrun_runs_the_cli_on_two_gloo_processes(tmp_path):
    import os
    import subprocess
    import sys

    import pandas as pd
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(free_port()), "-m", "roofline_lib", "longctx", "--context-parallel", "--device", "cpu",
               "--dtype", "fp32", "--seq-len", "101", "--d-model", "32", "--n-heads", "2", "--padding", "holes",
               "--reps", "1", "--out", str(tmp_path)]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (csv,) = tmp_path.glob("context_parallel_*_P2.csv")
    record = pd.read_csv(csv).iloc[0]
    assert record["ranks"] == 2 and record["status"] == "ok" and record["err_ratio"] <= 2


def test_the_schedule_figure_is_drawn_from_the_code():
    from roofline_lib.present.plots_longctx import plot_ring_schedule
    rows = schedule(1000, 3)
    assert len(rows) == 3 * 3 * 4  # steps × ranks × (2 query pieces × 2 key pieces)
    computed = {(r["query_piece"], r["key_piece"]) for r in rows if r["work"] != "skipped"}
    assert computed == {(q, k) for q in range(6) for k in range(6) if k <= q}  # every causal pair, once
    assert plot_ring_schedule(rows).axes


@pytest.mark.slow
def test_run_local_spawns_the_ranks_and_returns_a_checked_record():
    from roofline_lib.runs.context_parallel import run_local
    record = run_local(2, Shape("cp", 1, 29, 32, 2), torch.float32, padding="left")
    assert record["ranks"] == 2 and record["backend"] == "gloo" and record["passed"], record
