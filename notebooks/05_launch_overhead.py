# ---
# jupyter:
#   accelerator: GPU
#   colab:
#     gpuType: T4
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 — Launch overhead and CUDA graphs: when the GPU waits for the host
#
# **The question.** On the short rows of the suite each of the layer's kernels runs for a few µs. Launching each one
# costs the host as long or longer (Python and PyTorch's own work included), so the GPU finishes a kernel and waits
# for the next. How much of a call is that waiting, how much does a CUDA graph remove, and what is left once it is
# gone?
#
# **What you will measure:** one call's kernels on a time axis, eager and replayed from a CUDA graph; what the graph
# saves and what it costs; each rung's GPU time per call beside its whole call; and, in a stack of layers replayed
# as one graph, the kernels and the gaps that are left.
#
# **Time on a T4:** about 3 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: timing
# the ladder 2.1, the launch-bound stacks 0.6, timelines 0.1; [how](../roofline_lib/present/estimate.py)).
#
# **Words used here** (all in the [glossary](../docs/glossary.md)):
#
# - The **host** is the CPU side of a call: Python, PyTorch's dispatcher and the CUDA driver. A **kernel launch** is
#   the host asking the GPU to run one kernel; with Python's and PyTorch's work around it, it costs the host from a
#   few µs on a fast host to tens of µs on a slow one. On a GPU, section 2's table measures it here: the eager
#   call's host µs per call, divided by the kernels the call launches (Figure 1's title counts them), is one
#   launch's cost.
# - **GPU time per call** is how long the GPU is busy with one call, measured with several calls queued behind a
#   wait on the GPU so that the host is out of the way. The **host's share** is the rest of the call: time in which
#   the GPU waited for the host.
# - A call is **launch-bound** when the GPU waits for the host for most of it: its time follows how many kernels it
#   launches and how fast the host launches them, not its FLOPs or bytes.
# - A **CUDA graph** records a call's kernel launches once; a **graph replay** then launches them all with one launch.
#   A layer's name that starts with `graph_` (`graph_residual_addmm`) is that layer replayed from a graph.
# - A **rung**, the **ladder**, **§3** and a speedup's **p20–p80 band** are notebook 02's; `fastest`, the last rung,
#   picks per input shape the quickest of the other rungs, eager or replayed from a CUDA graph, and, from compute
#   capability 9.0, the whole-layer kernel (section 5).
# - **Compute capability** is NVIDIA's version number of a GPU's design: 7.5 for a T4, 9.0 for an H100 or H200. The
#   **whole-layer kernel** runs the whole layer as one kernel, from compute capability 9.0 only (section 6).
# - The **naive layer** the setup cell names is the reference layer as written; a row runs here only where it fits
#   in this GPU's memory.
# - `residual_addmm` is `triton_ln` with one kernel less: the two residual adds are folded into the matrix products
#   that produce them (the product is accumulated onto the residual). Its first LayerNorm is a Triton kernel too, so
#   it launches two Triton kernels where `triton_ln` launches one: fewer kernels, but more of the kind whose launch
#   costs the host more. Whether it pays is measured shape by shape by `fastest`.
#
# Protocol details and caveats are in
# [docs/walkthrough/05_launch_overhead.md](../docs/walkthrough/05_launch_overhead.md).

# %%
# Setup. In a checkout (notebooks/ the working folder) the checkout's roofline_lib is used, with no network.
# Elsewhere (Colab) it is installed from a zip of the repository uploaded next to this notebook, if there is
# one, else from REPO_URL; the installed torch is kept. If that fails, this cell prints pip's own error and
# what to do, and stops the run here.
REPO_URL = "https://github.com/roofline-lab/roofline"  # set in roofline_lib/present/colab.py
import importlib
import re
import subprocess
import sys
from pathlib import Path

if (Path.cwd().parent / "roofline_lib" / "__init__.py").is_file():  # a checkout: notebooks/ is the working folder
    sys.path.insert(0, str(Path.cwd().parent))
try:
    import roofline_lib
except ImportError:
    uploaded = [*Path.cwd().glob("roofline*.zip"), *(p.parent for p in Path.cwd().glob("roofline*/pyproject.toml"))]
    source = str(max(uploaded, key=lambda p: p.stat().st_mtime)) if uploaded else f"roofline_lib @ git+{REPO_URL}"
    print(f"Installing roofline_lib from {source} ...")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], capture_output=True, text=True)
    if pip.returncode != 0:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", pip.stdout + pip.stderr)  # in a notebook's kernel pip colours its text
        lines = [line.strip(" │╰─>×") for line in plain.splitlines()]
        if "Traceback (most recent call last):" in lines:  # pip crashed: its last line says why
            lines = lines[:lines.index("Traceback (most recent call last):")] + lines[-1:]
        noise = ("note:", "hint:", "error: subprocess-exited-with-error", "ERROR: Exception:", "[notice]", "exit code:")
        why = [line for line in lines if line and not line.startswith(noise) and not line.endswith("of output]")]
        print("pip could not install it:", *(why[-6:] or [f"pip exited with status {pip.returncode}"]), sep="\n    ")
        print("What to do:\n"
              "    1. In Colab, Runtime → Change runtime type → T4 GPU.\n"
              "    2. If the repository is not public (or pip cannot reach it), download it as a zip (on GitHub:\n"
              "       Code → Download ZIP) and upload the zip with the Files pane (the folder icon on the left),\n"
              "       keeping its name roofline….zip.\n"
              "    3. Run this notebook again (Runtime → Run all): this cell then installs from the zip.\n"
              "    In a checkout, open the notebook with notebooks/ as the working folder instead; for a fork, set\n"
              "    REPO_URL above and in roofline_lib/present/colab.py.")
        raise SystemExit("roofline_lib is not installed: see what to do above, then run the notebook again.")
    importlib.invalidate_caches()
    import roofline_lib

# %%
# %matplotlib inline
import pandas as pd
from IPython.display import Markdown, display

from roofline_lib import Case, build_variant
from roofline_lib.measure.profile_rules import short_kernel_name
from roofline_lib.measure.profiler import kernel_timeline
from roofline_lib.measure.timing import HOST_SENSITIVE, WAITS_ON_HOST
from roofline_lib.present.formatting import format_us, three_digits
from roofline_lib.present.notebook import figure_file, ladder_lines, save_figure, setup_context, shown_path, sweep
from roofline_lib.present.plots_profile import plot_timeline
from roofline_lib.present.prose import lowest_per_row, reasons_by_variant
from roofline_lib.present.report import host_gpu_table
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.runs.stack import LAYERS, build_layer, graph_costs, kernel_and_gap_us, launch_bound_table
from roofline_lib.variants.fastest import GRAPHED
from roofline_lib.variants.graphed import CudaGraphLayer, capture

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
SHORT = ctx.rows[:1] if ctx.smoke else ctx.rows[:5]  # the suite's first rows: the shortest, smallest calls
GPU = ctx.device.type == "cuda"
ctx

# %%
# What this notebook uses beyond the setup cell: the session's one ladder measurement, the tables and sentences
# computed from it, and the exercises' check and building blocks.
import torch
import torch.nn.functional as F

from roofline_lib.core.device import capability
from roofline_lib.present.exercises import check_layer
from roofline_lib.present.prose import host_share_headline
from roofline_lib.present.report import with_band
from roofline_lib.present.session import ladder_sweep
from roofline_lib.present.tables import as_measured, blank_missing
from roofline_lib.variants.parts import fuse_qkv, merge_heads, split_qkv
from roofline_lib.variants.sdpa import sdpa_attention

SHORT_ROWS = [s.row for s in SHORT]

# %% [markdown]
# ## The result
#
# `no_empty_mask` and `fastest` (the last rung, which replays a CUDA graph where that pays) on the suite's shortest
# rows: each call's time under the one protocol, its GPU time per call, and the host's share. These numbers come
# from the session's one measurement of the whole ladder, the one notebooks 02–04 show. On a CPU there is no GPU time
# to split off, and those cells stay blank. The column `fastest chose` names its pick: `graph_whole_layer`, where it
# appears, is `whole_layer` replayed from a graph, the whole layer as one kernel (section 6; compute capability 9.0
# or newer only).

# %%
if RUN:
    ladder = ladder_sweep(ctx)  # every rung on every row, checked and timed once per session
    short = ladder[ladder.row.isin(SHORT_ROWS)]
    display(Markdown(host_share_headline(ladder, "no_empty_mask", SHORT_ROWS)))
    headline = host_gpu_table(short[short.variant.isin(["no_empty_mask", "fastest"])])
    chose = short.set_index(["row", "variant"]).chosen
    headline["fastest chose"] = [chose.get((r, v), "") if v == "fastest" else "" for r, v in
                                 zip(headline.row, headline.variant)]
    display(blank_missing(headline))

# %% [markdown]
# The sections below take the call apart: what the GPU does during one eager call, what a CUDA graph saves, the
# host's share rung by rung, and what still costs once the host is out of the way.
#
# ## 1. One eager call on a time axis
#
# The profiler's trace of one `no_empty_mask` call on the first row, kernel by kernel (aten ops on a CPU, which has
# no kernels): each bar is a kernel on the GPU, coloured by category; the white between the bars is the GPU idle,
# waiting for the next launch. The profiler slows the host down, so the gaps here are wider than in the timed calls
# above (this is a separate run), and it slows some launches far more than others: read which kernels wait, not how
# long (section 2's table has the real cost). The trace is also saved as a file you can open in
# [Perfetto](https://ui.perfetto.dev) to see the host's launches above the GPU's kernels.

# %%
if RUN:
    row = SHORT[0]
    case = Case(row, ctx.dtype, ctx.device)
    layer = build_variant("no_empty_mask", case.layer)
    trace = figure_file(ctx, "05_timeline_trace.json")
    eager_line = kernel_timeline(layer, case.x, trace=str(trace) if trace else None)
    what = "kernels" if GPU else "aten ops"
    busy = kernel_and_gap_us(eager_line)[0]  # overlapping kernels counted once
    display(save_figure(plot_timeline(eager_line, title=(
        f"Figure 1 — Row {row.row} ({row.label}), no_empty_mask, eager: {len(eager_line)} {what}, busy "
        f"{format_us(busy)} of {format_us(eager_line.end_us.max())} (profiled)")), "05_timeline_eager", ctx))
    display(Markdown(f"Chrome trace of the eager call: `{shown_path(trace)}`." if trace else
                     "No trace file saved here (figures are not saved in this mode)."))

# %% [markdown]
# The largest gaps: the kernel that waited, and how long the GPU sat idle before it (µs).

# %%
if RUN:
    gaps = eager_line.sort_values("gap_before_us", ascending=False)[["name", "category", "start_us", "duration_us",
                                                                     "gap_before_us"]].head(8)
    display(as_measured(gaps.assign(name=gaps["name"].map(short_kernel_name)),
                        ["start_us", "duration_us", "gap_before_us"]))  # a gap of 28.0 µs, not 28

# %% [markdown]
# ## 2. What a CUDA graph saves, and what it costs
#
# `CudaGraphLayer` captures the layer's kernels once per input shape and replays them with one launch. The graph
# reads and writes fixed buffers, so every call also copies its input in and clones its output out: two small
# kernels and their launches, paid on every call. Figure 2 is the same call replayed, on its own time axis (compare
# the µs in the two titles). On a CPU there are no graphs, and it is the eager call again.

# %%
if RUN:
    graph_line = kernel_timeline(CudaGraphLayer(layer), case.x)
    replayed = "replayed from a CUDA graph" if GPU else "through CudaGraphLayer (no graph on a CPU: called as is)"
    display(save_figure(plot_timeline(graph_line, title=(
        f"Figure 2 — Row {row.row} ({row.label}), no_empty_mask, {replayed}: {len(graph_line)} {what}, busy "
        f"{format_us(kernel_and_gap_us(graph_line)[0])} of {format_us(graph_line.end_us.max())} (profiled)")),
        "05_timeline_graph", ctx))

# %% [markdown]
# In Figure 2 the first bar is the input copy and the last the output clone; the gaps around the replay are the host
# launching them (widened by the profiler, as in Figure 1). A third bar of the same colour (copy/layout) may sit
# inside the replay: a `Memset`, a CUDA runtime kernel that fills a block of memory with one value (zeros, say).
# cuDNN's attention launches one, and PyTorch does for some of its own ops; on a GPU whose attention runs another
# kernel (a T4, say) this one may be absent. A gap inside the replay is not a host launch (a replay has none): read
# the GPU µs below, timed without the profiler, instead. Where one gap is long, this notebook does not find out what
# the GPU waits for (section 4 comes back to it).
#
# The table times each piece called many times back to back: host µs per call (what the CPU spends), wall µs (with
# the final sync: the larger of host and GPU time), and the GPU µs of one replay. The pieces timed apart need not add
# up to the graphed call (their sum can be more or less): in a whole call the host's work on one piece overlaps the
# GPU's queue, while a piece timed alone pays its own waits.

# %%
if RUN and GPU:
    costs = graph_costs("no_empty_mask", row, ctx.dtype, ctx.device)
    display(blank_missing(costs))
    by = costs.set_index("piece")
    host, gpu = by.loc["no_empty_mask(x), graphed", "host_us"], by.loc["replay, GPU only", "gpu_us"]
    display(Markdown(
        f"Eager, one call costs the host {format_us(by.loc['no_empty_mask(x), eager', 'host_us'])}; graphed, "
        f"{format_us(host)}, and the replay's kernels take {format_us(gpu)} of GPU time, so "
        + (f"the GPU still waits about {format_us(host - gpu)} per call for the host." if host > 1.1 * gpu else
           "the host keeps ahead of the GPU and the GPU no longer waits." if host < 0.9 * gpu else
           "host and GPU take about as long as each other (within a tenth): the GPU hardly waits any more.")))
    graphed_rows = short[(short.variant == "fastest") & short.chosen.fillna("").str.startswith(GRAPHED)].row
    display(Markdown(f"In the ladder, `fastest` chose a graph replay on {len(graphed_rows)} of {len(SHORT)} of these "
                     f"rows{(' (' + ', '.join(graphed_rows) + ')') if len(graphed_rows) else ''}: it keeps one only "
                     "where it beats its own eager layer beyond noise."))
elif RUN:
    print("CUDA graphs need a CUDA GPU: nothing to capture here.")

# %% [markdown]
# ## 3. Host time and GPU time, rung by rung
#
# The host's share, explained once. A call's time under the one protocol is the larger of two things: the host's
# work to launch it and the GPU's work to run it. The GPU time per call is measured apart, with the host out of the
# way, so the call's time minus it is the time the GPU waited; the two are separate measurements, so where they
# are close the GPU µs can read a little above the call µs, by up to about a tenth. Where the kernels fill less than
# half of a call (`timing.WAITS_ON_HOST`, the same one-half threshold as notebook 01's profile mark, here applied to
# these timed shares) the GPU mostly waits; a share under a tenth (`timing.HOST_SENSITIVE`) is within what two
# timings differ by anyway, and reads "under 10%". The share is computed from the unrounded times, so worked out
# from the rounded µs printed, a share labelled "under 10%" can come to a little over 10%.
#
# One launch's cost, from section 2: the eager call's host µs per call divided by the kernels it launches (Figure
# 1's title counts them), Python's and PyTorch's work included. Set it beside `no_empty_mask`'s GPU µs on the same
# row in the table below, divided by the same count: how long one kernel keeps the GPU busy on average. Where a
# launch costs more, the GPU waits between kernels. On the shortest rows one launch can cost the same order of time
# as the whole call's GPU µs. Notebook 04's extra host cost of a Triton launch is best read against it.

# %%
RUNGS = ["no_empty_mask", "triton_ln", "residual_addmm", "fastest"]
if RUN:
    display(blank_missing(host_gpu_table(short[short.variant.isin(RUNGS)])))

# %% [markdown]
# The host's share is the part that moves: a launch-bound call follows the host's speed, which on a shared machine can
# change from one cell to the next by more than a table's p20–p80 band, and from row to row within one table (rows 1,
# 2 and 4 launch the same number of kernels, yet their call µs can read far apart). So compare call µs within one row
# of one table, where the rungs were timed in turn, round after round. Separate measurements of the same layer (the
# ladder's call µs; section 2's host µs per call; the latency of one eager call, defined in section 4; *Try it*) can
# differ by tens of per cent, at times 2× or more, on these launch-bound rows; the tables compare the ladder's call
# µs. Section 2's host µs per call is an average over many calls, so the host's occasional stalls count in it, where
# the ladder takes a median; but it is timed at another moment, so it can read higher or lower than the ladder's. One
# call's latency also waits for that call's last kernel to end, a wait that calls run back to back hide behind the
# next call's launches; yet it is timed in a run of its own, so where the host's speed moved between the two runs it
# can read lower or higher than the ladder's. A *Try it* run, which times only two or three layers under the same
# protocol, often reads lower than the ladder, which times every rung in turn (notebook 03 says so too).
#
# GPU µs hold much better, compared in the same form. An eager call's GPU time includes the GPU's short idle gaps
# between kernels launched one by one, which a graph replay shortens, so it reads higher than the same layer
# replayed. On a GPU this notebook has to itself, GPU µs of the same form (eager with eager, replay with replay, each
# timed without the profiler) agree from one measurement to the next within about 15%; a profile's kernel time is
# another kind, and usually reads lower (at most about equal). Where other work shares the GPU (several notebooks at
# once, say), the GPU µs move too.
#
# That holds for `fastest` too. A graph replay timed on its own, as in section 2, can cost the host about as long as
# the GPU, so that the GPU waits far less than in an eager call; the ladder's interleaved call of a replay can read
# more than that, with a larger host share.
#
# `triton_ln` and `residual_addmm` launch Triton kernels, which can cost the host more per launch than PyTorch's;
# their GPU µs say whether the GPU's own work shrank. On a T4 (compute capability 7.5) these Triton kernels run in
# fp16 (bf16 only from 8.0), and CUDA graphs capture them as they do PyTorch's.
#
# ## 4. What still costs, once the host is out of the way
#
# Inside a model the layers follow one another, and a CUDA graph of the whole model takes the host out of the way.
# What is left is the GPU's own time per layer, gaps between kernels included. Per rung on each short row: the
# kernels one layer launches (from a profile), the GPU µs per layer in a stack of 8 distinct layers captured as one
# graph and replayed, that time split from one profiled replay into kernel time and gaps, and one eager call's
# latency (timed briefly, at its own moment: a separate run from the ladder's).
#
# Fewer kernels remove their own gaps, each short; faster kernels must cut the kernel time. Where most of a replay's
# gap is one long wait (a wait just before the attention kernel, say), that wait stays however many kernels go, and
# the gap µs move little from rung to rung. On a GPU that runs cuDNN's attention (notebook 03's profile names the
# attention kernel), look for one in Figure 2, and in Figure 3, which section 6 draws only on compute capability 9.0
# or newer (a **Hopper** GPU, NVIDIA's generation of 9.0, such as the H100 or H200, or a newer one). On a T4, whose
# attention runs another kernel, there may be none. This notebook does not find out what that wait is: it shows only
# that it is not a host launch and that fewer kernels do not remove it. `fastest` replays a graph of its own and
# cannot go inside another; its line says what it measures instead. It also chooses again in this run, on the shape's
# first call, so its kernel count is that of what it picked here (its `detail` says what, with the attention backend
# it kept: `sdpa_pick` is SDPA's own choice of kernel), which can differ from what the ladder's `fastest` runs
# (section 5).

# %%
if RUN:
    bound = launch_bound_table(SHORT, RUNGS, ctx.dtype, ctx.device)
    shown = ["row", "shape", "variant"] + (["status"] if (bound.status != "ok").any() else []) + [
        "kernels_per_layer", "gpu_us_per_layer"] + (["kernel_us_per_layer", "gap_us_per_layer"] if GPU else []) + [
        "latency_us"] + (["detail"] if bound.detail.fillna("").ne("").any() else [])  # what `fastest` picked here
    display(blank_missing(bound[shown].dropna(axis="columns", how="all")))  # a CPU: no GPU µs at all
    noted = bound[bound.not_timed.fillna("") != ""].groupby("not_timed", sort=False).variant.unique()
    display(Markdown(" ".join([reasons_by_variant(bound)] + [  # what `fastest` never times here: said once
        f"{', '.join(f'`{v}`' for v in names)}: {note}." for note, names in noted.items()])))
    eager = [name for name in RUNGS if name != "fastest"]  # fastest may replay a CUDA graph of its own: not eager
    named = ", ".join(f"`{name}`" for name in eager)
    display(Markdown(f"Of the eager rungs ({named}; `fastest` is left out, as its call may replay a graph), the "
                     f"lowest latency of one call: {lowest_per_row(bound, 'latency_us', eager)}."
                     + (f" The least GPU time per layer in the graph, of the same rungs: "
                        f"{lowest_per_row(bound, 'gpu_us_per_layer', eager)}."
                        if GPU else " No GPU here: no graph, no GPU time per layer.")))
    if GPU:
        profiled_over_timed = ((bound.kernel_us_per_layer + bound.gap_us_per_layer) / bound.gpu_us_per_layer).dropna()
        if len(profiled_over_timed):
            display(Markdown(f"Profiled, kernel and gap µs add up to {three_digits(profiled_over_timed.min())}× to "
                             f"{three_digits(profiled_over_timed.max())}× the GPU µs per layer timed without the profiler: "
                             "read them as shares of a layer, not as µs to add up."))

# %% [markdown]
# ## 5. What `fastest` picks
#
# `fastest` times its candidates on the first call with each shape (eager and graph-replayed versions of the rungs,
# SDPA's attention backends, and, from compute capability 9.0 on shapes of few tokens, the whole-layer kernel
# replayed from a graph, `graph_whole_layer`) under the same protocol, and keeps the winner. What it chose on every
# row of the ladder, with its time and the band of its speedup over the reference. Where two candidates are within
# noise of each other, another run may choose the other (section 4's `fastest` chose on its own, so its `detail` can
# name another layer than this table). The `attention` column is the attention backend it kept: `sdpa_pick` is
# SDPA's own choice, `cudnn`, `flash` or `efficient` one forced (notebook 02; where flash and cuDNN attention cannot
# run, as on a T4, `sdpa_pick` and `efficient` are the same kernel, and a pick between them is noise). The choice is
# made once, on a shape's first call, and the ladder times the pick again later, so on some rows `fastest`'s time can
# come out slower than another rung's on the same row, within noise or, on a row the host decides, beyond both
# bands (notebook 03's table has `no_empty_mask`'s).

# %%
if RUN:
    chosen = ladder[ladder.variant == "fastest"]
    display(blank_missing(pd.DataFrame({  # a CPU: no GPU µs column
        "row": chosen.row, "shape": chosen["shape"], "call µs": chosen.median_ms * 1e3,
        "GPU µs": chosen.gpu_ms * 1e3, "× reference [p20–p80]": [
            with_band(*r) for r in zip(chosen.speedup, chosen.speedup_p20, chosen.speedup_p80)],
        "chose": chosen.chosen, "attention": chosen.attention_backend.replace("", None)}).dropna(
            axis="columns", how="all"),  # the whole-layer kernel has no SDPA backend to pick:
        {"attention": lambda line: "its own kernel's" if "whole_layer" in str(line["chose"]) else ""}))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter), a dtype and a
# rung: it is timed next to `no_empty_mask`, with the GPU's and the host's share of each call. It opens on the
# ladder's lines for the first and last rows. The last row's `no_empty_mask` line is in no table above (notebooks 03
# and 04 show it), and its `fastest` line is section 5's. Each change is a new, separate run, so its call µs can
# differ from the ladder's, on a launch-bound row by tens of per cent or more, at times 2× or more (section 3 says
# why); the GPU µs hold much better.

# %%
def step_results(results):
    return blank_missing(host_gpu_table(results))


def measure_step(rows, dtype, variant):
    """This step's measurement, a separate run: `variant` and no_empty_mask on `rows` in `dtype`, host and GPU µs."""
    return step_results(sweep(ctx, ["no_empty_mask", variant], rows=rows, dtype=dtype))


if RUN:
    controls = step_controls(ctx, RUNGS, value="fastest")
    opening = ladder_lines(ladder, ctx, controls["rows"].value, ["no_empty_mask", "fastest"])
    display(rerun_widget(measure_step, opening=step_results(opening), **controls))

# %% [markdown]
# ## Exercises
#
# `check_layer` checks your layer by §3 on the first two rows, without padding and with left padding, then times it
# against a rung on the first row, the shortest; its first line says whether it passed.

# %% [markdown]
# ### Exercise 1 — Replay the layer from a CUDA graph
#
# The starter returns `no_empty_mask` as it is, eager. Make it replay a CUDA graph instead (`CudaGraphLayer` wraps a
# layer), and read the timing line against eager `no_empty_mask` on this launch-bound row. Run the starter first: it
# is `no_empty_mask` itself, yet on a launch-bound row, where the host's work sets the time, the same layer can read
# anywhere from about 0.9× to 1.1× against itself, and even be called *faster* or *slower*. Compare your version's
# line with the starter's. On a CPU the wrapper calls the layer as it is, and the timing says nothing.

# %%
def my_replayed_layer(ref):
    """no_empty_mask, eager: one launch per kernel. Make it one launch per call."""
    return build_variant("no_empty_mask", ref)


check_layer(ctx, my_replayed_layer, baseline="no_empty_mask")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `CudaGraphLayer(layer)` captures `layer` on its first call with each input shape and replays the graph after that.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# def my_graph_layer(ref):
#     """no_empty_mask replayed from a CUDA graph: an input copy, one replay and an output clone per call."""
#     return CudaGraphLayer(build_variant("no_empty_mask", ref))
#
#
# check_layer(ctx, my_graph_layer, baseline="no_empty_mask")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — Fewer launches by hand
#
# The starter computes every projection as a matrix product followed by a separate bias add: one more kernel, and
# one more launch, per projection. Fold each bias back into its matrix product (`F.linear` takes the bias), check
# the layer, and compare its timing line against `no_empty_mask` with the starter's.

# %%
class MySeparateBiasLayer(torch.nn.Module):
    """no_empty_mask with every bias added by a kernel of its own. Fold the biases into the products."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref
        self.qkv_proj = fuse_qkv(ref)

    @staticmethod
    def project(h, proj):
        return h @ proj.weight.T + proj.bias  # a matrix product, then a second kernel for the bias

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        r = self.ref
        q, k, v = split_qkv(self.project(r.ln1(x), self.qkv_proj), r.n_heads)  # each (B, H, N, hd)
        x = x + self.project(merge_heads(sdpa_attention(q, k, v, key_padding_mask)), r.out_proj)  # (B, N, C)
        return x + self.project(F.gelu(self.project(r.ln2(x), r.fc1)), r.fc2)


check_layer(ctx, MySeparateBiasLayer, baseline="no_empty_mask")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `F.linear(h, proj.weight, proj.bias)` computes `h @ proj.weight.T + proj.bias` and hands the bias to the matrix
# product itself (`addmm`), as `no_empty_mask`'s `nn.Linear` layers do, instead of to a kernel of its own.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyFoldedBiasLayer(MySeparateBiasLayer):
#     """The biases handed to the matrix products (addmm), as no_empty_mask's nn.Linear layers do."""
#
#     @staticmethod
#     def project(h, proj):
#         return F.linear(h, proj.weight, proj.bias)
#
#
# check_layer(ctx, MyFoldedBiasLayer, baseline="no_empty_mask")
# ```
#
# </details>


# %% [markdown]
# ## 6. Optional: experiments for compute capability 9.0 and newer
#
# Two experiments go further down in kernel count; both were tuned on an H200 (compute capability 9.0), and the
# table below measures them on this GPU; a T4 learner has the whole lesson without them. This section runs them
# only on a GPU of compute capability 9.0 or newer: the whole-layer kernel needs it, and `fused_gemm`, which also
# runs at 7.5 with one fixed tile (07's *Try it* can time it there), was tuned for it. The next cell says why they
# are skipped elsewhere.
#
# **`fused_gemm`** folds everything around the GEMMs into Triton GEMMs (LayerNorm before, bias, GELU and the residual
# adds after, **split-K**, a GEMM's inner dimension cut into slices summed at the end, on GEMMs with few output tiles).
# **`whole_layer`** runs the whole layer as one **persistent** kernel, whose programs stay on the GPU for the whole
# layer, its phases separated by grid-wide barriers (every program waits until all have finished a phase). The
# walkthrough page says what caps them.

# %%
HOPPER = GPU and capability(ctx.device) >= (9, 0)
NOT_HOPPER = ""  # why the two cells below show nothing here
if not GPU:
    NOT_HOPPER = "CUDA graphs need a GPU, so there is no graphed stack to show on the CPU"
elif not HOPPER:
    major, minor = capability(ctx.device)
    NOT_HOPPER = (f"the whole-layer kernel runs from compute capability 9.0 and `fused_gemm` was tuned there; this "
                  f"GPU's is {major}.{minor}")
if NOT_HOPPER:
    print(f"Skipped: {NOT_HOPPER}.")

# %% [markdown]
# Both in the same graphed stack as section 4, beside `residual_addmm` from its table (a separate run from this one:
# the two tables were measured minutes apart). A `whole_layer` line's `detail` names its configuration as
# `MxNxK/S/wWsT`: each program's GEMM **tile** of M × N outputs, stepping K elements at a time along the inner
# dimension (BLOCK_M × BLOCK_N × BLOCK_K); S, the slices of fc2's split-K; W, the warps per program; T, the
# pipelining stages (how many steps' inputs are loaded ahead).

# %%
if RUN and HOPPER:
    extra = launch_bound_table(SHORT, ["fused_gemm", "whole_layer"], ctx.dtype, ctx.device)
    beside = pd.concat([bound[bound.variant == "residual_addmm"], extra], ignore_index=True)
    beside_shown = [c for c in shown if c != "status"]  # a status column where any line of these did not run
    if (beside.status != "ok").any():
        beside_shown.insert(3, "status")
    display(blank_missing(beside[beside_shown]))
    names = ["residual_addmm", "fused_gemm", "whole_layer"]
    display(Markdown(f"Least GPU time per layer: {lowest_per_row(beside, 'gpu_us_per_layer', names)}. "
                     + " ".join(f"`{r.variant}` on row {r.row}: {r.status} ({r.reason})." for r in extra.itertuples()
                                if r.status != "ok")))
elif RUN:
    print("No table here (the reason above).")

# %% [markdown]
# Where the table ran (compute capability 9.0 or newer), read it row by row. The whole-layer kernel removes the gaps
# (its gap µs are near zero), but it does the GEMMs with its own resident programs instead of cuBLAS's kernels, so it
# pays where the gaps are a large share of the layer, on the smallest rows at most; `fused_gemm`'s Triton GEMMs pay
# only where they beat cuBLAS's at that size. The *Least GPU time* line says where each wins here. One eager call's
# latency is another matter: `fused_gemm` launches fewer kernels than `residual_addmm`, yet its latency can read well
# above it, as its launches are Triton kernels' from Python, each costing the host more than a PyTorch op's
# (notebook 04).
#
# On compute capability 9.0 or newer (a Hopper GPU such as the H100 or H200, or newer), Figures 3 and 4 below: one
# layer of each, replayed alone from a CUDA graph on the first row, each on its own time axis: `residual_addmm`'s
# kernels with the gaps between them, and the whole-layer kernel as one bar. Each is one profiled call where the
# table's is timed over many, so their µs can differ from the table's either way (section 4's note): one layer
# profiled alone can show a longer wait than the table's layers in a stack. `fastest` weighs `graph_whole_layer` on
# row 1 too (it times `whole_layer` on shapes of at most 256 tokens); where two replays are within noise of each
# other, either may win, and the choice can change from run to run. Elsewhere the cell below draws nothing and says
# why.

# %%
if RUN and HOPPER and extra[(extra.variant == "whole_layer") & (extra.row == row.row)].status.eq("ok").any():
    graphs = {name: capture(build_layer(name, case.layer), case.x) for name in ("residual_addmm", "whole_layer")}
    for number, (name, graph) in enumerate(graphs.items(), start=3):
        line = kernel_timeline(lambda x, mask, graph=graph: graph.graph.replay(), case.x)
        title = (f"Figure {number} — Row {row.row} ({row.label}), {name}, one layer replayed: {len(line)} "
                 f"kernel{'s' if len(line) > 1 else ''}, busy {format_us(kernel_and_gap_us(line)[0])} of "
                 f"{format_us(line.end_us.max())} (profiled)")
        display(save_figure(plot_timeline(line, title=title), f"05_timeline_{name}", ctx))
elif RUN:
    print("No figures here: " + ("the reason above" if NOT_HOPPER else
                                 "`whole_layer` did not run on these rows (the table above says why)") + ".")
