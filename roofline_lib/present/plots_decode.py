"""Figures of decode: the key/value cache's memory against context, a step's time against its floor, and prefill
and a step on the roofline beside what a step must move."""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..core.device import T4_MEMORY_GIB  # the line a learner's cache must stay under
from ..measure.ceilings import Ceilings
from .formatting import three_digits
from .labels import legend_if_labelled, name_points, plain_log_ticks
from .plots_profile import PANEL_LETTERS, panel_title


def plot_cache_memory(memory: pd.DataFrame, capacity_gib: float | None = None) -> Figure:
    """The cache's GiB against context (`runs.decode.cache_memory`), one line per stack × batch, log-log; the
    T4's memory (black dashed) and, if given and not the same, this device's (black dotted) as horizontal lines,
    in a colour no stack × batch line takes; the legend right of the axes, where it covers no line."""
    fig = Figure(figsize=(9.5, 4.2), layout="constrained")
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    for i, ((stack, batch), part) in enumerate(memory.groupby(["stack", "batch"], sort=False)):
        ax.plot(part.context, part.cache_gib, marker="o", color=colors(i), label=f"{stack}, B {batch}")
    ax.axhline(T4_MEMORY_GIB, color="black", linestyle="--",
               label=f"what PyTorch can use on a T4 ({three_digits(T4_MEMORY_GIB)} GiB)")
    if capacity_gib is not None and three_digits(capacity_gib) != three_digits(T4_MEMORY_GIB):  # not a T4's again
        ax.axhline(capacity_gib, color="black", linestyle=":", label=f"this device ({three_digits(capacity_gib)} GiB)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens per sequence)")
    ax.set_ylabel("key/value cache (GiB, fp16)")
    ax.set_title("The cache grows with batch × context × layers × d_model")
    legend_if_labelled(fig, fontsize=8, loc="outside right upper")
    return fig


def plot_step_against_floor(timed: Sequence[pd.DataFrame]) -> Figure:
    """One panel per `runs.decode.time_decode` table: µs per layer per step of each decoder that ran, as a dot
    with its value on a log axis shared by the panels, the step's floor as a line (a decoder that could not run
    here has no dot; the table says why). Dots, not bars: a bar on a log axis starts at an arbitrary value, so its
    length says nothing; a dot's place is its time, and the same place means the same time in every panel."""
    fig = Figure(figsize=(8.5, 2.2 + 1.6 * len(timed)), layout="constrained")  # wide: a legend right of each
    axes = fig.subplots(len(timed), 1, squeeze=False, sharex=True)[:, 0]
    values = []  # every time and floor drawn: the shared axis spans them all
    for letter, ax, table in zip(PANEL_LETTERS, axes, timed):
        ran = table[table.us_per_layer.notna()] if "us_per_layer" in table else table.iloc[:0]
        floor = float(table.floor_us.iloc[0])
        values += [floor, *ran.us_per_layer]
        ax.axvline(floor, color="tab:red", linestyle="--",
                   label=f"floor: {three_digits(floor)} µs\n(bytes ÷ bandwidth)")
        ax.scatter(ran.us_per_layer, ran.decoder, color="tab:blue", s=36, zorder=3)
        for y, value in enumerate(ran.us_per_layer):
            ax.annotate(three_digits(value), (value, y), textcoords="offset points", xytext=(6, 0), va="center",
                        fontsize=8)
        ax.set_ylim(max(len(ran), 1) - 0.5, -0.5)  # the first decoder on top, half a row of room round the dots
        ax.grid(axis="y", color="0.9", linewidth=0.8)  # a guide from each decoder's name to its dot
        ax.set_axisbelow(True)
        first = table.iloc[0]
        ax.set_title(panel_title(letter, f"{first['shape']}: context {int(first.context):,}, "
                                         f"{int(first.layers)} layers", len(timed)), fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # clear of the values
    axes[0].set_xscale("log")  # a step can take 10⁴× its floor in smoke mode, 2× on a GPU: each visible
    axes[0].set_xlim(min(values) / 2, 4 * max(values))  # room for the values right of the dots
    for ax in axes:
        plain_log_ticks(ax)
        ax.tick_params(axis="x", labelbottom=True)  # each panel read on its own too
        ax.set_xlabel("µs per layer per step (log scale)")
    return fig


def plot_prefill_and_decode(points: pd.DataFrame, parts: pd.DataFrame, ceilings: Ceilings) -> Figure:
    """(a) Prefill and a step on the roofline (`present.decode_report.roofline_points`): the measured roof, the
    ridge, each call at its intensity — filled where it was timed (achieved TFLOP/s), hollow on the roof where it
    was not; (b) a step's bytes by part against context (`step_bytes_table`), stacked."""
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    ax, bars = fig.subplots(1, 2, width_ratios=(3, 2))
    x = np.geomspace(min(ceilings.ridge / 1e3, points.flops_per_byte.min() / 3),
                     max(ceilings.ridge * 10, points.flops_per_byte.max() * 3), 200)
    ax.plot(x, np.minimum(ceilings.matmul_tflops, ceilings.copy_gbps * x / 1e3), color="black",
            label=f"measured roof: {three_digits(ceilings.matmul_tflops)} TFLOP/s, "
                  f"{three_digits(ceilings.copy_gbps)} GB/s")
    ax.axvline(ceilings.ridge, color="gray", linestyle=":", linewidth=0.8,
               label=f"ridge: {three_digits(ceilings.ridge)} FLOP/B")
    colors = {"prefill": "tab:orange", "one step": "tab:blue"}
    named, markers = [], []  # (x, y, name, radius) and (x, y, radius): placed once the layout is done
    for kind, color in colors.items():
        sub = points[points.call.str.startswith(kind)]
        timed = sub[sub.achieved_tflops.notna()]
        ax.scatter(timed.flops_per_byte, timed.achieved_tflops, color=color, s=36, zorder=3,
                   label=f"{kind}, measured")
        roof = np.minimum(ceilings.matmul_tflops, ceilings.copy_gbps * sub.flops_per_byte / 1e3)
        ax.scatter(sub.flops_per_byte, roof, facecolors="none", edgecolors=color, s=36, zorder=3,
                   label=f"{kind}, its roof")
        markers += [(x, y, 3.5) for x, y in zip(sub.flops_per_byte, roof)]
        markers += [(x, y, 3.5) for x, y in zip(timed.flops_per_byte, timed.achieved_tflops)]
        named += [(x, y, call, 3.5) for x, y, call in zip(timed.flops_per_byte, timed.achieved_tflops, timed.call)]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("intensity (useful FLOPs / fewest bytes)")
    ax.set_ylabel("TFLOP/s (useful FLOPs / median time)")
    ax.set_title(panel_title("a", "prefill and one decode step, one layer each", 2), fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    labels = [f"{int(c):,}" for c in parts.context]
    bottom = np.zeros(len(parts))
    written = three_digits(parts.new_kv_written_MB.max())
    for column, name, color in (("weights_MB", "weights (read once)", "tab:green"),
                                ("cache_read_MB", "cache read", "tab:purple"),
                                ("new_kv_written_MB", f"new key and value written (at most {written} MB: "
                                 "too thin to see)", "tab:red")):
        bars.bar(labels, parts[column], bottom=bottom, color=color, label=name)
        bottom += parts[column].to_numpy()
    for x, total in enumerate(bottom):
        bars.text(x, total, three_digits(total), ha="center", va="bottom", fontsize=8)
    bars.set_ylim(0, 1.45 * bottom.max())  # room above the bars for the totals and the legend
    first = parts.iloc[0]
    bars.set_xlabel(f"context (positions attended); B {int(first.batch)}, d_model {int(first.d_model)}")
    bars.set_ylabel("MB one step of one layer moves")
    bars.set_title(panel_title("b", "what a step must move", 2), fontsize=10)
    bars.legend(fontsize=7, loc="upper left")
    fig.draw_without_rendering()  # the layout final, so names are placed where they are drawn
    name_points(ax, fig, named, markers)
    return fig
