"""Notebook 08's present/ helpers: a step's bytes by part, the sentences read from a timed table, the split table,
the figures' panels, the decode controls, and `check_own_decoder`'s verdicts (a decoder that is right passes, one
that drops the padding fails, one that cannot run here is skipped with its reason)."""
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_rgba

from roofline_lib.core.catalog import DECODERS
from roofline_lib.core.outcome import VariantUnavailable
from roofline_lib.core.shapes import Shape
from roofline_lib.measure.ceilings import Ceilings
from roofline_lib.measure.decode_roofline import decode_step_bytes
from roofline_lib.present import decode_report, exercises, widgets
from roofline_lib.present import notebook as nbl
from roofline_lib.present.exercises import check_own_decoder
from roofline_lib.present.plots_decode import plot_cache_memory, plot_prefill_and_decode, plot_step_against_floor
from roofline_lib.present.tables import blank_missing
from roofline_lib.runs import decode as decode_runs
from roofline_lib.runs.decode import time_decode
from roofline_lib.variants.decode import GrowingCacheDecoder, StaticCacheDecoder


@pytest.fixture
def smoke(monkeypatch) -> nbl.Context:
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.setenv(nbl.BUDGET_ENV, "0")
    monkeypatch.delenv(nbl.FIGURES_ENV, raising=False)
    return nbl.setup_context()


CEILINGS = Ceilings(device="a test GPU", dtype="fp16", matmul_tflops=100.0, copy_gbps=1000.0, source="made up")


def test_the_parts_of_a_step_add_up_to_its_bytes():
    parts = decode_report.step_bytes_parts(2, 4096, 1024, torch.float16)
    assert sum(parts.values()) == decode_step_bytes(2, 4096, 1024, torch.float16)
    assert parts["new_kv_written"] == 2 * 2 * 1024 * 2  # a key and a value per sequence, fp16
    assert parts["cache_read"] == 2 * 2 * 4096 * 1024 * 2
    table = decode_report.step_bytes_table(1, [128, 32768], 1024, torch.float16, CEILINGS)
    assert table.cache_read_MB.is_monotonic_increasing and table.weights_MB.nunique() == 1
    assert (table.flops_per_byte < CEILINGS.ridge / 10).all()  # far left of the ridge: memory-bound


def timed_table(times: dict[str, float | None], layers: int = 4) -> pd.DataFrame:
    """A table as `runs.decode.time_decode` returns it, with made-up times (None: could not run)."""
    return pd.DataFrame([{"row": "short", "shape": "B1 N127 d512 H8", "context": 128, "layers": layers,
                          "decoder": name, "status": "ok" if us else "skipped", "reason": "" if us else "no Triton",
                          "floor_us": 2.0, "us_per_layer": us, "fraction_of_floor": 2.0 / us if us else None,
                          "tokens_per_s": 1 / (us * layers * 1e-6) if us else None} for name, us in times.items()])


def test_the_sentences_are_read_from_the_table():
    table = timed_table({"static_cache": 40.0, "graph_static_cache": 10.0, "graph_split_kv": None})
    assert decode_report.fastest_step(table).decoder == "graph_static_cache"
    headline = decode_report.decode_headline([table])
    assert headline.startswith("At context 128 (4 layers)") and "`graph_static_cache`: 10.0 µs per layer" in headline
    assert "floor of 2.00 µs is 20.0% of that, 25,000 tokens/s" in headline  # 2 µs over 10; 1 token per 40 µs
    saving = decode_report.graph_saving(table)
    assert "120 µs saved per token" in saving and "30.0 µs per layer" in saving  # (40 − 10) × 4 layers
    lost = decode_report.graph_saving(timed_table({"static_cache": 10.0, "graph_static_cache": 12.0}))
    assert "lost per token" in lost
    assert "not timed here (no Triton)" in decode_report.graph_saving(
        timed_table({"split_kv": None, "graph_split_kv": 5.0}))
    assert decode_report.step_times(table, ["graph_static_cache", "graph_split_kv", "other"]) == (
        "At context 128: `graph_static_cache` 10.0 µs per layer, `graph_split_kv` not timed (no Triton).")
    two_skipped = timed_table({"graph_split_kv": None, "graph_static_cache": 10.0, "graph_fused_split_kv": None})
    assert decode_report.step_times(two_skipped, ["graph_split_kv", "graph_static_cache", "graph_fused_split_kv"]) == (
        "At context 128: `graph_split_kv`, `graph_fused_split_kv` not timed (no Triton), "
        "`graph_static_cache` 10.0 µs per layer.")  # one reason, said once
    with pytest.raises(ValueError, match="no decoder was timed"):
        decode_report.fastest_step(timed_table({"split_kv": None}))


def test_roofline_points_place_a_step_left_of_its_prefill(smoke):
    shape = Shape("short", 1, 31, 64, 4)
    points = decode_report.roofline_points(smoke, [(shape, timed_table({"static_cache": 40.0}))])
    prefill, step = points.iloc[0], points.iloc[1]
    assert prefill.us > 0 and step.how == "static_cache" and step.flops_per_byte < prefill.flops_per_byte
    assert "memory-bound" in decode_report.roofline_sentence(points, CEILINGS)
    fig = plot_prefill_and_decode(points, decode_report.step_bytes_table(1, [32, 256], 64, torch.float16, CEILINGS),
                                  CEILINGS)
    assert [ax.get_title() for ax in fig.axes] == ["(a) prefill and one decode step, one layer each",
                                                   "(b) what a step must move"]


def test_a_graphed_name_that_ran_eagerly_claims_no_saving():
    table = timed_table({"static_cache": 40.0, "graph_static_cache": 39.0}).assign(graph_replayed=[False, False])
    said = decode_report.graph_saving(table)
    assert "replayed no CUDA graph here" in said and "noise" in said
    assert "saved" not in said and "lost" not in said and "µs" not in said
    replayed = table.assign(graph_replayed=[False, True])
    assert "4.00 µs saved per token" in decode_report.graph_saving(replayed)  # (40 − 39) × 4 layers
    slower = timed_table({"static_cache": 40.0, "graph_static_cache": 45.0}).assign(graph_replayed=[False, True])
    lost = decode_report.graph_saving(slower)
    assert "20.0 µs lost per token (5.00 µs per layer)" in lost and "-" not in lost  # the word carries the sign


def test_time_decode_says_the_graphed_step_ran_eagerly_on_a_cpu():
    timed = time_decode(["static_cache", "graph_static_cache"], Shape("t", 1, 7, 32, 2), 1, torch.float32,
                        torch.device("cpu"), CEILINGS, budget_s=0.02)
    assert timed.graph_replayed.tolist() == [False, False]
    assert "replayed no CUDA graph here" in decode_report.graph_saving(timed)


def test_time_decode_times_labelled_builds_of_one_decoder_against_the_one_named():
    built = []
    original = decode_runs.DecodeStack

    def recording(name, refs, capacity, graphed=False, **options):
        built.append((name, graphed, options))
        return original(name, refs, capacity, graphed=graphed)

    names = ["static_cache", "graph_static_cache first", "graph_static_cache second"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode_runs, "DecodeStack", recording)
        timed = time_decode(names, Shape("t", 1, 7, 32, 2), 1, torch.float32, torch.device("cpu"), CEILINGS,
                            budget_s=0.02, options={"graph_static_cache second": {"tag": 2}}, against="static_cache")
    assert built == [("static_cache", False, {}), ("static_cache", True, {}), ("static_cache", True, {"tag": 2})]
    assert list(timed.decoder) == names and timed.status.eq("ok").all()
    assert timed.vs_speedup.isna().tolist() == [True, False, False]  # each build against the one named


def test_the_step_figure_has_a_numbered_panel_per_table_and_a_valued_dot_for_each_decoder_that_ran():
    fig = plot_step_against_floor([timed_table({"static_cache": 40.0, "graph_split_kv": None}),
                                   timed_table({"static_cache": 3000.0, "graph_split_kv": 300.0})])
    assert [ax.get_title()[:4] for ax in fig.axes] == ["(a) ", "(b) "]
    for ax, times in zip(fig.axes, ([40.0], [3000.0, 300.0])):
        assert not ax.patches  # no bars: on a log axis a bar's length says nothing
        (dots,) = ax.collections
        assert dots.get_offsets()[:, 0].tolist() == times  # a dot at each time that ran, none for the other
        assert [t.get_text() for t in ax.texts] == [f"{v:,.0f}" if v >= 100 else f"{v:.1f}" for v in times]
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()  # one axis: the same place is the same time
    assert all(ax.get_xlabel() == "µs per layer per step (log scale)" for ax in fig.axes)  # each panel labelled
    low, high = fig.axes[0].get_xlim()
    assert low < 2.0 and high > 3000.0  # the floor and every dot in view
    single = plot_step_against_floor([timed_table({"static_cache": 40.0})])
    assert single.axes[0].get_title().startswith("B1 N127")  # one panel: no letter


def test_the_t4_memory_line_takes_a_colour_no_cache_line_does_and_the_legend_covers_no_line():
    memory = decode_runs.cache_memory([("12 layers", 12, 768), ("8 layers", 8, 1024)], [1, 8, 64], [128, 2048])
    fig = plot_cache_memory(memory, capacity_gib=139.0)
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1  # outside the axes, over no line
    fig.draw_without_rendering()
    assert fig.legends[0].get_window_extent().x0 >= ax.get_window_extent().x1
    lines = {line.get_label(): line for line in ax.get_lines()}
    t4 = next(line for label, line in lines.items() if "T4" in label)
    assert t4.get_label() == "what PyTorch can use on a T4 (14.7 GiB)" and t4.get_linestyle() == "--"
    series = [line for label, line in lines.items() if ", B " in label]  # the six stack × batch lines
    assert len(series) == 6 and to_rgba(t4.get_color()) not in {to_rgba(line.get_color()) for line in series}


def test_split_table_on_a_cpu():
    table = decode_report.split_table(torch.device("cpu"), torch.float32, 16, 4096, [1, 4])
    assert table.pairs_B_x_H.tolist() == [16, 64] and table.multiprocessors.eq(1).all()
    assert table.programs_unsplit.tolist() == [16, 64]


def test_split_table_under_t4_emulation_counts_a_t4s_multiprocessors(emulated_t4):
    table = decode_report.split_table(emulated_t4, torch.float16, 16, 4096, [1, 4])
    assert table.multiprocessors.eq(40).all() and table.pairs_per_multiprocessor.tolist() == [0.4, 1.6]
    if table.n_splits.notna().all():  # the kernel can run here: its split count is a T4's
        from roofline_lib.kernels.decode_attention import split_count
        assert table.n_splits.tolist() == [split_count(16, 4096, emulated_t4), split_count(64, 4096, emulated_t4)]
        assert table.n_splits.iloc[0] == -(-4 * 40 // 16)  # 4 programs per SM of 40, over 16 pairs


def test_split_table_without_the_kernel_leaves_its_columns_blank_not_the_reason_per_row(monkeypatch):
    monkeypatch.setattr(decode_report, "unavailable_reason", lambda device, dtype: "no Triton here")
    shown = blank_missing(decode_report.split_table(torch.device("cpu"), torch.float32, 16, 4096, [1, 4]))
    assert (shown[["n_splits", "programs_split", "keys_per_range"]] == "").all().all()
    assert not shown.astype(str).apply(lambda column: column.str.contains("Triton")).any().any()


def test_decode_controls_rerun_on_change(smoke):
    calls = []
    controls = widgets.decode_controls(1, 256, "d64 H4")
    box = widgets.rerun_widget(lambda batch, context, shape: calls.append((batch, context, shape)) or
                               pd.DataFrame({"batch": [batch]}), **controls)
    controls["batch"].value = 4
    assert calls == [(1, 256, "d64 H4"), (4, 256, "d64 H4")] and len(box.children) == 2


def test_a_right_decoder_passes_and_is_timed(smoke):
    verdict = check_own_decoder(smoke, GrowingCacheDecoder, baseline="static_cache")
    assert verdict.passed and verdict.line.startswith(
        "✅ passes §3 on B3 N37 d48 H4, 6 steps (no padding and left padding; error at most ")
    assert "static_cache" in verdict.line and "smoke shapes" in verdict.line
    assert verdict.table.padding.tolist() == ["none", "left"]


def test_two_static_caches_are_timed_graphed_where_graphs_exist_and_any_other_pair_eagerly(smoke, monkeypatch):
    asked = []  # the `graphed` each timed stack was built with
    stack = exercises.DecodeStack
    monkeypatch.setattr(exercises, "DecodeStack", lambda *args, **kw: asked.append(args[3]) or stack(*args, **kw))
    static = check_own_decoder(smoke, StaticCacheDecoder, baseline="static_cache")
    assert asked == [True, True] and "eager steps (launches included)" in static.line  # a CPU: no graph to replay
    asked.clear()
    growing = check_own_decoder(smoke, StaticCacheDecoder, baseline="growing_cache")  # its cache changes shape
    assert asked == [False, False] and "eager steps" in growing.line


@pytest.mark.gpu
def test_two_static_caches_are_timed_replayed_from_one_cuda_graph_each_on_a_gpu(smoke):
    verdict = check_own_decoder(smoke, StaticCacheDecoder, baseline="static_cache")
    assert verdict.passed and "one layer's step replayed from a CUDA graph" in verdict.line, verdict.line


class DropsPadding(StaticCacheDecoder):
    """Attends to the padding too: right without padding, wrong with left padding."""

    def attend(self, q):
        visible = self.slots <= self.cache.position  # (S,): the padding not masked
        return torch.nn.functional.scaled_dot_product_attention(q, self.cache.k, self.cache.v,
                                                                attn_mask=visible[None, None, None, :])


def test_a_decoder_that_drops_the_padding_fails_with_left_padding(smoke):
    verdict = check_own_decoder(smoke, DropsPadding)
    assert not verdict.passed and verdict.line.startswith("❌ fails §3") and "left padding" in verdict.line
    assert verdict.table.set_index("padding").status.to_dict() == {"none": "ok", "left": "fail"}


def test_a_decoder_that_cannot_run_here_is_skipped_and_a_broken_one_fails(smoke):
    def unavailable(ref, capacity):
        raise VariantUnavailable("needs a CUDA GPU")

    skipped = check_own_decoder(smoke, unavailable)
    assert not skipped.passed and skipped.line == "⏭ not checked by §3 here: needs a CUDA GPU"

    class Broken(StaticCacheDecoder):
        def attend(self, q):
            raise RuntimeError("shapes do not match")

    broken = check_own_decoder(smoke, Broken)
    assert broken.line.startswith("❌ fails §3") and "RuntimeError: shapes do not match" in broken.line


def test_the_exercise_shape_is_the_smoke_one_in_smoke_mode(smoke):
    big = Shape("B1 N4095 d1024 H16", 1, 4095, 1024, 16)
    assert "B3 N37 d48 H4" in check_own_decoder(smoke, GrowingCacheDecoder, shape=big).line
    assert {"growing_cache", "static_cache", "split_kv"} <= set(DECODERS)  # the baselines the exercises name


def test_the_floors_legend_covers_no_bars_value_and_numbers_have_three_digits():
    fig = plot_step_against_floor([timed_table({"growing_cache": 226.0, "static_cache": 221.0}).assign(floor_us=4.844),
                                   timed_table({"static_cache": 30.0})])
    fig.canvas.draw()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent()
        assert legend.x0 >= ax.bbox.x1  # beside the panel, not on its bars
        assert not any(legend.overlaps(t.get_window_extent()) for t in ax.texts)
    assert fig.axes[0].get_legend().get_texts()[0].get_text().startswith("floor: 4.84 µs")
    points = pd.DataFrame({"call": ["prefill", "one step"], "flops_per_byte": [100.0, 1.0],
                           "achieved_tflops": [10.0, 0.5]})
    parts = decode_report.step_bytes_table(1, [32], 64, torch.float16, CEILINGS)
    roofline = plot_prefill_and_decode(points, parts, Ceilings("gpu", "fp16", 100.0, 44.95, "test")).axes[0]
    assert "measured roof: 100 TFLOP/s, 45.0 GB/s" in roofline.get_legend_handles_labels()[1]
