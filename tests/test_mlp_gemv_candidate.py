"""The fused-MLP candidate for a B = 1 decode step (benchmarks.mlp_gemv_candidate): the layer's MLP in one kernel,
checked against float64 and against fused_linear's two GEMVs, in both ways of adding the partials; the Triton
interpreter runs it on a CPU."""
import pytest
import torch
from torch import nn

from benchmarks.mlp_gemv_candidate import MlpScratch, mlp_gemv, mlp_inputs, mlp_truth, relative_error
from roofline_lib.kernels.fused_linear import fused_linear
from tests.conftest import DEVICE


@pytest.mark.parametrize("reduce", ["ordered", "atomic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_mlp_in_one_kernel_matches_float64_like_the_two_gemvs(reduce, dtype):
    D = 50  # not a power of two: the masks on D and on H (4·D = 200, not a multiple of 16 or 32) both matter
    s, ln, fc1, fc2 = mlp_inputs(D, DEVICE, dtype)
    truth = mlp_truth(s, ln, fc1, fc2)
    row = s[None, :]
    two = fused_linear(fused_linear(row, fc1, ln, True, None), fc2, None, False, row)[0]
    for block_h in (16, 32):
        scratch = MlpScratch(D, 4 * D, block_h, reduce, DEVICE)
        for _ in range(2):  # the count and the atomic row are reset for the next call
            one = mlp_gemv(s, ln, fc1, fc2, scratch)
            assert relative_error(one, truth) <= 2 * relative_error(two, truth) + 1e-6  # §3's rule
        assert int(scratch.count) == 0 and (reduce == "ordered" or not scratch.partial.any())


def test_bad_input_is_one_clear_error():
    s, ln, fc1, fc2 = mlp_inputs(32, DEVICE, torch.float32)
    with pytest.raises(ValueError, match="reduce must be one of ordered, atomic, got 'sum'"):
        MlpScratch(32, 128, 16, "sum", DEVICE)
    scratch = MlpScratch(32, 128, 16, "ordered", DEVICE)
    with pytest.raises(ValueError, match=r"one row, shape \(32,\), got \(1, 32\)"):
        mlp_gemv(s[None, :], ln, fc1, fc2, scratch)
    with pytest.raises(ValueError, match="made for 8 programs, and fc1's 64 hidden units make 4"):
        mlp_gemv(s, ln, nn.Linear(32, 64), fc2, scratch)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message")
def test_the_benchmark_says_in_one_line_that_it_needs_a_gpu(tmp_path):
    from benchmarks.mlp_gemv_candidate import main
    with pytest.raises(SystemExit, match="no GPU is visible"):
        main(["--out", str(tmp_path)])
