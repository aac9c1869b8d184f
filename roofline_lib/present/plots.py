"""Figures from result DataFrames; each function returns a matplotlib Figure and draws nothing else."""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..measure.ceilings import Ceilings
from ..measure.profile_rules import CATEGORIES
from .prose import format_number

MIN_BAR = 0.004  # the narrowest bar of a timeline, as a share of its axis
# one colour per profiling category in every figure: tab10 for the ten op categories, near-black for the
# whole-layer kernel, which holds all of them
CATEGORY_COLORS = {c: matplotlib.colormaps["tab10"](i) if i < 10 else "#333333" for i, c in enumerate(CATEGORIES)}
VALUE_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}  # a bar's value over a line


def _grouped_bars(data: pd.DataFrame, value: pd.Series, whiskers: tuple[pd.Series, pd.Series] | None = None,
                  first_color: int = 0, scale: float = 0.7):
    """One bar per (row, variant) of `data`, grouped by row, variants side by side: (figure, axes)."""
    rows = list(dict.fromkeys(data.row))
    variants = list(dict.fromkeys(data.variant))
    width_in = min(11, max(6, scale * len(rows) * max(1, len(variants)) / 2 + 3))
    fig = Figure(figsize=(width_in, 4.5), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(variants))
    colors = matplotlib.colormaps["tab10"]
    for i, name in enumerate(variants):
        mine = (data.variant == name).to_numpy()
        order = pd.Index(data.row[mine]).get_indexer(rows)  # this variant's bars in row order (-1: none)
        heights = np.where(order >= 0, value[mine].to_numpy()[order], np.nan)
        err = None
        if whiskers is not None:
            low, high = (np.where(order >= 0, w[mine].to_numpy()[order], np.nan) for w in whiskers)
            err = np.vstack([heights - low, high - heights]).clip(min=0)
        x = np.arange(len(rows)) + (i - (len(variants) - 1) / 2) * width
        ax.bar(x, heights, width, yerr=err, capsize=2 if err is not None else 0, label=name,
               color=colors(i + first_color))
    ax.set_xticks(np.arange(len(rows)), row_labels(data, rows), fontsize="small" if len(rows) <= 4 else "x-small")
    return fig, ax


def row_labels(data: pd.DataFrame, rows: list) -> list[str]:
    """Tick labels naming each row and, where the table has it, its shape (B·N·d·H) under it."""
    if "shape" not in data:
        return [str(r) for r in rows]
    shapes = data.drop_duplicates("row").set_index("row")["shape"]
    return [f"{r}\n{shapes.get(r, '').replace(' ', chr(10))}" for r in rows]


def _times(ax) -> None:
    """A log₂ speedup axis read as 1×, 2×, 4×, … (and ½× below 1), ending on a labelled power of two above
    the tallest bar, so no bar runs past the last tick."""
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    low, high = ax.get_ylim()
    if high > 0:
        ax.set_ylim(low, 2.0 ** np.ceil(np.log2(high)))


def plot_speedups(results: pd.DataFrame, title: str | None = None) -> Figure:
    """Speedup over the reference per row and variant, whiskers at p20/p80 of the interleaved ratios."""
    data = results[(results.variant != "reference") & results.speedup.notna()]
    fig, ax = _grouped_bars(data, data.speedup, (data.speedup_p20, data.speedup_p80), first_color=1)
    ax.axhline(1.0, color="black", linewidth=0.8)
    _times(ax)
    ax.set_xlabel("suite row and shape (batch, sequence, d_model, heads)")
    ax.set_ylabel("speedup over the reference")
    first = results.iloc[0]
    ax.set_title(title or f"Speedup over the naive layer\n{first['device']}, {first['dtype']}")
    fig.legend(fontsize="small", loc="outside right upper")
    return fig


def plot_roofline(results: pd.DataFrame, ceilings: Ceilings, datasheet: Ceilings | None = None,
                  title: str | None = None, variants: Sequence[str] | None = None) -> Figure:
    """Log–log roofline: the compute and bandwidth ceilings, the ridge point, one marker per variant × row.

    x = arithmetic intensity (useful FLOPs / fewest bytes), y = achieved TFLOP/s (useful FLOPs /
    median time); `results` as returned by `roofline.add_roofline`; the datasheet roof is dashed. With
    `variants`, only those, and a line per row from the first to the last: the climb a row made. Where the
    rows' highest points crowd together (`crowded_rows`), a second panel shows them closer, labelled there.
    """
    data = results[results.achieved_tflops.notna()] if "achieved_tflops" in results else results.iloc[:0]
    links = []  # per row, (intensities, TFLOP/s) of its first and last variant
    if variants is not None:
        data = data[data.variant.isin(variants)]
        for _, sub in data.groupby("row", sort=False):
            ends = sub.set_index("variant").reindex([variants[0], variants[-1]]).dropna(subset=["intensity"])
            if len(ends) == 2:
                links.append((ends.intensity.to_numpy(), ends.achieved_tflops.to_numpy()))
    crowded = crowded_rows(data)
    zoom = len(crowded) >= MIN_CROWD
    fig = Figure(figsize=(12.5, 5) if zoom else (7.5, 5), layout="constrained")
    axes = fig.subplots(1, 2, width_ratios=(3, 2)) if zoom else [fig.subplots()]
    x_lo = min([ceilings.ridge / 100] + list(data.intensity / 2))
    x_hi = max([ceilings.ridge * 10] + list(data.intensity * 2))
    for ax in axes:
        _draw_roofline(ax, data, links, ceilings, datasheet, np.geomspace(x_lo, x_hi, 200), legend=ax is axes[0])
    ax = axes[0]
    ax.annotate(f"ridge {ceilings.ridge:,.0f} FLOP/B", (ceilings.ridge, 0.02), xycoords=("data", "axes fraction"),
                textcoords="offset points", xytext=(4, 0), fontsize="small", color="gray")  # low: under no point
    ax.set_xlabel("arithmetic intensity (useful FLOPs / fewest bytes)")
    ax.set_ylabel("achieved TFLOP/s (useful FLOPs / median time)")
    ax.set_title(title or f"Roofline — {ceilings.device}, {ceilings.dtype}")
    if zoom:
        tops = data.sort_values("achieved_tflops").groupby("row", sort=False).tail(1)
        tops = tops[tops.row.isin(crowded)]
        (x0, x1), (y0, y1) = ((np.log10(v.min()) - ZOOM_PAD, np.log10(v.max()) + ZOOM_PAD)
                              for v in (tops.intensity, tops.achieved_tflops))
        roof = np.log10(min(ceilings.matmul_tflops, ceilings.copy_gbps * 10 ** x1 / 1e3))  # its highest in view
        if roof - y1 < ROOF_IN_ZOOM:  # near enough to show how much room is left above the points
            y1 = max(y1, roof + ZOOM_PAD)
        axes[1].set_xlim(10 ** x0, 10 ** x1)
        axes[1].set_ylim(10 ** y0, 10 ** y1)
        axes[1].set_title(f"the grey box, closer: rows {', '.join(map(str, crowded))}", fontsize="small")
        axes[1].set_xlabel("arithmetic intensity")
        ax.indicate_inset((10 ** x0, 10 ** y0, 10 ** x1 - 10 ** x0, 10 ** y1 - 10 ** y0), inset_ax=axes[1],
                          edgecolor="gray")
    fig.legend(fontsize="small", loc="outside right upper")
    fig.draw_without_rendering()  # the layout final, so labels are placed where they are drawn
    _label_rows(ax, fig, data, [row for row in dict.fromkeys(data.row) if row not in crowded] if zoom else None)
    if zoom:
        _label_rows(axes[1], fig, data, crowded)
    return fig


MIN_CROWD = 3  # rows crowded together from which the roofline gets a closer panel
CROWD_DECADES = 0.15  # highest points this close in x and in y (log10, a factor of 1.4) crowd each other's labels
ZOOM_PAD = 0.06  # decades of margin round the crowded points in the closer panel
ROOF_IN_ZOOM = 0.3  # decades: a measured roof at most this far above them is shown in the closer panel too


def crowded_rows(data: pd.DataFrame) -> list:
    """The rows whose highest point lies within CROWD_DECADES of another row's in both axes: where their
    labels would crowd on a full roofline."""
    tops = data.sort_values("achieved_tflops").groupby("row", sort=False).tail(1)
    xy = np.log10(tops[["intensity", "achieved_tflops"]].to_numpy(dtype=float))
    near = (np.abs(xy[:, None, :] - xy[None, :, :]) <= CROWD_DECADES).all(axis=2)
    np.fill_diagonal(near, False)
    crowded = set(tops.row[near.any(axis=1)])
    return [row for row in dict.fromkeys(data.row) if row in crowded]  # in the rows' own order


def _draw_roofline(ax, data: pd.DataFrame, links: list, ceilings: Ceilings, datasheet: Ceilings | None,
                   x: np.ndarray, legend: bool) -> None:
    """The roofs, the ridge, the links and the markers on one log–log panel (`legend`: with labels)."""
    for c, style in ((ceilings, "-"), (datasheet, "--")):
        if c is None:
            continue
        roof = np.minimum(c.matmul_tflops, c.copy_gbps * x / 1e3)  # TFLOP/s
        kind = "measured" if c is ceilings else "datasheet"
        ax.plot(x, roof, style, color="black", linewidth=1.2 if c is ceilings else 0.8,
                label=f"{kind}: {c.matmul_tflops:,.3g} TFLOP/s, {c.copy_gbps:,.4g} GB/s" if legend else None)
    ax.axvline(ceilings.ridge, color="gray", linestyle=":", linewidth=0.8)
    for xs, ys in links:
        ax.plot(xs, ys, color="lightgray", linewidth=1, zorder=2)
    colors = matplotlib.colormaps["tab10"]
    for i, name in enumerate(dict.fromkeys(data.variant)):
        sub = data[data.variant == name]
        ax.scatter(sub.intensity, sub.achieved_tflops, s=22, color=colors(i), label=name if legend else None, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")


LABEL_STEPS = (7, 16, 26, 38)  # points from a row's highest point to its label: near first, farther where crowded
LEADER_FROM = 12  # points: a label at least this far from its point gets a line to it
LABEL_ASPECT = 0.6  # a label is wider than tall: horizontal distances count this much of their length


def _label_offsets() -> list[tuple[float, float]]:
    """Candidate label offsets in points: eight directions at each of LABEL_STEPS, nearest first."""
    angles = np.deg2rad([0, 180, 90, 270, 45, 135, 315, 225])
    return [(r * np.cos(a), r * np.sin(a)) for r in LABEL_STEPS for a in angles]


def _clearance(obstacles: np.ndarray, centre: np.ndarray) -> float:
    """Display pixels from `centre` to the nearest of `obstacles` (infinite where there are none), horizontal
    distances shrunk by LABEL_ASPECT, so that a label needs more room beside a neighbour than above it."""
    if not len(obstacles):
        return np.inf
    dx, dy = (obstacles - centre).T
    return float(np.min(np.hypot(LABEL_ASPECT * dx, dy)))


def _label_rows(ax, fig: Figure, data: pd.DataFrame, labelled: Sequence | None = None) -> None:
    """Each row's number (of the `labelled` rows, default all) by its highest point, at the nearest offset whose label keeps
    clear of every other row's points and of the labels already placed (a line joins it to a label set farther
    off), so that no number reads as a neighbour's."""
    ax.autoscale_view()
    px = fig.dpi / 72  # display pixels per point
    points = ax.transData.transform(np.column_stack([data.intensity, data.achieved_tflops]))
    rows = data.row.to_numpy()
    placed: list[np.ndarray] = []  # label centres so far, display px
    order = data.groupby("row", sort=False).achieved_tflops.max().sort_values(ascending=False).index  # top first
    for row in (order if labelled is None else [row for row in order if row in set(labelled)]):
        sub = data[data.row == row]
        anchor = (sub.intensity.iloc[0], sub.achieved_tflops.max())
        at = ax.transData.transform(anchor)
        obstacles = np.vstack([points[rows != row], *placed]) if len(placed) else points[rows != row]
        clearance = {o: _clearance(obstacles, at + px * np.array(o)) for o in _label_offsets()}
        wanted = 9 * px  # a label's half-size and a margin: clear enough to read as its own
        offset = next((o for o, c in clearance.items() if c >= wanted), max(clearance, key=clearance.get))
        placed.append(at + px * np.array(offset))
        far = np.hypot(*offset) >= LEADER_FROM
        ax.annotate(str(row), anchor, textcoords="offset points", xytext=offset, ha="center", va="center",
                    fontsize="x-small", arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5,
                                                    "shrinkA": 0, "shrinkB": 3} if far else None)


NAME_SHIFTS = (0, -9, 9, -15, 15, -21, 21, -27, 27, -33, 33, -39, 39)  # points above (+) or below, nearest first
NAME_FONT_PT = 6.9  # matplotlib's "x-small" at the default 10-point size
NAME_LINE = 1.2 * NAME_FONT_PT  # a name's height, ascenders and descenders included
NAME_FONT = FontProperties(size=NAME_FONT_PT)
NAME_WIDTH = TextToPath()  # a name's width in points, measured in the font it is drawn in
NAME_STEPS_OUT = (0, 20, 40)  # points further out a name may sit, where no shift beside its point is free


def _overlap(box: tuple[float, float, float, float], others: list[tuple[float, float, float, float]]) -> float:
    """The area `box` (x0, y0, x1, y1) shares with `others`, summed."""
    return sum(max(0.0, min(box[2], b[2]) - max(box[0], b[0])) * max(0.0, min(box[3], b[3]) - max(box[1], b[1]))
               for b in others)


def _name_points(ax, fig: Figure, named: list[tuple[float, float, str, float]],
                 markers: list[tuple[float, float, float]]) -> None:
    """A small name beside each named point (x, y, name, marker radius in points), clear of its marker, each at
    the nearest offset (up or down, then further out; right of the point, else left of it) whose box (the text's
    measured width) covers no marker of `markers` (x, y, radius in points: every point drawn) and no
    name already placed, inside the axes, highest point first; where every offset covers something, the one
    that covers least. A name moved past its neighbours' gets a line to its point. The figure's layout must be
    done first (`Figure.draw_without_rendering`), every panel's limits final: names are placed in pixels."""
    px = fig.dpi / 72  # display pixels per point
    boxes: list[tuple[float, float, float, float]] = []  # x0, y0, x1, y1 in display px
    for x, y, r in markers:
        cx, cy = ax.transData.transform((x, y))
        boxes.append((cx - r * px, cy - r * px, cx + r * px, cy + r * px))
    for x, y, text, radius in sorted(named, key=lambda item: -item[1]):
        at = ax.transData.transform((x, y))
        gap = radius + 2  # points from the point's centre to the name
        width, half = NAME_WIDTH.get_text_width_height_descent(text, NAME_FONT, ismath=False)[0], NAME_LINE / 2  # pt
        # (x offset of the name's near end, y offset) in points, right of the point first, then left of it
        offsets = [(side * (gap + dx), dy) for side in (1, -1)
                   for dx, dy in sorted(((dx, dy) for dx in NAME_STEPS_OUT for dy in NAME_SHIFTS),
                                        key=lambda o: np.hypot(*o))]  # nearest first
        spans = {o: (o[0], o[0] + width) if o[0] > 0 else (o[0] - width, o[0]) for o in offsets}  # x, points
        candidates = {o: (at[0] + left * px, at[1] + (o[1] - half) * px, at[0] + right * px, at[1] + (o[1] + half) * px)
                      for o, (left, right) in spans.items()}
        x0, y0, x1, y1 = ax.bbox.extents  # a name may not leave the axes, onto the tick labels or the next panel
        covered = {o: _overlap(box, boxes) + (np.inf if box[0] < x0 or box[1] < y0 or box[2] > x1 or box[3] > y1
                                              else 0) for o, box in candidates.items()}
        offset = next((o for o in offsets if covered[o] == 0), min(covered, key=covered.get))
        boxes.append(candidates[offset])
        far = np.hypot(abs(offset[0]) - gap, offset[1]) > NAME_SHIFTS[2]  # past its neighbours': a line to its point
        ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, va="center",
                    ha="left" if offset[0] > 0 else "right", fontsize=NAME_FONT_PT,
                    arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5, "shrinkA": 0,
                                "shrinkB": radius} if far else None
                    ).set_in_layout(False)  # placed for the layout already done: it must not move the axes


def plot_op_roofline(points: dict[str, pd.DataFrame], ceilings: Ceilings, title: str | None = None) -> Figure:
    """Each op of a layer on the roofline, one panel per layer (`profiling.op_roofline` tables by name):
    x = intensity (FLOPs / byte it reads and writes), y = achieved TFLOP/s; ops without matrix products sit
    at the left edge with their GB/s against the bandwidth roof. Marker area ∝ share of the layer's time; the
    ops with a matrix product, and the others of 2 % or more of the time, are named."""
    fig = Figure(figsize=(5.2 * len(points) + 2, 4.5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(points), sharey=True))
    floor_x = ceilings.ridge / 1e4  # where an op without FLOPs is drawn: far left of the ridge
    names = []  # per panel: (its axes, the points to name, every marker), placed once the layout is done
    for ax, (name, table) in zip(axes, points.items()):
        x = np.geomspace(floor_x, ceilings.ridge * 20, 200)
        ax.plot(x, np.minimum(ceilings.matmul_tflops, ceilings.copy_gbps * x / 1e3), color="black", linewidth=1)
        xs = table.intensity.where(table.flops > 0, floor_x)
        ys = table.tflops.where(table.flops > 0, table.gbps * floor_x / 1e3)  # below the roof by its share of copy GB/s
        sizes = 20 + 600 * table.share  # marker area, points²
        for rank, i in enumerate(sizes.sort_values(ascending=False).index):  # small markers drawn over large ones
            ax.scatter(xs.loc[i], ys.loc[i], s=sizes.loc[i], color=CATEGORY_COLORS.get(table.category.loc[i]),
                       alpha=0.8, edgecolor="black", linewidth=0.4, zorder=3 + rank / 1000)
        # (x, y, name, marker radius) of the matrix products and the ops that matter; the many tiny others
        # would pile up unreadably
        named = [(xs.loc[i], ys.loc[i], r.op.removeprefix("aten::").replace("_scaled_dot_product_", "sdpa_"),
                  np.sqrt(sizes.loc[i]) / 2) for i, r in zip(table.index, table.itertuples())
                 if r.share >= 0.02 or r.flops > 0]
        names.append((ax, named, list(zip(xs, ys, np.sqrt(sizes) / 2))))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(name, fontsize="small")
        ax.set_xlabel("intensity (FLOPs per byte the op reads and writes)")
    axes[0].set_ylabel("achieved TFLOP/s")
    shown = dict.fromkeys(c for table in points.values() for c in table.category)
    handles = [Line2D([], [], marker="o", linestyle="", color=CATEGORY_COLORS.get(c), markeredgecolor="black")
               for c in shown]
    fig.legend(handles, list(shown), fontsize="x-small", title_fontsize="x-small", loc="outside lower center",
               ncols=4, title="category (ops with no matrix product, 0 FLOPs, are drawn at the left edge, below "
                              "the roof by their share of the copy bandwidth)")
    fig.suptitle(title or f"Ops on the roofline — {ceilings.device}, {ceilings.dtype}")
    fig.draw_without_rendering()  # the layout and the shared axis limits final, so names land where drawn
    for ax, named, markers in names:
        _name_points(ax, fig, named, markers)
    return fig


def plot_op_bandwidth(points: dict[str, pd.DataFrame], ceilings: Ceilings, title: str | None = None) -> Figure:
    """The GB/s each op of a layer reaches (bytes it reads and writes / its GPU time), one panel per layer
    (`profiling.op_roofline` tables by name), against a plain copy's GB/s: how far under the bandwidth roof
    the memory-bound ops sit. Ops of 2 % or more of the layer's time, most time first."""
    fig = Figure(figsize=(5.2 * len(points) + 2, 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(points), sharex=True))
    for ax, (name, table) in zip(axes, points.items()):
        shown = table[table.share >= 0.02].sort_values("time_us")  # bottom to top: the most time on top
        labels = [op.removeprefix("aten::").replace("_scaled_dot_product_", "sdpa_") for op in shown.op]
        bars = ax.barh(range(len(shown)), shown.gbps, color=[CATEGORY_COLORS.get(c) for c in shown.category])
        ax.bar_label(bars, [format_number(v) for v in shown.gbps], fontsize="x-small", padding=2, bbox=VALUE_BOX)
        ax.set_yticks(range(len(shown)), labels, fontsize="x-small")
        ax.margins(x=0.15)  # room for the values right of the longest bars
        ax.axvline(ceilings.copy_gbps, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(name, fontsize="small")
        ax.set_xlabel("GB/s (bytes read and written / GPU time)")
    axes[0].annotate(f"copy {ceilings.copy_gbps:,.4g} GB/s", (ceilings.copy_gbps, 1.0),
                     xycoords=("data", "axes fraction"), textcoords="offset points", xytext=(-4, -10), ha="right",
                     fontsize="x-small")
    named = dict.fromkeys(c for table in points.values() for c in table[table.share >= 0.02].category)
    fig.legend([Patch(color=CATEGORY_COLORS.get(c)) for c in named], list(named), fontsize="x-small",
               loc="outside right upper", title="category")
    fig.suptitle((title or f"Ops against the copy bandwidth — {ceilings.device}, {ceilings.dtype}")
                 + "\n(the ops of 2 % or more of each layer's time)", fontsize="medium")
    return fig


def plot_timeline(timeline: pd.DataFrame, title: str | None = None, axis_us: float | None = None) -> Figure:
    """One layer call on a time axis (`profiling.kernel_timeline`): a bar per kernel, coloured by category;
    the white between bars is where the GPU waited. `axis_us` fixes the axis's length, so that two calls
    drawn side by side compare at a glance. A kernel shorter than MIN_BAR of the axis is drawn that wide,
    and the axis starts a little before 0, so that no kernel vanishes into a hairline or the axis."""
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    ax = fig.subplots()
    span = float(timeline.end_us.max()) if len(timeline) else 0.0
    busy = float(timeline.duration_us.sum()) if len(timeline) else 0.0
    length = axis_us if axis_us is not None else max(span, 1.0)
    for category, sub in timeline.groupby("category", sort=False):
        widths = sub.duration_us.clip(lower=MIN_BAR * length)
        ax.broken_barh(list(zip(sub.start_us, widths)), (0, 1), color=CATEGORY_COLORS.get(category), label=category)
    ax.set_yticks([])
    ax.set_xlim(-2 * MIN_BAR * length, length * (1 + MIN_BAR))
    ax.set_xlabel("µs from the first kernel")
    ax.set_title(title or f"One call: {len(timeline)} kernels, busy {busy:,.0f} µs of {span:,.0f} µs", fontsize="small")
    fig.legend(fontsize="x-small", loc="outside lower center", ncols=4, title="category")
    return fig


# Lines that may lie on top of each other (two layers' times, two strategies'): each drawn its own way, so
# the one underneath still shows.
OVERLAP_STYLES = ({"marker": "o", "linestyle": "-", "markersize": 7},
                  {"marker": "s", "linestyle": "--", "markersize": 5, "markerfacecolor": "none"},
                  {"marker": "^", "linestyle": ":", "markersize": 5, "markerfacecolor": "none"},
                  {"marker": "D", "linestyle": "-.", "markersize": 4, "markerfacecolor": "none"})


def _covering_label(label: str, x: pd.Series, y: pd.Series, drawn: dict[str, pd.Series], rtol: float = 0.03) -> str:
    """`label`, with "(on top of …)" naming the first earlier line of `drawn` (label → y by x) whose every point
    this line covers (the same x, y within `rtol`), so that a line hidden under this one still says where it is;
    records this line in `drawn`. Points without a value are left out; a repeated x counts by its mean."""
    values = pd.Series(y.to_numpy(dtype=float), index=x.to_numpy()).dropna()
    values = values.groupby(level=0).mean()
    under = next((name for name, other in drawn.items() if len(other) and other.index.isin(values.index).all()
                  and np.allclose(other.to_numpy(), values.reindex(other.index).to_numpy(), rtol=rtol)), None)
    drawn[label] = values
    return label if under is None else f"{label} (on top of {under})"


def plot_memory_against_n(memory: pd.DataFrame, title: str | None = None) -> Figure:
    """Peak memory against sequence length per layer (`longctx.memory_against_n`): the estimate as a line,
    the measured peak as markers, the card's capacity as a red line; the right panel, time against N."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax_mem, ax_time = fig.subplots(1, 2)
    colors = matplotlib.colormaps["tab10"]
    timed_lines: dict[str, pd.Series] = {}
    for i, (layer, sub) in enumerate(memory.groupby("layer", sort=False)):
        ax_mem.plot(sub.seq_len, sub.estimated_gib, color=colors(i), linestyle="--", linewidth=1,
                    label=f"{layer} (estimated)")
        measured = sub[sub.peak_gib.notna()]
        ax_mem.plot(measured.seq_len, measured.peak_gib, "o", color=colors(i), label=f"{layer} (measured)")
        failed = sub[sub.status.eq("oom")]  # out of memory although tried: at its estimate, crossed
        if len(failed):
            ax_mem.plot(failed.seq_len, failed.estimated_gib, "x", color=colors(i), markersize=9, mew=2,
                        label=f"{layer} (out of memory)")
        timed = sub[sub.median_ms.notna()]
        ax_time.plot(timed.seq_len, timed.median_ms, color=colors(i),
                     label=_covering_label(layer, timed.seq_len, timed.median_ms, timed_lines),
                     **OVERLAP_STYLES[i % len(OVERLAP_STYLES)])
    capacity = float(memory.capacity_gib.iloc[0])
    ax_mem.axhline(capacity, color="red", linewidth=1, label=f"memory allowed here: {capacity:,.1f} GiB")
    panels = [(ax_mem, "peak GiB")]
    if memory.median_ms.notna().any():
        panels.append((ax_time, "ms per call"))
        ax_time.legend(fontsize="x-small", loc="upper left")  # its own line styles; time grows to the right
    else:
        ax_time.axis("off")
        ax_time.text(0.5, 0.5, "nothing was timed", ha="center", va="center", transform=ax_time.transAxes)
    for ax, label in panels:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (tokens)")
        ax.set_ylabel(label)
        ax.set_xticks(sorted(memory.seq_len.unique()))  # the lengths measured, not decades
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize="x-small", labelrotation=90)  # upright: close lengths stay apart
    ax_mem.set_title("memory: the naive layer grows with N², the others with N", fontsize="small")
    ax_time.set_title("time, where it ran", fontsize="small")
    handles, labels = ax_mem.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize="x-small", loc="outside right upper")
    first = memory.iloc[0]
    fig.suptitle(title or f"Memory and time against N — {first['device']}, {first['dtype']}")
    return fig


def plot_ring_schedule(schedule: list[dict], title: str | None = None) -> Figure:
    """Which rank attends which query piece to which key piece, at which ring step (`context_parallel.schedule`):
    a (2P × 2P) grid of pieces coloured by the work done (no mask, the causal diagonal, skipped)."""
    pieces_n = 1 + max(r["query_piece"] for r in schedule)
    kinds = {"full": 2, "masked": 1, "skipped": 0}
    grid = np.zeros((pieces_n, pieces_n))
    fig = Figure(figsize=(5.5, 5), layout="constrained")
    ax = fig.subplots()
    for r in schedule:
        grid[r["query_piece"], r["key_piece"]] = kinds[r["work"]]
    cmap = matplotlib.colors.ListedColormap(["#eeeeee", "#f4a261", "#2a9d8f"])
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=2)
    for r in schedule:
        if r["work"] != "skipped":
            ax.text(r["key_piece"], r["query_piece"], f"r{r['rank']}\ns{r['step']}", ha="center", va="center",
                    fontsize="x-small")
    owner = {r["query_piece"]: r["rank"] for r in schedule}  # zigzag: rank r holds pieces r and 2P-1-r
    ax.set_xticks(range(pieces_n))
    ax.set_yticks(range(pieces_n), [f"{i} (r{owner[i]})" for i in range(pieces_n)])
    ax.set_xlabel("key piece (sequence order)")
    ax.set_ylabel("query piece (held by rank)")
    handles = [Patch(facecolor=c, label=l) for c, l in (("#2a9d8f", "all keys in the past: no mask"),
                                                         ("#f4a261", "diagonal: causal mask"),
                                                         ("#eeeeee", "hidden by the mask: skipped"))]
    fig.legend(handles=handles, fontsize="x-small", loc="outside lower center", ncols=3)
    ranks = 1 + max(r["rank"] for r in schedule)
    ax.set_title(title or f"The ring on {ranks} ranks: rank r at step s (zigzag pieces)", fontsize="small")
    return fig


def plot_category_breakdown(categories: pd.DataFrame, title: str | None = None) -> Figure:
    """Share of time per category, one stacked bar per row × variant, grouped by row, the ops' total ms on top
    (on a GPU their kernels' time, not the call's, which is longer wherever the GPU waits for the host).

    `categories` as in `profiling.SuiteProfile.categories` (row, variant, category, time_us, share).
    """
    rows = list(dict.fromkeys(categories.row))
    variants = list(dict.fromkeys(categories.variant))
    wide = categories.pivot_table(index=["row", "variant"], columns="category", values="time_us", aggfunc="sum")
    wide = wide.reindex(columns=list(CATEGORIES), fill_value=0.0).fillna(0.0)
    shown = [c for c in CATEGORIES if wide[c].sum() > 0]  # the legend names only what took time
    fig = Figure(figsize=(max(7, 0.45 * len(rows) * len(variants) + 3), 4.8), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(variants))
    hatches = ["", "//", "..", "xx", "\\\\", "oo"]
    for j, name in enumerate(variants):
        sub = wide.xs(name, level="variant").reindex(rows).fillna(0.0)
        total = sub.sum(axis=1)
        shares = sub.div(total.where(total > 0), axis=0).fillna(0.0)
        x = np.arange(len(rows)) + (j - (len(variants) - 1) / 2) * width
        bottom = np.zeros(len(rows))
        for category in shown:
            ax.bar(x, shares[category], width, bottom=bottom, color=CATEGORY_COLORS[category],
                   hatch=hatches[j % len(hatches)], edgecolor="white", linewidth=0.3, label=category if j == 0 else None)
            bottom += shares[category].to_numpy()
        for xi, t in zip(x, total / 1e3):
            if t > 0:
                ax.text(xi, 1.01, f"{t:.3g}", ha="center", va="bottom", fontsize="x-small" if len(variants) == 1
                        else "xx-small", rotation=0 if len(variants) == 1 else 90)
    ax.set_xticks(np.arange(len(rows)), row_labels(categories, rows), fontsize="x-small")
    ax.set_ylim(0, 1.15)
    ax.set_xlabel("suite row and shape (on top of each bar: the ops' ms per call, kernel time on a GPU)")
    ax.set_ylabel("share of op time")
    ax.set_title(title or "Where the time goes, by category" + (f": {variants[0]}" if len(variants) == 1 else ""))
    fig.legend(fontsize="x-small", loc="outside right upper", title="category")
    if len(variants) > 1:  # one variant is named in the title instead
        bars = [Patch(facecolor="white", edgecolor="black", hatch=hatches[j % len(hatches)])
                for j in range(len(variants))]
        fig.legend(bars, variants, fontsize="x-small", loc="outside right lower", title="variant")
    return fig


def plot_mask_share(mask_shares: pd.DataFrame, title: str | None = None) -> Figure:
    """Share of op time spent building and applying masks, per row and variant (`profiling.mask_share_table`)."""
    fig, ax = _grouped_bars(mask_shares, 100 * mask_shares.mask_share.fillna(0.0), scale=0.5)
    ax.set_xlabel("suite row and shape (batch, sequence, d_model, heads)")
    ax.set_ylabel("mask construction + masking (% of op time)")
    ax.set_title(title or "Time spent on masks")
    fig.legend(fontsize="small", loc="outside right upper")
    return fig


def plot_longctx(results: pd.DataFrame, title: str | None = None) -> Figure:
    """Chunk size against median time (whiskers at p20/p80) and against peak memory, one line per attention
    strategy, the full-sequence layer as a dashed line; `results` as returned by `longctx.run_longctx`.

    Peak memory is not counted on the CPU: that panel then says so instead of drawing.
    """
    measured = results[results.kind == "measure"]
    chunked = measured[(measured.variant == "chunked") & measured.median_ms.notna()].sort_values("chunk_size")
    full = measured[(measured.variant != "chunked") & measured.median_ms.notna()]
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax_time, ax_mem = fig.subplots(1, 2)
    colors = matplotlib.colormaps["tab10"]
    drawn: dict[str, dict[str, pd.Series]] = {"time": {}, "memory": {}}  # per panel: label → its line
    for i, (name, sub) in enumerate(chunked.groupby("attention", sort=False)):
        resolved = sub.resolved_attention.iloc[0]
        label = name if resolved == name or pd.isna(resolved) else f"{name} → {resolved}"
        style = OVERLAP_STYLES[i % len(OVERLAP_STYLES)]  # strategies of equal time or memory hide each other
        err = np.vstack([sub.median_ms - sub.p20_ms, sub.p80_ms - sub.median_ms]).clip(min=0)
        ax_time.errorbar(sub.chunk_size, sub.median_ms, yerr=err, capsize=2, color=colors(i),
                         label=_covering_label(label, sub.chunk_size, sub.median_ms, drawn["time"]), **style)
        ax_mem.plot(sub.chunk_size, sub.peak_gib, color=colors(i),
                    label=_covering_label(label, sub.chunk_size, sub.peak_gib, drawn["memory"]), **style)
    for r in full.itertuples():
        for ax, value in ((ax_time, r.median_ms), (ax_mem, r.peak_gib)):
            ax.axhline(value, color="black", linestyle="--", linewidth=0.8, label=f"full sequence ({r.variant})")
    caps = results.memory_cap_gib.dropna().unique()
    for cap in caps:
        ax_mem.axhline(cap, color="red", linestyle=":", linewidth=0.8, label=f"memory cap {cap:.3g} GiB")
    counted = results.peak_gib.notna().any()
    if not counted:
        ax_mem.axis("off")
        ax_mem.text(0.5, 0.5, "peak memory is not counted on the CPU", ha="center", va="center",
                    transform=ax_mem.transAxes)
    sizes = sorted(chunked.chunk_size.dropna().astype(int).unique())
    panels = [(ax_time, "median ms per call")] + ([(ax_mem, "peak GiB")] if counted else [])
    ax_time.set_title("time per call", fontsize="small")
    ax_mem.set_title("peak memory" if counted else "", fontsize="small")
    for ax, ylabel in panels:
        if sizes:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [f"{c:,}" for c in sizes])
            ax.minorticks_off()
        ax.set_xlabel("chunk size (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)  # the full layer's line off the axis's edge, and sizes read as sizes
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small")
    first = results.iloc[0]
    shape = f"B{int(first['batch'])} N{int(first['seq_len']):,} d{int(first['d_model'])}"
    fig.suptitle(title or f"Chunked layer, {shape} — {first['device']}, {first['dtype']}")
    return fig


def plot_bandwidth(kernels: pd.DataFrame, copy_gbps: float, title: str | None = None) -> Figure:
    """GB/s of torch's add + layer_norm and of the fused kernel per input (n_rows × d_model), with the device's
    copy bandwidth as the line neither can pass; `kernels` as returned by `kernels.bench.kernel_table`. Inputs
    go left to right by size."""
    kernels = kernels.iloc[np.argsort((kernels.n_rows * kernels.d_model).to_numpy(), kind="stable")]
    labels = [f"{m:,}×{n:,}" for m, n in zip(kernels.n_rows, kernels.d_model)]
    x = np.arange(len(labels))
    fig = Figure(figsize=(max(6, 0.9 * len(labels) + 2), 4), layout="constrained")
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    for i, (name, label) in enumerate((("torch", "torch: add, then layer_norm"), ("triton", "fused Triton kernel"))):
        bars = ax.bar(x + (i - 0.5) * 0.4, kernels[f"{name}_gbps"], 0.4, label=label, color=colors(i))
        ax.bar_label(bars, [format_number(v) for v in kernels[f"{name}_gbps"]], fontsize="x-small", rotation=90,
                     padding=2, bbox=VALUE_BOX)
    ax.set_yscale("log")  # the smallest inputs reach a thousandth of the largest: on a linear axis, no bar
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_number(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    if copy_gbps == copy_gbps:  # NaN: no copy bandwidth measured
        ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=0.8, label=f"copy {copy_gbps:,.4g} GB/s")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 4)  # room for the values over the tallest bars
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_xlabel("input rows × d_model")
    ax.set_ylabel("GB/s (fewest bytes / median time)")
    ax.set_title(title or "Residual add + LayerNorm on its own")
    fig.legend(fontsize="small", loc="outside right upper")
    return fig
