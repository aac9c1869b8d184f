"""Figures of sweep results: speedups, the roofline, mask shares, a kernel's bandwidth; each function returns a
matplotlib Figure and draws nothing else. Profiles are drawn in `plots_profile`, long context in
`plots_longctx`; where labels go is `labels`' job."""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..core.device import timed_on
from ..measure.ceilings import Ceilings
from .formatting import format_number, three_digits
from .labels import (
    NAME_FONT_PT,
    NAME_LINE,
    PLAIN_TICKS,
    VALUE_BOX,
    label_line,
    label_rows,
    legend_if_labelled,
    plain_log_ticks,
    row_labels,
    row_tops,
    text_width,
)
from .plots_profile import panel_title


def _grouped_bars(data: pd.DataFrame, value: pd.Series, whiskers: tuple[pd.Series, pd.Series] | None = None,
                  first_color: int = 0, scale: float = 0.7, base: float = 0.0):
    """One bar per (row, variant) of `data`, grouped by row, variants side by side, each from `base` to its
    value (below `base`, a bar points down): (figure, axes)."""
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
        ax.bar(x, heights - base, width, bottom=base, yerr=err, capsize=2 if err is not None else 0, label=name,
               color=colors(i + first_color))
    ax.set_xticks(np.arange(len(rows)), row_labels(data, rows), fontsize="small" if len(rows) <= 4 else "x-small")
    return fig, ax


def _times(ax) -> None:
    """A log₂ speedup axis read as 1×, 2×, 4×, … (and ½× below 1), from a labelled power of two at or below
    the shortest bar and 1× to one above the tallest, so no bar runs past the last tick."""
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    low, high = ax.get_ylim()
    if high > 0:
        ax.set_ylim(2.0 ** np.floor(np.log2(min(low, 1.0))), 2.0 ** np.ceil(np.log2(high)))


def plot_speedups(results: pd.DataFrame, title: str | None = None) -> Figure:
    """Speedup over the reference per row and variant, whiskers at p20/p80 of the interleaved ratios; each bar
    from 1× (the reference's time), up for a speedup, down for a slowdown, its value beyond its whisker where the
    bars are wide enough (`_speedup_values`)."""
    data = results[(results.variant != "reference") & results.speedup.notna()]
    fig, ax = _grouped_bars(data, data.speedup, (data.speedup_p20, data.speedup_p80), first_color=1, base=1.0)
    ax.axhline(1.0, color="black", linewidth=0.8)
    _times(ax)
    ax.set_xlabel("suite row and shape (batch, sequence, d_model, heads)")
    ax.set_ylabel("speedup over the reference")
    first = results.iloc[0]
    ax.set_title(title or f"Speedup over the reference\n{first['device']}, {first['dtype']}")
    # right of the axes at mid-height: a title wider than the axes ("T4 (emulated on …)") runs clear of it
    legend_if_labelled(fig, fontsize="small", loc="outside right center")
    fig.draw_without_rendering()  # the layout final, so the values are placed where they are drawn
    _speedup_values(ax, fig, data)
    return fig


def _speedup_values(ax, fig: Figure, data: pd.DataFrame) -> None:
    """Each bar's speedup, upright, beyond its whisker: over a bar that points up, under one that points down;
    the axis grows by powers of two until every value is inside it. Only where every bar is wide enough to hold
    a value's height, so that no two touch (many variants side by side: no values; the table has them). The
    layout must be done first: the values are placed in pixels."""
    px = fig.dpi / 72
    rows = list(dict.fromkeys(data.row))
    bars = [(bar, (row, container.get_label())) for container in ax.containers
            if isinstance(container, BarContainer) for bar, row in zip(container, rows)]
    widths = [ax.transData.transform((bar.get_width(), 1))[0] - ax.transData.transform((0, 1))[0] for bar, _ in bars]
    if not bars or min(widths) < NAME_LINE * px:
        return
    lines = data.set_index(["row", "variant"])
    values = []  # (x, whisker's end, text, length in px, up)
    for bar, key in bars:
        if key not in lines.index:
            continue
        line = lines.loc[key]
        up = line.speedup >= 1
        end = line.speedup_p80 if up else line.speedup_p20
        text = f"{three_digits(line.speedup)}×"
        length = (text_width(text) + 2 * VALUE_PAD) * px
        values.append((bar.get_x() + bar.get_width() / 2, line.speedup if end != end else end, text, length, up))
    for _ in range(4):  # a power of two more each time, where a value would run past the axis
        tips = [ax.transData.transform((0, end))[1] + (length if up else -length) for _, end, _, length, up in values]
        over, under = max(tips, default=0) > ax.bbox.y1, min(tips, default=ax.bbox.y0) < ax.bbox.y0
        if not (over or under):
            break
        low, high = ax.get_ylim()
        ax.set_ylim(low / 2 if under else low, high * 2 if over else high)
    for x, end, text, _, up in values:
        ax.annotate(text, (x, end), textcoords="offset points", xytext=(0, VALUE_PAD if up else -VALUE_PAD),
                    ha="center", va="bottom" if up else "top", rotation=90, fontsize=NAME_FONT_PT,
                    bbox=VALUE_BOX).set_in_layout(False)


def plot_roofline(results: pd.DataFrame, ceilings: Ceilings, datasheet: Ceilings | None = None,
                  title: str | None = None, variants: Sequence[str] | None = None) -> Figure:
    """Log–log roofline: the compute and bandwidth ceilings, the ridge point, one marker per variant × row.

    x = arithmetic intensity (useful FLOPs / fewest bytes), y = achieved TFLOP/s (useful FLOPs /
    median time); `results` as returned by `roofline.add_roofline`; the datasheet roof is dashed. With
    `variants`, only those, and a line per row from the first to the last: the climb a row made. Where the
    rows' highest points crowd together (`crowded_rows`), a second panel (b) shows them closer (the grey box of
    (a), no lines between the panels), its title listing the rows whose points it shows. Each panel numbers every
    point it shows by its row, (a) leaving those of the grey box to (b) (with `variants`; without, a row's points
    stand in one column, numbered at its top), clear of every marker and of the other numbers (`labels.label_rows`),
    the ridge's value clear of them all and of the lines (`labels.label_line`); log ticks read as plain numbers
    (`labels.plain_log_ticks`).
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
    ax.set_xlabel("arithmetic intensity (useful FLOPs / fewest bytes)")
    ax.set_ylabel("achieved TFLOP/s (useful FLOPs / median time)")
    ax.set_title(panel_title("a", title or f"Roofline — {ceilings.device}, {ceilings.dtype}", len(axes)))
    # the points numbered: with `variants`, every one (both ends of each row's climb); else the top of each row's
    # column (a row's points share its intensity, one above another)
    numbered = data if variants is not None else row_tops(data)
    if zoom:
        tops = row_tops(data)
        tops = tops[tops.row.isin(crowded)]
        (x0, x1), (y0, y1) = ((np.log10(v.min()) - ZOOM_PAD, np.log10(v.max()) + ZOOM_PAD)
                              for v in (tops.intensity, tops.achieved_tflops))
        roof = np.log10(min(ceilings.matmul_tflops, ceilings.copy_gbps * 10 ** x1 / 1e3))  # its highest in view
        if roof - y1 < ROOF_IN_ZOOM:  # near enough to show how much room is left above the points
            y1 = max(y1, roof + ZOOM_PAD)
        closer = axes[1]
        closer.set_xlim(10 ** x0, 10 ** x1)
        closer.set_ylim(10 ** y0, 10 ** y1)
        shown = [row for row in dict.fromkeys(data.row) if row in set(points_in_view(closer, numbered).row)]
        closer.set_title(panel_title("b", f"the grey box of (a), closer:\nrows {', '.join(map(str, shown))}", 2),
                         fontsize="small")
        closer.set_xlabel(ax.get_xlabel())  # the same quantity as (a), in the same words
        closer.set_ylabel(ax.get_ylabel())
        closer.spines[:].set_edgecolor("gray")  # the box's colour, no lines between the panels to cross them
        ax.indicate_inset((10 ** x0, 10 ** y0, 10 ** x1 - 10 ** x0, 10 ** y1 - 10 ** y0), edgecolor="gray")
    for panel in axes:
        plain_log_ticks(panel)
    legend_if_labelled(fig, fontsize="small", loc="outside right upper")
    fig.draw_without_rendering()  # the layout final, so labels are placed where they are drawn
    # with a closer panel, (a) numbers only the points outside its grey box: (b) numbers those inside
    boxed = points_in_view(axes[1], numbered) if zoom else numbered.iloc[:0]
    numbers = label_rows(ax, fig, data, numbered.drop(boxed.index))
    label_line(ax, fig, f"ridge {three_digits(ceilings.ridge)} FLOP/B", ceilings.ridge, numbers)  # clear of them all
    if zoom:
        label_rows(axes[1], fig, data, boxed)
    return fig


def points_in_view(ax, points: pd.DataFrame) -> pd.DataFrame:
    """The rows of `points` (intensity, achieved_tflops) inside `ax`'s limits."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    return points[points.intensity.between(x0, x1) & points.achieved_tflops.between(y0, y1)]


MIN_CROWD = 3  # rows crowded together from which the roofline gets a closer panel
CROWD_DECADES = 0.15  # highest points this close in x and in y (log10, a factor of 1.4) crowd each other's labels
ZOOM_PAD = 0.06  # decades of margin round the crowded points in the closer panel
ROOF_IN_ZOOM = 0.3  # decades: a measured roof at most this far above them is shown in the closer panel too


def crowded_rows(data: pd.DataFrame) -> list:
    """The rows whose highest point lies within CROWD_DECADES of another row's in both axes: where their
    labels would crowd on a full roofline."""
    tops = row_tops(data)
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
        # an emulated T4's speeds are its GPU's, and so is the datasheet beside them: the legend names that GPU
        kind = "measured" if c is ceilings else (
            "datasheet" if timed_on(c.device) == c.device else f"datasheet of {timed_on(c.device)}")
        ax.plot(x, roof, style, color="black", linewidth=1.2 if c is ceilings else 0.8,
                label=f"{kind}: {three_digits(c.matmul_tflops)} TFLOP/s, {three_digits(c.copy_gbps)} GB/s"
                if legend else None)
    ax.axvline(ceilings.ridge, color="gray", linestyle=":", linewidth=0.8)
    for xs, ys in links:
        ax.plot(xs, ys, color="lightgray", linewidth=1, zorder=2)
    colors = matplotlib.colormaps["tab10"]
    for i, name in enumerate(dict.fromkeys(data.variant)):
        sub = data[data.variant == name]
        ax.scatter(sub.intensity, sub.achieved_tflops, s=22, color=colors(i), label=name if legend else None, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")


def plot_mask_share(mask_shares: pd.DataFrame, title: str | None = None) -> Figure:
    """Share of op time spent building and applying masks, per row and variant (`profiling.mask_share_table`)."""
    fig, ax = _grouped_bars(mask_shares, 100 * mask_shares.mask_share.fillna(0.0), scale=0.5)
    ax.set_xlabel("suite row and shape (batch, sequence, d_model, heads)")
    ax.set_ylabel("mask construction + masking (% of op time)")
    ax.set_title(title or "Time spent on masks")
    legend_if_labelled(fig, fontsize="small", loc="outside right upper")
    return fig


def plot_bandwidth(kernels: pd.DataFrame, copy_gbps: float, title: str | None = None) -> Figure:
    """GB/s of torch's add + layer_norm and of the fused kernel per input (n_rows × d_model), with the device's
    copy bandwidth as the line neither can pass; `kernels` as returned by `kernels.bench.kernel_table`. Inputs
    go left to right by size. Each bar's value stands over it, or inside its top where above it would cross the
    copy line (`_bar_values`)."""
    kernels = kernels.iloc[np.argsort((kernels.n_rows * kernels.d_model).to_numpy(), kind="stable")]
    labels = [f"{m:,}×{n:,}" for m, n in zip(kernels.n_rows, kernels.d_model)]
    x = np.arange(len(labels))
    fig = Figure(figsize=(max(6, 0.9 * len(labels) + 2), 4), layout="constrained")
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    drawn = []  # (bars, values), given their values once the layout is done
    for i, (name, label) in enumerate((("torch", "torch: add, then layer_norm"), ("triton", "fused Triton kernel"))):
        bars = ax.bar(x + (i - 0.5) * 0.4, kernels[f"{name}_gbps"], 0.4, label=label, color=colors(i))
        drawn.append((bars, kernels[f"{name}_gbps"]))
    ax.set_yscale("log")  # the smallest inputs reach a thousandth of the largest: on a linear axis, no bar
    ax.yaxis.set_major_formatter(PLAIN_TICKS)
    ax.yaxis.set_minor_formatter(NullFormatter())
    if copy_gbps == copy_gbps:  # NaN: no copy bandwidth measured
        ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=0.8,
                   label=f"copy {three_digits(copy_gbps)} GB/s")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 4)  # room for the values over the tallest bars
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_xlabel("input rows × d_model")
    ax.set_ylabel("GB/s (fewest bytes / median time)")
    ax.set_title(title or "Residual add + LayerNorm on its own")
    legend_if_labelled(fig, fontsize="small", loc="outside right upper")
    fig.draw_without_rendering()  # the layout final, so the values are placed where they are drawn
    for bars, values in drawn:
        _bar_values(ax, fig, bars, values, copy_gbps)
    return fig


VALUE_PAD = 2  # points between a bar's end and its value, and between a value and a line it keeps clear of


def _bar_values(ax, fig: Figure, bars, values: pd.Series, line: float) -> None:
    """Each bar's value, upright, over its top; inside the top instead where over it the value would cross the
    horizontal line at `line` (NaN: none), and over the line where the bar is too short to hold it either. The
    layout must be done first: the values' lengths are counted in pixels."""
    px = fig.dpi / 72
    line_y = ax.transData.transform((0, line))[1] if line == line else np.nan
    for bar, value in zip(bars, values):
        text = format_number(value)
        length = (text_width(text) + 2 * VALUE_PAD) * px
        bottom, top = (ax.transData.transform((0, v))[1] for v in (ax.get_ylim()[0], value))
        over = top < line_y + VALUE_PAD * px and top + length > line_y - VALUE_PAD * px  # would cross the line
        if not over:
            at, shift, va = value, VALUE_PAD, "bottom"
        elif top - bottom >= length:  # inside the bar's top
            at, shift, va = value, -VALUE_PAD, "top"
        else:  # a bar too short to hold it, just under the line: over the line
            at, shift, va = line, VALUE_PAD, "bottom"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, at), textcoords="offset points", xytext=(0, shift),
                    ha="center", va=va, rotation=90, fontsize=NAME_FONT_PT, bbox=VALUE_BOX).set_in_layout(False)
