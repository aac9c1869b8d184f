"""Figures of long context: memory and time against the sequence length, the chunked layer by chunk size,
the ring's schedule over ranks; each function returns a matplotlib Figure, its panels numbered. A run's table is
`tables.longctx_table`, its sentence `prose.longctx_headline`."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..core.catalog import ATTENTION_CHOICES
from .formatting import three_digits
from .labels import PLAIN_MINOR_TICKS, PLAIN_TICKS, legend_if_labelled

# Lines that may lie on top of each other (two layers' times, two strategies'): each drawn its own way, so
# the one underneath still shows.
OVERLAP_STYLES = ({"marker": "o", "linestyle": "-", "markersize": 7},
                  {"marker": "s", "linestyle": "--", "markersize": 5, "markerfacecolor": "none"},
                  {"marker": "^", "linestyle": ":", "markersize": 5, "markerfacecolor": "none"},
                  {"marker": "D", "linestyle": "-.", "markersize": 4, "markerfacecolor": "none"})

STRATEGY_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one per name of ATTENTION_CHOICES


def strategy_look(name: str) -> dict:
    """A chunked strategy's colour and line style, fixed by its place in `core.catalog.ATTENTION_CHOICES`: one run's
    figure draws a strategy as another run's does. No two strategies share a colour or a marker, and only `auto`'s
    marker is large and filled, so where lines of equal time or memory lie on top of each other the one underneath
    still shows. A name outside the catalog draws in grey with no marker."""
    if name not in ATTENTION_CHOICES:
        return {"color": "grey", "marker": "", "linestyle": "-"}
    i = ATTENTION_CHOICES.index(name)
    return {"color": matplotlib.colormaps["tab10"](i), "marker": STRATEGY_MARKERS[i],
            "linestyle": ("-", "--", ":", "-.")[i % 4], "markersize": 7 if i == 0 else 5,
            "markerfacecolor": None if i == 0 else "none"}


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


def _few_decades(ax) -> bool:
    """Whether a log y axis holds at most one power of ten, so that its major ticks alone give nothing to read by."""
    lo, hi = ax.get_ylim()
    return lo > 0 and np.floor(np.log10(hi)) - np.ceil(np.log10(lo)) < 1


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
        if len(measured):  # on the CPU nothing is counted: no legend entry for points that are not there
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
    ax_mem.axhline(capacity, color="red", linewidth=1, label=f"memory allowed here: {three_digits(capacity)} GiB")
    panels = [(ax_mem, "peak GiB")]
    if memory.median_ms.notna().any():
        panels.append((ax_time, "ms per call"))
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
        ax.yaxis.set_major_formatter(PLAIN_TICKS)  # 0.001, 2, 30 rather than 10⁻³, 2×10⁰
        ax.yaxis.set_minor_formatter(PLAIN_MINOR_TICKS if _few_decades(ax) else NullFormatter())
        ax.tick_params(axis="x", labelsize="x-small", labelrotation=90)  # upright: close lengths stay apart
    ax_mem.set_title("Panel 1 — memory: the naive layer grows with N², others with N", fontsize="small")
    ax_time.set_title("Panel 2 — time, where it ran", fontsize="small")
    for number, ((ax, _), side) in enumerate(zip(panels, ("left", "right")), 1):  # one legend per panel, under it
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, fontsize="x-small", loc=f"outside lower {side}", ncols=2,
                       title=f"Panel {number}", title_fontsize="x-small")
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
    handles = [Patch(facecolor=color, label=label) for color, label in (("#2a9d8f", "all keys in the past: no mask"),
                                                                        ("#f4a261", "diagonal: causal mask"),
                                                                        ("#eeeeee", "hidden by the mask: skipped"))]
    fig.legend(handles=handles, fontsize="x-small", loc="outside lower center", ncols=3)
    ranks = 1 + max(r["rank"] for r in schedule)
    ax.set_title(title or f"The ring on {ranks} ranks: rank r at step s (zigzag pieces)", fontsize="small")
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
    drawn: dict[str, dict[str, pd.Series]] = {"time": {}, "memory": {}}  # per panel: label → its line
    for name, sub in chunked.groupby("attention", sort=False):
        style = strategy_look(name)
        resolved = sub.resolved_attention.iloc[0]
        label = name if resolved == name or pd.isna(resolved) else f"{name} → {resolved}"
        err = np.vstack([sub.median_ms - sub.p20_ms, sub.p80_ms - sub.median_ms]).clip(min=0)
        ax_time.errorbar(sub.chunk_size, sub.median_ms, yerr=err, capsize=2,
                         label=_covering_label(label, sub.chunk_size, sub.median_ms, drawn["time"]), **style)
        ax_mem.plot(sub.chunk_size, sub.peak_gib,
                    label=_covering_label(label, sub.chunk_size, sub.peak_gib, drawn["memory"]), **style)
    for r in full.itertuples():
        for ax, value in ((ax_time, r.median_ms), (ax_mem, r.peak_gib)):
            ax.axhline(value, color="black", linestyle="--", linewidth=0.8, label=f"full sequence ({r.variant})")
    caps = results.memory_cap_gib.dropna().unique()
    for cap in caps:
        ax_mem.axhline(cap, color="red", linestyle=":", linewidth=0.8, label=f"memory cap {three_digits(cap)} GiB")
    counted = results.peak_gib.notna().any()
    if not counted:
        ax_mem.axis("off")
        ax_mem.text(0.5, 0.5, "peak memory is not counted on the CPU", ha="center", va="center",
                    transform=ax_mem.transAxes)
    sizes = sorted(chunked.chunk_size.dropna().astype(int).unique())
    panels = [(ax_time, "median ms per call")] + ([(ax_mem, "peak GiB")] if counted else [])
    ax_time.set_title("Panel 1 — time per call", fontsize="small")
    ax_mem.set_title("Panel 2 — peak memory" + ("" if counted else ": not counted on the CPU"), fontsize="small")
    for ax, ylabel in panels:
        if sizes:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [f"{c:,}" for c in sizes])
            ax.minorticks_off()
        ax.set_xlabel("chunk size (tokens)")
        ax.set_ylabel(ylabel)
        top = ax.dataLim.y1  # the highest whisker, point or line drawn (-inf where none is)
        # from 0: the full layer's line off the axis's edge, and sizes read as sizes; to 5% above the highest, as
        # bottom=0 alone keeps the top autoscale had, which can leave the highest point cut at the edge
        ax.set_ylim(0, 1.05 * top if np.isfinite(top) and top > 0 else None)
        # below its panel, where no line or whisker can run under it
        legend_if_labelled(ax, fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.18))
    first = results.iloc[0]
    shape = f"B{int(first['batch'])} N{int(first['seq_len']):,} d{int(first['d_model'])}"
    fig.suptitle(title or f"Chunked layer, {shape} — {first['device']}, {first['dtype']}")
    return fig
