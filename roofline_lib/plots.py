"""Figures from result DataFrames; each function returns a matplotlib Figure and draws nothing else."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure


def plot_speedups(results: pd.DataFrame, title: str | None = None) -> Figure:
    """Speedup over the reference per row and variant, whiskers at p20/p80 of the interleaved ratios."""
    data = results[(results.variant != "reference") & results.speedup.notna()]
    rows = list(dict.fromkeys(data.row))
    variants = list(dict.fromkeys(data.variant))
    fig = Figure(figsize=(max(6, 0.7 * len(rows) * max(1, len(variants)) / 2 + 3), 4), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(variants))
    colors = matplotlib.colormaps["tab10"]
    for i, name in enumerate(variants):
        sub = data[data.variant == name].set_index("row").reindex(rows)
        x = np.arange(len(rows)) + (i - (len(variants) - 1) / 2) * width
        err = np.vstack([sub.speedup - sub.speedup_p20, sub.speedup_p80 - sub.speedup]).clip(min=0)
        ax.bar(x, sub.speedup, width, yerr=err, capsize=2, label=name, color=colors(i + 1))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(rows)), rows)
    ax.set_xlabel("suite row")
    ax.set_ylabel("speedup over reference (×, log)")
    first = results.iloc[0]
    ax.set_title(title or f"Speedup over the naive layer — {first['device']}, {first['dtype']}")
    ax.legend(fontsize="small")
    return fig
