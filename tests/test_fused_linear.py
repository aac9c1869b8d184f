"""The fused-GEMM kernel (LayerNorm prologue; bias, GELU, residual epilogue) against float64 math, and the
"fused_gemm" rung built on it. Without a GPU it runs through the Triton interpreter (conftest.py)."""
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytest.importorskip("triton")
import triton  # noqa: E402
from conftest import CUDA, DEVICE  # noqa: E402

from roofline_lib import SMOKE_SUITE, VARIANTS, Case, VariantUnavailable, build_variant  # noqa: E402
from roofline_lib.kernels import fused_linear as fl  # noqa: E402
from roofline_lib.kernels import launch, launch_mode
from roofline_lib.kernels.fused_linear import fused_linear  # noqa: E402
from roofline_lib.runs.pipeline import check_variant  # noqa: E402

pytestmark = pytest.mark.skipif(not CUDA and not fl.INTERPRETED, reason="needs a GPU or TRITON_INTERPRET=1")

FUSIONS = {"plain": {}, "ln": {"ln": True}, "ln_gelu": {"ln": True, "gelu": True},
           "residual": {"residual": True}, "all": {"ln": True, "gelu": True, "residual": True}}


def modules(k: int, n: int, dtype: torch.dtype, seed: int) -> tuple[nn.Linear, nn.LayerNorm]:
    """A Linear k → n and a LayerNorm over k with random (never default) affine parameters."""
    torch.manual_seed(seed)
    linear, ln = nn.Linear(k, n), nn.LayerNorm(k)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    return linear.to(DEVICE, dtype), ln.to(DEVICE, dtype)


def torch_path(a, linear, ln, gelu, residual):
    """The unfused composition, as the reference layer runs it (in whatever dtype the modules are)."""
    h = linear(ln(a) if ln is not None else a)
    h = F.gelu(h) if gelu else h
    return h + residual if residual is not None else h


def check(shape, k, n, dtype, fusion, seed=0, offset=0.0):
    """The kernel is at least as close to float64 as torch's unfused ops in the same dtype (§3's rule)."""
    linear, ln = modules(k, n, dtype, seed)
    a = (torch.randn(*shape, k, device=DEVICE) + offset).to(dtype)
    residual = torch.randn(*shape, n, device=DEVICE).to(dtype) if fusion.get("residual") else None
    args = dict(ln=ln if fusion.get("ln") else None, gelu=fusion.get("gelu", False))
    out = fused_linear(a, linear, residual=residual, **args)
    assert out.shape == (*shape, n) and out.dtype == dtype
    with torch.no_grad():
        want = torch_path(a, linear, residual=residual, **args)
        args64 = dict(args, ln=None if args["ln"] is None else ln.double())
        truth = torch_path(a.double(), linear.double(), residual=None if residual is None else residual.double(),
                           **args64)
    err = lambda y: ((y.double() - truth).norm() / truth.norm()).item()  # noqa: E731
    # The interpreter truncates fp32 → bf16 where a GPU rounds to nearest: a biased error, up to 2× more.
    factor = 4 if dtype == torch.bfloat16 and fl.INTERPRETED else 2
    assert err(out) <= factor * err(want) + 1e-6, (err(out), err(want))


@pytest.mark.parametrize("fusion", FUSIONS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_matches_float64_like_torch(dtype, fusion):
    check((2, 19), 48, 72, dtype, FUSIONS[fusion])  # 38 rows, K and N not multiples of the tiles


@pytest.mark.parametrize("k, n", [(16, 16), (33, 17), (96, 384), (300, 40)])  # 300: several K steps
def test_awkward_sizes(k, n):
    check((5,), k, n, torch.float32, FUSIONS["all"], seed=k)


def test_layer_norm_statistics_survive_a_large_offset():
    check((7,), 64, 32, torch.float32, FUSIONS["ln"], offset=300.0)


def test_strided_input_rows():
    linear, ln = modules(40, 24, torch.float32, seed=1)
    wide = torch.randn(6, 50, device=DEVICE)
    a = wide[:, :40]  # rows 50 elements apart
    with torch.no_grad():
        torch.testing.assert_close(fused_linear(a, linear, ln=ln), linear(ln(a)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("split_k", [2, 3, 8])
def test_split_k_gives_the_unsplit_result_and_leaves_the_counts_at_zero(split_k):
    linear, ln = modules(1000, 40, torch.float32, seed=6)  # 8 steps of the interpreter's BLOCK_K: 3 splits unevenly
    a, residual = torch.randn(37, 1000, device=DEVICE), torch.randn(37, 40, device=DEVICE)
    with torch.no_grad():
        whole = fused_linear(a, linear, ln=ln, gelu=True, residual=residual)
        split = fused_linear(a, linear, ln=ln, gelu=True, residual=residual, split_k=split_k)
        torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)
        assert torch.equal(split, fused_linear(a, linear, ln=ln, gelu=True, residual=residual, split_k=split_k))
    assert all(int(counts.abs().sum()) == 0 for counts in fl._COUNTS.values())  # ready for the next call


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_split_k_matches_float64_like_torch_in_half_precision(dtype, monkeypatch):
    real = fl.fused_linear
    monkeypatch.setattr(sys.modules[__name__], "fused_linear", lambda *a, **k: real(*a, **k, split_k=4))
    check((2, 19), 600, 72, dtype, FUSIONS["all"])


@pytest.mark.parametrize("split_k", [0, 9, 2.0, True])
def test_a_forced_split_out_of_range_is_refused(split_k):
    linear, _ = modules(32, 16, torch.float32, seed=7)
    with pytest.raises(ValueError, match="split_k must be an integer from 1 to 8"):
        fused_linear(torch.randn(4, 32, device=DEVICE), linear, split_k=split_k)


def test_split_k_is_tried_only_for_small_outputs_and_long_k():
    assert fl.splits_k(128, 512, 2048, 8, 64)  # row 1's fc2: 16 tiles of 64 × 64, K = 2048
    assert not fl.splits_k(8192, 768, 3072, 2, 64)  # row 5's fc2: hundreds of tiles already
    assert not fl.splits_k(128, 512, 512, 8, 64)  # slices of one BLOCK_K step: no loop left to split
    assert not fl.splits_k(128, 512, 1088, 8, 64)  # 17 steps in slices of 3: the last two slices empty
    assert fl.splits_k(8192, 768, 3072, 1, 64)  # unsplit is always a candidate


def test_a_decode_steps_few_rows_try_only_the_short_tiles():
    assert fl.fits_rows(1, 16) and not fl.fits_rows(1, 32) and not fl.fits_rows(16, 32)  # M = B: GEMVs
    assert fl.fits_rows(17, 32) and not fl.fits_rows(17, 64)
    assert all(fl.fits_rows(128, m) for m in (16, 32, 64, 128))  # prefill: every tile stays
    tiles = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1}, num_stages=2)
             for m in (16, 32, 64, 128)]
    a = torch.empty(1, 64, device=DEVICE)

    def pruned(M, configs=tiles):
        return {c.kwargs["BLOCK_M"] for c in fl._prune(configs, {"M": M, "N": 64, "K": 64, "A": a})}
    if fl.INTERPRETED or fl.capability(DEVICE) >= (8, 0):  # a T4 is given its one tile
        assert pruned(1) == {16} and pruned(20) == {16, 32} and pruned(128) == {16, 32, 64, 128}
        assert pruned(1, tiles[1:]) == {32, 64, 128}  # no short tile fits: the taller ones, not none


def test_the_gemv_tiles_are_tried_for_a_decode_steps_few_rows_only():
    gemv = [fl.parse_tile(f"{m}x{n}x{k}/{split}/w{warps}s{stages}") for m, n, k, stages, warps, split in fl.GEMV_TILES]
    tall = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1}, num_stages=2)
    assert all(fl.gemv_tile(c) for c in gemv) and not fl.gemv_tile(tall)
    a = torch.empty(1, 64, device=DEVICE)

    def pruned(M):  # K long enough for every split of the GEMV tiles
        return fl._prune(gemv + [tall], {"M": M, "N": 1024, "K": 4096, "A": a})
    if fl.INTERPRETED or fl.capability(DEVICE) >= (8, 0):  # a T4 is given its one tile
        assert set(map(fl.tile_label, pruned(fl.GEMV_ROWS))) == set(map(fl.tile_label, gemv))
        assert list(map(fl.tile_label, pruned(fl.GEMV_ROWS + 1))) == [fl.tile_label(tall)]


def test_a_tile_reads_as_it_is_written_and_a_bad_one_is_one_clear_error():
    assert fl.tile_label(fl.parse_tile("16x16x256/2/w4s4")) == "16x16x256/2/w4s4"
    for bad in ("16x16x256/2", "16x12x256/1/w4s4", "16x16x256/9/w4s4"):
        with pytest.raises(ValueError, match=r"^tile '[^\n]*$"):
            fl.parse_tile(bad)
    if fl.INTERPRETED:  # a forced tile compiles for the GPU: the interpreter refuses it in one line
        linear, _ = modules(32, 16, torch.float32, seed=3)
        with pytest.raises(ValueError, match="on a GPU alone"):
            fused_linear(torch.randn(2, 32), linear, tile="16x16x256/1/w4s4")


def test_the_arrival_counts_cover_every_split_tile_and_outgrown_ones_stay_alive():
    smallest = (32, 64) if fl.INTERPRETED else min(fl._SPLIT_TILES, key=lambda t: t[0] * t[1])  # the forced 32 × 64
    assert fl._split_tiles(128, 512) == (128 // smallest[0]) * (512 // smallest[1])
    device = torch.device(DEVICE)
    first = fl._arrival_counts(device, 4)
    bigger = fl._arrival_counts(device, first.numel() + 1)
    assert bigger is not first and any(t is first for t in fl._OUTGROWN)  # a graph may still point at it
    assert fl._arrival_counts(device, 1) is bigger


def test_programmatic_dependent_launch_is_opt_in_and_says_why_it_is_off(monkeypatch):
    monkeypatch.delenv(launch.PDL_SWITCH, raising=False)
    assert launch.pdl_reason(torch.device(DEVICE)) == "not switched on (ROOFLINE_PDL=1)"
    if not CUDA:  # a decode step asks for it: then only the GPU and Triton decide
        assert "interpreter" in launch.pdl_reason(torch.device("cpu"), asked=True)
    assert launch_mode(DEVICE) == "plain launches: not switched on (ROOFLINE_PDL=1)"
    monkeypatch.setenv(launch.PDL_SWITCH, "1")
    assert launch.pdl_reason(torch.device(DEVICE), asked=False) == "its caller launches it plain"  # whatever the switch
    if not CUDA:
        assert "interpreter" in launch.pdl_reason(torch.device("cpu"))
        linear, _ = modules(32, 16, torch.float32, seed=9)
        a = torch.randn(4, 32)
        with torch.no_grad():  # switched on, and no GPU to use it: the same kernel, plain
            torch.testing.assert_close(fused_linear(a, linear), linear(a), atol=1e-5, rtol=1e-5)


def test_bad_inputs_fail_clearly():
    linear, ln = modules(32, 16, torch.float32, seed=2)
    a = torch.randn(4, 32, device=DEVICE)
    with pytest.raises(TypeError, match="share one of"):
        fused_linear(a.double(), linear)
    with pytest.raises(ValueError, match="in_features=32"):
        fused_linear(a[:, :31], linear)
    with pytest.raises(ValueError, match="residual must be"):
        fused_linear(a, linear, residual=torch.zeros(4, 15, device=DEVICE))
    with pytest.raises(ValueError, match="LayerNorm must be affine over the last 32"):
        fused_linear(a, linear, ln=nn.LayerNorm(16).to(DEVICE))
    with pytest.raises(ValueError, match="must have a bias"):
        fused_linear(a, nn.Linear(32, 16, bias=False).to(DEVICE))


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(fl, "INTERPRETED", False)
    linear, _ = modules(32, 16, torch.float32, seed=3)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        fused_linear(torch.randn(4, 32), linear.cpu())


def test_registered_before_fastest():
    names = list(VARIANTS)
    assert names.index("triton_ln") < names.index("fused_gemm") < names.index("fastest")


@pytest.mark.parametrize("padding", ["none", "left", "holes"])
@pytest.mark.parametrize("shape", SMOKE_SUITE[:2], ids=lambda s: s.label)
def test_rung_passes_section_3(shape, padding):
    dtype = torch.float16 if CUDA else torch.float32
    result = check_variant(Case(shape, dtype, DEVICE, padding, seed=4), "fused_gemm")
    assert result.passed, result.reason


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)], ids=str)
def test_rung_passes_section_3_in_half_precision(dtype):  # bf16: the interpreter truncates, see check()
    assert check_variant(Case(SMOKE_SUITE[0], dtype, DEVICE, "holes", seed=5), "fused_gemm").passed


def test_rung_unavailable_in_float64():
    case = Case(SMOKE_SUITE[0], torch.float64, DEVICE)
    with pytest.raises(VariantUnavailable, match="fused_gemm: the Triton kernels take"):
        build_variant("fused_gemm", case.layer)


@pytest.mark.gpu
@pytest.mark.parametrize("fusion", ["ln", "ln_gelu", "residual"])
def test_suite_sized_gemms_on_the_gpu(fusion):
    check((4, 512), 1024, 4096 if fusion == "ln_gelu" else 1024, torch.float16, FUSIONS[fusion])


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", ["0", "1"], ids=["plain", "pdl"])
def test_launch_bound_gemms_replay_in_a_graph_with_the_same_result(pdl, monkeypatch):  # row 1's fc1, fc2
    monkeypatch.setenv(launch.PDL_SWITCH, pdl)
    fc1, ln = modules(512, 2048, torch.float16, seed=8)
    fc2, _ = modules(2048, 512, torch.float16, seed=9)
    x = torch.randn(128, 512, device="cuda").half()
    check((128,), 2048, 512, torch.float16, FUSIONS["residual"])

    def mlp():  # two GEMMs back to back: with PDL the second may launch while the first runs
        return fused_linear(fused_linear(x, fc1, ln=ln, gelu=True), fc2, residual=x)

    with torch.no_grad():
        eager = mlp()
        torch.testing.assert_close(eager, x + fc2(F.gelu(fc1(ln(x)))), atol=2e-2, rtol=2e-2)
        for split_k in range(1, fl.MAX_SPLIT_K + 1):  # each split on the hardware, not only the tuned one
            forced = fused_linear(fused_linear(x, fc1, ln=ln, gelu=True), fc2, residual=x, split_k=split_k)
            torch.testing.assert_close(forced, eager, atol=2e-2, rtol=2e-2)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the arrival counts of the capture stream, made before capturing
            mlp()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            captured = mlp()
        for _ in range(20):  # every replay finds the arrival counts back at zero
            graph.replay()
            torch.testing.assert_close(captured, eager, atol=0, rtol=0)


@pytest.mark.slow
def test_the_kernels_compile_for_a_hopper_gpu_and_a_t4_without_either():  # what the interpreter cannot catch
    import os
    import subprocess
    from pathlib import Path
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", "benchmarks.compile_check"], cwd=Path(__file__).resolve().parents[1],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.count("ok ") >= 20 and "FAIL" not in run.stdout


def test_the_decode_gemv_benchmark_checks_each_variant_against_the_function_it_computes():
    """Its float64 truth is LayerNorm, Linear, GELU and the residual as torch composes them, and the kernel with all
    of them folded in passes its tolerance at a decode step's M = 2 rows; a plain Linear is far from it."""
    from benchmarks import decode_gemv as bench

    a, linear, ln, res = bench.projection_inputs(2, 64, 96, True, DEVICE, torch.float32)
    want = bench.projection_truth(a, linear, ln, True, res)
    composed = res + F.gelu(linear(F.layer_norm(a, (64,), ln.weight, ln.bias, ln.eps)))  # torch, fp32
    assert bench.relative_error(composed, want) < 1e-5 < 0.1 < bench.relative_error(linear(a), want)
    assert bench.relative_error(fused_linear(a, linear, ln, gelu=True, residual=res), want) < bench.TOLERANCE
    with pytest.raises(SystemExit, match="^--stats-elements must be a power of two from 256 to 16384, got 1000$"):
        bench.main(["--out", "unused", "--stats-elements", "1000"])
    with pytest.raises(SystemExit, match=r"^tile '16x16x256': expected MxNxK/SPLIT_K/wWARPSsSTAGES"):
        bench.main(["--out", "unused", "--tiles", "16x16x256"])
    if not CUDA:
        with pytest.raises(SystemExit, match="^this benchmark times GPU kernels: no GPU is visible$"):
            bench.main(["--out", "unused"])
    assert bench.weight_copies(2 << 20, 50 << 20) == 75  # 3 × L2 over 2 MiB
    assert bench.weight_copies(1 << 30, 50 << 20) == 2 and bench.weight_copies(1, 50 << 20) == 512
