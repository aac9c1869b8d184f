"""Figures of decode: the key/value cache's memory against context, and a step's time against its floor."""
from __future__ import annotations

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from ..core.device import T4_MEMORY_GIB  # the line a learner's cache must stay under


def plot_cache_memory(memory: pd.DataFrame, capacity_gib: float | None = None) -> Figure:
    """The cache's GiB against context (`runs.decode.cache_memory`), one line per stack × batch, log-log; the
    T4's memory and, if given, this device's as horizontal lines."""
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    for i, ((stack, batch), part) in enumerate(memory.groupby(["stack", "batch"], sort=False)):
        ax.plot(part.context, part.cache_gib, marker="o", color=colors(i), label=f"{stack}, B {batch}")
    ax.axhline(T4_MEMORY_GIB, color="tab:red", linestyle="--", label=f"a T4's memory ({T4_MEMORY_GIB:g} GiB)")
    if capacity_gib is not None:
        ax.axhline(capacity_gib, color="black", linestyle=":", label=f"this device ({capacity_gib:,.0f} GiB)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens per sequence)")
    ax.set_ylabel("key/value cache (GiB, fp16)")
    ax.set_title("The cache grows with batch × context × layers × d_model")
    ax.legend(fontsize=8)
    return fig


def plot_step_against_floor(timed: pd.DataFrame) -> Figure:
    """µs per layer per step of each decoder (`runs.decode.time_decode`) as bars, the step's floor as a line."""
    fig = Figure(figsize=(7.5, 3.8), layout="constrained")
    ax = fig.subplots()
    ran = timed[timed.status.eq("ok")]
    ax.barh(ran.decoder, ran.us_per_layer, color="tab:blue")
    floor = float(timed.floor_us.iloc[0])
    ax.axvline(floor, color="tab:red", linestyle="--", label=f"floor: {floor:.3g} µs (bytes ÷ bandwidth)")
    for y, value in enumerate(ran.us_per_layer):
        ax.text(value, y, f" {value:.3g}", va="center", fontsize=8)
    ax.set_xlabel("µs per layer per step")
    ax.set_title(f"{timed['shape'].iloc[0]}, context {timed.context.iloc[0]:,}, {timed.layers.iloc[0]} layers")
    ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()
    return fig
