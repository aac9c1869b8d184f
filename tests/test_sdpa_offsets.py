"""SDPA calls past the memory-efficient kernel's 32-bit offsets: keys compacted, queries in blocks, the same
attention either way. The limits are lowered here, so that shapes a CPU runs in milliseconds cross them."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import roofline_lib.variants.sdpa_offsets as offsets
from roofline_lib import Shape
from roofline_lib.core.correctness import Case
from roofline_lib.runs.longctx import FULL, estimated_bytes, long_shape, needs_bytes
from roofline_lib.runs.pipeline import check_variant
from roofline_lib.variants.chunk_attention import attend_efficient
from roofline_lib.variants.parts import causal_padding_mask
from roofline_lib.variants.sdpa import forced

B, N, H, HD = 2, 37, 3, 8


def fused_views():
    """q, k, v (B, H, N, hd) as the layers hold them: views into one fused (B, N, 3·H·hd) projection."""
    qkv = torch.randn(B, N, 3, H, HD, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return [t.transpose(1, 2) for t in qkv.unbind(2)]  # row stride 3·H·hd


@pytest.fixture
def calls(monkeypatch):
    """The (q, k, mask) of every SDPA call the module makes (torch's own function is left alone)."""
    seen = []

    def recording(q, k, v, attn_mask=None, is_causal=False):
        seen.append((q, k, attn_mask))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)

    monkeypatch.setattr(offsets, "F", SimpleNamespace(scaled_dot_product_attention=recording))
    return seen


def test_inside_the_limits_it_is_the_plain_call(calls):
    q, k, v = fused_views()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(offsets.sdpa(q, k, v, is_causal=True), expected)
    assert len(calls) == 1 and calls[0][1] is k  # no copy


def test_keys_past_the_offset_limit_are_compacted_and_attend_the_same(calls, monkeypatch):
    q, k, v = fused_views()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    monkeypatch.setattr(offsets, "KEY_OFFSET_LIMIT", N * k.stride(-2) - 1)  # the fused view just past it
    out = offsets.sdpa(q, k, v, is_causal=True)
    assert calls[0][1].stride(-2) == HD  # compact (B, H, N, hd)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-14)


def test_mask_rows_past_the_bias_limit_go_in_query_blocks(calls, monkeypatch):
    q, k, v = fused_views()
    real = torch.ones(B, N, dtype=torch.bool)
    real[1, :5] = False  # left padding
    real[0, 20:23] = False  # a hole
    mask = causal_padding_mask(real, N)  # (B, 1, N, N)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    row = -(-N // offsets.BIAS_ROW_ALIGNMENT) * offsets.BIAS_ROW_ALIGNMENT
    monkeypatch.setattr(offsets, "BIAS_OFFSET_LIMIT", 5 * row)  # offsets 0, row, …, 4·row: 5 queries per block
    out = offsets.sdpa(q, k, v, attn_mask=mask)
    assert [c[0].size(-2) for c in calls] == [5] * 7 + [2]
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-14)


def test_heads_past_the_head_offset_limit_go_in_groups(calls, monkeypatch):
    q, k, v = (t.contiguous() for t in fused_views())  # head stride N·hd
    per_head = torch.randn(B, H, N, N, dtype=torch.float64)  # an additive mask with a head dim
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=per_head)
    monkeypatch.setattr(offsets, "HEAD_OFFSET_LIMIT", 2 * N * HD)  # heads 0 and 1 fit, head 2 does not
    out = offsets.sdpa(q, k, v, attn_mask=per_head)
    assert [(c[0].size(1), c[2].size(1)) for c in calls] == [(2, 2), (1, 1)]
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-14)


def test_a_mask_without_rows_per_query_takes_the_plain_call(calls, monkeypatch):
    from torch.nn.attention.bias import causal_lower_right
    q, k, v = fused_views()
    monkeypatch.setattr(offsets, "BIAS_OFFSET_LIMIT", 1)  # any bias row would need blocks of one query
    offsets.sdpa(q, k, v, attn_mask=torch.ones(B, 1, 1, N, dtype=torch.bool))  # one row for all queries
    offsets.sdpa(q, k, v, attn_mask=causal_lower_right(N, N))  # no bias tensor at all
    assert [c[0].size(-2) for c in calls] == [N, N]


def test_a_mask_and_is_causal_together_are_refused():
    q, k, v = fused_views()
    with pytest.raises(ValueError, match="not both"):
        offsets.sdpa(q, k, v, attn_mask=torch.ones(N, N, dtype=torch.bool), is_causal=True)


def test_keys_past_even_a_compact_layout_are_refused(monkeypatch):
    q, k, v = fused_views()
    monkeypatch.setattr(offsets, "KEY_OFFSET_LIMIT", N * HD)
    with pytest.raises(ValueError, match="pass the 2\\^31 elements per head"):
        offsets.sdpa(q, k, v, is_causal=True)


@pytest.mark.parametrize("variant, options", [("no_empty_mask", {}), ("chunked", {"attention": "lower_right"}),
                                              ("chunked", {"attention": "mask"})])
@pytest.mark.parametrize("padding", ["none", "holes"])
def test_the_layers_stay_exact_past_both_limits(calls, monkeypatch, variant, options, padding):
    if padding != "none" and options.get("attention") == "lower_right":
        pytest.skip("lower_right takes no padding")
    monkeypatch.setattr(offsets, "KEY_OFFSET_LIMIT", 2000)  # the layers' key views cross it, compact keys do not
    monkeypatch.setattr(offsets, "BIAS_OFFSET_LIMIT", 100)  # and every mask's rows: 2 queries per block
    case = Case(Shape("o1", 3, 37, 48, 4), torch.float64, torch.device("cpu"), padding, seed=5)
    result = check_variant(case, variant, **({"chunk_size": 16} | options if variant == "chunked" else {}))
    assert result.passed and result.err < 1e-13, result.reason
    assert any(k.stride(-2) == 12 for _, k, _ in calls)  # compacted keys (head_dim 12) ran
    if padding != "none" or options.get("attention") == "mask":
        assert any(mask is not None and q.size(-2) <= 2 for q, _, mask in calls)  # and blocked queries


@pytest.mark.parametrize("layer, row_stride", [(FULL, 3), ("chunked", 2)])  # × d_model: fused views, the cache
def test_memory_estimates_count_the_compact_copies_past_the_limit(layer, row_stride):
    d, e = 1024, 2
    first = -(-offsets.KEY_OFFSET_LIMIT // (row_stride * d))  # the first N whose rows reach it: 699,051 for FULL
    below, above = (estimated_bytes(layer, long_shape(n, d_model=d), torch.float16) for n in (first - 1, first))
    assert above - below > 2 * first * d * e  # keys and values copied once
    assert offsets.compact_copy_bytes(first - 1, row_stride * d, d, 1, e) == 0
    if layer == "chunked":  # what a long run must hold grows with it
        need_below, need_above = (needs_bytes(long_shape(n, d_model=d), torch.float16) for n in (first - 1, first))
        assert need_above - need_below > 2 * first * d * e


@pytest.mark.gpu
def test_on_a_gpu_keys_past_2_31_elements_attend_right_through_sdpa():
    """The real kernel: keys whose rows sit 32,768 elements apart (a view into a wide buffer, 4 GiB), so the
    last of 65,600 keys is past 2^31 elements. Forced onto the memory-efficient backend, `sdpa` must match
    float64 attention. (The plain call is not made: where it reads unmapped memory, the CUDA context is lost
    for every test after it.)"""
    cuda, stride, n_keys, hd = torch.device("cuda"), 32768, 65600, 64
    gen = torch.Generator(device=cuda).manual_seed(0)
    wide = torch.randn(1, n_keys, 2, stride // 2, device=cuda, dtype=torch.float16, generator=gen)
    k, v = (wide[:, :, i, :hd].unsqueeze(1) for i in range(2))  # (1, 1, S, hd), row stride 32,768
    q = torch.randn(1, 1, 64, hd, device=cuda, dtype=torch.float16, generator=gen)
    assert n_keys * k.stride(-2) > offsets.KEY_OFFSET_LIMIT
    truth = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    with forced("efficient"):
        ours = offsets.sdpa(q, k, v)
    assert (ours.double() - truth).abs().max().item() < 1e-2
    split = attend_efficient(q, k, v)[0]  # the chunked layer's private-op path
    assert (split.double() - truth).abs().max().item() < 1e-2
