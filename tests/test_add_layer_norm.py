"""The fused add + LayerNorm kernel against torch: s is exactly `x + r`, y is `F.layer_norm(x + r)`, across
dtypes, awkward widths and row counts. Without a GPU it runs through the Triton interpreter (conftest.py)."""
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from conftest import CUDA, DEVICE  # noqa: E402

from roofline_lib.kernels import add_layer_norm as aln  # noqa: E402
from roofline_lib.kernels.add_layer_norm import add_layer_norm, kernel_settings  # noqa: E402
from roofline_lib.runs.add_layer_norm_bench import add_layer_norm_bytes, check_add_layer_norm, random_inputs  # noqa: E402

pytestmark = pytest.mark.skipif(not CUDA and not aln.INTERPRETED, reason="needs a GPU or TRITON_INTERPRET=1")

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
D_MODELS = [96, 1000, 1023, 4096, 5120, 8192]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=2e-2)}
EPS = 1e-5


def assert_matches_torch(x, r, weight, bias, eps=EPS):
    s, y = add_layer_norm(x, r, weight, bias, eps)
    want_s = x + r
    assert s.shape == y.shape == x.shape and s.dtype == y.dtype == x.dtype
    if x.dtype == torch.bfloat16 and aln.INTERPRETED:
        # The interpreter truncates fp32 → bf16 where a GPU rounds to nearest: one ulp at most.
        torch.testing.assert_close(s, want_s, rtol=2**-7, atol=0)
    else:
        assert torch.equal(s, want_s)
    torch.testing.assert_close(y, F.layer_norm(want_s, (x.shape[-1],), weight, bias, eps), **TOL[x.dtype])


@pytest.mark.parametrize("n_rows", [1, 5])
@pytest.mark.parametrize("d_model", D_MODELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch(dtype, d_model, n_rows):
    assert_matches_torch(*random_inputs(n_rows, d_model, dtype, DEVICE, seed=d_model + n_rows))


@pytest.mark.parametrize("n_rows", [31, 32, 33, 70])
def test_rows_spanning_several_programs(n_rows):
    block, rows_per_program, _ = kernel_settings(96)
    assert rows_per_program == 32 and block == 128  # so these row counts end mid-program
    assert_matches_torch(*random_inputs(n_rows, 96, torch.float32, DEVICE, seed=n_rows))


def test_batched_and_strided_inputs():
    x, _, weight, bias = random_inputs(10, 100, torch.float16, DEVICE)
    x = x.view(2, 5, 100)  # (B, N, C)
    wide = torch.randn(2, 5, 107, device=DEVICE).half()
    r = wide[..., :100]  # rows 107 elements apart, columns contiguous
    assert not r.is_contiguous()
    assert_matches_torch(x, r, weight, bias)


def test_statistics_survive_a_large_offset():
    x, r, weight, bias = random_inputs(4, 1000, torch.float32, DEVICE)
    x = x + 1e4  # E[s²] − E[s]² would cancel catastrophically here; the two-pass variance does not
    _, y = add_layer_norm(x, r, weight, bias)
    truth = F.layer_norm((x + r).double(), (1000,), weight.double(), bias.double(), EPS)
    torch.testing.assert_close(y.double(), truth, atol=5e-3, rtol=5e-3)


def test_no_rows():
    x, r, weight, bias = random_inputs(0, 64, torch.float32, DEVICE)
    s, y = add_layer_norm(x, r, weight, bias)
    assert s.shape == y.shape == (0, 64)


@pytest.mark.parametrize("n_cols", [1, 96, 1000, 1023, 4096, 5120, 8192, 20000, 32768])
def test_kernel_settings(n_cols):
    block, rows, warps = kernel_settings(n_cols)
    assert n_cols <= block < 2 * n_cols or block == n_cols == 1
    assert block & (block - 1) == 0 and rows & (rows - 1) == 0
    assert rows * block == max(block, aln.TILE_ELEMENTS)
    assert warps in (4, 8, 16, 32)


def test_rows_too_wide_are_refused():
    with pytest.raises(ValueError, match="too wide"):
        kernel_settings(aln.MAX_BLOCK_SIZE + 1)


@pytest.mark.parametrize("bad, error, match", [
    (lambda x, r, w, b: (x, r[:, :-1], w, b), ValueError, "same shape"),
    (lambda x, r, w, b: (x, r.double(), w, b), TypeError, "share one of"),
    (lambda x, r, w, b: (x.long(), r.long(), w, b), TypeError, "share one of"),
    (lambda x, r, w, b: (x, r, w[:-1], b), ValueError, "weight must be"),
    (lambda x, r, w, b: (x, r, w, b[None]), ValueError, "bias must be"),
    (lambda x, r, w, b: (x[:, :0], r[:, :0], w[:0], b[:0]), ValueError, "non-empty"),
], ids=["shape", "dtype", "integer", "weight", "bias", "empty-row"])
def test_bad_inputs_fail_loudly(bad, error, match):
    with pytest.raises(error, match=match):
        add_layer_norm(*bad(*random_inputs(3, 16, torch.float32, DEVICE)))


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(aln, "INTERPRETED", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        add_layer_norm(*random_inputs(3, 16, torch.float32, torch.device("cpu")))


def test_check_and_bytes():
    result = check_add_layer_norm(3, 1000, torch.float32, DEVICE)
    assert result["s_exact"] and result["passed"] and result["y_err"] < 1e-6
    assert add_layer_norm_bytes(3, 1000, torch.float16) == (4 * 3 + 2) * 1000 * 2


@pytest.mark.gpu
@pytest.mark.parametrize("n_rows", [1, 7, 1000, 4099])
@pytest.mark.parametrize("d_model", D_MODELS + [20000])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_matches_torch(dtype, d_model, n_rows):
    assert_matches_torch(*random_inputs(n_rows, d_model, dtype, DEVICE, seed=n_rows))
    assert check_add_layer_norm(n_rows, d_model, dtype, DEVICE)["passed"]


@pytest.mark.gpu
def test_gpu_more_than_2_31_elements():
    n_rows, d_model = 2**21 + 3, 1024  # (M·N > 2³¹: row offsets need int64)
    if torch.cuda.mem_get_info()[0] < 24 * 2**30:
        pytest.skip("needs 24 GiB of free GPU memory")
    x = torch.randn(n_rows, d_model, device=DEVICE, dtype=torch.float16)
    r = torch.randn_like(x)
    weight, bias = random_inputs(1, d_model, torch.float16, DEVICE)[2:]
    s, y = add_layer_norm(x, r, weight, bias)
    assert torch.equal(s[-5:], x[-5:] + r[-5:])
    torch.testing.assert_close(y[-5:], F.layer_norm(x[-5:] + r[-5:], (d_model,), weight, bias, EPS),
                               **TOL[torch.float16])


@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_shift_is_added_to_the_stored_stream_only(dtype, with_residual):
    x, r, weight, bias = random_inputs(7, 1000, dtype, DEVICE, seed=11)
    shift = torch.randn(1000, device=DEVICE).to(dtype)
    r = r if with_residual else None
    s, y = add_layer_norm(x, r, weight, bias, EPS, shift=shift)
    stream = x + r if with_residual else x
    want_s = (stream.float() + shift.float()).to(dtype)  # one rounding of the fp32 sum
    if dtype == torch.bfloat16 and aln.INTERPRETED:  # two truncations (x + r, then + shift): an ulp each
        bound = 2**-6 * (stream.float().abs() + shift.float().abs())
        assert ((s.float() - want_s.float()).abs() <= bound).all()
    else:
        assert torch.equal(s, want_s)
    torch.testing.assert_close(y, F.layer_norm(stream, (1000,), weight, bias, EPS), **TOL[dtype])


def test_without_residual_it_is_layer_norm():
    x, _, weight, bias = random_inputs(5, 96, torch.float32, DEVICE, seed=12)
    s, y = add_layer_norm(x, None, weight, bias)
    assert torch.equal(s, x)
    torch.testing.assert_close(y, F.layer_norm(x, (96,), weight, bias, EPS), **TOL[torch.float32])


def test_shift_of_the_wrong_width_is_refused():
    x, r, weight, bias = random_inputs(2, 96, torch.float32, DEVICE)
    with pytest.raises(ValueError, match=r"shift must be a floating-point \(96,\) tensor"):
        add_layer_norm(x, r, weight, bias, shift=torch.zeros(95, device=DEVICE))
