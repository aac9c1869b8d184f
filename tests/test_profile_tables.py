"""The tables and sentences behind notebooks 00 and 01 (present.tables, present.prose_profile, present.plots_profile):
no NaN left for a reader, speedups shown with their bands, a profile's passes and kernel names read from the
trace, numbered panels; and notebook 00 does not give away what notebook 01's profile finds."""
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity

from roofline_lib import SMOKE_SUITE, SUITE
from roofline_lib.core.correctness import Case
from roofline_lib.measure.ceilings import Ceilings
from roofline_lib.measure.profile_events import Profile
from roofline_lib.measure.profile_rules import CATEGORIES
from roofline_lib.present import prose_profile, tables
from roofline_lib.present.plots_profile import plot_op_bandwidth, plot_op_roofline
from roofline_lib.runs.profile_suite import profile_suite

ROOT = Path(__file__).resolve().parents[1]
SHAPE = SMOKE_SUITE[2]  # B2 N64 d96 H6


def _no_nan(frame: pd.DataFrame) -> bool:
    return not frame.isna().any().any() and not frame.astype(str).isin(["nan", "NaN", "None"]).any().any()


def _sweep() -> pd.DataFrame:
    """One row of a ladder sweep: the reference, a rung timed against it, a rung skipped here."""
    base = {"row": "s1", "shape": "B1 N16 d32 H2", "dtype": "fp32", "device": "x86_64", "torch": "2.x+cpu",
            "gpu_share": math.nan, "peak_extra_mib": math.nan}
    return pd.DataFrame([
        {**base, "variant": "reference", "status": "ok", "median_ms": 0.688, "p20_ms": 0.677, "p80_ms": 0.697,
         "speedup": math.nan, "speedup_p20": math.nan, "speedup_p80": math.nan, "verdict": math.nan,
         "passed": True, "err_ratio": 1.0},
        {**base, "variant": "fast", "status": "ok", "median_ms": 0.359, "p20_ms": 0.344, "p80_ms": 0.363,
         "speedup": 1.9123, "speedup_p20": 1.85, "speedup_p80": 1.97, "verdict": "faster", "passed": True,
         "err_ratio": 0.994},
        {**base, "variant": "gpu_only", "status": "skipped", "median_ms": math.nan, "p20_ms": math.nan,
         "p80_ms": math.nan, "speedup": math.nan, "speedup_p20": math.nan, "speedup_p80": math.nan,
         "verdict": math.nan, "passed": math.nan, "err_ratio": math.nan},
    ])


def test_blank_missing_shows_a_reason_or_nothing_and_formats_the_numbers():
    frame = pd.DataFrame({"a": [1.23456, math.nan], "b": ["x", None], "c": [1.0, 2.0]})
    shown = tables.blank_missing(frame, {"a": lambda line: f"because {line.c:g}"})
    assert shown.a.tolist() == ["1.23", "because 2"] and shown.b.tolist() == ["x", ""]
    assert shown.c.tolist() == [1.0, 2.0] and _no_nan(shown)  # a column with nothing missing is left alone


def test_a_column_with_nothing_in_it_is_left_out_and_one_with_anything_stays():
    frame = pd.DataFrame({"status": ["ok", "ok"], "reason": ["", ""], "none": [None, math.nan], "x": ["", "why"]})
    assert list(tables.without_empty_columns(frame)) == ["status", "x"]


def test_timing_table_shows_each_speedup_in_its_band_and_why_a_variant_did_not_run():
    table = tables.timing_table(_sweep())
    line = table.iloc[0]
    assert line["reference ms [p20–p80]"] == "0.688 [0.677–0.697]"
    assert line["fast (× reference) [p20–p80]"] == "1.91× [1.85–1.97]" and line["fast verdict"] == "faster"
    assert line["fast §3"] == "passed"
    assert line["gpu_only ms [p20–p80]"] == "skipped" and line["gpu_only §3"] == "skipped"
    assert "reference (× reference) [p20–p80]" not in table and _no_nan(table)


def test_record_table_gives_each_missing_value_its_reason():
    table = tables.record_table(_sweep(), ["variant", "median_ms", "speedup", "speedup_p20", "verdict",
                                           "peak_extra_mib"]).set_index("variant")
    assert table.loc["reference", "speedup"] == "baseline" and table.loc["reference", "verdict"] == ""
    assert table.loc["fast", "speedup"] == "1.91" and table.loc["gpu_only", "median_ms"] == "skipped"
    assert set(table.peak_extra_mib) == {"no count on the CPU"} and _no_nan(table.reset_index())
    whole = _sweep().assign(err_ratio=1.0, peak_extra_mib=14.0, gpu_share=0.5)  # measured, though whole numbers
    shown = tables.record_table(whole, ["variant", "err_ratio", "peak_extra_mib"]).set_index("variant")
    assert shown.loc["fast", "err_ratio"] == "1.00" and shown.loc["fast", "peak_extra_mib"] == "14.0"


def test_flops_and_bytes_read_in_three_digits_beside_larger_ones_and_a_whole_ratio_as_measured():
    from roofline_lib import flop_crosscheck, roofline_table
    floors = tables.as_measured(roofline_table(SUITE[:3], torch.float16, Ceilings("x", "fp16", 700, 3000, "m")),
                                ["flops", "min_bytes"])
    assert floors.min_bytes.tolist() == ["6.57e+06", "8.40e+06", "2.68e+07"]  # not "6,566,912" beside "2.68e+07"
    assert floors.flops.iloc[0] == "8.22e+08" and floors.intensity.dtype == float  # other columns untouched
    cross = flop_crosscheck(SUITE[0])
    shown = tables.as_measured(cross, list(cross.columns))
    assert shown.counted_over_useful.tolist() == ["1.00", "2.00"] and shown.counted.iloc[0] == "8.05e+08"
    flags = tables.as_measured(pd.DataFrame({"n": [1, 2], "ok": [True, False], "x": [float("nan"), 3.0]}),
                               ["n", "ok", "x"])
    assert flags.n.tolist() == ["1.00", "2.00"] and flags.ok.tolist() == [True, False]  # a flag is no number
    assert flags.x.iloc[0] != flags.x.iloc[0] and flags.x.iloc[1] == "3.00"  # missing stays missing


def test_datasheet_table_says_why_a_cell_is_empty():
    table = tables.datasheet_table().set_index("device")
    assert _no_nan(table.reset_index())
    assert "compute capability 8.0" in table.loc["T4", "bf16 TFLOP/s"]
    assert table.loc["generic CPU (nominal)", "memory GB"] == "the host's"
    assert table.loc["H200 SXM", "fp16 TFLOP/s"] == "990"  # 989.5, three significant digits
    assert table.loc["T4", "fp16 TFLOP/s"] == "65.0"  # a rate, not a count: three digits though whole


def test_category_shares_leave_out_categories_that_took_no_time():
    categories = pd.DataFrame([{"row": r, "category": c, "time_us": t, "share": t / 10}
                               for r in ("1", "2") for c, t in zip(CATEGORIES, [6, 4] + [0] * 9)])
    shares = tables.category_shares(categories, ["2", "1"])
    assert list(shares.columns) == list(CATEGORIES[:2]) and list(shares.index) == ["2", "1"]


@pytest.fixture(scope="module")
def smoke_profile():
    return profile_suite([SHAPE], ["reference"], torch.float32, torch.device("cpu"), show_progress=False)


def test_row_profile_is_the_suites_own_measurement(smoke_profile):
    one = tables.row_profile(smoke_profile, SHAPE.row)
    assert one.device_type == "cpu" and one.total_us == pytest.approx(float(smoke_profile.runs.total_us.iloc[0]))
    assert one.ops.time_us.sum() == pytest.approx(smoke_profile.ops.time_us.sum())
    with pytest.raises(ValueError, match="no profile of 'other'"):
        tables.row_profile(smoke_profile, SHAPE.row, "other")


def test_the_headline_table_and_sentence_put_the_profile_beside_the_timing(smoke_profile):
    timed = pd.DataFrame([{"row": SHAPE.row, "median_ms": 2.0, "p20_ms": 1.9, "p80_ms": 2.2, "floor_ms": 0.5,
                           "fraction_of_floor": 0.25}])
    table = tables.baseline_headline(smoke_profile.categories, timed)
    assert table.loc[0, "ms [p20–p80]"] == "2.00 [1.90–2.20]" and table.loc[0, "fraction of floor"] == 0.25
    assert 0 < table.loc[0, "mask share"] < 1 and _no_nan(table)
    text = prose_profile.where_time_goes(tables.row_profile(smoke_profile, SHAPE.row), timed.iloc[0], SHAPE)
    assert text.startswith(f"On row {SHAPE.row} ({SHAPE.label}) `reference` spends ") and "of its op time in" in text
    assert "2.00 ms (p20–p80 1.90–2.20) where the roofline floor is 0.500 ms: its time is 4.00× the floor (it runs " \
           "at 0.250 of the floor's speed)." in text


def _one_call(padding: str) -> tuple[pd.DataFrame, Case]:
    case = Case(SHAPE, torch.float32, torch.device("cpu"), padding)
    case.layer(case.x, case.key_padding_mask)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True) as trace:
        case.layer(case.x, case.key_padding_mask)
    total = Profile.from_events(trace.events(), "cpu").total_us
    return tables.masked_fill_passes(trace.events(), "cpu", total), case


def test_the_trace_shows_the_padding_pass_of_a_call_without_padding_masks_nothing():
    passes, case = _one_call("none")
    B, H, N = SHAPE.batch, SHAPE.n_heads, SHAPE.seq_len
    assert passes["mask shape"].tolist() == [(N, N), (B, 1, 1, N)]
    assert passes["scores shape"].tolist() == [(B, H, N, N)] * 2 and (passes.share > 0).all()
    text = prose_profile.masked_fill_summary(passes, SHAPE, padded=False, device_type="cpu")
    assert "the causal mask" in text and "which is the key padding mask" in text
    assert "pass 2 sets no score to -inf" in text
    padded, case = _one_call("left")
    text = prose_profile.masked_fill_summary(padded, SHAPE, padded=True, device_type="cpu")
    assert "does hide some of them" in text and "sets no score" not in text


@pytest.mark.parametrize("name, source", [
    ("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "cuBLAS kernels"),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32", "cuBLAS kernels"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", "cuBLAS kernels"),
    ("void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<masked_fill>>(int)",
     "PyTorch's own CUDA kernels"),
    ("void (anonymous namespace)::cunn_SoftMaxForwardReg<Half, float, Half>(Half*)", "PyTorch's own CUDA kernels"),
    ("Memcpy DtoD (Device -> Device)", "memory copies the CUDA runtime runs"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "fused attention kernels"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_f16_64x64_32x6_tn_align8>(Params)", "CUTLASS kernels"),
    ("_add_layer_norm_fwd_kernel", "Triton kernels"),
    ("something_else", "other kernels"),
])
def test_a_kernels_author_is_read_from_its_name(name, source):
    assert prose_profile.kernel_source(name)[0] == source


def test_kernel_sources_names_the_kernels_and_says_what_nvjet_is():
    kernels = pd.DataFrame({"kernel": ["void at::native::elementwise_kernel<128, 4>(int)",
                                       "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
                                       "nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NNT",
                                       "Memcpy DtoD (Device -> Device)"],
                            "category": ["masking", "GEMM", "attention core", "masking"],
                            "time_us": [60.0, 20.0, 10.0, 10.0]})
    text = prose_profile.kernel_sources(kernels, SHAPE)
    assert text.startswith(f"On row {SHAPE.row} ({SHAPE.label}) the GPU ran 4 distinct kernels")
    assert "PyTorch's own CUDA kernels (`elementwise_kernel`), 60.0% of the GPU time" in text
    assert ("cuBLAS kernels (`nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT`, "
            "`nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NNT`), 30.0% of the GPU time: nvjet is what cuBLAS calls its "
            "own GEMM kernels on Hopper GPUs") in text
    assert text.index("PyTorch") < text.index("cuBLAS") < text.index("Memcpy")  # most time first
    assert "no GPU kernels" in prose_profile.kernel_sources(kernels.iloc[:0], SHAPE)
    wrapped = kernels.assign(kernel=["void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_f16_64x64>(Params)"] * 4)
    assert "(`cutlass_80_tensorop_f16_s16816gemm_f16_64x64`)" in prose_profile.kernel_sources(wrapped, SHAPE)


def test_op_figures_number_their_panels():
    table = pd.DataFrame({"op": ["aten::addmm", "aten::masked_fill"], "category": ["GEMM", "masking"],
                          "flops": [1e9, 0.0], "bytes": [1e7, 1e8], "time_us": [10.0, 30.0],
                          "intensity": [100.0, 0.0], "tflops": [100.0, 0.0], "gbps": [1000.0, 3000.0],
                          "share": [0.25, 0.75]})
    ceilings = Ceilings("test GPU", "fp16", 700.0, 4000.0, "test")
    for draw in (plot_op_roofline, plot_op_bandwidth):
        fig = draw({"reference": table, "best": table}, ceilings)
        assert [ax.get_title() for ax in fig.axes[:2]] == ["(a) reference", "(b) best"]
        single = draw({"reference": table}, ceilings)
        assert single.axes[0].get_title() == "reference"


def test_the_overview_does_not_give_away_what_the_profile_finds():
    """Notebook 01's profile finds the padding mask that masks nothing; notebook 00 describes the layer without
    saying so (the wording a reader would take for the answer)."""
    text = (ROOT / "notebooks" / "00_overview.py").read_text().lower()
    for giveaway in ("masks nothing", "empty mask", "all-true", "no_empty_mask", "useless", "never hides"):
        assert giveaway not in text, giveaway


def test_attention_ran_names_the_helper_kernels_by_their_base_names_never_clipped():
    from types import SimpleNamespace
    ran = ["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
           "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::Half>, "
           "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<c10::Half>, at::detail::Array<char*, 1>)",
           "Memset (Device)"]
    text = prose_profile.attention_ran(SimpleNamespace(ran=lambda category: ran, device_type="cuda"), "sdpa")
    assert "cuDNN's fused attention" in text
    assert "with the helper kernels `vectorized_elementwise_kernel`, `Memset`." in text and "…" not in text
    twice = prose_profile.attention_ran(SimpleNamespace(ran=lambda category: [ran[0], ran[1], ran[1]],
                                                        device_type="cuda"), "sdpa")
    assert twice.endswith("with the helper kernel `vectorized_elementwise_kernel`.")  # one kernel, named once
