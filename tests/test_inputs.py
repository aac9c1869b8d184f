"""Bad input gets a clear error naming the problem."""
import pytest
import torch

from roofline_lib import ReferenceLayer, build_variant, select_rows, select_variants
from roofline_lib.device import resolve_device, resolve_dtype

LAYERS = ["reference", "sdpa_fused_qkv", "no_empty_mask"]


@pytest.fixture(params=LAYERS)
def layer(request):
    return build_variant(request.param, ReferenceLayer(32, 4))


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        ReferenceLayer(30, 4)


@pytest.mark.parametrize("bad, match", [
    (torch.randn(8, 32), "3-D"),
    (torch.randn(1, 2, 8, 32), "3-D"),
    (torch.randn(1, 8, 31), "last dimension is 31"),
])
def test_bad_x_shape(layer, bad, match):
    with pytest.raises(ValueError, match=match):
        layer(bad)


def test_dtype_mismatch(layer):
    with pytest.raises(TypeError, match="float64 but the layer's weights are torch.float32"):
        layer(torch.randn(1, 8, 32, dtype=torch.float64))


def test_device_mismatch(layer):
    class FakeMeta:  # a tensor on another device, without needing a GPU
        pass
    with pytest.raises(ValueError, match="is on meta but the layer is on cpu"):
        layer(torch.empty(1, 8, 32, device="meta"))


@pytest.mark.parametrize("mask, error, match", [
    (torch.ones(1, 8, dtype=torch.int64), TypeError, "bool tensor"),
    (torch.ones(1, 7, dtype=torch.bool), ValueError, r"shape \(batch, seq_len\) = \(1, 8\)"),
    (torch.ones(8, dtype=torch.bool), ValueError, "shape"),
    ([True] * 8, TypeError, "bool tensor"),
])
def test_bad_mask(layer, mask, error, match):
    with pytest.raises(error, match=match):
        layer(torch.randn(1, 8, 32), mask)


def test_unknown_names():
    with pytest.raises(ValueError, match="unknown variant 'fastest_ever'.*known variants are reference"):
        select_variants("reference,fastest_ever")
    with pytest.raises(ValueError, match="unknown variant"):
        build_variant("nope", ReferenceLayer(32, 4))
    with pytest.raises(ValueError, match="unknown row '15'"):
        select_rows("1,15")
    with pytest.raises(ValueError, match="bad row range"):
        select_rows("3-20")


def test_row_selection():
    assert [s.row for s in select_rows("1-3,s2")] == ["1", "2", "3", "s2"]
    assert len(select_rows("suite")) == 14 and select_rows(None)[0].seq_len == 128


def test_dtype_and_device_resolution(monkeypatch):
    cpu = torch.device("cpu")
    assert resolve_dtype(None, cpu) == torch.float32
    assert resolve_dtype("fp64", cpu) == torch.float64
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype("int8", cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None).type == "cpu"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_bf16_on_an_old_gpu_says_use_fp16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ValueError, match=r"bf16 needs .*compute capability ≥ 8.0.*Tesla T4 is 7.5.*fp16"):
        resolve_dtype("bf16", torch.device("cuda"))
