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
# # 01 — Baseline profiling: where the naive layer spends its time
#
# **The question.** Before changing anything, measure. Where does the naive layer's time go, and how far is it
# from the least time this device could take for the same work?
#
# **What you will measure.** A profile of the reference layer on every row that runs here, the device's matrix
# multiply and memory ceilings, and from them each row's floor; for one figure, the profile of the rung that
# notebook 04's decision keeps.
#
# **Time on a T4:** about 3 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: timing
# the ladder 2.1, profiles 0.9, the exercises' checks 0.2; [how](../roofline_lib/present/estimate.py)).
#
# Each term is defined where it is first used and collected in the [glossary](../docs/glossary.md); notebook 00
# defines layer, row, dtype, §3, median, p20–p80 and interleaved timing. How the profile and the ceilings are
# measured, and what to keep in mind when reading them, is in
# [docs/walkthrough/01_baseline_profiling.md](../docs/walkthrough/01_baseline_profiling.md).

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

from roofline_lib import (
    SUITE,
    VARIANTS,
    Case,
    add_roofline,
    build_variant,
    datasheet,
    datasheet_ceilings,
    flop_crosscheck,
    mask_share_table,
    measure_ceilings,
    op_costs,
    roofline_table,
)
from roofline_lib.measure.profile_analysis import launch_table, op_roofline
from roofline_lib.measure.profile_rules import charge_category, short_kernel_name
from roofline_lib.measure.roofline import op_traffic
from roofline_lib.present.formatting import three_digits
from roofline_lib.present.notebook import profile, save_figure, setup_context, show_source, sweep
from roofline_lib.present.plots import plot_roofline
from roofline_lib.present.plots_profile import plot_category_breakdown, plot_op_bandwidth, plot_op_roofline
from roofline_lib.present.prose_profile import op_roofline_summary
from roofline_lib.present.tables import as_measured, ceilings_table
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.variants.best import best_variant

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## The result first
#
# A few words to read the table:
#
# - a **kernel** is one function the GPU runs; every PyTorch operation (an **op**, such as `aten::addmm`, a matrix
#   multiply plus a bias) launches one or more kernels;
# - a **profile** records every op and kernel of a few calls with their times (PyTorch's `torch.profiler`; the
#   events it records, on a time axis, are a **trace**); here the time is sorted into categories such as GEMM
#   (general matrix multiply), softmax or masking. The category GEMM is the projections and the MLP's matrices;
#   the attention's own matrix products (queries times keys, the softmax's output times the values) are
#   `attention core`;
# - the **mask share** is the share of a call's profiled GPU time (op time on a CPU) spent building and applying
#   the causal and padding masks: the categories `mask construction` and `masking` together;
# - the **floor** is the least time any implementation of the layer could take on this device: its useful FLOPs
#   (floating-point operations) at the device's measured matrix-multiply rate, or the fewest bytes it must move
#   at its measured memory bandwidth, whichever takes longer (the **roofline** model, below);
# - the **fraction of floor** is the floor over the measured time: 1 would be perfect, 0.1 is ten times slower
#   than the floor.
#
# The shares come from the profile, the milliseconds from the session's timing of the reference, the one that
# notebook 00 and the later notebooks show too: two measurements, side by side.

# %%
import math

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity

from roofline_lib.core.device import synchronize
from roofline_lib.measure.profile_events import Profile
from roofline_lib.present.exercises import check_layer
from roofline_lib.present.prose_profile import kernel_sources, masked_fill_summary, where_time_goes
from roofline_lib.present.session import ladder_sweep, measured_ceilings, suite_profile
from roofline_lib.present.tables import (
    baseline_headline,
    category_shares,
    datasheet_table,
    masked_fill_passes,
    row_profile,
)

if RUN:
    base = suite_profile(ctx, "reference")  # every op and kernel of the reference on every row, once per session
    ceilings = measured_ceilings(ctx)  # this device's matmul and copy ceilings, measured once per session
    timed = add_roofline(ladder_sweep(ctx).query("variant == 'reference'"), ceilings)  # the session's timing
    big = ctx.rows[-1]  # the largest row that runs here
    display(baseline_headline(base.categories, timed))
    display(Markdown(where_time_goes(row_profile(base, big.row), timed.set_index("row").loc[big.row], big)))

# %% [markdown]
# ## Reading the profile
#
# The profile runs the layer a few times unrecorded (the warm-up), then records a few calls; every time below is per
# call of the layer. On a GPU an op's time is the GPU time of the kernels it launched; on the CPU, the op's own CPU
# time. One rule sorts the time into categories: an op inside a mask operation is charged to the mask, otherwise the
# op the layer called decides.

# %%
show_source(charge_category)

# %% [markdown]
# Per row: the calls recorded, one call's wall time on the host's clock, and the GPU time of its kernels (on the
# CPU, the CPU time of its ops). The host-clock time includes the profiler's own host time for every op, so on
# the short rows it reads above the timed median of the first table, often well above; *How much of a call is the GPU
# working?* below compares the two.

# %%
if RUN:
    display(base.runs[["row", "shape", "variant", "status", "steps", "step_us", "total_us"]].rename(columns={
        "steps": "recorded calls", "step_us": "call µs (host clock)", "total_us": "kernel µs"}))

# %% [markdown]
# ### Per op
#
# The largest row that runs here, ops sorted by time per call. `calls` is per call of the layer and `share` is the
# op's part of the total. `self_cpu_us` is the host's own time in the op: PyTorch's dispatch of it and the kernel
# launches it makes, not the time of the ops it calls (its children). An op can appear more than once when its time
# goes to several categories, by the rule above: a copy inside `masked_fill` is charged to `masking`, one inside a
# `linear` to `GEMM`, one inside the attention's `matmul` to `attention core`, one the layer asks for itself to
# `copy/layout`.

# %%
if RUN:
    columns = ["op", "category", "calls", "time_us", "self_cpu_us", "share"]
    display(Markdown(f"Row {big.row} ({big.label}), {ctx.dtype_name}, µs per call of the layer:"))
    ops = base.ops[(base.ops.row == big.row) & (base.ops.time_us > 0)]  # an op whose work is all in its callees: 0
    display(ops[columns].head(15))

# %% [markdown]
# ### Per kernel
#
# On a GPU, what actually ran: the kernels behind those ops. A kernel's name says who wrote it; the sentence under
# the table reads the names. Some names carry the GPU's **compute capability**, NVIDIA's version number of a GPU's
# design: 7.5 for a T4, 9.0 for an H100 or H200 (`sm90` in a name is 9.0). The table has one line per kernel and
# category, so a kernel charged to two categories shows on two lines (such as one `direct_copy` kernel under both
# `attention core` and `copy/layout`), and it stops at 15 lines; the sentence under it counts distinct kernels, all
# of them, so it can name kernels below the cut. One op can launch its kernel more than once per call (`calls`
# counts launches, the op table above counts ops). A line named `Memcpy DtoD` is not a kernel of PyTorch's: it is
# a copy from device memory to device memory (DtoD: device to device) that the **CUDA runtime** runs, the NVIDIA
# library the host calls to launch kernels and to copy memory; the copy of the scores inside `masked_fill` is one.
# A `Memset` line is the runtime filling a buffer with one value (zeros, most often).
# **cuBLAS**, NVIDIA's library of matrix-multiply kernels, runs both the `GEMM` category's products and the
# attention core's, so the sentence's cuBLAS share is larger than the `GEMM` category's share.

# %%
if RUN:
    kernels = base.kernels[base.kernels.row == big.row]
    if len(kernels):
        display(kernels[["kernel", "category", "calls", "time_us", "share"]].head(15).assign(
            kernel=lambda t: t.kernel.map(short_kernel_name)))
    display(Markdown(kernel_sources(kernels, big)))

# %% [markdown]
# ### Per category
#
# The same time rolled up into categories, for every row (a category that took no time on any row is left
# out). The figure shows the shares as stacked bars, with the kernels' total GPU milliseconds per call on top.

# %%
if RUN:
    display(category_shares(base.categories, [s.row for s in ctx.rows]))
    display(save_figure(plot_category_breakdown(base.categories), "01_breakdown", ctx))

# %% [markdown]
# Compare the rows by sequence length. The GEMMs grow with `B·N·d²`; everything that touches the `(B, H, N, N)`
# score tensor grows with `N²`: the attention matmuls with `B·N²·d`, the softmax and the masking with `B·H·N²`.
# So expect GEMMs and fixed costs to lead on the short rows and the score-tensor categories on the long ones; the
# first table's `largest category` says which it is on each row here.
#
# ## Two passes of `masked_fill`: what does each one mask?
#
# The per-op table shows `masked_fill` called twice per call of the layer; the table below numbers the two as passes 1
# and 2. Each is itself two trips through the whole score tensor: a copy of it (the `aten::copy_` charged to
# `masking`), then a fill of that copy in place (`aten::masked_fill_`), which sets the masked scores to `-inf`. A
# pass's time below covers both. The profiler can also record each op's input shapes (`record_shapes=True`), and the
# shape of a mask says what it is. One call of the largest row, recorded with its shapes, without padding (every token
# real), a recording of its own ([notes](../docs/walkthrough/01_baseline_profiling.md#the-two-masked_fill-passes)).

# %%
if RUN:
    case = Case(big, ctx.dtype, ctx.device)  # the seeded layer and input of this row; no padding
    for _ in range(2):  # warm-up calls, not recorded
        case.layer(case.x, case.key_padding_mask)
    synchronize(ctx.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities, record_shapes=True) as trace:
        case.layer(case.x, case.key_padding_mask)
        synchronize(ctx.device)
    one_call = Profile.from_events(trace.events(), ctx.device.type)  # this call's tables, for its total time
    passes = masked_fill_passes(trace.events(), ctx.device.type, one_call.total_us)
    display(passes)
    display(Markdown(masked_fill_summary(passes, big, case.key_padding_mask is not None, ctx.device.type)))

# %% [markdown]
# That is work the layer does not need, and notebook 03 removes it. The per-op table holds two more candidates:
# `aten::div` divides the whole score tensor by √(d / H), and the mask construction (`tril`, `bitwise_not`) is
# redone on every call. The exercises at the end remove those two.
#
# ## The roofline model
#
# How fast *could* a row run? Count the useful work and the fewest bytes:
#
# - the four GEMMs (the q, k, v projections as one, the output projection, the two MLP matrices) make
#   `24·B·N·d²` FLOPs;
# - causal attention makes `2·B·N²·d`: `QKᵀ` (queries times keys: the scores) and `PV` (P, the softmax's
#   probabilities, times the values) over the lower triangle only, half of the full square that the naive layer
#   computes and then masks;
# - the fewest bytes are the weights once, the input read once and the output written once.
#
# Per op, for the largest row here (`naive_flops` is what the naive layer actually computes; an op's `min_bytes`
# is for that op alone, the `layer` line's for the whole layer as one fused computation):

# %%
op_costs(ctx.rows[-1], ctx.dtype)

# %% [markdown]
# ### The device's ceilings
#
# A **ceiling** is the fastest the device goes at one kind of work: its matrix-multiply rate (TFLOP/s, measured with a
# large matmul in the run dtype) and its memory bandwidth (GB/s, a large device-to-device copy). The floor uses the
# measured ones, the session's, measured once. Where the device is in the datasheet table, its datasheet figures are
# beside them. The name the GPU reports is matched to a line of that table by its model and, where a model comes in
# several forms, by the form the name gives: "NVIDIA H100 80GB HBM3", for example, names no PCIe or NVL form (the
# board forms a GPU model is sold in), so it is the SXM part and gets the `H100 SXM` line; a GPU that no line matches
# is marked *not in the datasheet table* and has no datasheet column. The table's last line, the **ridge** (in FLOPs
# per byte), is the matmul ceiling over the bandwidth ceiling; *The floor of every suite row* below says what it is
# for:

# %%
if RUN:
    sheet = datasheet_ceilings(ceilings.device, ctx.dtype)
    display(Markdown(f"**{ceilings.device}**, {ceilings.source}" + ("" if sheet else " (not in the datasheet table)")))
    display(ceilings_table(ceilings, sheet))

# %% [markdown]
# The datasheet table, with where each number comes from (an empty cell says why it is empty). Where a source
# quotes a larger fp16 figure "with sparsity", that is the rate for **2:4 structured sparsity** (two of every four
# weights zero, in a pattern the GPU's matrix units skip): twice the dense rate, and of no use to a dense layer like
# this one, so the table lists the dense figure. **bf16** (bfloat16) is a 16-bit float with fp32's exponent range
# and fewer mantissa bits than fp16; GPUs compute in it natively from compute capability 8.0.

# %%
datasheet_table()

# %% [markdown]
# ### The floor of every suite row
#
# A row's **intensity** is its useful FLOPs per byte moved. Against the ridge (the ceilings table's last line,
# above), a row whose intensity is below it is **memory-bound** (its bytes set the floor), above it
# **compute-bound** (its FLOPs do). This is a model, so it covers the whole suite, row 14 included.

# %%
if RUN:
    display(as_measured(roofline_table(SUITE, ctx.dtype, ceilings), ["flops", "min_bytes"]))  # 6.57e+06, not 6,566,912

# %% [markdown]
# ### The reference on the roofline
#
# The reference's session timing on every row here, with its achieved TFLOP/s (useful FLOPs over the median
# time) and the fraction of the floor it reaches (`floor_ms / median_ms`; 1 would be perfect). In the figure,
# every point sits below the roof; the gap is what the following notebooks go after. On the smallest rows the GPU
# waits for the host between kernels (section *How much of a call is the GPU working?* below), so there the
# fraction says more about the host.

# %%
if RUN:
    display(timed[["row", "shape", "median_ms", "p20_ms", "p80_ms", "floor_ms", "bound", "achieved_tflops",
                   "fraction_of_floor"]])
    display(save_figure(plot_roofline(timed, ceilings, sheet), "01_roofline", ctx))

# %% [markdown]
# ## Cross-check: what `FlopCounterMode` counts
#
# PyTorch's `torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of every matrix product the layer runs
# (here on the `meta` device: shapes only, nothing computed). For the GEMMs it must agree with the formula
# exactly. For attention it counts the naive layer's full `(N, N)` products, `4·B·N²·d`: **twice** the useful
# causal count, since half the scores are computed only to be set to `-inf` by the causal mask.

# %%
if RUN:
    cross = pd.concat({s.row: flop_crosscheck(s) for s in ctx.rows}, names=["row"])
    display(as_measured(cross.xs(ctx.rows[-1].row, level="row"), list(cross.columns)).rename_axis(
        f"row {ctx.rows[-1].row}"))  # a ratio of 1.00, not 1
    ratio = cross.counted_over_useful.unstack("kind")
    display(Markdown(f"Counted over useful FLOPs on all {len(ratio)} rows: GEMMs "
                     + ", ".join(map(three_digits, sorted(ratio["GEMM"].unique()))) + "; attention "
                     + ", ".join(map(three_digits, sorted(ratio["attention"].unique()))) + "."))
    assert (ratio["GEMM"] == 1).all() and (ratio["attention"] == 2).all(), ratio

# %% [markdown]
# ## Each op on the roofline: which passes are memory-bound
#
# The floor counts the layer's fewest bytes, as if it were one fused kernel. The naive layer is not: every op
# reads its inputs from memory and writes its output back. Counting each op's FLOPs and the bytes it moves, and
# dividing by its GPU time from the profile, places each op on the roofline by itself.
#
# `masked_fill` and `softmax` do no matrix product on the score tensor they read and write, so they are memory-bound
# although the layer as a whole is compute-bound. The table's `profiled_as` names the profiler's ops whose time a row
# sums. A copy shows in the profile as `clone`, the op that makes it, and the `copy_` that `clone` calls to do the
# work: `masked_fill` makes such a copy of the scores before it fills them, so its row sums `masked_fill_`, `copy_`,
# `clone` and `masked_fill`, and the layer's other copies are merged into one row named `aten::copy`
# (`copy_ + clone`). A row's category is the one most of its time went to. Its bytes, though, are the op's own: its
# input read and its output written once each. The copy inside `masked_fill` moves the score tensor a second time,
# so the GPU moved about twice the bytes its row counts, and its GB/s read about half of what the GPU carried.
#
# Panel (a) is the reference, from the profile above; panel (b) is `best_variant`, the rung kept by notebook 04's
# keep-or-revert decision: `triton_ln` (04's Triton kernel for the residual add and LayerNorm) if kept, else
# `no_empty_mask` (03's layer, which stops building the padding mask), the rung it is built on. Both compute
# attention in one fused call, PyTorch's `scaled_dot_product_attention` (SDPA, notebook 02), so panel (b) shows an
# `sdpa_…_attention` op where panel (a) has the reference's matrix products and softmax. In a fresh Python
# session that is the decision the package records for this GPU and dtype, and `no_empty_mask` where none is recorded
# (as on a T4). Its ops come from the session's profile of it on the same row, the one the later notebooks show for
# that rung.
#
# The second figure gives each op's GB/s against a plain copy's. The copy line is the speed of one measured copy, not
# a hard limit: a copy reads and writes equal amounts, which is not the fastest traffic memory can carry, so an op
# that reads more than it writes (an `add` reads two tensors and writes one) can come out up to about ten percent
# above it. And since the copy line is itself one measurement, with its own noise, any op can land a few percent
# either side of it, even one that reads and writes equal amounts, as a `div` does. How to read both figures is in the
# [notes](../docs/walkthrough/01_baseline_profiling.md#ops-on-the-roofline).

# %%
BEST = best_variant(ctx.device, ctx.dtype)  # the rung notebook 04's decision leaves (recorded for this GPU, if any)
if RUN:
    points = {"reference": op_roofline(row_profile(base, big.row), op_traffic(case.layer, case.x)),
              BEST: op_roofline(row_profile(suite_profile(ctx, BEST), big.row, BEST),  # the session's profile
                                op_traffic(build_variant(BEST, case.layer), case.x))}
    display(points["reference"][["op", "profiled_as", "category", "calls", "flops", "bytes", "time_us", "intensity",
                                 "tflops", "gbps", "share"]].sort_values("time_us", ascending=False).head(12))
    display(save_figure(plot_op_roofline(points, ceilings, title=f"Ops on row {big.row} ({big.label}), "
                                         f"{ctx.dtype_name}: the reference and {BEST}"), "01_op_roofline", ctx))
    display(save_figure(plot_op_bandwidth(points, ceilings, title=f"Ops on row {big.row} ({big.label}), "
                                          f"{ctx.dtype_name}, against the copy bandwidth"), "01_op_bandwidth", ctx))
    display(Markdown(op_roofline_summary(points["reference"], ceilings, "reference")))

# %% [markdown]
# ## How much of a call is the GPU working?
#
# The profile has one call's wall time on the host clock (`call_us`) next to its kernels' GPU time (`kernel_us`);
# `idle_us` is the difference, the time in which no kernel of the call runs. Where the kernels fill less than half of
# the call (`busy` below 0.5: `waits_on_host`), the GPU spends most of it waiting for the host (the CPU, running
# Python) to launch the next kernel: there the number of kernels, not their FLOPs or bytes, sets the time. That is the
# profile's measure, with its threshold of one half; the *idles for more than 10%* of notebooks 02–04's decisions is
# another: the ladder's GPU time over its call time (`gpu_share`) below 0.9, where a call's time already follows the
# host's speed. These are the profile's numbers, a different measurement from the session's timing (`timed_us`, as in
# the tables above): the profiler adds host time to every op, so `call_us` is usually longer, though not necessarily
# on every row: the two are separate measurements, each with its own noise. Notebook 05 measures the split without it.

# %%
if RUN:
    display(launch_table(base.runs).merge(
        timed[["row", "median_ms"]].assign(timed_us=lambda t: t.median_ms * 1e3).drop(columns="median_ms"),
        on="row", how="left"))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter), a dtype and a
# variant: it is profiled again (a separate run from the tables above), its mask shares are shown and the
# breakdown is redrawn.

# %%
def measure_step(rows, dtype, variant):
    """This step's measurement: the profile of `variant` on `rows` in `dtype`, its mask share and breakdown."""
    again = profile(ctx, [variant], rows=rows, dtype=dtype)
    if again.categories.empty:  # nothing ran (e.g. a variant that cannot run here): the run table says why
        return again.runs[["row", "variant", "status", "reason"]]
    return mask_share_table(again.categories), plot_category_breakdown(again.categories)


if RUN:
    display(rerun_widget(measure_step, **step_controls(ctx, list(VARIANTS), value="reference")))

# %% [markdown]
# ## Exercises
#
# `check_layer(ctx, YourLayer)` builds your layer from the reference (`YourLayer(reference)`), checks it by §3,
# without padding and with left padding, then times it interleaved against a rung (here the reference). Its first
# line says whether it passed.

# %% [markdown]
# ### Exercise 1 — Scale the queries, not the scores
#
# `MyLayer` is the reference's `forward` written out, with the score computation in a method of its own. The
# profile found `aten::div` making a full pass over the `(B, H, N, N)` score tensor, to divide it by √(d / H).
# Divide `q` instead, a `(B, H, N, d / H)` tensor, so that the pass disappears. The check runs on the largest row
# here, where the pass costs the most; compare its speedup with the `div` line's `share` in the per-op table.
# The starter's own timing line is the one to compare against: `MyLayer` is the reference written out, not its own
# code, so unchanged it can already read a little *faster* or *slower* than the reference, even with a verdict
# other than *within noise*; compare your version's line with it.

# %%
class MyLayer(torch.nn.Module):
    """The reference's forward written out, to change one thing at a time (unchanged, it passes)."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref

    def scores(self, q, k):
        """(B, H, N, N) attention scores of q and k, each (B, H, N, hd)."""
        return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # the division: a pass over the scores

    def hidden_by_causal(self, N, device):
        """(N, N) booleans, True where a query must not see a key (the key comes after it)."""
        return ~torch.tril(torch.ones(N, N, dtype=torch.bool, device=device))  # built on every call

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        r = self.ref
        B, N, C = x.shape
        H, hd = r.n_heads, C // r.n_heads
        h = r.ln1(x)
        q = r.q_proj(h).view(B, N, H, hd).transpose(1, 2)  # (B, H, N, hd)
        k = r.k_proj(h).view(B, N, H, hd).transpose(1, 2)
        v = r.v_proj(h).view(B, N, H, hd).transpose(1, 2)
        s = self.scores(q, k).masked_fill(self.hidden_by_causal(N, x.device), float("-inf"))
        if key_padding_mask is None:
            key_padding_mask = torch.ones(B, N, dtype=torch.bool, device=x.device)  # (B, N)
        s = s.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))  # (B, H, N, N)
        y = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, N, C)  # (B, N, C)
        x = x + r.out_proj(y)
        return x + r.fc2(F.gelu(r.fc1(r.ln2(x))))


check_layer(ctx, MyLayer, rows=ctx.rows[-1:], baseline="reference")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `(q @ kᵀ) / c` equals `(q / c) @ kᵀ`. Override `scores` in a subclass of `MyLayer`. On the GPU rows every head
# is 64 or 128 wide, so dividing by √(d / H) is dividing by 8 or by a power of 2 times √2; in fp16 only the first
# is exact, and §3 allows the rest.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class ScaledQueries(MyLayer):
#     """The scale applied to q, (B, H, N, hd), instead of to the (B, H, N, N) scores."""
#
#     def scores(self, q, k):
#         return (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)
#
#
# check_layer(ctx, ScaledQueries, rows=ctx.rows[-1:], baseline="reference")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — Build the causal mask once
#
# The mask construction category (`ones`, `tril`, `bitwise_not`) is redone on every call although it depends only
# on N. Write a subclass of `MyLayer` whose `hidden_by_causal` builds the mask once per sequence length and device
# and reuses it. The check runs on the first two rows, where a call is a few dozen small kernels.
# The starter's own timing line is the one to compare against: `MyLayer` is the reference written out, not its own
# code, so the starter alone can already read *faster* or *within noise*; compare your version's line with it.

# %%
class CausalOnce(MyLayer):
    """Starter: still builds the causal mask on every call. Keep it instead."""

    def hidden_by_causal(self, N, device):
        return super().hidden_by_causal(N, device)


check_layer(ctx, CausalOnce, baseline="reference")

# %% [markdown]
# <details><summary>Hint</summary>
#
# Keep a dictionary on the module, keyed by `(N, device)`, and fill it on the first call for that key.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class CausalKept(MyLayer):
#     """The causal mask built on the first call for a sequence length and device, then reused."""
#
#     def __init__(self, ref):
#         super().__init__(ref)
#         self.kept = {}
#
#     def hidden_by_causal(self, N, device):
#         if (N, device) not in self.kept:
#             self.kept[N, device] = super().hidden_by_causal(N, device)
#         return self.kept[N, device]
#
#
# check_layer(ctx, CausalKept, baseline="reference")
# ```
#
# Three kernels fewer per call: on the shortest rows, where launching kernels sets the time, that can show;
# on the long rows it is lost in the passes over the score tensor.
#
# </details>
