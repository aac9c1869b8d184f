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
# # 00 — Overview: the layer, the shapes, and how a faster version is judged
#
# **The question.** A Transformer model reads a text as a sequence of **tokens** (a token is a word or a piece of
# one, which the model holds as a vector of numbers). The model is a stack of identical **layers**: attention, in
# which every token looks at the tokens before it, then a small neural network (the MLP). This walkthrough takes
# one such layer, written the naive way, and makes it faster one checked step at a time. Before the first step:
# what does the layer compute, on which inputs, and when is a new version *correct* and *faster*?
#
# **What you will measure.** The error of the naive layer and of the walkthrough's first step against an exact
# answer, and their times on the first input shapes that run here.
#
# **Time on a T4:** about 2 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: timing
# the ladder 2.1, correctness checks 0.2; [how](../roofline_lib/present/estimate.py)).
#
# The estimate uses a T4's peak speeds. Most of this notebook's time is the timing of every step on every row,
# which runs for a set time per row and version however fast the GPU is, so on another GPU, even a faster one,
# the notebook can take as long or longer. In a checkout the later notebooks reuse that timing; in Colab each
# notebook times it again.
#
# Each term is defined where it is first used and collected in the [glossary](../docs/glossary.md). How the
# measurements are made, and the caveats that go with them, are in
# [docs/walkthrough/00_overview.md](../docs/walkthrough/00_overview.md).
#
# The first two code cells set the notebook up. The second prints the device, the rows that run here, and one
# line on how a layer call is timed. Three of its words first; *median* and *interleaved* come in the next
# section:
#
# - **steady state**: calls timed back to back, each launched without waiting for the one before to finish, as
#   the layers inside a model run;
# - **working clock**: the speed a GPU's clock runs at under load; an idle GPU slows its clock down, so the GPU is
#   kept busy for a moment before any timing;
# - **untimed sample**: a batch of the same calls run just before the timed one and not counted, so the timed calls
#   start on a busy GPU, not an idle one.

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

from roofline_lib import SMOKE_SUITE, VARIANTS, ReferenceLayer, verify
from roofline_lib.present.notebook import check_table, setup_context, show_source, suite_table, sweep
from roofline_lib.present.prose import check_summary
from roofline_lib.present.report import rung_descriptions, speedup_table

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## The result first: one step, checked and timed
#
# The walkthrough's first step, `sdpa_fused_qkv`, against the naive layer, the **reference**, on the first rows
# that run here. The step computes q, k and v (each token's **query**, **key** and **value** vectors, which *The
# layer* below defines) with one matrix product, and attention through PyTorch's **fused**
# `scaled_dot_product_attention`: one GPU function doing the work of several operations. What you need to read the
# table:
#
# - a **row** is one input shape of the **shape suite**, 14 shapes; every step is measured on those that fit, written
#   `B1 N128 d512 H8`: a batch of B sequences of N tokens, each token d numbers wide, attention split into H heads;
# - the **dtype** is the number format of the weights and inputs: **fp16** (16-bit floating point) on a GPU,
#   fp32 (32-bit) on the CPU;
# - **§3** is the correctness rule (named after its section of the [design page](../docs/design.md#s3)): a
#   version passes when its error against an exact float64 answer is at most twice the reference's own error,
#   plus 1e-6. In fp16 the `bound` column of the check table in *What "correct" means* below is about twice the
#   reference's error (`ref_err`), the 1e-6 too small to matter; in fp32 (the CPU), where errors are tiny, that
#   1e-6 can be most of the bound;
# - a time is the **median** over many timed rounds, shown with **p20–p80**, the 20th to the 80th percentile, as
#   its spread; the versions of a row are timed **interleaved** (A B A B …), so a slow moment hits them alike;
# - the **speedup** is the median of the round-by-round ratios of the reference's time over the step's; its band
#   is their p20–p80, and where the band includes 1 the **verdict** is *within noise*;
# - over several rows the speedups are combined into their **geometric mean**: the n-th root of the product of the
#   n speedups, the typical speedup over the rows, which one large ratio does not dominate; its band is the
#   geometric mean of the rows' p20s and of their p80s.
#
# These first rows are so short that much of a call's time is the host's (the CPU, which runs Python and launches the
# layer's GPU work one operation at a time), on some rows most of it (notebook 02's GPU share says which), not the
# GPU's arithmetic: so the smallest row need not be the fastest (*The shape suite* below says more). The host's speed
# also drifts during a sweep, so these rows' time bands can be wide; their speedups, timed interleaved, hold better.

# %%
import copy

import torch

from roofline_lib.core.decision import decide
from roofline_lib.present.exercises import check_layer
from roofline_lib.present.formatting import with_band
from roofline_lib.present.prose import decision_markdown
from roofline_lib.present.session import ladder_sweep
from roofline_lib.present.tables import as_measured, record_table, timing_table

STEP = "sdpa_fused_qkv"  # the walkthrough's first step
if RUN:
    ladder = ladder_sweep(ctx)  # every step on every row here, checked and timed once per session, shared by notebooks
    first_rows = [s.row for s in ctx.rows[:3]]
    results = ladder[ladder.row.isin(first_rows) & ladder.variant.isin(["reference", STEP])]
    display(timing_table(results, ["reference", STEP]))
    step = results[results.variant == STEP]
    call = decide(step, candidate=STEP, baseline="reference")  # the keep-or-revert rule: its band and verdict
    compared = (f"is {with_band(call.speedup, call.p20, call.p80)} as fast as the reference (the geometric mean of "
                f"the {call.rows} rows' speedups, with its p20–p80 band): {call.verdict}" if call.rows else
                f"is not compared with the reference: {call.reason}")
    display(Markdown(f"On rows {', '.join(first_rows)} of this {ctx.env['device']}, in {ctx.dtype_name}, `{STEP}` "
                     f"passes §3 on {int(step.passed.eq(True).sum())} of {len(step)} rows and {compared}."))

# %% [markdown]
# The rest of this notebook explains what is behind that table: the layer, the rows, the check and the timing.
#
# ## The layer
#
# `ReferenceLayer` is one layer of the kind GPT models stack, for inference only. A call, in order:
#
# 1. normalizes its input x (**LayerNorm**: each token's d numbers shifted and scaled to mean 0 and variance 1,
#    then scaled and shifted by learned weights) and projects it three times, to queries q, keys k and values v,
#    each split into H heads of width d / H. A token's **query** says what it looks for, each token's **key** what
#    it offers to be matched against, and its **value** what it passes on: a query's product with a key scores
#    how much of that key's value the query's token takes;
# 2. multiplies every query with every key, which materializes the whole `(B, H, N, N)` **score tensor**, and
#    divides the scores by √(d / H);
# 3. masks the scores with `masked_fill`, twice: with a causal mask (a token sees only itself and the tokens
#    before it) and with a key padding mask (which keys are real tokens), both built inside the call. Sequences
#    of different lengths share a batch by filling the short ones up to N with **padding** tokens, which
#    attention must ignore; *left* padding puts them first;
# 4. takes the softmax over the keys (each query's scores become weights that sum to 1), multiplies by v, merges
#    the heads, projects back and adds x (the residual);
# 5. runs the MLP on that: LayerNorm, a matrix from d to 4·d, GELU (a smooth activation function), a matrix back
#    to d, and the residual again.
#
# Every later step must compute this same function. The code, as it is in the library:

# %%
show_source(ReferenceLayer.forward)

# %% [markdown]
# ## The shape suite
#
# Fourteen rows, from one sequence of 128 tokens to one of 100,000. `naive peak GiB` estimates the memory the naive
# layer needs for a row in this dtype (its score tensors, masks, activations and weights; the record table below
# measures a call's own peak, which can read about a tenth more), and a row runs here only if that fits (`run here`),
# because every step is checked against the naive layer. Row 14 never fits: notebook 06 runs it chunk by chunk. `note`
# flags rows with a lesson of their own: **launch-bound** means so short that the GPU mostly waits for the host (the
# CPU) to launch its work (notebook 05). The note marks row 1, launch-bound on every GPU. On a fast GPU the next short
# rows (2–4) can be too: the GPU finishes their work so quickly that a large part of their time is the host's as well.
# Notebook 01's profile measures which rows wait on the host on your GPU. `tokens` is B·N, the tokens of the whole
# batch.

# %%
suite_table(ctx)

# %% [markdown]
# Without a GPU (or with `ROOFLINE_SMOKE=1`, as in CI, the repository's automatic test run) the notebooks run the
# tiny **smoke suite** instead. It runs every code path in seconds; its timings say nothing about a GPU.

# %%
pd.DataFrame([{"row": s.row, "batch": s.batch, "seq_len": s.seq_len, "d_model": s.d_model,
               "heads": s.n_heads, "note": s.note} for s in SMOKE_SUITE])

# %% [markdown]
# ## What "correct" means: §3
#
# The **truth** is the reference layer with the same weights and inputs, computed in float64. A layer's error is
# the relative distance of its output from the truth, over the real (non-padded) tokens:
#
# $$\mathrm{err}(m) = \frac{\lVert m(x) - \mathrm{truth} \rVert_F}{\lVert \mathrm{truth} \rVert_F}$$
#
# where ‖·‖_F is the Frobenius norm: the square root of the sum of the squares of all the entries.
#
# A version **passes** when `err(version) ≤ 2 · err(reference) + 1e-6`, both in the same dtype, with no NaN or
# Inf in its output at the real (non-padded) token positions. The reference's own error is the rounding its dtype
# costs; a step may round up to twice as much, not more. `verify` runs one such check (its `rows_checked` counts
# the token positions of a sequence compared with the truth, not rows of the suite); the reference against itself
# gives an error ratio of exactly 1:

# %%
if RUN:
    result = verify("reference", ctx.rows[0], ctx.dtype, ctx.device)
    shown = as_measured(pd.DataFrame([result.as_dict()]), ["err", "ref_err", "err_ratio", "bound"])  # 1.00, not 1
    display(shown.iloc[0].rename(f"verify: {result.variant} on row {result.row}"))

# %% [markdown]
# `check_table` runs the check over many rows, one line per check: `err` is the version's error, `ref_err` the
# reference's, `err_ratio` their ratio and `bound` the most `err` may be. Here the reference and the first step
# on every row that runs here; the table shows its first lines, the summary under it counts all of them.

# %%
if RUN:
    checks = check_table(ctx, ["reference", STEP])
    display(as_measured(checks.head(4), ["err", "ref_err", "err_ratio", "bound"]))
    display(Markdown(check_summary(checks)))
    assert checks.passed.eq(True).all(), "a check failed: see the summary above"

# %% [markdown]
# ## How to read a timing table
#
# The first table reads `median [p20–p80]` in ms for each version, then the speedup `× [p20–p80]`, the verdict and §3
# (`FAIL` marks a failure); a version that could not run on a row shows why (`infeasible`, `skipped`, `oom`).
# Numbers have three significant digits, except that a speedup or band edge that would then read 1.00 without
# being exactly 1 gets more digits (1.002× [0.957–1.04]), so that it can be told from 1 and its band read.
# Error ratios (`err_ratio`) always print three digits, so an error ratio of 1.00 can be anything from 0.9995 to
# 1.005, exactly 1 included.
#
# The steps' times come from one timing of all of them per session (the **ladder** sweep; *The path ahead* below
# says why "ladder"), so every table built from it shows the same time for a layer on a row, in every notebook of
# the session (in Colab each notebook has a runtime, and so a session, of its own). The *Try it* widgets, the
# exercises' checks, notebook 06's long-context runs, notebook 07's `torch.compile` layers, notebook 05's stacks of
# layers replayed as one recorded call and notebook 08's decode steps are separate runs: their times can differ from
# the ladder's. The details of that timing (how many calls a sample holds, what warms up first, why the shortest
# rows drift) are in [docs/walkthrough/00_overview.md](../docs/walkthrough/00_overview.md#timing).
#
# Behind the table is one record per version and row, with the device, versions, dtype and date every results
# file carries. `peak_extra_mib` is a call's peak memory beyond what was already held:

# %%
if RUN:
    display(record_table(results, ["row", "variant", "status", "median_ms", "p20_ms", "p80_ms", "speedup",
                                   "speedup_p20", "speedup_p80", "verdict", "err_ratio", "peak_extra_mib", "device",
                                   "dtype", "torch", "date"]))

# %% [markdown]
# A step is kept only if it passes §3 on every row and the geometric mean of its speedups has its whole p20–p80
# band above 1; otherwise the walkthrough reverts it (`roofline_lib.core.decision.decide`). Each step's notebook
# has a decision section with that call, computed from its own table. For the first step on these rows:

# %%
if RUN:
    display(Markdown(decision_markdown(call)))

# %% [markdown]
# ## How fast could it be? The roofline
#
# "Faster" alone does not say how much is left. The **roofline** model bounds a layer call by the device's two
# **ceilings**: its matrix-multiply rate (FLOPs, floating-point operations, per second) and its memory bandwidth
# (bytes per second). The **floor** is the longer of the layer's useful FLOPs at the first and its fewest
# bytes at the second: no version can run much faster. Notebook 01 measures the ceilings and puts every row on the
# roofline.
#
# ## The path ahead
#
# The steps are called **rungs**, and the walkthrough is a **ladder** of them ([glossary](../docs/glossary.md)):
#
# - 01 profiles the reference: where does its time go, and how far is it from the floor?
# - 02 computes attention with one fused kernel (a single GPU function doing the work of several ops) instead of
#   materializing the whole score tensor (`sdpa_fused_qkv`);
# - 03 removes work that notebook 01's profile finds the layer does not need;
# - 04 tries a Triton kernel (Triton writes GPU functions in Python) for the residual add and LayerNorm, and keeps
#   it only if it measures faster;
# - 05 looks at the shortest rows, where the GPU waits for the host (the CPU, which runs Python and launches the GPU's
#   work), and what CUDA graphs (a recording of a call's launches, replayed at once) do about it;
# - 06 runs the layer at 100,000 tokens and beyond, chunk by chunk and across GPUs;
# - 07 puts the whole ladder side by side, and 08 turns the layer into a decoder that generates token by token.
#
# Each notebook is a pair: the percent-format .py is the source, the .ipynb is what Colab opens (jupytext, a tool
# that pairs the two, keeps them in step: `jupytext --sync notebooks/*.py` after editing a .py).

# %% [markdown]
# ## Exercises
#
# `check_layer(ctx, YourLayer)` builds your layer from the reference (`YourLayer(reference)`), checks it by §3 on
# the first two rows, without padding and with left padding, then times it interleaved against a rung (here the
# reference). Its first line says whether it passed.

# %% [markdown]
# ### Exercise 1 — Break the layer on purpose and watch §3 catch it
#
# `Nudged` returns the reference's output times `1 + EPS`, a relative error you add on purpose; with `EPS = 0` it
# passes. Predict from the `bound` column of the check table above how large `EPS` must be for §3 to fail, set it, and
# run the cell. Then find an `EPS` above 0 that still passes. Its timing line can read a little either side of 1×, or
# within noise, even at `EPS = 0`: noise can tip it either way, and the wrapper's Python and its extra multiply (one
# more kernel launch) cost host time, and the timing runs on the first row, where launches set the time.

# %%
class Nudged(torch.nn.Module):
    """The reference's output times (1 + EPS): with EPS = 0 it is the reference itself."""

    EPS = 0.0  # the relative error added on purpose

    def __init__(self, ref):
        super().__init__()
        self.ref = ref

    def forward(self, x, key_padding_mask=None):
        return self.ref(x, key_padding_mask) * (1 + self.EPS)


check_layer(ctx, Nudged, baseline="reference")

# %% [markdown]
# <details><summary>Hint</summary>
#
# Scaling the output by `1 + EPS` adds a relative error of about `EPS` to the reference's own, `ref_err`. The two
# add up to at most `EPS + ref_err`, so §3 passes for sure while `EPS` stays below `bound − ref_err`, and fails a
# little above that (the two errors do not point quite the same way, so their total is a bit less than the sum).
# In fp32 `ref_err` is tiny, so the threshold is about `bound`; in fp16 `ref_err` is about half of `bound`, and so
# is the threshold, give or take: the scaled output is rounded to fp16 once more, which moves its error in steps.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class TooFar(Nudged):
#     EPS = 3 * checks.bound.max()  # about 3× the error §3 allows: fails on every case
#
#
# check_layer(ctx, TooFar, baseline="reference")
# ```
#
# `EPS = checks.bound.max() / 4` adds a quarter of what is allowed and passes in fp32; in fp16 the second
# rounding adds to it, so run it to see on which side of `bound` it lands.
#
# </details>

# %% [markdown]
# ### Exercise 2 — More accurate than the reference
#
# The starter is the reference itself. Make it compute in float64 and round only its output back to the
# notebook's dtype. Before you run it, predict its `err_ratio`: above 1, 1, or below 1? Its timing line says what
# the extra precision costs: compare it with the starter's own line, since even the unchanged starter can read a
# little slower than the reference (the check's wrapper around it), or within noise of it.

# %%
class Wider(torch.nn.Module):
    """Starter: the reference itself, in the notebook's dtype."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref

    def forward(self, x, key_padding_mask=None):
        return self.ref(x, key_padding_mask)


check_layer(ctx, Wider, baseline="reference")

# %% [markdown]
# <details><summary>Hint</summary>
#
# Keep a float64 copy of the layer (`copy.deepcopy(ref).double()`: the reference's own weights must not change),
# call it on `x.double()`, and convert the result back with `.to(x.dtype)`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class InFloat64(torch.nn.Module):
#     """The reference computed in float64, its output rounded once to the input's dtype."""
#
#     def __init__(self, ref):
#         super().__init__()
#         self.wide = copy.deepcopy(ref).double()
#
#     def forward(self, x, key_padding_mask=None):
#         return self.wide(x.double(), key_padding_mask).to(x.dtype)
#
#
# check_layer(ctx, InFloat64, baseline="reference")
# ```
#
# Its only error is the final rounding, so `err_ratio` is well below 1; it is slower, the more so on a GPU with
# few float64 units (a T4).
#
# </details>
