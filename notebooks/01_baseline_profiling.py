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
# # 01 — Baseline profiling: where the reference spends its time, and how far it is from the roofline
#
# Before changing anything, measure. This notebook profiles the naive layer, op by op and kernel by
# kernel, sorts the time into a few categories, and sets it against the roofline: the least time any
# implementation of the same function could take on this device, as a whole and op by op.
#
# **In this notebook you will learn**
#
# - how to profile one forward call with `torch.profiler` and read the per-op, per-kernel and per-category tables;
# - how to count the useful work (FLOPs) and the fewest bytes of the layer, and turn them into a floor
#   with the device's measured ceilings (and how those compare with the datasheet);
# - why `FlopCounterMode` counts twice the useful attention FLOPs of a causal layer;
# - which ops are memory-bound, from each op's own FLOPs and bytes on the roofline;
# - how much of a call the GPU is working, and where it waits for the host (notebook 05 goes further).
#
# Every number below is measured when the notebook runs, on whatever device it runs on.

# %%
# Setup. In a checkout (Jupyter or VS Code with notebooks/ as the working folder) the checkout's roofline_lib
# is used, with no network; elsewhere (Colab) it is installed from REPO_URL, and the installed torch is kept.
REPO_URL = "https://github.com/roofline-lab/roofline"  # where the repository is published (= roofline_lib.present.colab.REPO_URL)
import importlib
import subprocess
import sys
from pathlib import Path

if (Path.cwd().parent / "roofline_lib" / "__init__.py").is_file():  # a checkout: notebooks/ is the working folder
    sys.path.insert(0, str(Path.cwd().parent))
try:
    import roofline_lib
except ImportError:
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"roofline_lib @ git+{REPO_URL}"],
                         capture_output=True, text=True)
    importlib.invalidate_caches()
    if pip.returncode != 0:
        why = pip.stderr.strip().splitlines()[-1] if pip.stderr.strip() else "pip failed"
        raise SystemExit(f"roofline_lib is not installed and could not be installed from {REPO_URL} ({why}). "
                         "Open this notebook from the notebooks/ folder of a checkout, or set REPO_URL to the "
                         "repository's published address.")

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
    profile_variant,
    roofline_table,
)
from roofline_lib.measure.profile_analysis import launch_table, op_roofline
from roofline_lib.measure.profile_rules import charge_category, short_kernel_name
from roofline_lib.measure.roofline import op_traffic
from roofline_lib.present.notebook import profile, save_figure, setup_context, show_source, sweep
from roofline_lib.present.plots import plot_roofline
from roofline_lib.present.plots_profile import plot_category_breakdown, plot_op_bandwidth, plot_op_roofline
from roofline_lib.present.prose_profile import op_roofline_summary
from roofline_lib.present.tables import ceilings_table
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.variants.best import best_variant

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## Profiling the reference
#
# `torch.profiler` records every aten op the layer calls and, on a GPU, every kernel those ops launch.
# The library's profile runs a few unrecorded calls first (warm-up), then records a few and reports the
# mean **per forward call**: on CUDA the GPU time of the kernels each op launched, on the CPU each op's
# own CPU time. One rule sorts that time into categories (GEMM, attention core, softmax, mask
# construction, masking, LayerNorm, …): an op inside a mask operation is charged to the mask, otherwise
# the op the layer called decides. The first table gives, per row, the calls recorded, one call's wall time
# on the host clock and its kernels' time.

# %%
show_source(charge_category)

# %%
if RUN:
    base = profile(ctx, ["reference"])
    display(base.runs[["row", "shape", "variant", "status", "steps", "step_us", "total_us"]].rename(columns={
        "steps": "recorded calls", "step_us": "call µs (host clock)", "total_us": "kernel µs"}))

# %% [markdown]
# ### Per op
#
# The largest row that runs here, ops sorted by time per call. `calls` is per forward call; `share` is the
# op's part of the total. The same op can appear more than once when its time goes to several categories (a `clone`
# inside `masked_fill` is masking; elsewhere it is a copy).

# %%
if RUN:
    big = ctx.rows[-1]
    columns = ["op", "category", "calls", "time_us", "self_cpu_us", "share"]
    display(Markdown(f"Row {big.row} ({big.label}), {ctx.dtype_name}, µs per forward call:"))
    ops = base.ops[(base.ops.row == big.row) & (base.ops.time_us > 0)]  # an op whose work is all in its callees: 0
    display(ops[columns].head(15))

# %% [markdown]
# ### Per kernel
#
# On a GPU, what actually ran: the kernels behind those ops, by name. The kernel names tell you which
# library did the work (cuBLAS GEMMs, PyTorch's own elementwise and reduction kernels).

# %%
if RUN:
    kernels = base.kernels[base.kernels.row == big.row]
    if kernels.empty:
        print("No GPU kernels: on the CPU the profile has op times only.")
    else:
        display(kernels[["kernel", "category", "calls", "time_us", "share"]].head(15).assign(
            kernel=lambda t: t.kernel.map(short_kernel_name)))

# %% [markdown]
# ### Per category
#
# The same time rolled up into categories, for every row: the share of each category, then the largest
# category on each row. The plot shows the shares as stacked bars, with the kernels' total GPU milliseconds
# per call on top of each bar: the profiled kernels' time, not the call's, which is longer wherever the GPU
# waits for the host.

# %%
if RUN:
    shares = base.categories.pivot(index="row", columns="category", values="share")
    display(shares.reindex(index=[s.row for s in ctx.rows], columns=list(base.categories.category.unique())))
    largest = base.categories.loc[base.categories.groupby("row", sort=False).time_us.idxmax()]
    display(largest[["row", "shape", "category", "time_us", "share"]].rename(columns={"category": "largest"}))
    display(save_figure(plot_category_breakdown(base.categories), "01_breakdown", ctx))

# %% [markdown]
# Compare the rows by sequence length. The GEMMs (the projections and the MLP) grow with `B·N·d²`;
# everything that touches the `(B, H, N, N)` score tensor grows with `N²`: the attention matmuls with
# `B·N²·d`, the softmax and the two `masked_fill` passes with `B·H·N²` (the mask construction, an `(N, N)`
# triangle and its negation, with `N²`).
# So expect GEMMs and fixed costs on
# the short rows and the score-tensor categories on the long ones; the `largest` table above says which it
# is on each row here.
#
# ## The roofline model
#
# How fast *could* a row run? Count the useful work and the fewest bytes:
#
# - the four GEMMs (fused QKV, output projection, the two MLP matrices) make `24·B·N·d²` FLOPs;
# - causal attention makes `2·B·N²·d`: `QKᵀ` and `PV` over the lower triangle only, half the full square
#   that the naive layer computes and then masks;
# - the fewest bytes are the weights once, the input read once and the output written once.
#
# Per op, for the largest row here (`naive_flops` is what the naive layer actually computes; an op's
# `min_bytes` is for that op alone, the `layer` line's for the whole fused layer):

# %%
op_costs(ctx.rows[-1], ctx.dtype)

# %% [markdown]
# ### The device's ceilings
#
# Two numbers bound any kernel: the matmul rate and the memory bandwidth. The datasheet prints them; what
# the device actually reaches is measured here with a large matmul in the run dtype and a large
# device-to-device copy. The floor uses the measured ones. Where the device is in the datasheet table,
# the two are side by side:

# %%
if RUN:
    ceilings = measure_ceilings(ctx.device, ctx.dtype, budget_s=ctx.budget_s)
    sheet = datasheet_ceilings(ceilings.device, ctx.dtype)
    display(Markdown(f"**{ceilings.device}**, {ceilings.source}" + ("" if sheet else " (not in the datasheet table)")))
    display(ceilings_table(ceilings, sheet))

# %% [markdown]
# The datasheet table, with where each number comes from:

# %%
datasheet()

# %% [markdown]
# ### The floor of every suite row
#
# `floor = max(FLOPs / matmul rate, bytes / bandwidth)`. The arithmetic intensity (FLOPs per byte) says
# which ceiling binds: below the ridge point a row is memory-bound, above it compute-bound. This is a
# model, so it covers the whole suite, the long-context row included.

# %%
if RUN:
    display(roofline_table(SUITE, ctx.dtype, ceilings))

# %% [markdown]
# ### The reference on the roofline
#
# The reference timed on every row that runs here, with its achieved TFLOP/s (useful FLOPs over the
# median time) and the fraction of the floor it reaches (`floor_ms / median_ms`; 1 would be perfect).
# Each point sits below the roof; the gap is what the following notebooks go after (where points crowd
# together, a second panel draws them closer). On the first, smallest
# rows the GPU waits for the host (notebook 05 shows it), so their times follow the host's speed at that
# moment, which drifts: other notebooks may time the same call faster or slower, and a fraction of the floor
# there says more about the host than about the kernels.

# %%
if RUN:
    timed = add_roofline(sweep(ctx, ["reference"]), ceilings)
    display(timed[["row", "shape", "median_ms", "p20_ms", "p80_ms", "floor_ms", "bound", "achieved_tflops",
                   "fraction_of_floor"]])
    display(save_figure(plot_roofline(timed, ceilings, sheet), "01_roofline", ctx))

# %% [markdown]
# ## Cross-check: what `FlopCounterMode` counts
#
# PyTorch's `torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of every matmul the layer runs
# (here on the `meta` device: shapes only, nothing computed). For the GEMMs it must agree with our
# formula exactly. For attention it counts the naive layer's full `(N, N)` products, `4·B·N²·d`: **twice**
# the useful causal count, because half of the scores are computed only to be set to `-inf` by the causal
# mask. That factor of 2 is work a causal kernel skips, and the reason the useful count is the one the
# roofline uses. The table shows the last row, the line under it every row, and the cell asserts both.

# %%
if RUN:
    cross = pd.concat({s.row: flop_crosscheck(s) for s in ctx.rows}, names=["row"])
    display(cross.xs(ctx.rows[-1].row, level="row").rename_axis(f"row {ctx.rows[-1].row}"))
    ratio = cross.counted_over_useful.unstack("kind")
    display(Markdown(f"Counted over useful FLOPs on all {len(ratio)} rows: GEMMs "
                     + ", ".join(f"{v:g}" for v in sorted(ratio["GEMM"].unique())) + "; attention "
                     + ", ".join(f"{v:g}" for v in sorted(ratio["attention"].unique())) + "."))
    assert (ratio["GEMM"] == 1).all() and (ratio["attention"] == 2).all(), ratio

# %% [markdown]
# ## The roofline per op: which passes are memory-bound
#
# The floor above counts the layer's fewest bytes, as if it were one fused kernel. The naive layer is not: every
# op reads its inputs from memory and writes its output back. Counting, per aten op, the FLOPs it does and the
# bytes it actually moves (`roofline.op_traffic`, from the op's own tensors) and dividing by its GPU time from
# the profile places each op on the roofline by itself. `masked_fill` and `softmax` do no matrix product on the
# `(B, H, N, N)` score tensor they read and write, so they sit far left, under the bandwidth roof: memory-bound,
# although the layer as a whole looks compute-bound. The reference's ops are drawn beside those of the rung the
# walkthrough ends with on this GPU (`best_variant`: the one notebook 04's keep-or-revert decision left,
# `no_empty_mask` where none is recorded): its attention is one fused kernel, and the memory-bound passes over
# the score tensor are gone. The sentence under the figures says where each of the reference's ops landed on
# this GPU, the GEMMs against the compute roof. How far under the bandwidth roof the memory-bound ops sit, the
# second figure shows: each op's GB/s against a plain copy's. That copy line is what one plain copy reached when
# the ceilings were measured, not a hard limit: an elementwise pass that streams as well as a copy can land a
# few percent above it. An op without a matrix product has 0 FLOPs, so its intensity and TFLOP/s in the table
# are 0, which a log axis cannot show: the first figure draws those ops at its left edge, each below the
# bandwidth roof by its share of a copy's GB/s (the `gbps` column), which the second figure shows as bars, for
# the ops of 2 % or more of the layer's time. Ops with a matrix product are bound by compute, not bandwidth: a
# low GB/s in the second figure is no shortfall for them. In the first figure the marker's colour gives its
# category (the legend under it): where markers overlap, a name placed clear of them may sit nearer another
# marker than its own, so match a name to its marker by its line, where it has one, and by the category.

# %%
BEST = best_variant(ctx.device, ctx.dtype)  # the rung notebook 04's decision leaves (recorded for this GPU, if any)
if RUN:
    case = Case(big, ctx.dtype, ctx.device)
    points = {name: op_roofline(profile_variant(name, big, ctx.dtype, ctx.device),
                                op_traffic(build_variant(name, case.layer), case.x)) for name in ("reference", BEST)}
    display(points["reference"][["op", "category", "calls", "flops", "bytes", "time_us", "intensity", "tflops", "gbps",
                                 "share"]].sort_values("time_us", ascending=False).head(12))
    display(save_figure(plot_op_roofline(points, ceilings, title=f"Ops on row {big.row} ({big.label}), "
                                         f"{ctx.dtype_name}: the reference and {BEST}"), "01_op_roofline", ctx))
    display(save_figure(plot_op_bandwidth(points, ceilings, title=f"Ops on row {big.row} ({big.label}), "
                                          f"{ctx.dtype_name}, against the copy bandwidth"), "01_op_bandwidth", ctx))
    display(Markdown(op_roofline_summary(points["reference"], ceilings, "reference")))

# %% [markdown]
# ## How much of a call is the GPU working?
#
# The profile also has the wall time of one call on the host clock (`call_us`, synchronized) next to the
# GPU time of its kernels (`kernel_us`). Where the kernels fill less than half of the call, the GPU spends
# most of it waiting for the host to launch the next kernel: on those rows the number of kernels, not their
# FLOPs or bytes, sets the time. The profiler records every op, and that costs host time too: where the
# host sets the pace, `call_us` is larger than the same call timed without it (`timed_us`, the one protocol,
# from the roofline table above), so the split here exaggerates the host's part. Where the GPU is busy,
# `call_us` is still larger, by about the profiled call's `idle_us`: the profiler's bookkeeping and the
# synchronized end of a single call, which calls timed back to back hide. That share shrinks as the call
# grows. Notebook 05 measures the split without the profiler.

# %%
if RUN:
    display(launch_table(base.runs).merge(
        timed[["row", "median_ms"]].assign(timed_us=lambda t: t.median_ms * 1e3).drop(columns="median_ms"),
        on="row", how="left"))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter), a dtype
# and a variant: it is profiled again, the run table and its mask shares are shown, and the breakdown is
# redrawn.

# %%
def measure_step(rows, dtype, variant):
    """This step's measurement: the profile of `variant` on `rows` in `dtype`, its mask share and breakdown."""
    again = profile(ctx, [variant], rows=rows, dtype=dtype)
    if again.categories.empty:  # nothing ran (e.g. a variant that cannot run here): the run table says why
        return again.runs[["row", "variant", "status", "reason"]]
    return mask_share_table(again.categories), plot_category_breakdown(again.categories)


if RUN:
    display(rerun_widget(measure_step, **step_controls(ctx, list(VARIANTS), value="reference")))
