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
# On the short rows of the suite the layer's kernels are tiny: a few microseconds each on a large GPU. The
# host (Python, PyTorch's dispatcher, the CUDA driver) needs about as long or longer to launch each one,
# so the GPU finishes a kernel and waits for the next. There the time is set by how many kernels a call
# launches and how fast the host launches them, not by FLOPs or bytes: the overhead regime of Horace He's
# "Making Deep Learning Go Brrrr From First Principles". A CUDA graph records a whole call once and
# replays it with one launch.
#
# **In this notebook you will learn**
#
# - how to split one layer call into the GPU's share and the host's, and find the rows where the GPU waits;
# - what one call looks like on a time axis, with the gaps between kernels, eager and replayed from a graph
#   (and how to open the profiler's trace in Perfetto);
# - what CUDA-graph replay removes and what it costs (the copy of the input in, the clone of the output out);
# - how the fused add + LayerNorm kernel that notebook 04 measured eagerly fares under a graph, what
#   `residual_addmm` adds, and what `fastest` picks per row, under which protocol.
#
# **Time on a T4:** about 3 min, estimated from the roofline with a T4's ceilings (largest parts, in minutes: the
# launch-bound stacks 2.5, the sweep 0.2, timelines 0.1; [how](../roofline_lib/present/estimate.py)).

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
from roofline_lib.present.formatting import format_us
from roofline_lib.present.notebook import figure_file, save_figure, setup_context, shown_path, sweep
from roofline_lib.present.plots_profile import plot_timeline
from roofline_lib.present.prose import lowest_per_row
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

# %% [markdown]
# ## Host and GPU, side by side
#
# Each layer is timed under the one protocol (the timing line above), and once more with the host out of the
# way: several calls queued behind a sleep kernel, so that the GPU then runs their kernels back to back
# (`bench.gpu_call_ms`). The second number is the GPU's share of a call; the rest of the call, the
# **host share**, is time in which the GPU waited for Python and the launches. Two thresholds read it:
# where the kernels fill less than half of a call (`bench.WAITS_ON_HOST`), the GPU *mostly* waits on the
# host, the rows below; where they fill less than nine tenths (`bench.HOST_SENSITIVE`), the call has host
# time in it, and the step summaries (00, 02, 03) warn that another cell can time it differently. A host
# share under a tenth is within what the two timings differ by anyway. On the CPU there is no such split:
# the column stays empty.

# %%
RUNGS = ["no_empty_mask", "triton_ln", "residual_addmm", "fastest"]
if RUN:
    results = sweep(ctx, RUNGS, rows=SHORT)
    split = host_gpu_table(results)
    display(split)
    eager = results[results.variant == "no_empty_mask"]
    waits = eager[eager.gpu_share < WAITS_ON_HOST]
    growth = ""
    if len(waits) >= 2:
        kernels, calls = waits.gpu_ms.max() / waits.gpu_ms.min(), waits.median_ms.max() / waits.median_ms.min()
        growth = (f" Across those rows the kernels' time spans {kernels:.1f}× (largest over smallest) and the "
                  f"call's time {calls:.1f}×" + (": while the GPU waits, a call costs what the host's work costs, "
                                                 "which varies less than the GPU's." if calls < kernels else "."))
    display(Markdown(
        "No GPU here: nothing to split." if not GPU else
        f"On {ctx.env['device']}, the GPU waits for the host during most of a `no_empty_mask` call on "
        f"{len(waits)} of {len(eager)} rows ({', '.join(waits.row) or 'none'}): there its kernels take "
        + ", ".join(f"{format_us(r.gpu_ms * 1e3)} of {format_us(r.median_ms * 1e3)}" for r in waits.itertuples())
        + " per call." + growth))

# %% [markdown]
# The host's share is the part that moves: a launch-bound call's time follows the host's speed, which on
# a shared machine can change from one cell to the next by more than one table's p20–p80 band (compare
# row 1 of `no_empty_mask` here with the same call in the last cell of this notebook, and with notebooks
# 02–04), while the GPU µs stay put. So compare call µs within one table, and GPU µs anywhere.
#
# ## One call on a time axis
#
# The profiler's trace of a single `no_empty_mask` call on row 1, kernel by kernel: each bar is a kernel
# on the GPU, coloured by category; the white between the bars is the GPU idle, waiting for the next
# launch. Below it, the same layer replayed from a CUDA graph: the same kernels, launched together (on a
# CPU there are no graphs, and the second figure is the same eager call again). The
# eager trace is also saved as a Chrome trace file: open it in [Perfetto](https://ui.perfetto.dev) (or
# `chrome://tracing`) to see the host's launches above the GPU's kernels; it is written beside the
# figures. The profiler itself slows the host down, so where the GPU waits for the host the gaps here are
# wider than in the timed calls above; the pattern is the same. In the
# graphed call the first bar is the copy of the input into the graph's buffer and the last the clone of
# its output: the gaps around the replay are the host launching them and the replay, one launch each.
# A gap inside the replay is no host launch (a graph has none inside it): it is time this profiled replay
# spent on something other than kernels; the replay's GPU time measured without the profiler, further
# down, is the number to compare. The two figures share one time axis.

# %%
if RUN:
    row = SHORT[0]
    case = Case(row, ctx.dtype, ctx.device)
    layer = build_variant("no_empty_mask", case.layer)
    trace = figure_file(ctx, "05_timeline_trace.json")
    eager_line = kernel_timeline(layer, case.x, trace=str(trace) if trace else None)
    graph_line = kernel_timeline(CudaGraphLayer(layer), case.x)
    what = "kernels" if GPU else "aten ops (on the CPU there are no kernels)"
    axis_us = 1.02 * max(eager_line.end_us.max(), graph_line.end_us.max())
    replayed = "replayed from a CUDA graph" if GPU else "through CudaGraphLayer (no graph on a CPU: called as is)"
    for name, line in (("eager", eager_line), (replayed, graph_line)):
        span, busy = line.end_us.max(), kernel_and_gap_us(line)[0]  # overlapping kernels counted once
        title = (f"Row {row.row} ({row.label}), no_empty_mask, {name}: {len(line)} {what}, "
                 f"busy {format_us(busy)} of {format_us(span)}")
        display(save_figure(plot_timeline(line, title=title, axis_us=axis_us),
                            f"05_timeline_{'eager' if name == 'eager' else 'graph'}", ctx))
    display(Markdown(f"Chrome trace of the eager call: `{shown_path(trace)}`." if trace else
                     "No trace file saved here (figures are not saved in this mode)."))

# %% [markdown]
# The gaps, largest first: the kernel that waited and how long the GPU sat idle before it.

# %%
if RUN:
    display(eager_line.sort_values("gap_before_us", ascending=False)[["name", "category", "start_us", "duration_us",
                                                                      "gap_before_us"]].head(8).assign(
        name=lambda t: t["name"].map(short_kernel_name)))

# %% [markdown]
# ## What a CUDA graph removes, and what it costs
#
# `CudaGraphLayer` captures the layer's kernels once per input shape and replays them with one launch. The
# graph reads and writes fixed buffers, so every call copies its input into the graph's input buffer and
# clones the output out of the graph's output buffer (the next replay overwrites it): two small kernels
# and their launches, paid on every call. Each piece, called many times back to back: host µs per call
# (no sync: what the CPU spends) and wall µs (with the final sync: the larger of host and GPU time), and
# the GPU µs of one replay with the host out of the way.

# %%
if RUN and GPU:
    costs = graph_costs("no_empty_mask", row, ctx.dtype, ctx.device)
    display(costs)
    by = costs.set_index("piece")
    host, gpu = by.loc["no_empty_mask(x), graphed", "host_us"], by.loc["replay, GPU only", "gpu_us"]
    display(Markdown(
        f"Eager, one call costs the host {format_us(by.loc['no_empty_mask(x), eager', 'host_us'])}; graphed, "
        f"{format_us(host)}, and the replay's kernels take {format_us(gpu)} of GPU time, so "
        + (f"the GPU still waits about {format_us(host - gpu)} per call for the host. " if host > 1.1 * gpu else
           "the host keeps ahead of the GPU and the GPU no longer waits. " if host < 0.9 * gpu else
           "host and GPU take about as long as each other (within a tenth): the GPU hardly waits any more. ")
        + "Timed alone, each piece also pays its own loop and launch, so the pieces (replay, copy in, clone "
        "out) add up to more than the whole graphed call, where they overlap. On long rows the kernels take "
        "far longer than their launches, there is nothing to remove, and the copy and clone are pure cost."))
elif RUN:
    print("CUDA graphs need a CUDA GPU: nothing to capture here.")

# %% [markdown]
# ## Fewer kernels, once the host is out of the way
#
# Inside a model the layers follow each other; with a graph the host is out of the way and what is left is
# the GPU's own time per layer, launch gaps between kernels included. Here, per rung: the kernels one layer
# launches (from a profile), the GPU µs per layer in a stack of distinct layers captured as one CUDA graph
# and replayed (`stack.launch_bound_table`), and one eager call's latency under the one protocol (timed
# briefly, at its own moment: the host's speed drifts, so compare latencies within one table). On a
# GPU, the GPU time per layer is also split, from the trace of one profiled replay, into the time some
# kernel runs (`kernel_us_per_layer`) and the idle gaps between kernels (`gap_us_per_layer`): gaps are what
# fewer kernels remove, kernel time what faster kernels must. The profiler slows both down, so together they
# usually come to more than the GPU µs timed without it (the line under the table says how they compare
# here): read them as shares of the layer, not as µs to add up.
#
# - `triton_ln` fuses the residual add and the second LayerNorm into one Triton kernel: one kernel fewer
#   per layer on a GPU (on the CPU the table counts the aten ops the Triton interpreter runs instead, many
#   more). Launching a Triton kernel from Python costs the host more than launching the two PyTorch kernels
#   it replaces, so eager, on launch-bound rows, the layer can be slower for it; in a graph the host's work
#   is gone, and only each kernel's own time and the gaps count.
# - `residual_addmm` also folds each residual add into its GEMM (`addmm` with the residual as the bias
#   term), so the residual stream is rounded once more per layer: its §3 error ratio can be a little above
#   1 (still far inside the bound of 2). It launches the Triton kernel twice per layer (both LayerNorms),
#   so eager it pays that host cost twice.
# - `fastest` replays a graph of its own, so it cannot be put into a stack's graph: its row shows its own
#   replays queued back to back (same weights each time; the line under the table says why).
#
# The lines under the table say which of the three rungs is quickest on each row, eager and in the graph.

# %%
if RUN:
    bound = launch_bound_table(SHORT, ["no_empty_mask", "triton_ln", "residual_addmm", "fastest"], ctx.dtype,
                               ctx.device)
    shown = ["row", "shape", "variant"] + (["status"] if (bound.status != "ok").any() else []) + [
        "kernels_per_layer", "gpu_us_per_layer"] + (["kernel_us_per_layer", "gap_us_per_layer"] if GPU else []) + [
        "latency_us"]
    display(bound[shown])
    noted = bound[bound.reason.fillna("") != ""].groupby("reason", sort=False).variant.unique()
    display(Markdown(" ".join(", ".join(f"`{v}`" for v in variants) + f": {reason}."
                              for reason, variants in noted.items())))
    if GPU:
        profiled_over_timed = ((bound.kernel_us_per_layer + bound.gap_us_per_layer) / bound.gpu_us_per_layer).dropna()
        if len(profiled_over_timed):
            display(Markdown(f"Profiled, kernel and gap µs add up to {profiled_over_timed.min():.2f}× to "
                             f"{profiled_over_timed.max():.2f}× the GPU µs per layer timed without the profiler."))
    rungs = ["no_empty_mask", "triton_ln", "residual_addmm"]
    display(Markdown(f"Lowest eager latency: {lowest_per_row(bound, 'latency_us', rungs)}."
                     + (f" Least GPU time per layer in the graph: {lowest_per_row(bound, 'gpu_us_per_layer', rungs)}."
                        if GPU else "")))
    if GPU:
        wide = bound.pivot(index="row", columns="variant", values="gpu_us_per_layer").reindex([s.row for s in SHORT])
        display(Markdown(f"In the {LAYERS}-layer graph, `triton_ln` takes "
                         + ", ".join(f"{v:.2f}×" for v in wide.triton_ln / wide.no_empty_mask)
                         + " the GPU time of `no_empty_mask` per layer on rows " + ", ".join(wide.index)
                         + "; `residual_addmm` " + ", ".join(f"{v:.2f}×" for v in wide.residual_addmm / wide.no_empty_mask)
                         + " (below 1: faster)."))

# %% [markdown]
# ## Fewer kernels is not enough: every GEMM in Triton
#
# Gaps between kernels are what fewer kernels remove, so the next step down looks obvious: fold everything
# around the GEMMs into them. `fused_gemm` does that in Triton: LayerNorm in the QKV and fc1 GEMMs'
# prologue, bias, GELU and the residual adds in their epilogues, split-K on the GEMMs with few output tiles,
# so a layer is four GEMM kernels and attention (on the H200 that is two kernels: cuDNN's and a memset;
# the timelines above name them). Here it is in the same graphed stack, beside
# `residual_addmm` from the table above. Whether it wins is the kernel time against the gaps: it removes
# gaps, and its own GEMMs must not take longer than the cuBLAS GEMMs and small kernels they replace.

# %%
if RUN:
    fused = launch_bound_table(SHORT, ["fused_gemm"], ctx.dtype, ctx.device)
    pair = pd.concat([bound[bound.variant == "residual_addmm"], fused], ignore_index=True)
    display(pair[shown])
    if GPU and fused.status.eq("ok").all():
        by = pair.set_index(["row", "variant"])
        display(Markdown("Per layer in the graph, `fused_gemm` against `residual_addmm`: " + "; ".join(
            f"row {s.row}: {by.loc[(s.row, 'fused_gemm'), 'kernels_per_layer']:.0f} kernels against "
            f"{by.loc[(s.row, 'residual_addmm'), 'kernels_per_layer']:.0f}, gaps "
            f"{format_us(by.loc[(s.row, 'fused_gemm'), 'gap_us_per_layer'])} against "
            f"{format_us(by.loc[(s.row, 'residual_addmm'), 'gap_us_per_layer'])}, GPU time "
            f"{format_us(by.loc[(s.row, 'fused_gemm'), 'gpu_us_per_layer'])} against "
            f"{format_us(by.loc[(s.row, 'residual_addmm'), 'gpu_us_per_layer'])}" for s in SHORT) + ". "
            + f"Least GPU time per layer: {lowest_per_row(pair, 'gpu_us_per_layer', ['residual_addmm', 'fused_gemm'])}."))
    else:
        display(Markdown(" ".join(f"`fused_gemm` on row {r.row}: {r.status} ({r.reason})." for r in fused.itertuples()
                                  if r.status != "ok") or "No GPU here: nothing to compare in a graph."))

# %% [markdown]
# Where `fused_gemm` has fewer kernels and smaller gaps and still takes longer, its kernels are the slower
# part: at these sizes a GEMM's time is the latency of its loop over K and of loading its weights, not its
# FLOPs, and cuBLAS's kernels for them are hard to beat one for one. `fastest` does not time `fused_gemm`
# for that reason: on an H200 it lost on every suite row where it was measured, eagerly (the recorded
# sweeps) and in an 8-layer graph like this one (`results/launch_bound/`); the sentence above says how it
# fares on this GPU. Going well below these times needs fewer kernels whose GEMMs keep up with cuBLAS's.
#
# ## The whole layer in one kernel
#
# The last step down in kernel count is one kernel per layer: `whole_layer` (`roofline_lib.kernels.whole_layer`)
# keeps one program resident on each of the GPU's streaming multiprocessors (SMs: 132 on an H200, 40 on a
# T4) for the whole layer and walks six phases — LayerNorm₁ + QKV, attention, out_proj + residual,
# LayerNorm₂ + fc1 + GELU, fc2, and the sum of fc2's slices. Each GEMM phase splits its output into tiles
# (blocks of rows and columns), one program's work at a time; fc2's inner dimension K, the 4·d_model it sums
# over, is cut into slices so that a short row still gives every program a tile, and the last phase adds
# the slices up. Between phases a grid-wide barrier, where every program waits until all have finished the
# phase, takes the place of a kernel launch. No launch gaps are left, and no kernel has to start up;
# what is left is each phase's own time and the barriers. The
# table puts it in the same graphed stack beside `residual_addmm`. It was tuned and measured on an H200
# (compute capability 9.0), and `fastest` times it there only on shapes of up to 256 tokens; on an older
# GPU, such as a T4, or without a GPU, its rows say why it is skipped.

# %%
if RUN:
    whole = launch_bound_table(SHORT, ["whole_layer"], ctx.dtype, ctx.device)
    beside = pd.concat([bound[bound.variant == "residual_addmm"], whole], ignore_index=True)
    display(beside[shown])
    ran = whole[whole.status == "ok"]
    if GPU and len(ran):
        by = beside.set_index(["row", "variant"])
        display(Markdown("Per layer in the graph, `whole_layer` against `residual_addmm`: " + "; ".join(
            f"row {r.row}: {r.kernels_per_layer:.0f} kernel against "
            f"{by.loc[(r.row, 'residual_addmm'), 'kernels_per_layer']:.0f}, GPU time {format_us(r.gpu_us_per_layer)} "
            f"against {format_us(by.loc[(r.row, 'residual_addmm'), 'gpu_us_per_layer'])}" for r in ran.itertuples())
            + ". Least GPU time per layer: "
            + f"{lowest_per_row(beside, 'gpu_us_per_layer', ['residual_addmm', 'whole_layer'])}."))
    else:
        display(Markdown(" ".join(f"{reason}." for reason in whole.reason.dropna().unique())))  # each names it

# %% [markdown]
# One layer of each, replayed alone from a CUDA graph on row 1, on one time axis: `residual_addmm`'s
# kernels with the gaps between them, and the whole-layer kernel as one bar. As in the timelines above, the
# profiler can stretch a gap inside a replay (a replay launches nothing from the host): the kernels' widths
# and their count are what to read here, and the GPU µs per layer in the table above, timed without the
# profiler, are what to compare.

# %%
if RUN and GPU and len(ran):
    row = SHORT[0]
    case = Case(row, ctx.dtype, ctx.device)
    graphs = {name: capture(build_layer(name, case.layer), case.x) for name in ("residual_addmm", "whole_layer")}
    lines = {name: kernel_timeline(lambda x, mask, graph=graph: graph.replay(), case.x)
             for name, graph in graphs.items()}
    axis_us = 1.02 * max(line.end_us.max() for line in lines.values())
    timed = beside[beside.row == row.row].set_index("variant").gpu_us_per_layer  # in the stack, unprofiled
    for name, line in lines.items():
        title = (f"Row {row.row}, {name}, one layer replayed: {len(line)} kernel{'s' if len(line) > 1 else ''}, "
                 f"busy {format_us(kernel_and_gap_us(line)[0])} of {format_us(line.end_us.max())} profiled; "
                 f"{format_us(timed[name])} per layer in the stack, unprofiled")
        display(save_figure(plot_timeline(line, title=title, axis_us=axis_us), f"05_timeline_{name}", ctx))
elif RUN:
    print("No whole-layer kernel ran here: nothing to draw.")

# %% [markdown]
# What caps it, measured on an H200 (`benchmarks/layer_megakernel.py`, which also times each phase launched on
# its own): on row 1 every phase takes 2–8 µs, though its bytes would take a fraction of a µs at the memory's
# bandwidth and its FLOPs less. At 128 tokens no phase has more tiles than the H200 has SMs, so each program
# runs about one tile, and a tile's time is the latency of its loads, one K step after another, not bandwidth.
# Launched one by one, the phases' kernels add up to about the persistent kernel's time: a barrier costs about
# what a kernel's start costs, and what one kernel saves is the launch gaps between kernels, a few µs per layer:
# the difference in GPU µs per layer in the table, timed without the profiler (the profiled `gap_us_per_layer`
# overstates the gaps, since the profiler stretches them). From 512 tokens (batch × sequence length) on, its
# Triton GEMM tiles lose to cuBLAS's by far more than that. The roofline floor of row 1 is under 2 µs per layer:
# what stands between is load latency, which fewer kernels do not remove; loading the next phase's weights while
# a barrier waits might (not tried here).
#
# Why `fastest` may not keep it, even where it wins in the stack: one layer called on its own through
# `fastest` is a copy into a graph's buffer, a replay and a clone of its output, and the host's time for
# those is most of the call; a few µs of GPU time less is inside that call's noise, so one run may keep it
# and the next `graph_residual_addmm` (the next section shows this run's choice; notebook 07's sweep makes
# its own). Inside a model's own CUDA graph, which has no copy or clone per layer, the stack's numbers are
# the ones that count.

# %% [markdown]
# ## What `fastest` picks, and under which protocol
#
# `fastest` measures its candidates on the shape it is called with (eager and CUDA-graph versions of the
# rungs, and of the whole-layer kernel on shapes of up to 256 tokens on GPUs of compute capability 9.0 and
# newer; and SDPA's attention backends) under the same protocol as every table here, and keeps the winner;
# a graph replay wins only where it beats its own eager layer beyond noise, since its input copy and
# output clone are pure cost where the GPU does not wait for the host.
# What it chose on each row, and its time, from the first table. Where two candidates are within noise of
# each other (as the 8-layer table above can show), another run, or another table, may choose the other:
# each `fastest` layer chooses on its own first call with a shape, and each table here builds its own.

# %%
if RUN:
    chosen = results[results.variant == "fastest"]
    display(pd.DataFrame({"row": chosen.row, "shape": chosen["shape"], "call µs": chosen.median_ms * 1e3,
                          "GPU µs": chosen.gpu_ms * 1e3, "chose": chosen.chosen,
                          "attention": chosen.attention_backend}))
    if GPU:
        first = chosen.iloc[0]
        call_us, gpu_us = first.median_ms * 1e3, first.gpu_ms * 1e3
        graphed = str(first.chosen).startswith(GRAPHED)  # it may keep an eager rung (fastest.pick)
        display(Markdown(
            f"On row {first.row}, `fastest` takes {format_us(call_us)} per call, "
            + (f"{format_us(gpu_us)} of them on the GPU. " if gpu_us < call_us else
               f"and its GPU time, {format_us(gpu_us)}, is as long (the two are timed apart, each with its noise): "
               "the GPU is busy for the whole call. ")
            + "On every call it also checks its input, looks up the shape's choice and sets the chosen attention "
            f"backend before it {'replays its graph' if graphed else 'calls the eager rung it chose'}: host work that "
            + ("stays hidden while the GPU is the slower side, since back to back the host prepares the next call "
               "while the GPU still runs the last one. " if first.gpu_share >= HOST_SENSITIVE else
               f"shows here: the call takes {call_us / gpu_us:.2f}× its GPU time. ")
            + (f"For scale, the graph costs above put a bare graphed `no_empty_mask` call at {format_us(host)} of "
               f"host time and {format_us(gpu)} of GPU time, but they were timed at another moment, and the host's "
               "speed drifts (compare host µs within one table); `fastest`'s graph also holds the kernels of the "
               "rung it chose, not necessarily `no_empty_mask`'s." if graphed else "")))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter), a dtype
# and a rung: it is timed next to `no_empty_mask`, with the GPU's and the host's share of each call.

# %%
def measure_step(rows, dtype, variant):
    """This step's measurement: `variant` and no_empty_mask on `rows` in `dtype`, host and GPU µs per call."""
    return host_gpu_table(sweep(ctx, ["no_empty_mask", variant], rows=rows, dtype=dtype))


if RUN:
    display(rerun_widget(measure_step, **step_controls(ctx, RUNGS, value="fastest")))
