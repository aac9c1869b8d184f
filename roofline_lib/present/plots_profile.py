"""Figures of profiles: where the time goes by category, each op on the roofline and against the copy
bandwidth, one call's kernels on a time axis; each function returns a matplotlib Figure."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..measure.ceilings import Ceilings
from ..measure.profile_rules import CATEGORIES
from .formatting import format_number, three_digits
from .labels import LABEL_PAD, NAME_LINE, VALUE_BOX, legend_if_labelled, name_column, name_points, row_labels, swarm

MIN_BAR = 0.004  # the narrowest bar of a timeline, as a share of its axis
PANEL_LETTERS = "abcdefghijklmnopqrstuvwxyz"  # a figure of several panels names each "(a) …", "(b) …"
# one colour per profiling category in every figure: tab10 for the ten op categories, near-black for the
# whole-layer kernel, which holds all of them
CATEGORY_COLORS = {c: matplotlib.colormaps["tab10"](i) if i < 10 else "#333333" for i, c in enumerate(CATEGORIES)}


def panel_title(letter: str, name: str, panels: int) -> str:
    """A panel's title: "(a) reference" where the figure has several panels, so the text can point at one;
    the name alone in a figure of one panel."""
    return f"({letter}) {name}" if panels > 1 else name


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
                   hatch=hatches[j % len(hatches)], edgecolor="white", linewidth=0.3,
                   label=category if j == 0 else None)
            bottom += shares[category].to_numpy()
        for xi, t in zip(x, total / 1e3):
            if t > 0:
                ax.text(xi, 1.01, three_digits(t), ha="center", va="bottom", fontsize="x-small" if len(variants) == 1
                        else "xx-small", rotation=0 if len(variants) == 1 else 90)
    ax.set_xticks(np.arange(len(rows)), row_labels(categories, rows), fontsize="x-small")
    ax.set_ylim(0, 1.15)
    ax.set_xlabel("suite row and shape (on top of each bar: the ops' ms per call, kernel time on a GPU)")
    ax.set_ylabel("share of op time")
    ax.set_title(title or "Where the time goes, by category" + (f": {variants[0]}" if len(variants) == 1 else ""))
    legend_if_labelled(fig, fontsize="x-small", loc="outside right upper", title="category")
    if len(variants) > 1:  # one variant is named in the title instead
        bars = [Patch(facecolor="white", edgecolor="black", hatch=hatches[j % len(hatches)])
                for j in range(len(variants))]
        fig.legend(bars, variants, fontsize="x-small", loc="outside right lower", title="variant")
    return fig


def plot_op_roofline(points: dict[str, pd.DataFrame], ceilings: Ceilings, title: str | None = None) -> Figure:
    """Each op of a layer on the roofline, one panel per layer (`profiling.op_roofline` tables by name):
    x = intensity (FLOPs / byte it reads and writes), y = achieved TFLOP/s; ops without matrix products sit
    at the left edge with their GB/s against the bandwidth roof, side by side where their markers would hide each
    other (`labels.swarm`). Marker area ∝ share of the layer's time; every op is named: those at the left edge in
    a column joined to their markers by lines that cross no other marker (`labels.name_column`; the y axis
    reaches low enough for the column to fit under the roof), the others beside theirs."""
    fig = Figure(figsize=(5.2 * len(points) + 2, 4.5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(points), sharey=True))
    floor_x = ceilings.ridge / 1e4  # where an op without FLOPs is drawn: far left of the ridge
    panels = []  # per panel: (its axes, its ops' table, their markers by row), named once the layout is done
    for letter, ax, (name, table) in zip(PANEL_LETTERS, axes, points.items()):
        x = np.geomspace(floor_x, ceilings.ridge * 20, 200)
        ax.plot(x, np.minimum(ceilings.matmul_tflops, ceilings.copy_gbps * x / 1e3), color="black", linewidth=1)
        xs = table.intensity.where(table.flops > 0, floor_x)
        ys = table.tflops.where(table.flops > 0, table.gbps * floor_x / 1e3)  # below the roof by its share of copy GB/s
        sizes = 20 + 600 * table.share  # marker area, points²
        drawn = {}
        for rank, i in enumerate(sizes.sort_values(ascending=False).index):  # small markers drawn over large ones
            drawn[i] = ax.scatter(xs.loc[i], ys.loc[i], s=sizes.loc[i], alpha=0.8, edgecolor="black", linewidth=0.4,
                                  color=CATEGORY_COLORS.get(table.category.loc[i]), zorder=3 + rank / 1000)
        panels.append((ax, table, drawn))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(panel_title(letter, name, len(points)), fontsize="small")
        ax.set_xlabel("intensity (FLOPs per byte the op reads and writes)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.tick_params(labelleft=True)  # a shared axis, labelled on every panel: each one reads on its own
    shown = dict.fromkeys(c for table in points.values() for c in table.category)
    handles = [Line2D([], [], marker="o", linestyle="", color=CATEGORY_COLORS.get(c), markeredgecolor="black")
               for c in shown]
    fig.legend(handles, list(shown), fontsize="x-small", title_fontsize="x-small", loc="outside lower center",
               ncols=4, title="category (ops with no matrix product, 0 FLOPs, are drawn at the left edge, side by "
                              "side, below the roof by their share of the copy bandwidth)")
    fig.suptitle(title or f"Ops on the roofline — {ceilings.device}, {ceilings.dtype}")
    fig.draw_without_rendering()  # the layout and the shared axis limits final, so markers and names land there
    piles = [t.gbps[t.flops <= 0] * floor_x / 1e3 for t in points.values()]  # each panel's ops at the left edge
    _room_for_column(axes[0], max(len(pile) for pile in piles), max((pile.max() for pile in piles if len(pile)),
                                                                    default=np.nan))
    for ax in axes:
        ax.set_xlim(ax.get_xlim())
        ax.set_ylim(ax.get_ylim())  # as laid out: markers moved aside must not rescale the panels
    for ax, table, drawn in panels:
        at = {i: tuple(c.get_offsets()[0]) + (np.sqrt(c.get_sizes()[0]) / 2,) for i, c in drawn.items()}  # x, y, r
        piled = [i for i in table.index if table.flops.loc[i] <= 0]  # no FLOPs: all at the left edge
        for i, x in zip(piled, swarm(ax, fig, [at[i] for i in piled])):
            at[i] = (x, *at[i][1:])
            drawn[i].set_offsets([at[i][:2]])
        markers = list(at.values())
        named = {i: (*at[i][:2], table.op.loc[i].removeprefix("aten::").replace("_scaled_dot_product_", "sdpa_"),
                     at[i][2]) for i in table.index}  # (x, y, name, marker radius)
        column = name_column(ax, fig, [named[i] for i in piled], [at[i] for i in piled])
        name_points(ax, fig, [n for i, n in named.items() if i not in piled], markers, column)
    return fig


def _room_for_column(ax, names: int, top: float) -> None:
    """Lower the (shared) y axis's bottom, where needed, so that a column of `names` names fits between it and
    `top` (data: the highest marker of a pile, near the roof the names must stay under) with a name's height to
    spare. The layout must be done first: the room is counted in pixels."""
    px = ax.figure.dpi / 72
    need = (names + 1) * (NAME_LINE + 2 * LABEL_PAD) * px
    low, high = np.log10(ax.get_ylim())
    span, room = high - low, np.log10(top) - low  # decades
    tall = ax.bbox.height
    if names and tall > need and room * tall / span < need:  # (room + e) / (span + e) of the height must hold them
        ax.set_ylim(bottom=10 ** (low - (need * span - room * tall) / (tall - need)))


def plot_op_bandwidth(points: dict[str, pd.DataFrame], ceilings: Ceilings, title: str | None = None) -> Figure:
    """The GB/s each op of a layer reaches (bytes it reads and writes / its GPU time), one panel per layer
    (`profiling.op_roofline` tables by name), against a plain copy's GB/s: how far under the bandwidth roof
    the memory-bound ops sit. Ops of 2 % or more of the layer's time, most time first."""
    fig = Figure(figsize=(5.2 * len(points) + 2, 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(points), sharex=True))
    for letter, ax, (name, table) in zip(PANEL_LETTERS, axes, points.items()):
        shown = table[table.share >= 0.02].sort_values("time_us")  # bottom to top: the most time on top
        labels = [op.removeprefix("aten::").replace("_scaled_dot_product_", "sdpa_") for op in shown.op]
        bars = ax.barh(range(len(shown)), shown.gbps, color=[CATEGORY_COLORS.get(c) for c in shown.category])
        ax.bar_label(bars, [format_number(v) for v in shown.gbps], fontsize="x-small", padding=2, bbox=VALUE_BOX)
        ax.set_yticks(range(len(shown)), labels, fontsize="x-small")
        ax.margins(x=0.15)  # room for the values right of the longest bars
        ax.axvline(ceilings.copy_gbps, color="black", linestyle="--", linewidth=0.8, zorder=1)  # under the values
        ax.annotate(f"copy {three_digits(ceilings.copy_gbps)} GB/s", (ceilings.copy_gbps, 1.0),
                    xycoords=("data", "axes fraction"), textcoords="offset points", xytext=(-4, -10), ha="right",
                    fontsize="x-small", bbox=VALUE_BOX)
        ax.set_title(panel_title(letter, name, len(points)), fontsize="small")
        ax.set_xlabel("GB/s (bytes read and written / GPU time)")
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
    ax.set_title(title or f"One call: {len(timeline)} kernels, busy {three_digits(busy)} µs of "
                          f"{three_digits(span)} µs", fontsize="small")
    legend_if_labelled(fig, fontsize="x-small", loc="outside lower center", ncols=4, title="category")
    return fig
