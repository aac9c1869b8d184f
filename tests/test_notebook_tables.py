"""The roofline_lib.present.notebook functions behind notebooks 01 and 04–06, and their plots, on the smoke suite and
small hand-made tables."""
import matplotlib

matplotlib.use("Agg")

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, SUITE, build_variant
from roofline_lib.core.decision import Decision, decide
from roofline_lib.core.numbers import as_shown
from roofline_lib.measure.ceilings import Ceilings
from roofline_lib.measure.roofline import add_roofline
from roofline_lib.present import formatting, prose, prose_profile, tables, widgets
from roofline_lib.present import notebook as nbl
from roofline_lib.present.plots import plot_bandwidth
from roofline_lib.present.plots_longctx import plot_longctx
from roofline_lib.runs import longctx
from roofline_lib.runs.longctx import COLUMNS, long_shape

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def smoke(monkeypatch) -> nbl.Context:
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.delenv(nbl.FIGURES_ENV, raising=False)
    return nbl.setup_context()


def test_check_table_in_float64_shows_chunking_is_exact(smoke):
    def chunked(ref):
        return build_variant("chunked", ref, chunk_size=5)  # 5 does not divide 37

    exact = nbl.check_table(smoke, {"chunked": chunked}, paddings=("left",), rows="s2", dtype="fp64")
    rounded = nbl.check_table(smoke, {"chunked": chunked}, paddings=("left",), rows="s2")
    assert exact.passed.all() and exact.err.max() < 1e-12 < rounded.err.min()


def test_profile_and_head_to_head_follow_the_context(smoke):
    prof = nbl.profile(smoke, ["reference", "reference"], rows="s1")  # duplicates profiled once
    assert prof.runs.variant.tolist() == ["reference"] and prof.runs.status.eq("ok").all()
    assert prof.categories.row.eq("s1").all() and prof.categories.dtype.eq("fp32").all()
    step = nbl.head_to_head(smoke, "no_empty_mask", "sdpa_fused_qkv", rows="s1", dtype="bf16")
    assert step.row.tolist() == ["s1"] and step.dtype.eq("bf16").all() and step.passed.all()


def decision(keep: bool) -> Decision:
    return Decision("triton_ln", "no_empty_mask", keep, 1.1, 1.05, 1.2, 3, "why")


def test_decision_markdown_reads_either_way():
    assert prose.decision_markdown(decision(True)) == "→ **keep**: why. The ladder goes on from **triton_ln**."
    assert prose.decision_markdown(decision(False)) == "→ **revert**: why. The ladder goes on from **no_empty_mask**."
    nothing = decide(pd.DataFrame(), candidate="triton_ln", baseline="no_empty_mask")
    assert prose.decision_markdown(nothing) == ("→ **nothing decided**: no row of **triton_ln** was timed against "
                                                "**no_empty_mask**, so the ladder goes on from **no_empty_mask**.")


def mask_shares(after_ms: list[float]) -> pd.DataFrame:
    before = pd.DataFrame({"row": ["1", "2"], "variant": "reference", "mask_ms": [1.0, 4.0], "total_ms": 10.0})
    after = pd.DataFrame({"row": ["1", "2"], "variant": "sdpa_fused_qkv", "mask_ms": after_ms, "total_ms": 5.0})
    table = pd.concat([before, after], ignore_index=True)
    return table.assign(mask_share=table.mask_ms / table.total_ms)


def test_mask_share_summary():
    text = prose_profile.mask_share_summary(mask_shares([0.5, 1.0]))
    assert "**reference** spends 10.0% (row 1) to 40.0% (row 2)" in text
    assert "**sdpa_fused_qkv** spends 10.0% (row 1) to 20.0% (row 2)" in text
    assert "on 2 of 2 rows, 0.250× to 0.500× the time reference spends on them" in text
    assert "no measurable time" in prose_profile.mask_share_summary(mask_shares([0.0, 0.0]))
    with pytest.raises(ValueError, match="no profiled rows for 'other'"):
        prose_profile.mask_share_summary(mask_shares([0.5, 1.0]), after="other")


def test_ceilings_table():
    measured = Ceilings("GPU", "fp16", 500.0, 4000.0, "measured")
    assert list(tables.ceilings_table(measured).columns) == ["measured"]
    table = tables.ceilings_table(measured, Ceilings("GPU", "fp16", 1000.0, 5000.0, "datasheet"))
    assert table["measured / datasheet"].tolist() == pytest.approx([0.5, 0.8, 0.625])


def test_feasibility_table(cpu):
    huge = long_shape(10**8)
    table = tables.feasibility_table([SMOKE_SUITE[0], huge], torch.float16, cpu).set_index("row")
    assert table.fits.tolist() == [True, False]
    assert table.loc["s1", "scores GiB"] == 1 * 2 * 16**2 * 2 / 2**30


def test_longctx_needs_bytes():
    shape = long_shape(1000, d_model=64, n_heads=4)
    weights, elements = 12 * 64**2, 1000 * 64
    truth = longctx.TRUTH_BLOCK_BYTES
    assert longctx.needs_bytes(shape, torch.float16) == 2 * weights + 2 * elements + truth  # the truth's blocks
    million = long_shape(1_000_000)  # the chunked layer's cache and output dominate: 3·N·C plus one chunk
    weights, elements = 12 * 1024**2, 1_000_000 * 1024
    assert longctx.needs_bytes(million, torch.float16, chunk_size=16384) == \
        2 * weights + 2 * elements + 2 * (3 * elements + 13 * 16384 * 1024)
    assert longctx.needs_bytes(million, torch.float16) / 2**30 < 15  # fits a T4: the point of chunking


def test_parse_sizes():
    assert widgets.parse_sizes(" 4096, 16384 ,") == [4096, 16384]
    for bad in ("", "4096,x", "0", "-5", "1.5"):
        with pytest.raises(ValueError, match="positive integers"):
            widgets.parse_sizes(bad)


def test_longctx_controls():
    controls = widgets.longctx_controls(300, (64, 256))
    assert controls["seq_len"].value == 300 and controls["chunk_sizes"].value == "64,256"
    assert not controls["seq_len"].continuous_update and not controls["chunk_sizes"].continuous_update


def sweep_results() -> pd.DataFrame:
    """Two smoke rows × three variants; "broken" is fastest on s2 but failed §3."""
    records = []
    for shape in SMOKE_SUITE[:2]:
        for name, ms, passed in (("reference", 1.0, True), ("fast", 0.5, True), ("broken", 0.25, False)):
            if shape.row == "s1" and name == "broken":
                ms = 2.0
            records.append({"row": shape.row, "shape": shape.label, "batch": shape.batch, "seq_len": shape.seq_len,
                            "d_model": shape.d_model, "n_heads": shape.n_heads, "variant": name, "dtype": "fp16",
                            "median_ms": ms * (1 if shape.row == "s1" else 2), "passed": passed,
                            "speedup": math.nan if name == "reference" else 1.0 / ms,
                            "speedup_p20": 0.9 / ms, "speedup_p80": 1.1 / ms, "verdict": "faster"})
    return pd.DataFrame(records)


def test_ladder_table_and_summary():
    results = add_roofline(sweep_results(), Ceilings("GPU", "fp16", 100.0, 1000.0, "test"))
    best = tables.ladder_table(results)
    assert best.fastest_passing.tolist() == ["fast", "fast"] and "fraction_of_floor" in best
    text = prose.ladder_summary(results)
    assert text.startswith("Of the variants measured here, the fastest that passed §3: **fast** on rows s1, s2.")
    assert "Its speedup over the reference: 2.00× (row s1)." in text  # both rows 2×: one row named
    assert "fraction of the roofline floor: from" in text and "measured low" not in text
    low = add_roofline(sweep_results(), Ceilings("GPU", "fp16", 1e-6, 1e-3, "a shared GPU"))
    assert "so above it (rows s1, s2) the ceiling that bounds the row was measured low" in prose.ladder_summary(low)
    assert "fraction_of_floor" not in tables.ladder_table(sweep_results())
    with pytest.raises(ValueError, match="no variant passed"):
        tables.ladder_table(sweep_results().assign(passed=False))


def test_ladder_summary_says_where_fastest_lost_beyond_noise():
    results = sweep_results().replace({"variant": {"fast": "no_empty_mask"}})
    fastest = results[results.variant == "no_empty_mask"].assign(
        variant="fastest", median_ms=[0.9, 1.8], speedup=[1.1, 1.1], speedup_p20=[1.0, 1.6],
        speedup_p80=[1.2, 2.4], chosen=["graph_no_empty_mask", "no_empty_mask"])
    text = prose.ladder_summary(pd.concat([results, fastest], ignore_index=True))
    assert ("On row s1 `fastest` (it ran graph_no_empty_mask) took 900 µs (1.10× [1.00–1.20]) against "
            "`no_empty_mask`'s 500 µs (2.00× [1.80–2.20]): slower beyond noise; "
            "`fastest` chose on its first call") in text
    same = prose.ladder_summary(pd.concat([results, fastest.assign(chosen="no_empty_mask")], ignore_index=True))
    assert "it ran `no_empty_mask` itself, so two measurements of one layer disagree" in same
    recorded = prose.ladder_summary(pd.concat([results, fastest.drop(columns="chosen")], ignore_index=True))
    assert "On row s1 `fastest` took 900 µs" in recorded  # a sweep recorded before the column: no choice named
    assert "these results do not record which candidate it ran" in recorded
    assert "On row s2 `fastest`" not in text  # its band overlaps no_empty_mask's: within noise, and said so
    assert ("On row s2 (`no_empty_mask`) the lower median is within noise of `fastest`'s: their p20–p80 bands "
            "overlap") in text and "row s1 (`" not in text


def longctx_results(peak: float = math.nan, cap: float | None = None) -> pd.DataFrame:
    base = {"seq_len": 100_000, "batch": 1, "d_model": 1024, "n_heads": 16}
    chunked = [{"attention": "auto", "resolved_attention": "split_cudnn", "chunk_size": c, "median_ms": ms,
                "p20_ms": 0.9 * ms, "p80_ms": 1.1 * ms, "peak_gib": peak, "err_ratio": r, "status": "ok"}
               for c, ms, r in ((4096, 60.0, 1.01), (16384, 50.0, 1.02))]
    records = [{"variant": "no_empty_mask", "status": "ok", "median_ms": 45.0, "peak_gib": 2 * peak},
               {"variant": "no_empty_mask", "status": "oom", "memory_cap_gib": cap,
                "reason": "out of memory: CUDA out of memory. Tried to allocate 7.63 GiB. "
                          "GPU 0 has a total capacity of 139.80 GiB of which 125.67 GiB is free"},
               *({"variant": "chunked", "memory_cap_gib": cap, **c} for c in chunked),
               {"variant": "chunked", "attention": "mask", "chunk_size": 4096, "status": "skipped", "reason": "x"}]
    records = [{"kind": "measure", **base, **r} for r in records]
    records.append({"kind": "comparison", **base, "variant": "chunked", "attention": "auto", "chunk_size": 16384,
                    "status": "ok", "median_ms": 51.0, "full_ms": 46.0, "ratio_vs_full": 1.11, "ratio_p20": 1.1,
                    "ratio_p80": 1.12, "verdict": "slower"})
    frame = pd.DataFrame(records).reindex(columns=COLUMNS)
    return frame.assign(device="test GPU", dtype="fp16")


def test_longctx_recap_names_the_fastest_chunked_run_and_its_ratio_to_the_full_layer():
    text = prose.longctx_recap(longctx_results(peak=1.24, cap=14.9))
    assert text == ("100,000 tokens, chunks of 16,384: 51.0 ms per call at a peak of 1.24 GiB, §3 passed in 2 of 3 "
                    "configurations; 1.11× [1.10–1.12] the full layer's time (46.0 ms), the two timed in turn")
    # the time beside the ratio is the interleaved calls' (06's headline's), not the configuration's own run (50.0)
    alone = longctx_results(peak=1.24)
    alone = alone[alone.kind != "comparison"]
    assert prose.longctx_recap(alone).startswith("100,000 tokens, chunks of 16,384: 50.0 ms per call")
    failed = longctx_results().assign(status="skipped")
    assert prose.longctx_recap(failed) == "100,000 tokens: no chunked configuration ran and passed §3"


def test_longctx_summary():
    text = prose.longctx_summary(longctx_results(peak=1.0, cap=14.9))
    assert text.startswith("At **100,000 tokens** (test GPU, fp16): the full-sequence layer (no_empty_mask, "
                           "uncapped) takes 45.0 ms, peak 2.00 GiB.")  # three digits, as the headline
    assert "under the 14.9 GiB cap) did not fit: out of memory: one allocation of 7.63 GiB failed." in text
    assert "139.80" not in text  # the allocator's account of the whole card, not of the cap
    assert "2 of 3 chunked configurations ran and passed §3 (1 skipped)." in text
    assert ("chunks of 16,384 tokens, 50.0 ms under the 14.9 GiB cap, peak 1.00 GiB; the 2 timed configurations' error "
            "ratio at most 1.02") in text
    assert "chunked takes 1.11× [1.10–1.12] the full-sequence layer's time, slower than it." in text
    assert text.endswith("the medians above come from separate runs, the chunked ones under the cap.")
    repeat = longctx_results(peak=1.0, cap=14.9)
    repeat.loc[repeat.status.eq("skipped"), "reason"] = "the same configuration as auto → mask"
    assert "2 of 2 chunked configurations ran and passed §3; 1 more was auto's choice, not run again." in (
        prose.longctx_summary(repeat))  # the count 06's headline gives too
    emulated = longctx_results(peak=1.0, cap=14.9)
    emulated.loc[emulated.kind == "comparison", "memory_cap_gib"] = 15.0  # an emulated card's own memory
    assert "Interleaved, under the 15.0 GiB cap: chunked takes 1.11×" in prose.longctx_summary(emulated)


@pytest.mark.parametrize("draw", [
    lambda: plot_longctx(longctx_results()),  # CPU: no memory counts
    lambda: plot_longctx(longctx_results(peak=1.0, cap=14.9)),
    lambda: plot_bandwidth(pd.DataFrame({"n_rows": [128, 4096], "d_model": [512, 1024], "torch_gbps": [100.0, 900.0],
                                         "triton_gbps": [80.0, 1200.0]}), 3000.0),
    lambda: plot_bandwidth(pd.DataFrame({"n_rows": [7], "d_model": [131], "torch_gbps": [1.0],
                                         "triton_gbps": [0.01]}), float("nan")),
], ids=["longctx-cpu", "longctx-gpu", "bandwidth", "bandwidth-no-copy"])
def test_plot_renders_png(draw, tmp_path):
    path = tmp_path / "plot.png"
    draw().savefig(path, dpi=60)
    assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_bandwidth_plot_orders_inputs_by_size():
    fig = plot_bandwidth(pd.DataFrame({"n_rows": [4096, 7], "d_model": [1024, 131], "torch_gbps": [900.0, 1.0],
                                       "triton_gbps": [1200.0, 0.5]}), 3000.0)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["7×131", "4,096×1,024"]


def test_show_source_of_a_triton_kernel():
    pytest.importorskip("triton")
    from roofline_lib.kernels import add_layer_norm
    text = nbl.show_source(add_layer_norm._add_layer_norm_fwd_kernel).data
    assert "@triton.jit" in text and "def _add_layer_norm_fwd_kernel(" in text
    assert "def feasibility_table(" in nbl.show_source(tables.feasibility_table).data


def test_suite_row_14_is_the_long_context_row():
    """Notebook 06 takes SUITE[-1] as row 14: the 100,000-token row."""
    assert SUITE[-1].row == "14" and SUITE[-1].seq_len == 100_000


def test_recorded_results_ship_with_the_package_as_exact_copies():
    from roofline_lib.core.recorded import DATA, recorded_results
    shipped = sorted(DATA.rglob("*.csv"))
    assert shipped
    for copy in shipped:
        original = ROOT / "results" / copy.relative_to(DATA)
        assert original.read_bytes() == copy.read_bytes(), f"{copy} differs from {original}"
    table = recorded_results("results/" + str(shipped[0].relative_to(DATA)))
    assert len(table) and table["row"].map(type).eq(str).all()  # rows are labels, "1".."14"
    with pytest.raises(ValueError, match="not shipped"):
        recorded_results("no_such_file.csv")


def test_check_summary_counts_and_lists_failures():
    checks = pd.DataFrame({"row": ["1", "2", "1"], "shape": ["a", "b", "a"], "padding": "left",
                           "variant": ["x", "x", "y"], "status": ["ok", "fail", "skipped"],
                           "err_ratio": [1.04, 2.5, float("nan")], "passed": [True, False, None],
                           "reason": ["", "error 2.5 exceeds", "needs a GPU"]})
    text = prose.check_summary(checks)
    assert text.splitlines()[0] == "**x**: 1 of 2 cases pass, worst error ratio 2.50."
    assert prose.check_summary(checks.assign(err_ratio=1.0)).startswith(
        "**x**: 1 of 2 cases pass, worst error ratio 1.00.")
    assert "**y**: 0 of 1 cases pass." in text
    assert "- row 2 (b), padding left, x: fail, error ratio 2.50: error 2.5 exceeds" in text
    assert "y: skipped: needs a GPU" in text


@pytest.mark.parametrize("value, shown", [(16384.0, "16,384"), (1063.4, "1,060"), (158_713.2, "159,000"),
                                          (57_982_058_496.0, "5.80e+10"), (0.04712, "0.0471"), (1.35, "1.35"),
                                          (12.0, "12"), (512.0, "512"),  # counts in int columns shown as floats
                                          (2.7e-7, "2.70e-07"), (0.0, "0"), (float("nan"), "")])
def test_numbers_are_shown_as_a_reader_wants_them(value, shown):
    assert formatting.format_number(value) == shown


@pytest.mark.parametrize("us, text", [(0, "0 µs"), (7.391, "7.39 µs"), (108.2, "108 µs"), (999.7, "1.00 ms"),
                                      (2934, "2.93 ms"), (4.892e6, "4,890 ms")])
def test_microseconds_read_with_three_digits_and_no_exponent(us, text):
    from roofline_lib.present.formatting import format_us
    assert format_us(us) == text


def _attention_profile(kernel: str, us: float):
    from roofline_lib.measure.profile_events import Profile
    from roofline_lib.measure.profile_rules import CATEGORIES
    kernels = pd.DataFrame({"kernel": [kernel, "gemm"], "category": ["attention core", "GEMM"], "time_us": [us, 5.0]})
    categories = pd.DataFrame({"category": CATEGORIES,
                               "time_us": [{"attention core": us, "GEMM": 5.0}.get(c, 0.0) for c in CATEGORIES]})
    return Profile("cuda", 1, 100.0, kernels.rename(columns={"kernel": "op"}), kernels, categories)


def test_attention_change_says_whether_the_kernel_changed_and_what_it_costs():
    same = prose_profile.attention_change(_attention_profile("cudnn_sdpa", 1639.0),
                                          _attention_profile("cudnn_sdpa", 485.0), ("sdpa_fused_qkv", "no_empty_mask"))
    assert same == ("The same attention kernel ran for both: attention takes 1.64 ms per call in `sdpa_fused_qkv`, "
                    "485 µs in `no_empty_mask`.")
    changed = prose_profile.attention_change(_attention_profile("fmha_mask", 90.0),
                                             _attention_profile("flash_fwd", 40.0), ("a", "b"))
    assert changed.startswith("The attention kernel changed from `fmha_mask` to `flash_fwd`")


def test_a_kernel_check_is_one_line_per_dtype_and_its_failures_in_full():
    from roofline_lib.present.prose import kernel_check_summary
    checks = pd.DataFrame({"dtype": ["fp16", "fp16", "bf16"], "n_rows": [128, 7, 128], "d_model": [512, 131, 512],
                           "s_exact": [True, True, False], "y_err": [2e-4, 3e-4, 1e-2],
                           "torch_y_err": [2e-4, 2e-4, 1e-3], "passed": [True, True, False]})
    lines = kernel_check_summary(checks).splitlines()
    assert lines[0] == "**fp16**: 2 of 2 inputs pass; `s` exact on 2; y's error at most 1.50× torch's own (2× allowed)."
    assert lines[1].startswith("**bf16**: 0 of 1 inputs pass; `s` exact on 0")
    assert lines[2] == "- bf16 128 × 512: `s` exact False, y error 0.0100 against torch's 0.00100"


def test_lowest_per_row_names_the_winner_of_each_row_among_the_named_variants():
    table = pd.DataFrame({"row": ["1", "1", "1", "2", "2", "3"],
                          "variant": ["a", "b", "fastest", "a", "b", "a"],
                          "gpu_us": [5.0, 4.0, 1.0, 3.0, 6.0, float("nan")]})
    assert prose.lowest_per_row(table, "gpu_us", ["a", "b"]) == "row 1 `b`, row 2 `a`"  # fastest not asked; 3 has none


def test_reasons_by_variant_names_each_variant_once_and_each_reason_once():
    table = pd.DataFrame({"variant": ["triton_ln", "residual_addmm", "fastest", "no_empty_mask", "triton_ln"],
                          "reason": ["triton_ln: needs a GPU", "residual_addmm: needs a GPU", "graphs its own call.",
                                     "", "triton_ln: needs a GPU"]})
    assert prose.reasons_by_variant(table) == ("`triton_ln`, `residual_addmm`: needs a GPU. "
                                              "`fastest`: graphs its own call.")
    assert prose.own_reason("chunked", float("nan")) == ""
    rows = pd.DataFrame({"row": ["1", "2", "3", "1"], "variant": ["fastest", "fastest", "fastest", "triton_ln"],
                         "reason": ["graphs its own call", "", "graphs its own call", "needs a GPU"]})
    assert prose.reasons_by_variant(rows) == ("`fastest` (rows 1, 3): graphs its own call. `triton_ln`: needs a GPU.")


def test_error_ratio_sides_names_who_adds_and_who_saves_rounding():
    checks = pd.DataFrame({"variant": ["reference", "a", "a", "b", "b", "c", "skipped"],
                           "err_ratio": [1.0, 0.9, 1.35, 0.96, 0.97, 1.003, float("nan")]})
    assert prose.error_ratio_sides(checks) == ("Above 1 on some row here: `a` (up to 1.35). Below 1 on every row: `b`. "
                                               "At 1.00 at most (the reference's rounding, give or take 0.005): `c`.")
    assert prose.error_ratio_sides(checks[checks.variant.isin(["reference", "b"])]) == (
        "No ratio above 1 here. Below 1 on every row: `b`.")


def test_kernel_names_for_a_table_keep_the_name_and_what_tells_instances_apart():
    from roofline_lib.measure.profile_rules import KERNEL_NAME_CHARS, short_kernel_name
    layer_norm = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>"
                  "(int, float, c10::Half const*)")
    assert short_kernel_name(layer_norm) == "vectorized_layer_norm_kernel<Half, float, false>"
    nvjet = "nvjet_sm90_hsh_64x32_64x16_2x4_h_bz_bias_TNT"
    assert short_kernel_name(nvjet) == nvjet
    copies = [f"void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
              f"direct_copy_kernel_cuda(at::TensorIteratorBase&)::{{lambda()#3}}::operator()() const::"
              f"{{lambda({t})#1}}> >(int, x)" for t in ("float", "c10::Half")]
    short = [short_kernel_name(n) for n in copies]
    assert short[0] != short[1] and all(len(n) <= KERNEL_NAME_CHARS and "…" in n for n in short)
    assert all(n.startswith("elementwise_kernel<128, 2,") for n in short)


def test_times_keep_three_digits_and_a_missing_one_reads_as_a_dash():
    assert [formatting.three_digits(v) for v in (0.55, 1.0, 23.5, 4855.2, 158_713.2)] == ["0.550", "1.00", "23.5",
                                                                                "4,860", "159,000"]
    assert formatting.three_digits(math.nan) == "—"


def test_a_value_as_shown_is_the_number_its_three_digits_read():
    values = (999.7, 0.012345, 4855.2, -23.46)
    assert [as_shown(v) for v in values] == [1000.0, 0.0123, 4860.0, -23.5]
    assert [formatting.three_digits(as_shown(v)) for v in values] == [formatting.three_digits(v) for v in values]




def test_op_roofline_summary_places_each_op_against_its_ceiling():
    points = pd.DataFrame({"op": ["aten::masked_fill", "aten::bmm", "aten::addmm", "aten::gelu"],
                           "flops": [0, 4e11, 2e11, 0], "time_us": [1200.0, 180.0, 34.0, 6.0],
                           "intensity": [0.0, 60.0, 500.0, 0.0], "tflops": [0.0, 230.0, 670.0, 0.0],
                           "gbps": [1000.0, 3800.0, 1300.0, 3000.0], "share": [0.84, 0.13, 0.02, 0.004]})
    text = prose_profile.op_roofline_summary(points, Ceilings("GPU", "fp16", 680.0, 4000.0, "test"), "reference")
    assert "(680 TFLOP/s, 4,000 GB/s; ridge 170 FLOPs per byte)" in text
    assert "`masked_fill` 1,000 GB/s with no arithmetic, 0.250 of a copy's" in text
    assert "`bmm` 230 TFLOP/s at 60.0 FLOPs per byte, left of the ridge: 0.958 of the bandwidth roof there" in text
    assert "`addmm` 670 TFLOP/s at 500 FLOPs per byte, right of the ridge: 0.985 of the matmul ceiling" in text
    assert "gelu" not in text and "measured low" not in text  # under 2 % of the time, no FLOPs: left out
    slow_copy = prose_profile.op_roofline_summary(points, Ceilings("GPU", "fp16", 680.0, 2000.0, "shared"), "reference")
    assert "`bmm` past the roof by more than a tenth: a ceiling was measured low" in slow_copy  # under the slope
    low = prose_profile.op_roofline_summary(points, Ceilings("GPU", "fp16", 170.0, 1000.0, "shared"), "reference")
    assert "`masked_fill`, `bmm`, `addmm` past the roof" not in low and "`bmm`, `addmm` past the roof" in low


def test_why_not_run_says_what_stopped_a_line_in_a_few_words():
    assert tables.why_not_run("ok", "anything") == "" and tables.why_not_run(float("nan"), None) == ""
    assert tables.why_not_run("oom", "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ...") == (
        "out of memory (one allocation of 2.00 GiB failed)")
    assert tables.why_not_run("skipped", "needs a GPU\nmore") == "not run: needs a GPU"
    assert tables.why_not_run("fail", "") == "failed §3" and len(tables.why_not_run("error", "x" * 200)) <= 90


def test_a_facts_table_is_one_line_with_numbers_as_tables_write_them():
    import numpy as np

    from roofline_lib.present.tables import facts_table
    table = facts_table({"last": np.int64(99999), "err": 8.26e-08, "gap": 0.0, "passed": True, "backend": "gloo"},
                        "a run")
    assert list(table.index) == ["a run"]
    assert table.to_dict("records") == [{"last": "99,999", "err": "8.26e-08", "gap": "0", "passed": True,
                                         "backend": "gloo"}]
