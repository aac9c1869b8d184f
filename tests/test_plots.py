"""Every plot renders headless (Agg) to a non-empty PNG from small hand-made tables (and one recorded run)."""
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Text

from roofline_lib import SMOKE_SUITE
from roofline_lib.measure.ceilings import Ceilings, datasheet_ceilings
from roofline_lib.measure.profile_rules import CATEGORIES
from roofline_lib.measure.roofline import add_roofline
from roofline_lib.present.formatting import format_number, three_digits
from roofline_lib.present.plots import crowded_rows, plot_mask_share, plot_roofline, plot_speedups, points_in_view
from roofline_lib.present.plots_profile import MIN_BAR, plot_category_breakdown, plot_timeline

VARIANTS = ["reference", "sdpa_fused_qkv", "no_empty_mask"]
CEILINGS = Ceilings("test GPU", "fp16", 700.0, 4000.0, "test")
H200 = Ceilings("NVIDIA H200", "fp16", 758.0, 4210.0, "measured")  # as notebook 01 measured it
ROOT = Path(__file__).resolve().parents[1]


def _results() -> pd.DataFrame:
    records = []
    for i, s in enumerate(SMOKE_SUITE):
        for j, name in enumerate(VARIANTS):
            records.append({"row": s.row, "shape": s.label, "batch": s.batch, "seq_len": s.seq_len,
                            "d_model": s.d_model, "n_heads": s.n_heads, "variant": name, "dtype": "fp16",
                            "device": "test GPU", "median_ms": 0.1 * (i + 1) / (j + 1),
                            "speedup": float(j + 1), "speedup_p20": j + 0.9, "speedup_p80": j + 1.1})
    return pd.DataFrame(records)


def _categories() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"row": s.row, "variant": v, "category": c, "time_us": float(rng.uniform(0, 50))}
                         for s in SMOKE_SUITE for v in VARIANTS for c in CATEGORIES])


def _mask_shares() -> pd.DataFrame:
    return pd.DataFrame([{"row": s.row, "variant": v, "mask_share": share}
                         for s in SMOKE_SUITE for v, share in zip(VARIANTS, (0.3, 0.1, 0.0))])


@pytest.mark.parametrize("draw", [
    lambda: plot_roofline(add_roofline(_results(), CEILINGS), CEILINGS),
    lambda: plot_roofline(add_roofline(_results(), CEILINGS), CEILINGS,
                          Ceilings("test GPU", "fp16", 990.0, 4800.0, "datasheet")),
    lambda: plot_category_breakdown(_categories()),
    lambda: plot_mask_share(_mask_shares()),
    lambda: plot_speedups(_results()),
], ids=["roofline", "roofline+datasheet", "breakdown", "mask_share", "speedups"])
def test_plot_renders_png(draw, tmp_path):
    fig = draw()
    assert isinstance(fig, Figure)
    path = tmp_path / "plot.png"
    fig.savefig(path, dpi=60)
    assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("draw", [
    lambda: plot_speedups(_results().query("variant == 'reference'")),  # nothing but the reference: no bar
    lambda: plot_category_breakdown(_categories().assign(time_us=0.0)),  # no category took time
    lambda: plot_timeline(pd.DataFrame(columns=["start_us", "end_us", "duration_us", "category"])),  # no kernel
], ids=["speedups", "breakdown", "timeline"])
def test_a_figure_with_nothing_labelled_draws_no_legend_and_warns_nothing(draw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found to put in legend" included
        fig = draw()
        fig.draw_without_rendering()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert all(legend.legend_handles for legend in legends)  # none empty (the breakdown still names its variants)
    assert "category" not in [legend.get_title().get_text() for legend in legends]
    assert plot_speedups(_results()).legends  # where there is something to name, its legend is drawn


def test_a_roofline_of_two_variants_joins_each_row_from_the_first_to_the_last():
    first, last = VARIANTS[0], VARIANTS[-1]
    fig = plot_roofline(add_roofline(_results(), CEILINGS), CEILINGS, variants=[first, last])
    ax = fig.axes[0]
    assert sum(len(c.get_offsets()) for c in ax.collections) == 2 * len(SMOKE_SUITE)
    joins = [line for line in ax.lines if line.get_color() == "lightgray"]
    assert len(joins) == len(SMOKE_SUITE) and all(len(line.get_xdata()) == 2 for line in joins)


def test_the_datasheet_roof_of_an_emulated_t4_names_the_gpu_it_belongs_to():
    """Under T4 emulation the speeds are the GPU's, and so is the datasheet beside them: the legend says whose."""
    name = "T4 (emulated on NVIDIA H100 80GB HBM3)"
    sheet = datasheet_ceilings(name, torch.float16)
    data = add_roofline(_results(), CEILINGS)
    labels = [line.get_label() for line in plot_roofline(data, CEILINGS, sheet).axes[0].lines]
    assert any(label.startswith("datasheet of NVIDIA H100 80GB HBM3: ") for label in labels)
    own = datasheet_ceilings("NVIDIA H100 80GB HBM3", torch.float16)
    labels = [line.get_label() for line in plot_roofline(data, CEILINGS, own).axes[0].lines]
    assert any(label.startswith("datasheet: ") for label in labels)


def test_roofline_plot_marks_every_variant_and_row():
    fig = plot_roofline(add_roofline(_results(), CEILINGS), CEILINGS)
    ax = fig.axes[0]
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(SMOKE_SUITE) * len(VARIANTS)
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_each_row_label_sits_beside_its_own_rows_highest_point():
    data = add_roofline(_results(), CEILINGS)
    ax = plot_roofline(data, CEILINGS).axes[0]
    labels = {t.get_text(): t for t in ax.texts if t.get_text().startswith("s")}
    assert set(labels) == {s.row for s in SMOKE_SUITE}
    for row, text in labels.items():
        sub = data[data.row == row]
        assert text.xy == (sub.intensity.iloc[0], sub.achieved_tflops.max())


def test_on_a_crowded_recorded_roofline_each_label_is_nearest_its_own_row():
    recorded = pd.read_csv(ROOT / "results" / "run_nvidia-h200_fp16_2026-12-01.csv", dtype={"row": str})
    data = recorded[recorded.variant.isin(["reference", "fastest"]) & recorded.achieved_tflops.notna()]
    fig = plot_roofline(data, CEILINGS, variants=["reference", "fastest"])
    fig.canvas.draw()
    for ax in fig.axes:  # the whole roofline, then the crowded rows closer
        points = ax.transData.transform(np.column_stack([data.intensity, data.achieved_tflops]))
        for text in ax.texts:
            if text.get_text() not in set(data.row):
                continue  # the ridge's label
            box = text.get_window_extent()
            centre = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
            nearest = data.row.to_numpy()[np.hypot(*(points - centre).T).argmin()]
            assert nearest == text.get_text() or text.arrow_patch is not None, (  # or a line joins it to its point
                f"label {text.get_text()} sits nearest row {nearest}'s point, with no line to its own")


@pytest.mark.parametrize("variants", [["reference"], ["reference", "fastest"]], ids=["reference", "climb"])
def test_every_point_is_numbered_once_in_a_or_in_the_closer_panel_that_names_its_rows(variants):
    recorded = pd.read_csv(ROOT / "results" / "run_nvidia-h200_fp16_2026-12-01.csv", dtype={"row": str})
    data = recorded[recorded.variant.isin(variants) & recorded.achieved_tflops.notna()]
    crowded = crowded_rows(data)
    assert len(crowded) >= 3 and "1" not in crowded and "14" not in crowded  # the H200's cluster
    fig = plot_roofline(data, CEILINGS, variants=variants if len(variants) > 1 else None)
    fig.canvas.draw()
    whole, closer = fig.axes
    boxed = points_in_view(closer, data)
    assert len(boxed) >= 3
    for ax, shown in ((whole, data.drop(boxed.index)), (closer, boxed)):  # (b) numbers the grey box's points
        numbers = sorted((t.get_text(), *np.round(t.xy, 6)) for t in ax.texts if t.get_text() in set(data.row))
        assert numbers == sorted((r, *np.round((x, y), 6)) for r, x, y in zip(shown.row, shown.intensity,
                                                                             shown.achieved_tflops))
    assert len(points_in_view(whole, data)) == len(data)  # every point in (a)
    rows_in_title = closer.get_title().split("rows ")[1].split(", ")
    assert rows_in_title == list(dict.fromkeys(points_in_view(closer, data).row))  # in the rows' order
    assert set(crowded) <= set(rows_in_title) and len(rows_in_title) < len(set(data.row))
    spread = data[data.row.isin(["1", "2", "14"])]  # far apart: one panel
    assert crowded_rows(spread) == [] and len(plot_roofline(spread, CEILINGS).axes) == 1


def test_the_grey_box_draws_no_line_outside_its_panel_and_log_ticks_read_as_plain_numbers():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.inset import InsetIndicator
    recorded = pd.read_csv(ROOT / "results" / "run_nvidia-h200_fp16_2026-12-01.csv", dtype={"row": str})
    data = recorded[recorded.variant.isin(["reference", "fastest"]) & recorded.achieved_tflops.notna()]
    fig = plot_roofline(data, CEILINGS, variants=["reference", "fastest"])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    whole, closer = fig.axes
    (box,) = [a for a in whole.get_children() if isinstance(a, InsetIndicator)]
    for part in [box.rectangle, *(box.connectors or [])]:  # a line to (b) would reach over to it
        extent = part.get_window_extent(canvas.get_renderer())
        assert whole.bbox.x0 <= extent.x0 and extent.x1 <= whole.bbox.x1 + 1 and extent.y1 <= whole.bbox.y1 + 1
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = axis.get_view_interval()
            ticks = [t.get_text() for t in axis.get_ticklabels(minor=True) + axis.get_ticklabels()
                     if t.get_text() and low <= t.get_position()[axis is ax.yaxis] <= high]
            assert len(ticks) >= 2 and not any("10^" in t or "×" in t or "$" in t for t in ticks), ticks
            assert all(float(t.replace(",", "")) > 0 for t in ticks)  # plain numbers


def test_a_timeline_draws_a_kernel_far_shorter_than_its_axis_wide_enough_to_see():
    timeline = pd.DataFrame({"name": ["copy", "gemm"], "category": ["copy/layout", "GEMM"],
                             "start_us": [0.0, 10.0], "duration_us": [0.1, 500.0]})
    timeline["end_us"] = timeline.start_us + timeline.duration_us
    ax = plot_timeline(timeline, axis_us=1000.0).axes[0]
    widths = sorted(np.ptp(path.vertices[:, 0]) for c in ax.collections for path in c.get_paths())
    assert widths[0] == pytest.approx(MIN_BAR * 1000) and widths[-1] == pytest.approx(500.0)
    assert ax.get_xlim()[0] < 0  # the first bar starts clear of the axis


def _clustered_ops() -> pd.DataFrame:
    """Ops as the reference's on a long row: a big cluster of memory-bound ops at nearly one point, two GEMMs."""
    ops = [("aten::masked_fill", "masking", 0.0, 1100.0, 0.38), ("aten::_softmax", "softmax", 0.0, 900.0, 0.33),
           ("aten::div", "elementwise/residual", 0.0, 4000.0, 0.05),
           ("aten::ones", "mask construction", 0.0, 3000.0, 0.01),
           ("aten::tril", "mask construction", 0.0, 1000.0, 0.01), ("aten::gelu", "activation", 0.0, 3900.0, 0.03),
           ("aten::native_layer_norm", "LayerNorm", 0.0, 1400.0, 0.03),
           ("aten::addmm", "GEMM", 1e12, 0.0, 0.06), ("aten::bmm", "attention core", 1e12, 0.0, 0.1)]
    return pd.DataFrame([{"op": op, "category": c, "flops": f, "gbps": g, "share": share,
                          "intensity": 500.0 if f else 0.0, "tflops": 600.0 if op == "aten::addmm" else 230.0 * bool(f)}
                         for op, c, f, g, share in ops])


def test_op_names_cover_no_marker_and_no_other_name():
    from roofline_lib.present.plots_profile import plot_op_roofline
    ops = _clustered_ops()
    ops.loc[ops.op == "aten::addmm", "intensity"] = 3000.0  # near the right edge: its name must go left
    fig = plot_op_roofline({"reference": ops}, CEILINGS)
    fig.canvas.draw()
    ax = fig.axes[0]
    names = [t.get_window_extent() and Text.get_window_extent(t) for t in ax.texts]  # placed, then the text alone
    assert len(names) == len(ops)  # every op, the smallest at the left edge too
    markers = []
    for collection in ax.collections:
        (r,) = np.sqrt(collection.get_sizes()) / 2 * fig.dpi / 72
        (cx, cy), = ax.transData.transform(collection.get_offsets())
        markers.append((cx - r, cy - r, cx + r, cy + r))

    def overlap(a, b):  # a: a text's Bbox, b: (x0, y0, x1, y1); one pixel of slack
        return min(a.x1, b[2]) - max(a.x0, b[0]) > 1 and min(a.y1, b[3]) - max(a.y0, b[1]) > 1

    inside = ax.bbox
    for i, name in enumerate(names):
        assert inside.x0 <= name.x0 and name.x1 <= inside.x1 and inside.y0 <= name.y0 and name.y1 <= inside.y1
        assert not any(overlap(name, m) for m in markers), ax.texts[i].get_text()
        others = names[:i] + names[i + 1:]
        assert not any(overlap(name, (o.x0, o.y0, o.x1, o.y1)) for o in others), ax.texts[i].get_text()


def test_every_panel_of_the_op_roofline_labels_its_y_axis():
    from roofline_lib.present.plots_profile import plot_op_roofline
    fig = plot_op_roofline({"reference": _clustered_ops(), "no_empty_mask": _clustered_ops()}, CEILINGS)
    fig.canvas.draw()
    for ax in fig.axes:
        assert ax.get_ylabel() == "achieved TFLOP/s"
        assert any(label.get_visible() and label.get_text() for label in ax.get_yticklabels()), ax.get_title()


def test_a_line_drawn_on_top_of_another_says_so_in_its_label():
    from roofline_lib.present.plots_longctx import _covering_label
    drawn: dict = {}
    x = pd.Series([4096, 8192])
    assert _covering_label("auto", x, pd.Series([1.00, 1.10]), drawn) == "auto"
    assert _covering_label("lower_right", x, pd.Series([1.01, 1.09]), drawn) == "lower_right (on top of auto)"
    assert _covering_label("mask", x, pd.Series([2.0, 3.2]), drawn) == "mask"  # apart: no note
    assert _covering_label("short", x[:1], pd.Series([2.0]), drawn) == "short"  # mask's other point still shows
    assert _covering_label("long", pd.Series([4096, 4096, 8192, 16384]), pd.Series([1.0, 1.02, 1.1, np.nan]),
                           drawn) == "long (on top of auto)"  # auto's two points, x 4096 by its mean, NaN left out


@pytest.mark.parametrize("variants", [None, ["reference", "fastest"]], ids=["every variant", "reference, fastest"])
def test_a_roofline_with_a_closer_panel_numbers_labels_and_keeps_row_numbers_clear(variants):
    recorded = pd.read_csv(ROOT / "results" / "run_nvidia-h200_fp16_2026-12-01.csv", dtype={"row": str})
    data = recorded[recorded.achieved_tflops.notna()]
    data = data if variants is None else data[data.variant.isin(variants)]
    fig = plot_roofline(data, CEILINGS, variants=variants)
    fig.canvas.draw()
    assert [ax.get_title()[:4] for ax in fig.axes] == ["(a) ", "(b) "]
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    whole, closer = fig.axes
    assert (closer.get_xlabel(), closer.get_ylabel()) == (whole.get_xlabel(), whole.get_ylabel())  # one quantity

    def overlap(a, b):  # Bboxes; one pixel of slack
        return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1

    numbered = set()
    for ax in fig.axes:
        labels = [t.get_window_extent() and Text.get_window_extent(t) for t in ax.texts
                  if t.get_text() in set(data.row)]  # placed, then the text alone
        numbered |= {t.get_text() for t in ax.texts} & set(data.row)
        markers = []
        for collection in ax.collections:
            r = np.sqrt(collection.get_sizes()[0]) / 2 * fig.dpi / 72
            for cx, cy in ax.transData.transform(collection.get_offsets()):
                if ax.bbox.x0 <= cx <= ax.bbox.x1 and ax.bbox.y0 <= cy <= ax.bbox.y1:
                    markers.append(matplotlib.transforms.Bbox([[cx - r, cy - r], [cx + r, cy + r]]))
        for i, box in enumerate(labels):
            assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1 and ax.bbox.y0 <= box.y0 and box.y1 <= ax.bbox.y1
            assert not any(overlap(box, m) for m in markers)
            assert not any(overlap(box, other) for other in labels[:i] + labels[i + 1:])
    assert numbered == set(data.row)  # every row numbered, in one panel or the other


def test_speedup_bars_start_at_one_so_a_slowdown_points_down():
    results = _results()
    slow = results.variant == "sdpa_fused_qkv"
    results.loc[slow, ["speedup", "speedup_p20", "speedup_p80"]] = [0.805, 0.79, 0.82]
    ax = plot_speedups(results).axes[0]
    bars = ax.patches
    assert len(bars) == len(results[results.variant != "reference"])
    assert all(bar.get_y() == pytest.approx(1.0) for bar in bars)  # every bar from 1×, the reference's time
    tops = sorted(round(bar.get_y() + bar.get_height(), 3) for bar in bars)
    assert tops == sorted(round(v, 3) for v in results.speedup[results.variant != "reference"])
    assert sum(bar.get_height() < 0 for bar in bars) == slow.sum()  # the slowdowns point down
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.lines)  # the line at 1×
    assert ax.get_ylim()[0] <= 0.5 and "0.5×" in [t.get_text() for t in ax.get_yticklabels()]


CPU_CEILINGS = Ceilings("x86_64", "fp32", 0.145, 44.95, "test")
CPU_POINTS = pd.DataFrame({"row": ["s1", "s2", "s3"], "variant": "reference", "intensity": [7.5, 42.0, 55.0],
                           "achieved_tflops": [4e-4, 1.6e-2, 3.1e-2]})  # s1 low, just right of the ridge


def test_numbers_on_figures_have_three_digits_as_in_the_tables():
    from roofline_lib.present.plots import plot_bandwidth
    fig = plot_roofline(CPU_POINTS, CPU_CEILINGS)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "measured: 0.145 TFLOP/s, 45.0 GB/s" in legend  # not 44.95
    assert "ridge 3.23 FLOP/B" in [t.get_text() for t in fig.axes[0].texts]
    kernels = pd.DataFrame({"n_rows": [64], "d_model": [96], "torch_gbps": [10.0], "triton_gbps": [20.0]})
    bars = plot_bandwidth(kernels, 44.95).axes[0]
    assert "copy 45.0 GB/s" in bars.get_legend_handles_labels()[1]


def _text_box(text: Text):
    """A placed label's own box, without its line (an annotation's extent includes it)."""
    return text.get_window_extent() and Text.get_window_extent(text)  # placed, then the text alone


def _overlaps(a, b) -> bool:  # Bboxes; one pixel of slack
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1


def _marker_bboxes(ax, fig) -> list:
    boxes = []
    for collection in ax.collections:
        radii = np.broadcast_to(np.sqrt(collection.get_sizes()) / 2 * fig.dpi / 72, (len(collection.get_offsets()),))
        for (cx, cy), r in zip(ax.transData.transform(collection.get_offsets()), radii):
            boxes.append(matplotlib.transforms.Bbox([[cx - r, cy - r], [cx + r, cy + r]]))
    return boxes


@pytest.mark.parametrize("case", ["cpu", "recorded"])
def test_the_ridge_label_covers_no_marker_no_row_number_and_no_line(case):
    if case == "cpu":
        data, ceilings, variants = CPU_POINTS, CPU_CEILINGS, None
    else:
        recorded = pd.read_csv(ROOT / "results" / "run_nvidia-h200_fp16_2026-12-01.csv", dtype={"row": str})
        data = recorded[recorded.variant.isin(["reference", "fastest"]) & recorded.achieved_tflops.notna()]
        ceilings, variants = CEILINGS, ["reference", "fastest"]
    fig = plot_roofline(data, ceilings, variants=variants)
    fig.canvas.draw()
    ax = fig.axes[0]
    (ridge,) = [t for t in ax.texts if t.get_text().startswith("ridge")]
    box = ridge.get_window_extent()
    inside = ax.bbox
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
    assert not any(_overlaps(box, m) for m in _marker_bboxes(ax, fig))
    assert not any(_overlaps(box, _text_box(t)) for t in ax.texts if t is not ridge)
    for line in ax.lines:  # the roofs and the lines between a row's points, not the ridge's own
        xy = line.get_transform().transform(line.get_xydata())
        if np.allclose(xy[:, 0], ax.transData.transform((ceilings.ridge, 1))[0], atol=1):
            continue
        dense = np.vstack([a + np.linspace(0, 1, 200)[:, None] * (b - a) for a, b in zip(xy[:-1], xy[1:])])
        assert not box.count_contains(dense), "the ridge's label lies across a line"


def _piled_ops() -> pd.DataFrame:
    """The ops of `_clustered_ops`, and two products close together near the roof (SDPA's and a GEMM's)."""
    ops = _clustered_ops()
    ops.loc[ops.op == "aten::bmm", ["op", "intensity", "tflops"]] = ["aten::_scaled_dot_product_cudnn_attention",
                                                                     2000.0, 420.0]
    ops.loc[ops.op == "aten::addmm", ["intensity", "tflops"]] = [560.0, 690.0]
    return ops


def test_ops_without_flops_sit_side_by_side_each_named_by_a_line_to_its_own_marker():
    from roofline_lib.present.plots_profile import CATEGORY_COLORS, plot_op_roofline
    ops = _piled_ops()
    fig = plot_op_roofline({"reference": ops}, CEILINGS)
    fig.canvas.draw()
    ax = fig.axes[0]
    px = fig.dpi / 72
    markers = [(ax.transData.transform(c.get_offsets()[0]), np.sqrt(c.get_sizes()[0]) / 2 * px, c)
               for c in ax.collections]
    for i, (a, ra, _) in enumerate(markers):  # no marker hides another
        for b, rb, _ in markers[i + 1:]:
            assert np.hypot(*(a - b)) >= ra + rb - 0.5
    piled = [(a, c) for a, _, c in markers if a[0] < ax.transData.transform((1.0, 1.0))[0]]
    assert len({round(a[0]) for a, _ in piled}) > 1  # moved aside where they would hide each other
    category = dict(zip(ops.op.str.removeprefix("aten::"), ops.category))
    for text in ax.texts:  # each name's point is its own op's marker, of its own category's colour
        (own,) = [c for c in ax.collections if np.allclose(c.get_offsets()[0], text.xy)]
        assert np.allclose(own.get_facecolor()[0][:3], matplotlib.colors.to_rgb(CATEGORY_COLORS[
            category.get(text.get_text(), category.get(text.get_text().replace("sdpa_", "_scaled_dot_product_")))]))
        if ops.set_index(ops.op.str.removeprefix("aten::")).flops.get(text.get_text(), 1) == 0:
            assert text.arrow_patch is not None  # in the column: a line to its marker


def _row_13_ops() -> pd.DataFrame:
    """The reference's ops on an H200's row 13 (B2 N8192 d768 H12), as profiled: nine with no matrix product, from
    half the time (masked_fill) to a sixth of a percent (add), at GB/s close together."""
    ops = [("masked_fill", "masking", 0, 1080, 0.512), ("_softmax", "softmax", 0, 884, 0.310),
           ("bmm", "attention core", 4.12e11, 3670, 0.0757), ("div", "elementwise/residual", 0, 4300, 0.0638),
           ("addmm", "GEMM", 2.32e11, 1350, 0.0147), ("copy", "attention core", 0, 1060, 0.00808),
           ("tril", "mask construction", 0, 856, 0.00666), ("native_layer_norm", "LayerNorm", 0, 1390, 0.00308),
           ("gelu", "activation", 0, 3100, 0.00276), ("bitwise_not", "mask construction", 0, 3130, 0.00182),
           ("add", "elementwise/residual", 0, 4200, 0.00153)]
    return pd.DataFrame([{"op": f"aten::{op}", "category": c, "flops": f, "gbps": g, "share": share,
                          "intensity": {"bmm": 63.0, "addmm": 496.0}.get(op, 0.0),
                          "tflops": {"bmm": 231.0, "addmm": 670.0}.get(op, 0.0)} for op, c, f, g, share in ops])


@pytest.mark.parametrize("ops", [_clustered_ops, _row_13_ops], ids=["clustered", "row 13"])
def test_every_op_is_named_and_no_line_to_a_name_crosses_another_marker_or_line(ops):
    from roofline_lib.present.plots_profile import plot_op_roofline
    table = ops()
    fig = plot_op_roofline({"reference": table, "again": table}, H200)
    fig.canvas.draw()
    px = fig.dpi / 72

    def side(p, q, r):
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    for ax in fig.axes:
        assert sorted(t.get_text() for t in ax.texts) == sorted(
            table.op.str.removeprefix("aten::").str.replace("_scaled_dot_product_", "sdpa_"))
        circles = [(ax.transData.transform(c.get_offsets()[0]), np.sqrt(c.get_sizes()[0]) / 2 * px)
                   for c in ax.collections]
        lines = []  # display px: from a name's left end to its marker's edge
        for text in ax.texts:
            if text.arrow_patch is None:
                continue
            box = _text_box(text)
            start = np.array([box.x0, (box.y0 + box.y1) / 2])
            (centre, radius), = [(c, r) for c, r in circles if np.allclose(c, ax.transData.transform(text.xy))]
            lines.append((text.get_text(), start, centre + (start - centre) / np.hypot(*(start - centre)) * radius,
                          centre))
        assert {name for name, *_ in lines} >= set(table.op[table.flops == 0].str.removeprefix("aten::"))
        for name, a, b, own in lines:
            for centre, radius in circles:  # every other marker: the line does not pass through it
                t = np.clip(np.dot(centre - a, b - a) / np.dot(b - a, b - a), 0, 1)
                assert np.allclose(centre, own) or np.hypot(*(a + t * (b - a) - centre)) >= radius - 0.5, (
                    f"{name}'s line crosses a marker")
            for other, c, d, _ in lines:
                assert other == name or not (side(a, b, c) * side(a, b, d) < 0 and side(c, d, a) * side(c, d, b) < 0), (
                    f"{name}'s line crosses {other}'s")


def test_a_name_without_a_line_to_its_point_lies_nearest_its_own_marker():
    from roofline_lib.present.plots_profile import plot_op_roofline
    fig = plot_op_roofline({"reference": _piled_ops()}, CEILINGS)
    fig.canvas.draw()
    ax = fig.axes[0]
    px = fig.dpi / 72
    markers = [(ax.transData.transform(c.get_offsets()[0]), np.sqrt(c.get_sizes()[0]) / 2 * px)
               for c in ax.collections]

    def gap(box, centre, radius):  # px from a marker's edge to the box
        dx = max(box.x0 - centre[0], 0, centre[0] - box.x1)
        dy = max(box.y0 - centre[1], 0, centre[1] - box.y1)
        return max(0.0, np.hypot(dx, dy) - radius)

    for text in ax.texts:
        if text.arrow_patch is not None:
            continue
        box = _text_box(text)
        own = ax.transData.transform(text.xy)
        mine = min(gap(box, c, r) for c, r in markers if np.allclose(c, own))
        assert all(mine <= gap(box, c, r) for c, r in markers if not np.allclose(c, own)), text.get_text()


def test_log_ticks_read_as_plain_numbers():
    from roofline_lib.present.formatting import tick_number
    assert [tick_number(v) for v in (0.001, 0.01, 0.1, 1, 30, 10_000, 2.5, 1e-5)] == [
        "0.001", "0.01", "0.1", "1", "30", "10,000", "2.5", "0.00001"]


def test_memory_against_n_reads_plain_ticks_and_has_one_legend_per_panel():
    from roofline_lib.present.plots_longctx import plot_memory_against_n
    memory = pd.DataFrame({"seq_len": [64, 64, 256, 256], "layer": ["reference", "chunked"] * 2,
                           "status": "ok", "estimated_gib": [4e-4, 4e-4, 3e-3, 1e-3], "peak_gib": np.nan,
                           "capacity_gib": 23.5, "median_ms": [0.06, 0.2, 0.8, 0.5], "device": "x86_64",
                           "dtype": "fp32"})
    fig = plot_memory_against_n(memory)
    fig.canvas.draw()
    memory_ax, time_ax = fig.axes
    ticks = [t.get_text() for t in memory_ax.get_yticklabels() if t.get_text()]
    assert {"0.001", "0.01", "0.1"} <= set(ticks) and not any(t.endswith("00") and "." in t for t in ticks)
    minor = {t.get_text() for t in time_ax.yaxis.get_ticklabels(minor=True)} - {""}  # one decade: minor ticks read
    assert {"0.2", "0.3", "0.5"} <= minor and "0.9" not in minor  # 2, 3, 5 of each: 0.9 would touch 1
    assert len(fig.legends) == 2 and not any(ax.get_legend() for ax in fig.axes)  # one each, none inside
    for legend, ax in zip(fig.legends, fig.axes):
        assert legend.get_title().get_text() == ax.get_title().split(" — ")[0]  # "Panel 1", "Panel 2"
        assert {t.get_text() for t in legend.get_texts()} == set(ax.get_legend_handles_labels()[1])


def test_bar_values_keep_off_the_copy_line():
    from roofline_lib.present.plots import plot_bandwidth
    kernels = pd.DataFrame([(7, 131, 0.699, 1.11), (128, 512, 60.7, 90.4), (4096, 768, 1170, 2000),
                            (8192, 1024, 1700, 2890), (16384, 768, 1670, 3310), (16384, 1024, 1890, 3390)],
                           columns=["n_rows", "d_model", "torch_gbps", "triton_gbps"])  # an H200's, as measured
    ax = plot_bandwidth(kernels, 4210.0).axes[0]
    ax.figure.canvas.draw()
    (line,) = [line for line in ax.lines if line.get_linestyle() == "--"]
    line_y = ax.transData.transform((0, 4210.0))[1]
    assert line.get_ydata()[0] == 4210.0
    values = list(ax.texts)
    assert sorted(t.get_text() for t in values) == sorted(
        format_number(v) for v in [*kernels.torch_gbps, *kernels.triton_gbps])
    for text in values:
        box = text.get_window_extent()
        assert not box.y0 - 1 < line_y < box.y1 + 1, f"{text.get_text()} crosses the copy line"


def test_each_speedup_bar_carries_its_value_beyond_its_whisker_inside_the_axes():
    results = _results()
    slow = results.variant == "sdpa_fused_qkv"
    results.loc[slow, ["speedup", "speedup_p20", "speedup_p80"]] = [0.805, 0.79, 0.82]
    fast = ~slow & (results.variant != "reference")
    results.loc[fast, ["speedup", "speedup_p20", "speedup_p80"]] = [30.0, 28.0, 31.0]
    fig = plot_speedups(results)
    fig.canvas.draw()
    ax = fig.axes[0]
    timed = results[results.variant != "reference"]
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{three_digits(v)}×" for v in timed.speedup)
    boxes = [_text_box(t) for t in ax.texts]
    for text, box in zip(ax.texts, boxes):
        whisker = ax.transData.transform((0, 0.79 if text.get_text() == "0.805×" else 31.0))[1]
        assert box.y0 >= whisker if text.get_text() != "0.805×" else box.y1 <= whisker  # up over it, down under it
        assert ax.bbox.y0 <= box.y0 and box.y1 <= ax.bbox.y1  # the axis grew to hold 30× and its value
    assert not any(_overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    many = plot_speedups(pd.concat([_results().assign(variant=lambda t, k=k: t.variant + str(k)) for k in range(12)]))
    assert not many.axes[0].texts  # bars too narrow to hold a value: none, rather than a heap of them
