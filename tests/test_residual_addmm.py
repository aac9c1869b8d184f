"""The "residual_addmm" rung: §3 with and without padding, skipped cleanly where Triton cannot run.
Without a GPU its LayerNorm kernel runs through the Triton interpreter (conftest.py)."""
import pytest
import torch

pytest.importorskip("triton")

from conftest import CUDA, DEVICE  # noqa: E402

from roofline_lib import SMOKE_SUITE, VARIANTS, Case, build_variant  # noqa: E402
from roofline_lib.core.outcome import VariantUnavailable  # noqa: E402
from roofline_lib.kernels import add_layer_norm as aln  # noqa: E402
from roofline_lib.runs.pipeline import check_variant  # noqa: E402

pytestmark = pytest.mark.skipif(not CUDA and not aln.INTERPRETED, reason="needs a GPU or TRITON_INTERPRET=1")


def test_registered_before_fastest():
    names = list(VARIANTS)
    assert names.index("triton_ln") < names.index("residual_addmm") < names.index("fastest")


@pytest.mark.parametrize("padding", ["none", "left", "holes"])
@pytest.mark.parametrize("shape", SMOKE_SUITE, ids=lambda s: s.label)
def test_rung_passes_section_3(shape, padding):
    dtype = torch.float16 if CUDA else torch.float32
    result = check_variant(Case(shape, dtype, DEVICE, padding, seed=6), "residual_addmm")
    assert result.passed, result.reason


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)], ids=str)
def test_rung_passes_section_3_in_half_precision(dtype):
    assert check_variant(Case(SMOKE_SUITE[1], dtype, DEVICE, "holes", seed=7), "residual_addmm").passed


def test_input_is_left_untouched():  # the GEMMs accumulate in place: onto fresh buffers, never onto x
    case = Case(SMOKE_SUITE[0], torch.float32, DEVICE)
    x = case.x.clone()
    build_variant("residual_addmm", case.layer)(case.x)
    assert torch.equal(case.x, x)


def test_rung_unavailable_in_float64():
    case = Case(SMOKE_SUITE[0], torch.float64, DEVICE)
    with pytest.raises(VariantUnavailable, match="residual_addmm: the Triton kernels take"):
        build_variant("residual_addmm", case.layer)


@pytest.mark.gpu
@pytest.mark.parametrize("row", ["1", "6", "13"])
def test_suite_rows_pass_section_3_on_the_gpu(row):
    from roofline_lib import SUITE
    shape = next(s for s in SUITE if s.row == row)
    result = check_variant(Case(shape, torch.float16, DEVICE, "none", seed=8), "residual_addmm")
    assert result.passed, result.reason
