"""Every variant against the float64 truth (§3) on awkward shapes, with and without real padding."""
import pytest
import torch
import torch.nn.functional as F

from roofline_lib import VARIANTS, Shape, verify
from roofline_lib.core.correctness import Case, section3_judgement
from roofline_lib.runs.pipeline import check_variant
from roofline_lib.variants import SdpaLayer
from roofline_lib.variants.registry import build_variant, describe, factories

AWKWARD = [
    Shape("a1", 3, 37, 48, 4),  # odd batch, prime seq_len
    Shape("a2", 1, 100, 60, 5),  # head_dim 12, five heads
    Shape("a3", 5, 23, 60, 3),  # head_dim 20
    Shape("a4", 2, 64, 36, 9),  # head_dim 4
]
CORE = ["reference", "sdpa_fused_qkv", "no_empty_mask"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding", ["none", "right", "left", "holes"])
@pytest.mark.parametrize("shape", AWKWARD, ids=lambda s: s.label)
def test_core_variants_pass(cpu, shape, padding, dtype):
    case = Case(shape, dtype, cpu, padding, seed=11)
    for name in CORE:
        result = check_variant(case, name)
        assert result.passed, (name, result.reason)
        assert result.err < (1e-12 if dtype == torch.float64 else 1e-5)


class DropsTheMask(SdpaLayer):
    """A wrong variant: always is_causal, ignoring key_padding_mask."""

    def attention(self, q, k, v, key_padding_mask):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class NoCausalMask(SdpaLayer):
    """A wrong variant: forgets the causal mask."""

    def attention(self, q, k, v, key_padding_mask):
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("padding", ["left", "holes"])
def test_dropping_the_mask_fails(cpu, padding):
    case = Case(AWKWARD[0], torch.float64, cpu, padding, seed=4)
    result = case.check_module("drops_mask", DropsTheMask(case.layer, build_empty_mask=False))
    assert not result.passed and "exceeds" in result.reason


def test_right_padding_alone_cannot_catch_a_dropped_mask(cpu):
    """§1's warning, demonstrated: under the causal mask right padding changes no real row."""
    case = Case(AWKWARD[0], torch.float64, cpu, "right", seed=4)
    assert case.check_module("drops_mask", DropsTheMask(case.layer, build_empty_mask=False)).passed


def test_dropping_the_causal_mask_fails(cpu):
    case = Case(AWKWARD[1], torch.float64, cpu, "none", seed=4)
    assert not case.check_module("no_causal", NoCausalMask(case.layer, build_empty_mask=False)).passed


def test_nan_output_fails(cpu):
    case = Case(AWKWARD[2], torch.float32, cpu, "none")
    result = case.check_module("nan", lambda x, m: torch.full_like(x, float("nan")))
    assert not result.passed and "NaN" in result.reason


def test_variants_registry_order_and_weights_untouched(cpu):
    assert list(VARIANTS)[:3] == CORE
    case = Case(AWKWARD[0], torch.float32, cpu)
    before = {n: p.clone() for n, p in case.layer.state_dict().items()}
    for name in CORE:
        build_variant(name, case.layer)(case.x)
    for n, p in case.layer.state_dict().items():
        assert torch.equal(p, before[n]), n


def test_fused_qkv_is_a_copy_of_the_reference_weights(cpu):
    case = Case(AWKWARD[0], torch.float32, cpu)
    layer = build_variant("no_empty_mask", case.layer)
    ref = case.layer
    torch.testing.assert_close(layer.qkv_proj.weight,
                               torch.cat([ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight]), rtol=0, atol=0)
    assert layer.qkv_proj.weight.data_ptr() != ref.q_proj.weight.data_ptr()


def test_verify_function(cpu):
    result = verify("no_empty_mask", AWKWARD[3], torch.float32, cpu, padding="left", seed=2)
    assert result.passed and result.variant == "no_empty_mask" and result.row == "a4"
    assert result.bound == pytest.approx(2 * result.ref_err + 1e-6)
    assert result.err_ratio == pytest.approx(result.err / result.ref_err)


@pytest.mark.parametrize("err, ref_err, passed", [
    (2.0e-3, 1.0e-3, True),  # exactly twice: still passes
    (2.1e-3, 1.0e-3, False),
    (5.0e-7, 0.0, True),  # an exact reference: the absolute slack is the bound
    (float("nan"), 1.0e-3, False),
])
def test_section3_judgement_is_twice_the_reference_error_plus_slack_never_nan(err, ref_err, passed):
    judged = section3_judgement(err, ref_err)
    assert judged.passed is passed and judged.bound == pytest.approx(2 * ref_err + 1e-6)
    assert ("NaN" in judged.reason) == (err != err) and ("exceeds" in judged.reason) == (not passed and err == err)


def test_every_variant_and_peer_is_described_by_its_whole_first_paragraph_on_one_line():
    for name in factories():
        text = describe(name)
        assert text and "\n" not in text and "  " not in text, name
        assert text.endswith((".", ")")), f"{name}: {text!r} stops mid-sentence"


def test_the_reduce_overhead_peer_says_in_one_line_why_it_needs_a_gpu(cpu):
    from roofline_lib import SMOKE_SUITE, VariantUnavailable
    from roofline_lib.runs.pipeline import prepare
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    with pytest.raises(VariantUnavailable, match="^compile_kept_reduce_overhead: .*CUDA GPU$"):
        build_variant("compile_kept_reduce_overhead", case.layer)
    done = prepare(case, "compile_kept_reduce_overhead")
    assert done.status == "skipped" and "\n" not in done.reason


def test_a_graph_replayed_layer_returns_an_output_the_next_call_cannot_overwrite(cpu, monkeypatch):
    from roofline_lib import SMOKE_SUITE
    from roofline_lib.variants.peers import GraphReplayed

    class OneBuffer(torch.nn.Module):  # what a CUDA-graph replay does: every call writes one static output
        def __init__(self, layer):
            super().__init__()
            self.layer, self.out = layer, None

        def forward(self, x, key_padding_mask=None):
            y = self.layer(x, key_padding_mask)
            self.out = y if self.out is None else self.out.copy_(y)
            return self.out

    modes = []
    monkeypatch.setattr(torch, "compile", lambda module, mode=None, **kw: modes.append(mode) or OneBuffer(module))
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    layer = GraphReplayed(build_variant("no_empty_mask", case.layer))
    assert modes == ["reduce-overhead"]
    first = layer(case.x)
    expected = first.clone()
    layer(torch.randn_like(case.x))  # the next call, on another input
    assert torch.equal(first, expected)  # the first output still holds its own values
    assert case.check_module("graph_replayed", layer).passed
    with pytest.raises(ValueError, match="d_model"):
        layer(case.x[..., :-1])


@pytest.mark.gpu
def test_the_reduce_overhead_peer_passes_section3_and_keeps_each_output():
    from roofline_lib import SMOKE_SUITE
    from roofline_lib.measure.timing import time_layer_calls
    case = Case(SMOKE_SUITE[2], torch.float16, torch.device("cuda"), padding="left")
    torch._dynamo.reset()
    peer = build_variant("compile_kept_reduce_overhead", case.layer)
    result = case.check_module("compile_kept_reduce_overhead", peer)
    assert result.passed, result.reason
    first = peer(case.x, case.key_padding_mask)
    expected = first.clone()
    for _ in range(3):  # replays on other inputs: the first output is a copy, not the graph's buffer
        peer(torch.randn_like(case.x), case.key_padding_mask)
    torch.cuda.synchronize()
    assert torch.equal(first, expected)
    samples = time_layer_calls({"peer": lambda: peer(case.x, case.key_padding_mask)}, case.device, budget_s=0.0)
    assert len(samples["peer"]) and (samples["peer"] > 0).all()
    assert case.check_module("compile_kept_reduce_overhead", peer).passed  # after the timing loop, still right
