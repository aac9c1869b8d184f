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
# # 00 — Overview: the layer, the suite, what "correct" and "faster" mean
#
# This walkthrough takes one naively written Transformer decoder layer and makes it faster one verified
# step at a time. Every step is checked against the original before anything is timed, and every
# timing comes with its noise.
#
# **In this notebook you will learn**
#
# - what the fixed layer computes, and which of its naive choices the later steps remove;
# - the shape suite every step is measured on, and why some rows do not run on every GPU;
# - the correctness rule ("no accuracy loss against the reference") and how to read a verification table;
# - how to read the timing tables: medians, the p20–p80 spread of interleaved ratios, noise verdicts.
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

from roofline_lib import SMOKE_SUITE, VARIANTS, ReferenceLayer, verify
from roofline_lib.present.notebook import check_table, setup_context, show_source, suite_table, sweep
from roofline_lib.present.prose import check_summary, speedup_summary
from roofline_lib.present.report import rung_descriptions, speedup_table

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## The layer
#
# `ReferenceLayer` is a pre-LayerNorm, GPT-style causal decoder layer, for inference only. Its
# `forward` is written the naive way on purpose:
#
# - three separate projections for q, k and v;
# - the full `(B, H, N, N)` score tensor is materialized, so memory grows with the square of the sequence;
# - the causal mask is rebuilt on every call;
# - when no padding mask is given, an all-True one is built anyway and applied with a second
#   `masked_fill` over the whole score tensor: a full pass over the scores that masks nothing.
#
# Every later step must compute the same function. Here is the code as it is in the library:

# %%
show_source(ReferenceLayer.forward)

# %% [markdown]
# ## The shape suite
#
# Fourteen rows, from a single short sequence (where launching kernels costs more than computing) to a
# 100,000-token sequence whose naive score tensor would need hundreds of GiB. The table gives each row's
# estimated peak memory for the naive layer in this notebook's dtype, and whether it runs here: a row
# runs only where the naive layer fits in this device's memory, because every variant is checked against
# it. The last row is the long-context problem, treated in its own notebook.

# %%
suite_table(ctx)

# %% [markdown]
# Without a GPU (or with `ROOFLINE_SMOKE=1`, as in CI) the notebooks run the tiny smoke suite instead.
# It exercises every code path in seconds; its timings say nothing about a GPU.

# %%
pd.DataFrame([{"row": s.row, "batch": s.batch, "seq_len": s.seq_len, "d_model": s.d_model,
               "heads": s.n_heads, "note": s.note} for s in SMOKE_SUITE])

# %% [markdown]
# ## What "correct" means
#
# This is the rule the notebooks call **§3**, after its section in the design
# ([docs/design.md](../docs/design.md#s3)). The truth is the reference layer, with the same weights and
# inputs, computed in float64. A layer's error is the relative Frobenius distance to the truth over the
# real (non-padded) query rows:
#
# $$\mathrm{err}(m) = \frac{\lVert m(x) - \mathrm{truth} \rVert_F}{\lVert \mathrm{truth} \rVert_F}$$
#
# A variant **passes** when `err(variant) ≤ 2 · err(reference in the same dtype) + 1e-6` and nothing in
# its valid rows is NaN or Inf. The reference in fp16 is itself some distance from the truth; a
# variant may be up to twice as far (the rule FlashAttention's own tests use), not more. Weights and
# inputs are fresh seeded random numbers for each check, never zeros.
#
# `verify` runs one such check. Checking the reference against itself gives a ratio of exactly 1:

# %%
if RUN:
    result = verify("reference", ctx.rows[0], ctx.dtype, ctx.device)
    display(pd.Series(result.as_dict(), name=f"verify: {result.variant} on row {result.row}"))

# %% [markdown]
# `check_table` does the same over many rows (and padding patterns), one line per check: `err` is the
# variant's error, `ref_err` the reference's own, `err_ratio` their ratio, `bound` the pass threshold.
# Here: the reference and the first optimized variant on every row that runs here.

# %%
if RUN:
    checks = check_table(ctx, ["reference", "sdpa_fused_qkv"])
    display(checks.head(4))  # the first lines of the table; the summary below counts all of it
    display(Markdown(check_summary(checks)))
    assert checks.passed.eq(True).all(), "a check failed: see the summary above"

# %% [markdown]
# ## How to read the timing tables
#
# Timing follows a few rules, so that a speedup is a measurement and not an impression:
#
# - warm-up first; on a GPU, CUDA events time a sample of 8 calls back to back, right after an untimed
#   sample of 8 (so the timed calls run in steady state, as a model's layers do), and the call's time is
#   the sample's divided by 8 (the protocol line above);
# - the variants of one row are timed **interleaved** (A B A B …), so a slow moment of the machine
#   hits all of them alike;
# - a speedup is the ratio of the medians; its spread is the p20–p80 range of the per-round ratios (the
#   two are computed differently, so after a few noisy rounds the ratio can even sit outside its band);
# - a speedup whose p20–p80 range includes 1 is **within noise**, and is reported as such;
# - on the shortest rows a call's time is mostly the host's (Python and kernel launches), which moves with
#   the host's speed from one cell to the next more than within one table: compare such rows within a
#   table (each summary names the rows where the GPU idles for part of a call; notebook 05 splits a call
#   into the GPU's share and the host's).
#
# Each cell of the table below reads `median ms (speedup [p20–p80])`; `FAIL` marks a §3 failure, and a
# row the naive layer cannot run says `infeasible`. Here: the naive reference against `no_empty_mask`,
# the layer after the first two steps of the walkthrough (the ladder of all the steps is listed below), on
# the first rows that run here.

# %%
if RUN:
    results = sweep(ctx, ["reference", "no_empty_mask"], rows=ctx.rows[:3])
    display(speedup_table(results))

# %% [markdown]
# Each step's notebook ends with a paragraph like this one, computed from its table together with the
# keep / revert call of the project's rule (`roofline_lib.core.decision.decide`: correct on every row, and a
# geometric-mean speedup whose whole p20–p80 band lies above 1). So the prose never carries a number
# measured on another GPU:

# %%
if RUN:
    display(Markdown(speedup_summary(results, "no_empty_mask")))

# %% [markdown]
# Behind the table is one tidy record per variant and row, with the device, versions, dtype and date
# that every results file carries, plus the peak memory of a call beyond what was already held (NaN on the
# CPU, where torch keeps no count):

# %%
if RUN:
    display(results[["row", "variant", "status", "median_ms", "p20_ms", "p80_ms", "speedup", "verdict",
                     "err_ratio", "peak_extra_mib", "device", "dtype", "torch", "date"]])

# %% [markdown]
# ## The roofline
#
# "Faster" alone does not say how much faster a row could still get. For each row notebook 01
# counts the useful work (the GEMMs and the causal half of attention) and the fewest bytes the layer must
# move, measures the device's matmul and copy ceilings, and compares each variant with the floor
# `max(FLOPs / peak, bytes / bandwidth)`. The fraction of that floor a variant reaches is the measure of
# how much is left.
#
# ## The ladder
#
# The variants, in walkthrough order, each described by its own docstring:

# %%
display(Markdown(rung_descriptions(list(VARIANTS))))

# %% [markdown]
# The following notebooks take them one at a time: profile the reference (01), replace attention with
# fused QKV and SDPA (02), stop building the empty mask (03), try a Triton kernel for add + LayerNorm and
# keep or revert it by measurement (04), see where the GPU waits for the host and what CUDA graphs do
# about it (05), run the layer at 100,000 tokens and beyond, chunk by chunk and across processes (06),
# and put the whole ladder side by side (07).
