"""The roofline numbers: FLOP and byte formulas against closed form, FlopCounterMode and the parameter count;
datasheet lookup; measured ceilings on the CPU; the floor and the fraction of it in a results table."""
import math

import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, SUITE, ReferenceLayer, Shape
from roofline_lib.measure.ceilings import (
    DATASHEET,
    Ceilings,
    datasheet,
    datasheet_ceilings,
    datasheet_spec,
    measure_ceilings,
)
from roofline_lib.measure.roofline import (
    add_roofline,
    count_flops,
    flop_crosscheck,
    fraction_table,
    layer_flops,
    layer_min_bytes,
    op_costs,
    op_traffic,
    roofline_table,
)

SHAPES = [SUITE[0], SUITE[5], SUITE[12], SMOKE_SUITE[1], Shape("odd", 3, 37, 40, 5)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.row)
def test_op_costs_closed_form(shape):
    B, N, d = shape.batch, shape.seq_len, shape.d_model
    costs = op_costs(shape, torch.float16)
    gemms = costs[costs.kind == "GEMM"]
    assert list(gemms.index) == ["qkv_proj", "out_proj", "fc1", "fc2"]
    assert gemms.flops.sum() == 24 * B * N * d * d
    assert (gemms.flops == gemms.naive_flops).all()
    attention = costs.loc["attention"]
    assert attention.flops == 2 * B * N * N * d and attention.naive_flops == 4 * B * N * N * d
    layer = costs.loc["layer"]
    assert layer.flops == layer_flops(shape) == 24 * B * N * d * d + 2 * B * N * N * d
    assert layer.min_bytes == layer_min_bytes(shape, torch.float16) == 2 * (12 * d * d + 13 * d + 2 * B * N * d)
    assert layer_min_bytes(shape, torch.float32) == 2 * layer.min_bytes


def test_min_bytes_are_the_parameters_plus_input_and_output():
    shape = SMOKE_SUITE[2]
    layer = ReferenceLayer(shape.d_model, shape.n_heads)
    params = sum(p.numel() for p in layer.parameters())
    assert layer_min_bytes(shape, torch.float32) == 4 * (params + 2 * shape.tokens * shape.d_model)
    costs = op_costs(shape, torch.float32)
    T, d = shape.tokens, shape.d_model
    fc1 = layer.fc1.weight.numel() + layer.fc1.bias.numel()
    assert costs.loc["fc1", "min_bytes"] == 4 * (fc1 + T * d + T * 4 * d)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.row)
def test_flop_counter_agrees_on_gemms_and_sees_the_full_square(shape):
    check = flop_crosscheck(shape)  # meta device: exact counts without computing
    assert check.loc["GEMM", "counted"] == check.loc["GEMM", "useful"] == 24 * shape.tokens * shape.d_model ** 2
    assert check.loc["attention", "counted"] == check.loc["attention", "naive"]
    assert check.loc["attention", "counted_over_useful"] == 2.0


def test_flop_counter_on_a_real_cpu_layer():
    shape = SMOKE_SUITE[1]
    layer = ReferenceLayer(shape.d_model, shape.n_heads)
    counted = count_flops(layer, torch.randn(shape.batch, shape.seq_len, shape.d_model))
    B, N, d = shape.batch, shape.seq_len, shape.d_model
    assert counted["aten.addmm"] == 24 * B * N * d * d
    assert counted["aten.bmm"] == 4 * B * N * N * d


def test_floor_matches_the_design_anchors():
    ceilings = Ceilings("H200", "fp16", 726.0, 4200.0, "anchor")  # DESIGN §7's measured ceilings
    table = roofline_table([SUITE[i - 1] for i in (1, 6, 9, 12, 13)], torch.float16, ceilings).set_index("row")
    for row, floor in {"1": 0.0016, "6": 0.154, "9": 0.663, "12": 0.473, "13": 0.604}.items():
        assert table.loc[row, "floor_ms"] == pytest.approx(floor, rel=0.03)
    assert table.loc["1", "bound"] == "memory" and table.loc["12", "bound"] == "compute"
    assert ceilings.ridge == pytest.approx(726e12 / 4200e9)
    assert ceilings.floor_ms(726e9, 0) == pytest.approx(1.0)


def test_datasheet_table_and_lookup():
    table = datasheet()
    for name in ("T4", "L4", "A10G", "A100", "H100", "H200", "CPU"):
        assert table.name.str.contains(name).any(), name
    for column in ("fp16_tflops", "bf16_tflops", "fp32_tflops", "bandwidth_gbps", "memory_gb",
                   "compute_capability", "source"):
        assert column in table.columns
    gpus = table[~table.name.str.contains("CPU")]
    assert gpus.source.str.startswith("https://").all() and (gpus.fp16_tflops > gpus.fp32_tflops).all()
    assert math.isnan(datasheet_spec("Tesla T4").bf16_tflops)
    assert datasheet_spec("NVIDIA H200").name.startswith("H200")
    assert datasheet_spec("NVIDIA H100 80GB HBM3").name.startswith("H100")
    assert datasheet_spec("NVIDIA A10G").name == "A10G"
    assert datasheet_spec("NVIDIA A100-SXM4-80GB").name.startswith("A100")
    assert datasheet_spec("NVIDIA H100 PCIe") is None and datasheet_spec("x86_64") is None
    assert datasheet_ceilings("Tesla T4", torch.bfloat16) is None  # no bf16 tensor cores
    h200 = datasheet_ceilings("NVIDIA H200", torch.float16)
    assert h200.copy_gbps == 4800 and h200.source.startswith("datasheet")
    assert len({s.name for s in DATASHEET}) == len(DATASHEET)


def test_measure_ceilings_on_cpu(cpu):
    c = measure_ceilings(cpu, torch.float32, matmul_size=128, copy_bytes=2**20, budget_s=0.0)
    assert c.dtype == "fp32" and c.source.startswith("measured")
    assert 0 < c.matmul_tflops < 1e3 and 0 < c.copy_gbps < 1e5 and math.isfinite(c.ridge)


def _results(median_ms: float) -> pd.DataFrame:
    s = SMOKE_SUITE[2]
    base = {"row": s.row, "shape": s.label, "batch": s.batch, "seq_len": s.seq_len, "d_model": s.d_model,
            "n_heads": s.n_heads, "dtype": "fp32"}
    return pd.DataFrame([{**base, "variant": "reference", "median_ms": 2 * median_ms},
                         {**base, "variant": "fast", "median_ms": median_ms},
                         {**base, "variant": "oom", "median_ms": float("nan")}])


def test_add_roofline_columns():
    ceilings = Ceilings("cpu", "fp32", 1.0, 10.0, "test")
    shape = SMOKE_SUITE[2]
    floor = ceilings.floor_ms(layer_flops(shape), layer_min_bytes(shape, torch.float32))
    out = add_roofline(_results(floor * 4), ceilings).set_index("variant")
    assert out.loc["fast", "floor_ms"] == pytest.approx(floor)
    assert out.loc["fast", "fraction_of_floor"] == pytest.approx(0.25)
    assert out.loc["reference", "fraction_of_floor"] == pytest.approx(0.125)
    assert math.isnan(out.loc["oom", "fraction_of_floor"])
    assert out.loc["fast", "achieved_tflops"] == pytest.approx(layer_flops(shape) / (floor * 4e-3) / 1e12)
    wide = fraction_table(out.reset_index())
    assert list(wide.columns[-3:]) == ["reference", "fast", "oom"] and wide.loc[0, "fast"] == pytest.approx(0.25)


def test_add_roofline_rejects_mixed_dtypes():
    results = _results(1.0)
    results.loc[0, "dtype"] = "fp16"
    with pytest.raises(ValueError, match="one known dtype"):
        add_roofline(results, Ceilings("cpu", "fp32", 1.0, 10.0, "test"))


def test_add_roofline_again_replaces_the_columns():  # e.g. results merged from several GPUs, one yardstick
    first = add_roofline(_results(1.0), Ceilings("cpu", "fp32", 1.0, 10.0, "first"))
    again = add_roofline(first, Ceilings("cpu", "fp32", 2.0, 10.0, "second"))
    assert list(again.columns) == list(first.columns)
    assert set(again.ceiling_source) == {"second"} and (again.floor_ms <= first.floor_ms).all()


def test_op_traffic_counts_each_ops_flops_and_bytes(cpu):
    from roofline_lib import Case, build_variant
    from roofline_lib.measure.roofline import op_traffic
    case = Case(SMOKE_SUITE[2], torch.float32, cpu)
    B, N, d, H = 2, 64, 96, 6
    naive = op_traffic(case.layer, case.x)
    assert naive.loc["aten::addmm", "flops"] == 24 * B * N * d * d  # the GEMMs, as §5 counts them
    assert naive.loc["aten::bmm", "flops"] == 4 * B * N * N * d  # the naive layer's full square
    scores = B * H * N * N * 4  # one fp32 score tensor
    assert naive.loc["aten::masked_fill", "bytes"] >= 2 * 2 * scores  # two passes, each reading and writing it
    assert naive.loc["aten::masked_fill", "flops"] == 0 and "aten::view" not in naive.index
    fused = op_traffic(build_variant("no_empty_mask", case.layer), case.x)
    assert "aten::masked_fill" not in fused.index and fused.loc["aten::addmm", "calls"] == 4


def test_op_roofline_places_every_timed_op(cpu):
    from roofline_lib import Case, profile_layer
    from roofline_lib.measure.profile_analysis import op_roofline
    from roofline_lib.measure.roofline import op_traffic
    from roofline_lib.present.plots_profile import plot_op_bandwidth, plot_op_roofline
    case = Case(SMOKE_SUITE[1], torch.float32, cpu)
    points = op_roofline(profile_layer(case.layer, case.x), op_traffic(case.layer, case.x))
    assert {"aten::addmm", "aten::masked_fill", "aten::_softmax"} <= set(points.op)
    assert (points.time_us > 0).all() and points.share.sum() == pytest.approx(1.0)
    gemm = points.set_index("op").loc["aten::addmm"]
    assert gemm.category == "GEMM" and gemm.intensity > points.set_index("op").loc["aten::masked_fill", "intensity"]
    ceilings = Ceilings("cpu", "fp32", 1.0, 100.0, "test")
    fig = plot_op_roofline({"reference": points}, ceilings)
    assert len(fig.axes) == 1
    bars = plot_op_bandwidth({"reference": points}, ceilings).axes[0]
    assert len(bars.patches) == (points.share >= 0.02).sum()  # one bar per op that matters
    assert any(line.get_xdata()[0] == ceilings.copy_gbps for line in bars.lines)  # against the copy's GB/s


def test_op_roofline_joins_the_time_of_inner_ops_to_the_op_whose_bytes_are_counted():
    """The clone inside masked_fill and the backend forward inside SDPA are timed under other names than
    the ones the traffic counts: their time goes to masked_fill and to the SDPA op, whose bytes include it."""
    from types import SimpleNamespace

    from roofline_lib.measure.profile_analysis import op_roofline
    ops = pd.DataFrame({"op": ["aten::_cudnn_attention_forward", "aten::copy_", "aten::masked_fill_", "aten::copy_"],
                        "category": ["attention core", "masking", "masking", "copy/layout"],
                        "time_us": [50.0, 30.0, 10.0, 5.0]})
    traffic = pd.DataFrame({"calls": [1, 1, 1], "flops": [4e9, 0, 0], "bytes": [1e7, 8e6, 2e6]},
                           index=pd.Index(["aten::_scaled_dot_product_cudnn_attention", "aten::masked_fill",
                                           "aten::copy_"], name="op"))
    points = op_roofline(SimpleNamespace(ops=ops), traffic).set_index("op")
    assert points.loc["aten::_scaled_dot_product_cudnn_attention", "time_us"] == 50.0
    assert points.loc["aten::masked_fill", "time_us"] == 40.0  # its own kernel and its clone's copy
    assert points.loc["aten::masked_fill", "profiled_as"] == "copy_ + masked_fill_"  # the merge named, sorted
    assert points.loc["aten::copy", "profiled_as"] == "copy_"
    assert points.loc["aten::copy", "time_us"] == 5.0


class _FusedAttention(torch.nn.Module):
    """q attends to itself through SDPA's memory-efficient kernel, `is_causal` passed by keyword or, as SDPA
    itself passes it, by position."""

    def __init__(self, causal: bool, by_keyword: bool):
        super().__init__()
        self.causal, self.by_keyword = causal, by_keyword

    def forward(self, q, key_padding_mask=None):
        attend = torch.ops.aten._scaled_dot_product_efficient_attention
        if self.by_keyword:
            return attend(q, q, q, None, False, is_causal=self.causal)[0]
        return attend(q, q, q, None, False, 0.0, self.causal)[0]


@pytest.mark.parametrize("by_keyword", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_a_causal_fused_attention_kernel_is_credited_with_the_useful_half_of_the_square(causal, by_keyword):
    B, H, N, hd = 2, 4, 128, 64
    q = torch.empty(B, H, N, hd, device="meta", dtype=torch.float16)  # (B, H, N, hd): no compute
    traffic = op_traffic(_FusedAttention(causal, by_keyword), q)
    costs = op_costs(Shape("t", B, N, H * hd, H), torch.float16).loc["attention"]
    assert traffic.loc["aten::_scaled_dot_product_efficient_attention", "flops"] == (
        costs.flops if causal else costs.naive_flops)


class _Backend(torch.nn.Module):
    """q attends to itself causally through one of SDPA's backends, called as the op the profile names."""

    def __init__(self, op: str):
        super().__init__()
        self.op = getattr(torch.ops.aten, op)
        self.biased = "cudnn" in op or "efficient" in op  # (attn_bias, compute_log_sumexp) after q, k, v

    def forward(self, q, key_padding_mask=None):
        return (self.op(q, q, q, None, False, is_causal=True) if self.biased else self.op(q, q, q, is_causal=True))[0]


@pytest.mark.parametrize("op", ["_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                                "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"])
def test_every_sdpa_backend_is_counted_with_the_useful_flops_of_causal_attention(op):
    """The GPU's backends and the CPU's (which FlopCounterMode has no rule for) alike: 2·B·N²·d, never 0."""
    B, H, N, hd = 2, 4, 128, 64
    q = torch.empty(B, H, N, hd, device="meta", dtype=torch.float16)  # (B, H, N, hd): no compute
    traffic = op_traffic(_Backend(op), q)
    assert traffic.loc[f"aten::{op}", "flops"] == 2 * B * N * N * (H * hd)
