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
# # 06 — Long context: the whole layer at 100,000 tokens, one chunk at a time
#
# **The question.** The suite's last row is one sequence of 100,000 tokens. The naive layer cannot run it: its
# score tensor alone would need hundreds of GiB. Can the same function be computed in memory that grows with the
# sequence length N, not with N², and how much time does that cost against the full-sequence layer?
#
# **What you will measure:** the chunked layer at 100,000 tokens (checked by §3, timed against the full-sequence
# layer), the memory of three layers as N grows, that chunking is exact, and a million tokens where the GPU allows
# and time permits (off by default on a T4).
#
# **Time on a T4:** about 1 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: memory
# against N 0.7, the 100,000-token run 0.2, the ceilings 0.1; [how](../roofline_lib/present/estimate.py)).
#
# **Words used here** (the [glossary](../docs/glossary.md) has the rest):
#
# - From notebooks 00–03: **§3** is the rule that a layer's error against the float64 truth is at most twice the
#   reference's own, plus 1e-6; a **rung** is one step of the ladder of faster layers; the **floor** is the least
#   time any implementation could take on this device: the larger of a call's FLOPs over the matmul rate and its
#   bytes over the memory bandwidth.
# - The **full-sequence layer** is notebook 03's rung `no_empty_mask`: all N tokens at once, attention through
#   SDPA (PyTorch's fused attention kernel, which never writes the N × N scores to memory).
# - A **key/value cache** (KV cache) keeps the keys and values of every token processed so far, in one tensor
#   allocated once for the whole sequence, so later tokens can attend to them without recomputing them.
# - **Chunked attention**: the queries of one block of L tokens (a **chunk**) attend to the cache up to the chunk's
#   end. Its memory is **bounded**: beyond the cache and the output, which grow with N, only one chunk's
#   **activations** (the intermediate tensors a call computes and holds) exist at a time, never an N × N tensor.
# - A **float64 truth on sampled rows** is §3's reference answer (the layer in float64, where rounding is
#   negligible) computed only for some query positions spread over the sequence. Causality makes each row cheap.
#
# Protocol details and caveats are in [docs/walkthrough/06_long_context.md](../docs/walkthrough/06_long_context.md).

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
from functools import partial

import pandas as pd
import torch
from IPython.display import Markdown, display

from roofline_lib import SMOKE_SUITE, SUITE, Case, build_variant, float64_truth, measure_ceilings, sample_rows
from roofline_lib.core.catalog import DEFAULT_CHUNK_SIZE
from roofline_lib.core.device import DTYPE_NAMES, T4_MEMORY_GIB, memory_capacity, set_memory_cap, small_gpu
from roofline_lib.measure.roofline import layer_flops, layer_min_bytes
from roofline_lib.present.notebook import check_table, save_figure, setup_context, show_source
from roofline_lib.present.plots_longctx import plot_longctx, plot_memory_against_n, plot_ring_schedule
from roofline_lib.present.prose import check_summary, longctx_summary
from roofline_lib.present.tables import as_measured, feasibility_table
from roofline_lib.present.widgets import longctx_controls, parse_sizes, rerun_widget
from roofline_lib.runs.context_parallel import run_local
from roofline_lib.runs.longctx import (
    FULL,
    estimated_bytes,
    grid_strategies,
    long_shape,
    memory_against_n,
    memory_seq_lens,
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

# %%
# What this notebook uses beyond the setup cell: the session's ceilings, the exercises' check, and the blocks
# the exercises are built from.
import torch.nn.functional as F

from roofline_lib.present.exercises import check_layer
from roofline_lib.present.formatting import three_digits
from roofline_lib.present.prose import longctx_headline
from roofline_lib.present.session import keep_result, measured_ceilings
from roofline_lib.present.tables import facts_table, longctx_table
from roofline_lib.variants.chunk_attention import attend_math
from roofline_lib.variants.parts import causal_padding_mask, merge_heads, split_qkv

# The million-token run (near the end) is off on a T4, or any GPU with 16 GiB or less, where it takes many
# minutes. To run it anyway, set RUN_MILLION = True on the next line and rerun this cell and that section.
RUN_MILLION = ctx.device.type == "cuda" and not small_gpu(ctx.device)
capped = ctx.device.type == "cuda" and memory_capacity(ctx.device) > T4_MEMORY_GIB * 2**30  # runs under a T4's cap
ceilings = measured_ceilings(ctx) if RUN else None  # measured once per session: notebook 07 shows the same floor
if RUN:
    floor_s = ceilings.floor_ms(layer_flops(LONG), layer_min_bytes(LONG, ctx.dtype)) / 1e3
    print(f"{LONG.label}: its roofline floor here is {three_digits(floor_s * 1e3)} ms per call (the measured "
          f"ceilings: {three_digits(ceilings.matmul_tflops)} TFLOP/s, {three_digits(ceilings.copy_gbps)} GB/s). "
          "Million-token run: "
          + ("on." if RUN_MILLION else "off: no GPU here." if ctx.device.type != "cuda" else
             "off on a GPU of 16 GiB or less (set RUN_MILLION = True above to run it)."))

# %% [markdown]
# ## The result: 100,000 tokens, chunk by chunk
#
# One run of `run_longctx` builds the inputs and the sampled float64 truth, runs the full-sequence layer as the
# baseline, runs the chunked layer for each chunk size (and, where a call is quick, each way of attending to the
# cache), checks each by §3, and times the fastest one in turn with the baseline. On a GPU larger than a T4 the
# chunked runs happen under a T4's 14.7 GiB, so the memory panel reads as it would on a T4.
#
# The **attention strategy** is how a chunk's queries attend to the cache; *The idea* below explains each and why
# they are needed. In short:
#
# - `mask` passes SDPA an explicit boolean mask of which keys each query may see;
# - `lower_right` passes SDPA a causal mask lined up with the chunk's end, a form SDPA's kernels understand;
# - `split_…` (`split_cudnn`, `split_efficient`, …) attends to the keys before the chunk and to the chunk's own
#   block in two separate calls, each on the kernel its name gives, and merges the two results; for `split_cudnn`
#   that kernel is **cuDNN** (NVIDIA's library of deep-learning kernels, one of the kernels SDPA can run on);
# - `auto` tries them in its own order of expected speed (on a GPU `split_cudnn`, `lower_right`, `split_flash`,
#   `split_efficient`, then `mask`) and takes the first that passes a **self-check**: a small seeded chunk computed
#   with that strategy and compared with the exact answer on this GPU. `auto → X` in the legend means it ran
#   strategy X here.
#
# The headline under the next cell names the strategy of the fastest configuration.

# %%
if RUN:
    quick = floor_s < 0.1  # a call of a tenth of a second or more: the automatic strategy only, timed 3 times
    strategies = grid_strategies("auto,lower_right,mask", ctx.device) if quick else ["auto"]
    long_results = run_longctx(LONG, ctx.dtype, ctx.device, CHUNK_SIZES, strategies,
                               memory_cap_gib=T4_MEMORY_GIB if capped else None, budget_s=ctx.budget_s,
                               reps=None if quick else 3)
    keep_result(ctx, "longctx", long_results)  # 07's recap reads it, in the same session
    display(Markdown(longctx_headline(long_results)))
    display(save_figure(plot_longctx(long_results), "06_long_context", ctx))
    assert not long_results.status.eq("fail").any(), "a chunked run failed §3: see the table below"

# %% [markdown]
# Panel 1 is each configuration's time per call, Panel 2 its peak memory; the dashed black line is the full-sequence
# layer. A smaller chunk needs less memory for its activations but makes more, smaller kernel calls. Where the full
# layer fits, it is as fast or faster when the two are timed in turn, as in the sentence above (its ratio and band say
# by how much here). Times from separate short runs, this figure's and the memory sweep's below, can show either one a
# few per cent ahead. Chunking buys memory, not speed: it is for the lengths where the full layer no longer fits,
# which the next sections show. One strategy does not even buy memory at large chunks: `mask` builds an explicit mask
# of each chunk's queries against the keys they see (chunk × up to N), which grows with the chunk size and with N, so
# at large chunks its peak can rise above the full layer's (Panel 2 shows it, where `mask` ran). Building and applying
# that mask costs time too, so `mask` tends to get slower as its chunks grow (the table in *Row 14 in detail* gives
# the times).
#
# ## Why the reference cannot run
#
# The naive layer materializes the `(B, H, N, N)` score tensor, and a second one for the softmax, so its memory
# grows with N². Here are the longest suite rows and a million-token sequence in this notebook's dtype, beside
# the memory this process may use:

# %%
fits = feasibility_table([*SUITE[-3:], MILLION], ctx.dtype, ctx.device)
display(as_measured(fits, ["scores GiB", "naive peak GiB", "capacity GiB"]))  # 2.00 GiB, not 2
too_big = fits[~fits.fits]
display(Markdown("The naive layer does not fit here for " + ", ".join(
    f"**{shape}** (≈{three_digits(gib)} GiB)" for shape, gib in zip(too_big["shape"], too_big["naive peak GiB"])) + "."
    if len(too_big) else "The naive layer fits here for every one of these shapes."))

# %% [markdown]
# ## Memory against sequence length
#
# Three layers, one function: the naive reference (score tensors grow with N²), the full-sequence layer (several `(B,
# N, d)` and `(B, N, 4d)` activations at once, so it grows with N) and the chunked layer (the cache and the output
# grow with N, the rest is one chunk). Each runs where its estimated peak fits the memory allowed here; on a GPU
# larger than a T4 that is a T4's 14.7 GiB. On a GPU of 16 GiB or less (a T4) the lengths stop at 262,144 tokens, to
# keep the run short there: each doubling of N makes a call about four times as long. Dashed lines are the estimates,
# dots the measured peaks, crosses an out-of-memory.

# %%
SEQ_LENS = (64, 256) if ctx.smoke else memory_seq_lens(small_gpu(ctx.device))  # up to 655,360; 262,144 on a T4
MEMORY_SHAPE = dict(d_model=64, n_heads=4) if ctx.smoke else dict(d_model=ROW14.d_model, n_heads=ROW14.n_heads)
if RUN:
    if capped:
        set_memory_cap(ctx.device, T4_MEMORY_GIB)
    try:
        memory = memory_against_n(SEQ_LENS, ctx.dtype, ctx.device, **MEMORY_SHAPE, reps=3)
    finally:
        if capped:
            set_memory_cap(ctx.device, None)
    display(save_figure(plot_memory_against_n(memory, title=f"Memory and time against N, B1 d{MEMORY_SHAPE['d_model']}"
                                              f" H{MEMORY_SHAPE['n_heads']}, {ctx.dtype_name}"
                                              + (f" (capped at a T4's {T4_MEMORY_GIB:g} GiB)" if capped else "")),
                        "06_memory_against_n", ctx))
    display(longctx_table(memory, ["seq_len", "layer", "status", "estimated_gib", "peak_gib", "median_ms"],
                          {"seq_len": "N", "estimated_gib": "estimated GiB", "peak_gib": "measured GiB",
                           "median_ms": "ms per call"}))
    longest = {layer: sub[sub.status == "ok"].seq_len.max() for layer, sub in memory.groupby("layer", sort=False)}
    display(Markdown("Longest sequence run here: " + "; ".join(
        f"`{layer}` {n:,.0f} tokens" if n == n else f"`{layer}` none of these" for layer, n in longest.items()) + "."))

# %% [markdown]
# Where a line has no measurement, a column `why` says why: `not run` where the estimate is over the memory allowed,
# `out of memory` where it was tried and did not fit (an estimate counts the layer's tensors, not the allocator's
# rounding: PyTorch's memory allocator hands out blocks rounded up in size and leaves gaps between them, so
# within a tenth of the limit the estimate can miss). In the time panel, where both run, the `no_empty_mask` and
# `chunked` lines lie close together on a fast GPU: chunking changes the memory a call needs far more than its time.
# On a slower GPU chunking can cost more, a tenth or a fifth more time per call; the `ms per call` column says how
# much here. Where the lengths reach past what the full layer fits (under a T4's 14.7 GiB, from about 524,288
# tokens), the chunked line goes on without it; on a T4 itself they stop at 262,144, where both fit: there the peaks
# tell them apart (about 7 GiB against 2.4, estimated).
#
# ## The idea: a key/value cache and one chunk of queries at a time
#
# Causal attention lets token `i` see tokens `0 … i` only, so the layer can walk the sequence in chunks. For each
# chunk: normalize it and project it to queries, keys and values; write its keys and values into the cache; let
# its queries attend to the cache up to the chunk's end; finish the chunk (output projection, residual, MLP) and
# write its output. Nothing of size N × N ever exists.

# %%
show_source(ChunkedLayer.forward)

# %% [markdown]
# A chunk's queries sit at the end of the keys they see, so its causal mask is aligned to the **bottom right**;
# SDPA's `is_causal` aligns it top-left when the two lengths differ. The attention strategies in the tables are
# ways round it: `mask` passes an explicit boolean mask, `lower_right` a bottom-right causal mask that SDPA's
# kernels understand, and `split_…` (`split_cudnn`, `split_efficient`, …: the kernel each part runs on) attends to
# the keys before the chunk (no mask needed) and to the square diagonal block (where `is_causal` is right)
# separately; `auto` takes the first in its order that passes the self-check here. Each part of a split also returns its
# **log-sum-exp**, the log of its softmax's denominator, and the two merge exactly:

# %%
show_source(merge)

# %% [markdown]
# ## Exact, whatever the chunk size
#
# Chunking changes the order of the work, not the function. In float64 rounding costs about 1e-16, too little to
# hide a wrong result behind, so the chunked layer should match the float64 truth as closely as the reference
# itself does. Here on a small shape with a prime sequence length (37), with no padding, left padding and holes,
# and chunk sizes from 1 (a token at a time) to 64 (one chunk longer than the sequence); the sizes between do not
# divide 37, so their last chunk is shorter:

# %%
if RUN:
    small = SMOKE_SUITE[1]  # B3 N37 d48 H4: 37 is prime
    factories = {f"chunk {c}": partial(build_variant, "chunked", chunk_size=c) for c in (1, 5, 16, 36, 64)}
    exact = check_table(ctx, factories, paddings=("none", "left", "holes"), rows=[small], dtype="fp64")
    display(Markdown(check_summary(exact)))
    display(exact[["row", "padding", "variant", "err", "ref_err"]].head(5))
    assert exact.passed.eq(True).all() and (exact.err < 1e-12).all(), "chunking changed the function"

# %% [markdown]
# The lines count all three paddings; the table under them shows the no-padding rows, one per chunk size (the
# cell stops the notebook if any case's error is above 1e-12). Every error is float64 rounding, as small as the
# reference's own (`ref_err`): the chunked layer computes the reference's function, not an approximation of it.
#
# ## The truth where the reference cannot run: sampled rows
#
# At 100,000 tokens no full float64 truth is affordable, but one query row needs only the keys and values of the
# tokens before it. So the truth is computed exactly, in float64, for a sample of rows spread evenly over the
# sequence, the first and the last included (`spacing` is the first gap; the others differ from it by one at most):

# %%
picked = sample_rows(ROW14.seq_len)
facts_table({"rows sampled": len(picked), "first": int(picked[0]), "last": int(picked[-1]),
             "spacing": int(picked[1] - picked[0])}, f"sample of {ROW14.label}")

# %% [markdown]
# The sampled truth is the full one restricted to those rows. Checked on a small shape where both fit:

# %%
if RUN:
    case = Case(SMOKE_SUITE[2], ctx.dtype, ctx.device)  # its truth covers every query row
    rows = sample_rows(case.shape.seq_len, 16).to(ctx.device)
    sampled = float64_truth(case.layer, case.x, rows=rows)  # (B, 16, C)
    gap = float((sampled - case.truth[:, rows]).abs().max() / case.truth.abs().max())
    display(facts_table({"rows": len(rows), "max |sampled − full| / max |full|": gap}, case.shape.label))
    assert gap < 1e-12, gap

# %% [markdown]
# Where the reference cannot run, §3's bound comes from its error on a shorter row (the
# [notes](../docs/walkthrough/06_long_context.md#the-truth-at-long-context) say which).
#
# ## Row 14 in detail
#
# Every configuration of the result's run, with its §3 error ratio, its first call (some kernels, cuDNN's among
# them, build a plan for every new key length, so theirs grows with the number of chunks) and its peak memory.
# `attention` is the strategy asked for, `resolved` the one it ran. A `no_empty_mask` line under the T4's memory cap
# that reads *not timed: a fit check* was run once only to see whether the full layer fits under that cap.

# %%
if RUN:
    display(longctx_table(long_results[long_results.kind == "measure"],
                          ["variant", "attention", "resolved_attention", "chunk_size", "memory_cap_gib", "status",
                           "err_ratio", "first_call_s", "median_ms", "tflops", "peak_gib"],
                          {"resolved_attention": "resolved", "chunk_size": "chunk", "memory_cap_gib": "cap GiB",
                           "err_ratio": "error ratio", "first_call_s": "first call s", "median_ms": "ms per call",
                           "tflops": "TFLOP/s", "peak_gib": "peak GiB"}))
    display(Markdown(longctx_summary(long_results)))

# %% [markdown]
# ## One million tokens: past the full layer's reach
#
# Ten times longer: the activations grow ten times, the attention work a hundred times. The run needs the sampled
# truth (float64, streamed over blocks of keys) and the chunked layer; it goes ahead where this device holds the
# larger of the two and `RUN_MILLION` is on. On a GPU larger than a T4 both layers are tried under a T4's 14.7 GiB:
# the full layer's out-of-memory is recorded, and it is not timed uncapped (the 100,000-token run compares them).

# %%
need, have = needs_bytes(MILLION, ctx.dtype), memory_capacity(ctx.device)
display(pd.DataFrame([{"shape": MILLION.label, "dtype": DTYPE_NAMES[dtype],  # a T4 runs fp16: its fit, in fp16
                       f"{FULL}: estimated GiB": estimated_bytes(FULL, MILLION, dtype) / 2**30,
                       "chunked: estimated GiB": estimated_bytes("chunked", MILLION, dtype) / 2**30,
                       "a T4 allows GiB": T4_MEMORY_GIB} for dtype in dict.fromkeys([ctx.dtype, torch.float16])]))
million_reps = 1
if not RUN:
    pass
elif ctx.device.type != "cuda":
    print(f"Not run: {MILLION.label} on the CPU would take hours.")
elif need > have:
    print(f"Not run: {MILLION.label} needs ≈{three_digits(need / 2**30)} GiB, this device allows "
          f"{three_digits(have / 2**30)} GiB.")
else:  # one call ≈ the 100,000-token chunked call × (N ratio)², attention dominating
    timed = long_results[(long_results.kind == "measure") & (long_results.variant == "chunked")].median_ms
    call_s = timed.min() / 1e3 * (MILLION.seq_len / LONG.seq_len) ** 2 if timed.notna().any() else float("nan")
    million_reps = 3 if call_s * 6 <= 180 else 1  # a run is the check, 2 estimates and the timed calls
    print(f"{MILLION.label} needs ≈{three_digits(need / 2**30)} GiB of the {three_digits(have / 2**30)} GiB here. "
          + (f"One call should take about {three_digits(call_s)} s, the run about "
             f"{three_digits(call_s * (million_reps + 3) / 60)} "
             f"minutes, timed {million_reps} {'times' if million_reps > 1 else 'time'}" if call_s == call_s
             else "No estimate of its time")
          + ("." if RUN_MILLION else ": not run (RUN_MILLION is off; set it to True in the cell after the setup)."))
RUN_MILLION = RUN_MILLION and RUN and ctx.device.type == "cuda" and need <= have

# %%
if RUN_MILLION:
    million = run_longctx(MILLION, ctx.dtype, ctx.device, [DEFAULT_CHUNK_SIZE], ["auto"],
                          memory_cap_gib=T4_MEMORY_GIB if capped else None, reps=million_reps, baseline=not capped)
    display(Markdown(longctx_headline(million)))
    display(longctx_table(million, ["kind", "variant", "resolved_attention", "chunk_size", "memory_cap_gib", "status",
                                    "err_ratio", "first_call_s", "median_ms", "tflops", "peak_gib", "ratio_vs_full",
                                    "verdict"],
                          {"resolved_attention": "resolved", "chunk_size": "chunk", "memory_cap_gib": "cap GiB",
                           "err_ratio": "error ratio", "first_call_s": "first call s", "median_ms": "ms per call",
                           "tflops": "TFLOP/s", "peak_gib": "peak GiB", "ratio_vs_full": "× full's time"}))
    assert not million.status.eq("fail").any(), "the million-token run failed §3: see the table above"

# %% [markdown]
# ## Beyond one device: context parallel
#
# Where one GPU is not enough, **context parallelism** splits the sequence over P GPUs
# (`roofline_lib.variants.context_parallel`). Each rank (one process, one GPU) runs the LayerNorms, projections and
# MLP on its own tokens; for attention the ranks pass key/value blocks around a **ring**, merging partial results
# by their log-sum-exp as the chunked layer does. The last tokens have the most keys to see, so the sequence is cut
# into 2P pieces and rank r takes pieces r and 2P−1−r (a **zigzag**). Who computes what at which step, for P = 4.
# Count one rank's coloured cells (its query pieces' rows, grey left out): every rank has 9, which is what the zigzag
# buys. With contiguous pieces (rank r taking pieces 2r and 2r+1), rank 0 would have 3 and rank 3 would have 15,
# and the others would wait for it.

# %%
display(save_figure(plot_ring_schedule(schedule(4096, 4)), "06_ring_schedule", ctx))

# %% [markdown]
# And it runs: P = 2 processes on this machine's CPU (`gloo`, the CPU backend of `torch.distributed`), in fp32, on
# a small shape with left padding across the rank borders, checked by §3. On GPUs the same code runs with NCCL:
# `torchrun --nproc-per-node P -m roofline_lib longctx --context-parallel`. In the table, `kernel` is how the ranks
# attend: `math` is attention written out in plain PyTorch matrix products, like SDPA's *math* backend (under SDPA
# in the [glossary](../docs/glossary.md)), the one used on a CPU.

# %%
if RUN:
    ring = run_local(2, long_shape(301, d_model=64, n_heads=4), padding="left")
    display(facts_table({k: ring[k] for k in ("ranks", "backend", "kernel", "seq_len", "padding", "err", "ref_err",
                                              "err_ratio", "passed", "rows_checked")}, "context parallel, P = 2"))
    assert ring["passed"], ring

# %% [markdown]
# ## Try it
#
# Pick a sequence length and chunk sizes (comma-separated), each applied on Enter: the chunked layer is checked and
# timed again with the automatic attention strategy (a separate run from the result above, over a few rounds only,
# so the band in its sentence is rough), and the plot redrawn. On a GPU larger than a T4 it runs without the
# result's 14.7 GiB cap, so lengths and chunks that would not fit a T4 can run here.
# `peak GiB` is the peak of the whole check: where the naive reference fits (short lengths), the truth covers every
# row, and its float64 copies can set the peak, so at the widget's default length the chunk sizes' peaks can read
# alike and say nothing about the chunks themselves (the result above, at 100,000 tokens, does).

# %%
def measure_step(seq_len, chunk_sizes):
    """This step's measurement: the chunked layer at `seq_len` tokens for each of `chunk_sizes` (text)."""
    shape = long_shape(seq_len, LONG.batch, LONG.d_model, LONG.n_heads)
    again = run_longctx(shape, ctx.dtype, ctx.device, parse_sizes(chunk_sizes), ["auto"], budget_s=ctx.budget_s,
                        reps=None if ctx.smoke else 3)
    shown = longctx_table(again, ["kind", "variant", "resolved_attention", "chunk_size", "status", "err_ratio",
                                  "median_ms", "peak_gib", "ratio_vs_full", "verdict"],
                          {"resolved_attention": "resolved", "chunk_size": "chunk", "err_ratio": "error ratio",
                           "median_ms": "ms per call", "peak_gib": "peak GiB", "ratio_vs_full": "× full's time"})
    return Markdown(longctx_headline(again)), shown, plot_longctx(again)


if RUN:
    seq_len = LONG.seq_len if ctx.smoke else LONG.seq_len // 4  # quick to rerun
    display(rerun_widget(measure_step, **longctx_controls(seq_len, CHUNK_SIZES[::2])))

# %% [markdown]
# ## Exercises
#
# Each starter below runs and passes as it is; the task changes how it computes, not what. `check_layer` checks
# your layer by §3 on a small row (37 tokens, no padding and left padding), then times it in turn with the
# full-sequence layer. Its line gives a speed ratio, the full-sequence layer's time over yours: below 1× yours is
# slower (the headlines above give the inverse, a time ratio, the chunked layer's time over the full layer's:
# there above 1× is slower).
#
# ### Exercise 1 — chunk the layer yourself
#
# The starter computes the whole sequence at once. Make it walk the sequence in chunks of `chunk_size` tokens
# (16 here, which does not divide 37): write each chunk's keys and values into a key/value cache allocated once,
# and let the chunk's queries attend to the cache up to the chunk's end with a bottom-right causal mask
# (`causal_padding_mask(kpm, n_queries, q_offset)` builds one, padding included).
#
# The starter's line can read below 1× already, before any chunking: it builds and passes an explicit mask, where
# `no_empty_mask` passes `is_causal=True` and no mask when nothing is padded (notebook 03). Your chunked layer passes
# a mask too, so compare your line with the starter's.

# %%
class MyChunked(torch.nn.Module):
    """The layer's function, with notebook 03's rung for the weights and the residual + MLP block."""

    def __init__(self, ref, chunk_size=16):
        super().__init__()
        self.layer, self.chunk_size = build_variant("no_empty_mask", ref), chunk_size

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        layer, (B, N, _) = self.layer, x.shape
        kpm = torch.ones(B, N, dtype=torch.bool, device=x.device) if key_padding_mask is None else key_padding_mask
        q, k, v = split_qkv(layer.qkv_proj(layer.ln1(x)), layer.n_heads)  # each (B, H, N, hd): TODO, chunk by chunk
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_padding_mask(kpm, N))  # (B, H, N, hd)
        return layer.residual_mlp(x, merge_heads(y))


check_layer(ctx, MyChunked, rows=[SMOKE_SUITE[1]])

# %% [markdown]
# <details><summary>Hint</summary>
#
# Allocate `k_cache` and `v_cache` as `(B, H, N, hd)` with `x.new_empty`, and the output with `torch.empty_like(x)`.
# For `start` in `range(0, N, chunk_size)`: project `x[:, start:end]`, write its `k` and `v` into
# `cache[:, :, start:end]`, and attend with `causal_padding_mask(kpm[:, :end], end - start, start)`: query `i` sits
# at position `start + i` and sees the keys `0 … start + i`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyChunked(torch.nn.Module):
#     def __init__(self, ref, chunk_size=16):
#         super().__init__()
#         self.layer, self.chunk_size = build_variant("no_empty_mask", ref), chunk_size
#
#     @torch.no_grad()
#     def forward(self, x, key_padding_mask=None):
#         layer, (B, N, C) = self.layer, x.shape
#         kpm = torch.ones(B, N, dtype=torch.bool, device=x.device) if key_padding_mask is None else key_padding_mask
#         H = layer.n_heads
#         k_cache = x.new_empty(B, H, N, C // H)  # the key/value cache, allocated once
#         v_cache = x.new_empty(B, H, N, C // H)
#         out = torch.empty_like(x)
#         for start in range(0, N, self.chunk_size):
#             end = min(start + self.chunk_size, N)
#             q, k, v = split_qkv(layer.qkv_proj(layer.ln1(x[:, start:end])), H)  # each (B, H, L, hd)
#             k_cache[:, :, start:end], v_cache[:, :, start:end] = k, v
#             mask = causal_padding_mask(kpm[:, :end], end - start, start)  # bottom-right: (B, 1, L, end)
#             y = F.scaled_dot_product_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=mask)
#             out[:, start:end] = layer.residual_mlp(x[:, start:end], merge_heads(y))
#         return out
#
#
# check_layer(ctx, MyChunked, rows=[SMOKE_SUITE[1]])
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — merge two parts of the keys by their log-sum-exp
#
# The starter's `attend` gives one chunk's attention with an explicit bottom-right mask, through `attend_math`,
# which returns the output and its log-sum-exp. Rewrite `attend` without that mask: the keys before the chunk
# (every one in the past, so only padding to mask) and the square diagonal block (`is_causal=True` is right there),
# each through `attend_math`, merged with `merge`, the function shown above. `attend_math` is attention in plain
# PyTorch matrix products, written for exactness, not speed, so the starter's timing line reads far below 1×:
# compare yours with it.

# %%
class MySplit(torch.nn.Module):
    """The layer chunk by chunk, as in exercise 1's solution; `attend` is the part to rewrite."""

    def __init__(self, ref, chunk_size=16):
        super().__init__()
        self.layer, self.chunk_size = build_variant("no_empty_mask", ref), chunk_size

    def attend(self, q, k, v, start, kpm):
        """q (B, H, L, hd) at positions start … start + L − 1; k, v (B, H, start + L, hd); kpm (B, start + L)."""
        return attend_math(q, k, v, causal_padding_mask(kpm, q.size(2), start))[0]  # TODO: two parts, merged

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        layer, (B, N, C) = self.layer, x.shape
        kpm = torch.ones(B, N, dtype=torch.bool, device=x.device) if key_padding_mask is None else key_padding_mask
        k_cache, v_cache = (x.new_empty(B, layer.n_heads, N, C // layer.n_heads) for _ in range(2))
        out = torch.empty_like(x)
        for start in range(0, N, self.chunk_size):
            end = min(start + self.chunk_size, N)
            q, k, v = split_qkv(layer.qkv_proj(layer.ln1(x[:, start:end])), layer.n_heads)
            k_cache[:, :, start:end], v_cache[:, :, start:end] = k, v
            y = self.attend(q, k_cache[:, :, :end], v_cache[:, :, :end], start, kpm[:, :end])
            out[:, start:end] = layer.residual_mlp(x[:, start:end], merge_heads(y))
        return out


check_layer(ctx, MySplit, rows=[SMOKE_SUITE[1]])

# %% [markdown]
# <details><summary>Hint</summary>
#
# The keys before the chunk are `k[:, :, :start]`, the diagonal block `k[:, :, start:]`. A padding mask for a part
# is `kpm[:, None, None, part]` (shape `(B, 1, 1, keys)`, True = a real token). The first chunk has no keys before
# it: `attend_math` then returns a log-sum-exp of −∞, and `merge` gives that part no weight.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MySplitMerged(MySplit):
#     def attend(self, q, k, v, start, kpm):
#         o1, lse1 = attend_math(q, k[:, :, :start], v[:, :, :start], kpm[:, None, None, :start])  # the past
#         o2, lse2 = attend_math(q, k[:, :, start:], v[:, :, start:], kpm[:, None, None, start:],
#                                is_causal=True)  # the diagonal block: square, so is_causal is right
#         return merge(o1, lse1, o2, lse2)
#
#
# check_layer(ctx, MySplitMerged, rows=[SMOKE_SUITE[1]])
# ```
#
# </details>
