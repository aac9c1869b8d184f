"""The CUDA-core GEMV (`roofline_lib.kernels.gemv`) against float64 math and torch's own error, on its own and as
`fused_linear` runs it at one row; the `--gemv` option of `benchmarks.decode_gemv`. Without a GPU the kernel runs
through the Triton interpreter (conftest.py)."""
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
from conftest import CUDA, DEVICE  # noqa: E402

from benchmarks import decode_gemv as bench  # noqa: E402
from roofline_lib.kernels import fused_linear as fl  # noqa: E402
from roofline_lib.kernels import gemv  # noqa: E402
from roofline_lib.kernels.gemv import gemv_linear  # noqa: E402
from roofline_lib.kernels.launch import INTERPRETED  # noqa: E402

kernel = pytest.mark.skipif(not CUDA and not INTERPRETED, reason="needs a GPU or TRITON_INTERPRET=1")
KINDS = {name: (ln, gelu, residual) for name, _, _, ln, gelu, residual in bench.PROJECTIONS}  # a layer's four
SHAPES = [(1, 64, 48, 16), (3, 96, 80, 32), (1, 96, 48, 4)]  # (M, K, N, BLOCK_N): K 96 and N 80 not powers of two,
# N 80 in blocks of 32 (the last one half masked)


def torch_path(a, linear, ln, gelu, residual):
    """The same function as torch composes it, in the inputs' dtype."""
    h = F.linear(ln(a) if ln is not None else a, linear.weight, linear.bias)
    h = F.gelu(h) if gelu else h
    return h if residual is None else h + residual


def in_block(block_n, warps=4):
    """The GEMV in one block, called as `fused_linear` is: (a, linear, ln, gelu, residual)."""
    return lambda *args: gemv_linear(*args, (block_n, warps))


def check(M, K, N, dtype, kind, project, offset=0.0):
    """`project(a, linear, ln, gelu, residual)` is as close to float64 as torch's composition in the same dtype, up
    to a factor (fused_linear's rule in tests/test_fused_linear.py)."""
    ln, gelu, residual = KINDS[kind]
    a, linear, norm, res = bench.projection_inputs(M, K, N, residual, DEVICE, dtype, seed=K + N)
    a = (a.float() + offset).to(dtype)
    norm = norm if ln else None
    out = project(a, linear, norm, gelu, res)
    assert out.shape == (M, N) and out.dtype == dtype
    truth = bench.projection_truth(a, linear, norm, gelu, res)
    err = bench.relative_error(out, truth)
    torch_err = bench.relative_error(torch_path(a, linear, norm, gelu, res), truth)
    # The interpreter truncates fp32 → bf16 where a GPU rounds to nearest: a biased error, up to 2× more.
    factor = 4 if dtype == torch.bfloat16 and INTERPRETED else 2
    assert err <= factor * torch_err + 1e-6, (err, torch_err)


@kernel
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}_K{}_N{}_b{}".format(*s))
def test_matches_float64_like_torch(shape, dtype, kind):
    M, K, N, block_n = shape
    check(M, K, N, dtype, kind, in_block(block_n))


@kernel
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_fused_linear_at_one_row_matches_float64_like_torch_through_the_gemv(dtype, kind):
    check(1, 96, 80, dtype, kind, fl.fused_linear)  # K 96: not a power of two
    assert fl.last_tile() == gemv.gemv_label(gemv.gemv_block(96))


@kernel
def test_layer_norm_statistics_survive_a_large_offset():  # two passes: no E[x²] − E[x]² cancellation
    check(3, 96, 48, torch.float32, "qkv", in_block(8), offset=300.0)


@kernel
def test_fused_linear_takes_the_gemv_at_one_row_only_and_the_tiles_where_asked(monkeypatch):
    blocks = []  # the block of each GEMV fused_linear runs
    monkeypatch.setattr(fl, "gemv_linear", lambda *args: blocks.append(args[5]) or gemv_linear(*args))
    a, linear, ln, res = bench.projection_inputs(2, 96, 80, True, DEVICE, torch.float32)
    with torch.no_grad():
        step = fl.fused_linear(a[:1, None], linear, ln, True, res[:1, None])  # (B, 1, C): a decode step at B = 1
        assert step.shape == (1, 1, 80) and blocks == [gemv.gemv_block(96)]
        assert fl.last_tile() == gemv.gemv_label(blocks[0])
        tiles = fl.fused_linear(a[:1], linear, ln, True, res[:1], gemv=False)
        two_rows = fl.fused_linear(a, linear, ln, True, res)
        split = fl.fused_linear(a[:1], linear, ln, True, res[:1], split_k=2)
        assert len(blocks) == 1 and not fl.last_tile().startswith("gemv")
        for other in (tiles, two_rows[:1], split):
            torch.testing.assert_close(step[0], other, atol=1e-5, rtol=1e-5)
        if not INTERPRETED:  # a forced tile runs on a GPU alone
            fl.fused_linear(a[:1], linear, ln, True, res[:1], tile="16x16x256/1/w4s4")
            assert len(blocks) == 1 and not fl.last_tile().startswith("gemv")
    monkeypatch.setattr(fl, "MAX_K", 64)  # a row wider than the GEMV was checked for takes the tiles
    with torch.no_grad():
        wide = fl.fused_linear(a[:1], linear, ln, True, res[:1])
    assert len(blocks) == 1 and not fl.last_tile().startswith("gemv")
    torch.testing.assert_close(step[0], wide, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_a_one_row_steps_projections_pass_and_replay_in_a_graph_with_the_same_result(pdl):
    """A B = 1 step's four projections at d_model 1024 through fused_linear's GEMV, back to back (with `pdl` each
    launched while the one before ends, where the GPU has it): within the benchmark's tolerance of float64 in the
    rule's blocks, and replayed from a CUDA graph bit for bit."""
    d, calls = 1024, []
    for _, k_mult, n_mult, ln, gelu, residual in bench.PROJECTIONS:
        a, linear, norm, res = bench.projection_inputs(1, k_mult * d, n_mult * d, residual, DEVICE, torch.float16)
        norm = norm if ln else None
        calls.append((lambda a=a, w=linear, n=norm, g=gelu, r=res: fl.fused_linear(a, w, n, g, r, pdl=pdl),
                      bench.projection_truth(a, linear, norm, gelu, res)))
    with torch.no_grad():
        eager, tiles = [], []
        for call, truth in calls:
            eager.append(call())
            tiles.append(fl.last_tile())
            assert bench.relative_error(eager[-1], truth) < bench.TOLERANCE
        assert tiles == ["gemv 2/w4", "gemv 2/w4", "gemv 2/w4", "gemv 1/w4"]  # qkv, out_proj, fc1, fc2
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            captured = [call() for call, _ in calls]
        for _ in range(5):
            graph.replay()
            for y, want in zip(captured, eager):
                torch.testing.assert_close(y, want, atol=0, rtol=0)


@kernel
def test_the_block_and_warps_leave_the_result_within_rounding():
    a, linear, ln, res = bench.projection_inputs(1, 96, 20, True, DEVICE, torch.float32)
    ys = [in_block(*block)(a, linear, ln, True, res) for block in [(1, 1), (8, 4), (64, 16)]]
    for y in ys[1:]:
        torch.testing.assert_close(y, ys[0], atol=1e-6, rtol=1e-6)


def test_the_block_rule_takes_one_row_of_w_per_program_from_fc2s_long_k_on_and_two_below(monkeypatch):
    monkeypatch.setattr(gemv, "INTERPRETED", False)  # the GPU's rule, wherever the tests run
    assert [gemv.gemv_block(K) for K in (512, 1024, 2047)] == [(2, 4)] * 3  # qkv, out_proj, fc1: K = d_model
    assert [gemv.gemv_block(K) for K in (2048, 3072, 4096)] == [(1, 4)] * 3  # fc2: K = 4·d_model
    monkeypatch.setattr(gemv, "INTERPRETED", True)  # wide blocks: the interpreter runs programs one by one
    assert gemv.gemv_block(4096) == gemv.INTERPRETED_BLOCK
    assert gemv.gemv_label((2, 4)) == "gemv 2/w4" and bench.parse_gemv(gemv.gemv_label((1, 4))[5:]) == [(1, 4)]


def test_the_gemv_option_parses_its_blocks_and_refuses_a_bad_one_before_any_gpu_work():
    assert bench.parse_gemv("1/w4, 4/w8,64/w16,") == [(1, 4), (4, 8), (64, 16)] and bench.parse_gemv("") == []
    for bad in ("3/w4", "128/w4", "0/w4", "4/w3", "4/w32", "4w4", "4/4", "x/w4"):
        with pytest.raises(SystemExit, match=f"^--gemv item '{bad}': expected BLOCK_N/wWARPS, BLOCK_N a power of two "
                                             "from 1 to 64 and WARPS one of 1, 2, 4, 8, 16, e.g. 4/w4$"):
            bench.main(["--out", "unused", "--gemv", f"1/w4,{bad}"])
    if not CUDA:  # a good item passes the parse and stops at the missing GPU
        with pytest.raises(SystemExit, match="^this benchmark times GPU kernels: no GPU is visible$"):
            bench.main(["--out", "unused", "--gemv", "4/w4,8/w8"])


def test_the_layer_sums_add_each_projections_fastest_passing_gemv():
    rows = []
    for B, d in [(1, 512), (16, 768)]:
        for i, (name, *_) in enumerate(bench.PROJECTIONS):
            rows += [(B, d, name, "fused_linear", 10.0 + i, True), (B, d, name, "F.linear (cuBLAS, alone)", 9.0, True),
                     (B, d, name, bench.TENSOR_CORES, 20.0, True),
                     (B, d, name, "gemv 1/w4", 5.0 + i, True), (B, d, name, "gemv 4/w4", 4.0 + (i == 0) * 2, True),
                     (B, d, name, "gemv 8/w4", 1.0, False)]  # the fastest, but wrong: left out
    table = pd.DataFrame(rows, columns=["B", "d_model", "projection", "variant", "us", "passed"])
    table.loc[(table.B == 16) & (table.projection == "fc2") & table.variant.str.startswith("gemv "), "us"] = math.nan
    step, fastest = bench.layer_sums(table)  # B16: fc2 has no gemv result, so no sum
    assert step.loc[(1, 512), bench.GEMV_BEST] == 5.0 + 4.0 * 3 and math.isnan(step.loc[(16, 768), bench.GEMV_BEST])
    assert step.loc[(1, 512), "fused_linear"] == 46.0 and step.loc[(1, 512), "F.linear (cuBLAS, alone)"] == 36.0
    assert step.loc[(1, 512), bench.TENSOR_CORES] == 80.0
    assert list(fastest[fastest.B == 1].variant) == ["gemv 1/w4", "gemv 4/w4", "gemv 4/w4", "gemv 4/w4"]
    assert bench.GEMV_BEST not in bench.layer_sums(table[~table.variant.str.startswith("gemv ")])[0]
