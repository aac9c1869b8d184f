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
# # 06 — Long context: the whole layer at 100,000 tokens and beyond, one chunk at a time
#
# The suite's last row is a single sequence of 100,000 tokens. The naive layer cannot run it anywhere:
# its score tensor alone would need hundreds of GiB. Even the SDPA layers, which never materialize the
# scores, hold every activation of the whole sequence at once. This notebook computes the same function
# chunk by chunk, in memory that grows with the sequence length, never with its square, and checks it.
#
# **In this notebook you will learn**
#
# - why the reference is infeasible at long context, from its memory model against this device's memory;
# - the idea of the chunked layer: a key/value cache, and attention of each chunk's queries against it;
# - how to show that chunking is exact (in float64, with chunk sizes that do not divide the sequence);
# - how "correct" is checked where the reference cannot run: a float64 truth for sampled rows;
# - what chunk size and attention kernel cost in time and memory, measured at 100,000 tokens, and at
#   1,000,000 where this device's memory allows.

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
from functools import partial

import pandas as pd
import torch
from IPython.display import Markdown, display

from roofline_lib import SMOKE_SUITE, SUITE, Case, build_variant, float64_truth, measure_ceilings, sample_rows
from roofline_lib.core.catalog import DEFAULT_CHUNK_SIZE
from roofline_lib.core.device import DTYPE_NAMES, T4_MEMORY_GIB, memory_capacity, set_memory_cap
from roofline_lib.measure.roofline import layer_flops, layer_min_bytes
from roofline_lib.present.notebook import check_table, save_figure, setup_context, show_source
from roofline_lib.present.plots_longctx import plot_longctx, plot_memory_against_n, plot_ring_schedule
from roofline_lib.present.prose import check_summary, longctx_summary
from roofline_lib.present.tables import feasibility_table
from roofline_lib.present.widgets import longctx_controls, parse_sizes, rerun_widget
from roofline_lib.runs.context_parallel import run_local
from roofline_lib.runs.longctx import (
    FULL,
    estimated_bytes,
    grid_strategies,
    long_shape,
    memory_against_n,
    needs_bytes,
    run_longctx,
)
from roofline_lib.variants.chunk_attention import merge
from roofline_lib.variants.chunked import ChunkedLayer
from roofline_lib.variants.context_parallel import schedule

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ROW14 = SUITE[-1]  # B1 N100000 d1024 H16
MILLION = long_shape(1_000_000, ROW14.batch, ROW14.d_model, ROW14.n_heads)
# The long run: row 14 on a GPU; a short sequence of the same kind in smoke mode (the CPU would take hours)
LONG = long_shape(300, d_model=64, n_heads=4) if ctx.smoke else ROW14
CHUNK_SIZES = (64, 100, 256) if ctx.smoke else (DEFAULT_CHUNK_SIZE // 4, DEFAULT_CHUNK_SIZE // 2, DEFAULT_CHUNK_SIZE)
ctx

# %% [markdown]
# ## Why the reference cannot run
#
# The naive layer materializes the `(B, H, N, N)` score tensor (twice, with the softmax), so its memory
# grows with the square of the sequence length. Here are the longest suite rows and a million-token
# sequence, in this notebook's dtype, next to the memory this process may use on this device:

# %%
fits = feasibility_table([*SUITE[-3:], MILLION], ctx.dtype, ctx.device)
display(fits)
too_big = fits[~fits.fits]
display(Markdown("The naive layer does not fit here for " + ", ".join(
    f"**{shape}** (≈{gib:,.0f} GiB)" for shape, gib in zip(too_big["shape"], too_big["naive peak GiB"])) + "."))

# %% [markdown]
# ## Memory against sequence length
#
# Three layers, the same function: the naive reference (its score tensors grow with N²), the full-sequence
# SDPA layer of step 03 (`no_empty_mask`: its activations grow with N, several `(B, N, d)` and `(B, N, 4d)`
# tensors at once) and the chunked layer below (a key/value cache and the output grow with N, everything
# else is one chunk). Each is run where its estimated peak fits the memory allowed here; on a GPU larger
# than a T4 the allowance is a T4's 15 GiB, so the memory panel reads the same on both (the time panel is
# this GPU's: a T4 takes many times longer). The dashed lines are the
# estimates, the dots the measured peaks; the red line is the allowance. Times are the one protocol's, over
# 3 timed rounds.

# %%
SEQ_LENS = (64, 256) if ctx.smoke else (8192, 32768, 131072, 262144, 524288, 655360)
MEMORY_SHAPE = dict(d_model=64, n_heads=4) if ctx.smoke else dict(d_model=ROW14.d_model, n_heads=ROW14.n_heads)
capped = ctx.device.type == "cuda" and memory_capacity(ctx.device) > T4_MEMORY_GIB * 2**30
if RUN:
    if capped:
        set_memory_cap(ctx.device, T4_MEMORY_GIB)
    try:
        memory = memory_against_n(SEQ_LENS, ctx.dtype, ctx.device, **MEMORY_SHAPE, reps=3)
    finally:
        if capped:
            set_memory_cap(ctx.device, None)
    display(memory[["seq_len", "layer", "status", "estimated_gib", "peak_gib", "capacity_gib", "median_ms"]])
    display(save_figure(plot_memory_against_n(memory, title=f"Memory and time against N, B1 d{MEMORY_SHAPE['d_model']}"
                                              f" H{MEMORY_SHAPE['n_heads']}, {ctx.dtype_name}"
                                              + (f" (capped at a T4's {T4_MEMORY_GIB:g} GiB)" if capped else "")),
                        "06_memory_against_n", ctx))
    last = memory.groupby("layer", sort=False).apply(lambda g: g[g.status == "ok"].seq_len.max(), include_groups=False)
    surprises = memory[(memory.status == "oom") & memory.fits]
    display(Markdown("Longest sequence run here: " + "; ".join(
        f"`{layer}` {n:,.0f} tokens" if pd.notna(n) else f"`{layer}` none" for layer, n in last.items()) + "."
        + "".join(f" At {r.seq_len:,} tokens `{r.layer}` ran out of memory although its estimate, "
                  f"{r.estimated_gib:.1f} GiB, is under the {r.capacity_gib:.0f} GiB allowed: the estimate counts the "
                  "layer's tensors, not the allocator's rounding and fragmentation or a kernel's workspace, so "
                  "within a tenth of the limit it can miss." for r in surprises.itertuples())))

# %% [markdown]
# ## The idea: a key/value cache and one chunk of queries at a time
#
# Causal attention lets token `i` see tokens `0 … i` only. So the layer can walk the sequence in chunks:
# for each chunk, normalize it and project it to queries, keys and values; write its keys and values into
# a cache preallocated for the whole sequence; let the chunk's queries attend to the cache up to the
# chunk's end; then finish the chunk (output projection, residual, MLP) and write its output. Nothing of
# size `N × N` ever exists: the extra memory is the cache, the output and one chunk's activations.

# %%
show_source(ChunkedLayer.forward)

# %% [markdown]
# The chunk's attention needs a causal mask aligned to the **bottom right** (its queries sit at the end of
# the keys they see), which SDPA's `is_causal` does not do when the two lengths differ. One way, and the
# fastest where cuDNN is available: attend to the keys before the chunk (no mask needed) and to the square
# diagonal block (`is_causal` is right there) separately, then merge the two exactly with their
# log-sum-exps, as a softmax over two disjoint sets of keys:

# %%
show_source(merge)

# %% [markdown]
# ## Exact, whatever the chunk size
#
# Chunking changes the order of the work, not the function. In float64 there is no dtype rounding to
# hide behind, so the chunked layer should match the float64 truth to float64 rounding, like the reference
# itself does. Here on a small shape with a prime sequence length and chunk sizes that do not divide it
# (a chunk longer than the sequence included), with no padding, left padding and scattered holes:

# %%
if RUN:
    small = SMOKE_SUITE[1]  # B3 N37 d48 H4: 37 is prime
    factories = {f"chunk {c}": partial(build_variant, "chunked", chunk_size=c) for c in (1, 5, 16, 36, 64)}
    exact = check_table(ctx, factories, paddings=("none", "left", "holes"), rows=[small], dtype="fp64")
    display(Markdown(check_summary(exact)))
    display(exact[["row", "padding", "variant", "err", "ref_err"]].head(5))
    assert exact.passed.eq(True).all() and (exact.err < 1e-12).all(), "chunking changed the function"

# %% [markdown]
# Every error above is float64 rounding, as small as the reference's own (`ref_err`): the chunked layer
# computes the reference's function, not an approximation of it.
#
# ## The truth where the reference cannot run: sampled rows
#
# §3 compares against a float64 truth. At 100,000 tokens no full truth is affordable, but causality makes
# any single query row cheap: it needs the keys and values of the tokens before it, and nothing else. So
# the truth is computed exactly, in float64, for a sample of query rows spread over the sequence, the first
# and the last included:

# %%
picked = sample_rows(ROW14.seq_len)
pd.Series({"rows sampled": len(picked), "first": int(picked[0]), "last": int(picked[-1]),
           "spacing": int(picked[1] - picked[0])}, name=f"sample of {ROW14.label}")

# %% [markdown]
# The sampled truth is the same computation as the full one, restricted to those rows. Checked on a small
# shape where both fit:

# %%
if RUN:
    case = Case(SMOKE_SUITE[2], ctx.dtype, ctx.device)  # its truth covers every query row
    rows = sample_rows(case.shape.seq_len, 16).to(ctx.device)
    sampled = float64_truth(case.layer, case.x, rows=rows)  # (B, 16, C)
    gap = float((sampled - case.truth[:, rows]).abs().max() / case.truth.abs().max())
    display(pd.Series({"rows": len(rows), "max |sampled − full| / max |full|": gap}, name=case.shape.label))
    assert gap < 1e-12, gap

# %% [markdown]
# The error bound at long context is twice the reference's own error at the largest suite row it runs
# with the same `d_model` and dtype (where it can still be measured).
#
# ## Row 14 on this device
#
# `run_longctx` measures, in one go: the float64 sampled truth; the full-sequence SDPA layer
# (`no_empty_mask`) as the baseline; the chunked layer for three attention strategies (the automatic
# choice, one SDPA call with a bottom-right causal bias, and an explicit boolean mask) × chunk size; and
# the fastest chunked configuration interleaved with the baseline. Two settings depend on the device:
#
# - on a GPU with more memory than a T4, the chunked runs (and a run of the full-sequence layer) are done
#   under a memory cap the size of a T4's (the 15 GiB Colab lets a process allocate), to show what a T4 can do;
# - on a GPU where one call takes long (its roofline floor for this row, from measured ceilings, is over
#   0.1 s), the grid is trimmed to the automatic strategy and each configuration is timed a fixed 3 times.
#
# The ceilings are measured again here, at whatever clock the GPU reaches now, so this row's floor can differ
# from the one notebook 01 printed by several percent or more.

# %%
if RUN:
    cap = T4_MEMORY_GIB if capped else None
    ceilings = measure_ceilings(ctx.device, ctx.dtype, budget_s=ctx.budget_s)
    floor_s = ceilings.floor_ms(layer_flops(LONG), layer_min_bytes(LONG, ctx.dtype)) / 1e3
    quick = floor_s < 0.1
    strategies = grid_strategies("auto,lower_right,mask", ctx.device) if quick else ["auto"]
    reps = None if quick else 3
    print(f"{LONG.label}: floor {floor_s * 1e3:,.3g} ms per call; strategies {', '.join(strategies)}; "
          f"chunk sizes {', '.join(map(str, CHUNK_SIZES))}; "
          + (f"memory cap {cap:.3g} GiB (a T4's)" if cap else
             f"no cap of its own: this device's {memory_capacity(ctx.device) / 2**30:.3g} GiB are the limit"))

# %%
if RUN:
    long_results = run_longctx(LONG, ctx.dtype, ctx.device, CHUNK_SIZES, strategies, memory_cap_gib=cap,
                               budget_s=ctx.budget_s, reps=reps)
    measured = long_results[long_results.kind == "measure"]
    display(measured[["variant", "resolved_attention", "chunk_size", "memory_cap_gib", "status", "err_ratio",
                      "first_call_s", "median_ms", "tflops", "peak_gib"]].rename(
        columns={"resolved_attention": "attention", "memory_cap_gib": "cap GiB", "first_call_s": "first call s"}))
    display(save_figure(plot_longctx(long_results), "06_long_context", ctx))
    assert not long_results.status.eq("fail").any(), "a chunked run failed §3: see the table above"

# %% [markdown]
# `status` is `ok` for a configuration that ran and passed §3; `skipped` where its attention kernel is not
# available here or failed its self-check (the reason is in the results); `oom` where it did not fit under
# the cap; `error` where a kernel refused this size (`attention` is the strategy each chunked run resolved
# to). What the table says, with the interleaved comparison against the full layer, computed from it.
# Read the plot with it: a smaller chunk means less memory for one chunk's activations but more, smaller
# kernel calls; the attention strategy decides how close the chunked layer gets to the full-sequence one.
# `first call s` is each configuration's first call: where it grows with the number of chunks, its kernel
# prepares itself for every new key length, which every chunk brings (cuDNN attention, where it runs,
# builds a plan per shape); later calls reuse that. The sentence below says whether the full-sequence
# layer is the faster here, and the time panel of the memory figure above shows both at every length.
# Where the full layer fits and is as fast or faster, chunking buys memory, not speed: it is for the lengths
# where the full layer no longer fits, the ones that figure marks.

# %%
if RUN:
    display(Markdown(longctx_summary(long_results)))

# %% [markdown]
# ## One million tokens: past the full layer's reach
#
# Ten times longer: the activations grow ten times, the attention work a hundred times. The run needs
# the sampled truth (float64, streamed over blocks of keys, so about 1 GiB beyond the input) and the chunked
# layer (its key/value cache, its output and one chunk), so it goes ahead where this device's memory holds
# the larger of the two. On a T4-sized card the full-sequence layer no longer fits at this length, while the
# chunked one does (the estimates are printed below) and passes §3: on a GPU larger than a T4 both are
# tried under a T4's 15 GiB cap, and the full layer's out-of-memory is recorded. The full layer is not timed
# uncapped here: on a larger GPU it would fit, but it would double the run; for the time of chunked against
# full, read the 100,000-token comparison above.
# How long it takes depends on the GPU: the cell below estimates one call from the 100,000-token run above
# (attention work grows with N², so a hundred times that run's time) and says what to expect; where one
# call takes long it is timed once instead of three times, and where the run would take more than ten
# minutes it waits for you to ask for it. It takes the default chunk size and the automatic strategy, and
# says which way it went and why.

# %%
RUN_LONG_ANYWAY = False  # True: run the million-token cell even where it would take more than 10 minutes
need, have = needs_bytes(MILLION, ctx.dtype), memory_capacity(ctx.device)
for dtype in dict.fromkeys([ctx.dtype, torch.float16]):  # a T4 runs fp16: its fit is judged in fp16
    print(f"{MILLION.label}, estimated peak per call in {DTYPE_NAMES[dtype]}: {FULL} "
          f"{estimated_bytes(FULL, MILLION, dtype) / 2**30:,.1f} GiB, chunked "
          f"{estimated_bytes('chunked', MILLION, dtype) / 2**30:,.1f} GiB"
          + (f"; a T4 allows {T4_MEMORY_GIB:g} GiB" if dtype == torch.float16 else ""))
RUN_MILLION = RUN and ctx.device.type == "cuda" and need <= have
if ctx.device.type != "cuda":
    print(f"Skipped: {MILLION.label} on the CPU would take hours (needs ≈{need / 2**30:,.0f} GiB).")
elif need > have:
    print(f"Skipped: {MILLION.label} needs ≈{need / 2**30:,.0f} GiB, this device allows {have / 2**30:,.0f} GiB.")
elif RUN_MILLION:  # one call ≈ the 100,000-token chunked call × (N ratio)²; a run is the check, 2 estimates, the reps
    at_long = long_results[(long_results.kind == "measure") & (long_results.variant == "chunked")].median_ms.min()
    call_s = at_long / 1e3 * (MILLION.seq_len / LONG.seq_len) ** 2
    million_reps = 3 if call_s * 6 <= 180 else 1  # NaN (nothing timed at 100,000 tokens): once
    minutes = call_s * (million_reps + 3) / 60
    RUN_MILLION = RUN_LONG_ANYWAY or not minutes > 10
    print(f"{MILLION.label} needs ≈{need / 2**30:,.0f} GiB of the {have / 2**30:,.0f} GiB available. "
          + ("No chunked call was timed at 100,000 tokens, so no estimate of its time: timed once."
             if minutes != minutes else f"One call should take about {call_s:,.0f} s here, so the run about "
             f"{minutes:,.1f} minutes, timed {million_reps} time(s)"
             + ("." if RUN_MILLION else ": not run by default; set RUN_LONG_ANYWAY = True above and rerun this "
                "cell and the next to run it.")))

# %%
if RUN_MILLION:
    million = run_longctx(MILLION, ctx.dtype, ctx.device, [DEFAULT_CHUNK_SIZE], ["auto"],
                          memory_cap_gib=T4_MEMORY_GIB if capped else None, reps=million_reps, baseline=not capped)
    display(million[["kind", "variant", "resolved_attention", "chunk_size", "memory_cap_gib", "status", "err_ratio",
                     "first_call_s", "median_ms", "tflops", "peak_gib", "ratio_vs_full", "verdict"]].dropna(
        axis="columns", how="all"))  # no comparison where the full layer did not run
    display(Markdown(longctx_summary(million)))
    assert not million.status.eq("fail").any(), "the million-token run failed §3: see the table above"

# %% [markdown]
# ## Beyond one device: context parallel
#
# Where one GPU is not enough, the sequence is split over P GPUs (`roofline_lib.variants.context_parallel`, on
# `torch.distributed`). Each rank holds a share of the tokens and runs the LayerNorms, projections and MLP
# on it alone. For attention, the ranks pass key/value blocks around a ring: at each step a rank attends
# its queries to the block it holds while it sends that block on and receives the next, and merges the
# partial results by their log-sum-exp — the merge the chunked layer uses between a chunk's prefix and its
# diagonal block. Causal attention gives the last tokens the most work, so the sequence is cut into 2P
# pieces and rank r takes pieces r and 2P−1−r (a zigzag): every rank gets one early and one late piece.
# Which rank computes which piece pair at which step, drawn from the code's own schedule for P = 4:

# %%
display(save_figure(plot_ring_schedule(schedule(4096, 4)), "06_ring_schedule", ctx))

# %% [markdown]
# And it runs: P = 2 processes on this machine's CPU (gloo, the CPU backend of `torch.distributed`), in
# fp32 (the CPU's dtype, not this notebook's), on a small shape with left padding across the rank borders,
# checked by §3 against the float64 truth. On GPUs
# the same code runs with NCCL, started by `torchrun --nproc-per-node P -m roofline_lib longctx
# --context-parallel`.

# %%
if RUN:
    ring = run_local(2, long_shape(301, d_model=64, n_heads=4), padding="left")
    display(pd.Series({k: ring[k] for k in ("ranks", "backend", "kernel", "seq_len", "padding", "err", "ref_err",
                                            "err_ratio", "passed", "rows_checked")}, name="context parallel, P = 2"))
    assert ring["passed"], ring

# %% [markdown]
# ## Try it
#
# Pick a sequence length and chunk sizes (comma-separated), each applied on Enter: the layer is checked
# and timed again with the automatic attention strategy (on a GPU, 3 timed calls per configuration), and
# the plot is redrawn.
#
# `peak_gib` is the peak of the whole check, §3's comparison included. Where the naive reference fits
# this device's memory (on an H200 at the default 25,000 tokens, not on a T4), the truth covers every query
# row. The comparison then holds float64 copies of the truth and of the output, each `B·N·d_model·8` bytes,
# and at a length this short they, not the layer, can set the peak: then every configuration shows about
# the same. The memory figure above measures each layer's call alone.

# %%
def measure_step(seq_len, chunk_sizes):
    """This step's measurement: the chunked layer at `seq_len` tokens for each of `chunk_sizes` (text)."""
    shape = long_shape(seq_len, LONG.batch, LONG.d_model, LONG.n_heads)
    again = run_longctx(shape, ctx.dtype, ctx.device, parse_sizes(chunk_sizes), ["auto"], budget_s=ctx.budget_s,
                        reps=None if ctx.smoke else 3)
    return again[["kind", "variant", "resolved_attention", "chunk_size", "status", "err_ratio", "median_ms",
                  "peak_gib", "ratio_vs_full", "verdict"]], plot_longctx(again)


if RUN:
    seq_len = LONG.seq_len if ctx.smoke else LONG.seq_len // 4  # quick to rerun
    display(rerun_widget(measure_step, **longctx_controls(seq_len, CHUNK_SIZES[::2])))
