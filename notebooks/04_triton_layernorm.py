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
# # 04 — A Triton kernel: fused residual add + LayerNorm, kept or reverted by measurement
#
# **The question.** After attention the layer adds the attention's output to its input, the **residual stream**
# `s = x + out_proj(y)`, and normalizes `s` for the MLP with `ln2`. In PyTorch that is two kernels, and the second
# reads back the `s` the first just wrote. Is the layer faster when one hand-written kernel does both in one pass?
# This step is an **experiment**: it stays on the ladder only if the measurement says it is faster beyond noise.
#
# **What you will measure:** the rung `triton_ln` against the rung before it (`no_empty_mask`), the kernel checked
# on its own against PyTorch, its GB/s against the device's copy bandwidth, the layer's §3 check, what the profiler
# sees change, and the keep-or-revert decision.
#
# **Time on a T4:** about 4 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: timing
# the ladder 2.1, profiles 0.9, correctness checks 0.5; [how](../roofline_lib/present/estimate.py)).
#
# **Words used here** (all in the [glossary](../docs/glossary.md)):
#
# - A **rung**, the **ladder**, **§3** (error at most twice the reference's own, plus 1e-6) and a speedup's
#   **p20–p80 band** are notebook 02's; `no_empty_mask`, the layer without the empty mask, is notebook 03's rung.
# - A **kernel launch** is the host (the CPU, running Python, PyTorch and the CUDA driver) asking the GPU to run one
#   kernel; a PyTorch op's launch costs the host from a few µs on a fast host to tens of µs on a slow one (notebook
#   05, section 2, measures it on yours), and a Triton kernel's launch from Python costs more, from tens of µs to a
#   hundred or more (the table *GPU time and the host's* below measures how much here).
# - **Triton** is a Python language for writing GPU kernels. A Triton kernel runs as many **programs**, copies of
#   the same code that each handle one block of the data (here, a few whole rows).
# - **GPU time per call** is how long the GPU is busy with one call when the host is kept out of the way; the rest
#   of a call's time is the GPU waiting for the host (notebook 05).
# - **Kernel time** is a profile's number: the sum of the profiled kernels' durations in a call. It is usually
#   lower than the GPU time per call, which is read on the GPU's clock over calls run back to back and so also
#   counts the short gaps between one kernel's end and the next one's start; on the short rows those gaps are a
#   large part of a call. The two are separate measurements: where the gaps are small they agree within a few per
#   cent, and the kernel time can even read a little higher.
# - **GB/s against the copy bandwidth**: the bytes an operation must move over its time, beside the rate of a plain
#   device-to-device copy measured on this GPU. A memory-bound kernel cannot go much faster than a copy.
# - **Compute capability** is NVIDIA's version number of a GPU's design: 7.5 for a T4, 9.0 for an H100 or H200.
#
# Protocol details and caveats are in
# [docs/walkthrough/04_triton_layernorm.md](../docs/walkthrough/04_triton_layernorm.md).

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

from roofline_lib import diff_profiles
from roofline_lib.core.decision import decide
from roofline_lib.kernels import add_layer_norm as fused
from roofline_lib.kernels import unavailable_reason
from roofline_lib.measure.profile_rules import short_kernel_name
from roofline_lib.present.notebook import (
    check_table,
    dtype_choices,
    head_to_head,
    save_figure,
    setup_context,
    show_source,
)
from roofline_lib.present.plots import plot_bandwidth
from roofline_lib.present.prose import check_summary, decision_markdown, kernel_check_summary
from roofline_lib.present.prose_profile import attention_ran, share_sentence
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.runs.add_layer_norm_bench import add_layer_norm_bytes, kernel_shapes, kernel_table
from roofline_lib.variants.best import best_variant, remember
from roofline_lib.variants.triton_ln import TritonLnLayer

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %%
# What this notebook uses beyond the setup cell: the session's one ladder measurement and ceilings, the tables and
# sentences computed from them, the exercises' check, and the building blocks the exercises use.
import torch
import torch.nn.functional as F

from roofline_lib.present.exercises import check_layer
from roofline_lib.present.formatting import format_us, percent, three_digits
from roofline_lib.present.prose import (
    gpu_time_sentence,
    kernel_bandwidth_sentence,
    step_decision,
    step_headline,
)
from roofline_lib.present.report import host_gpu_table, ladder_call, step_table, with_band
from roofline_lib.present.session import add_layer_norm_checks, ladder_sweep, measured_ceilings, suite_profile
from roofline_lib.present.tables import blank_missing, kernel_bandwidth_table, row_profile
from roofline_lib.variants.parts import merge_heads, split_qkv
from roofline_lib.variants.sdpa import SdpaLayer

# %% [markdown]
# ## The result
#
# `triton_ln` against `no_empty_mask` on every row that fits here, both checked by §3, then timed in turn, round after
# round (interleaved). A row fits where the **naive layer** (the reference layer as written, which every step is
# checked against) fits in this GPU's memory; the setup cell's output names any row left out. The speedup is the
# median of the per-round ratios of the rung before's time over this rung's, with their p20–p80 band in brackets; `×
# reference` is the whole climb so far. These numbers come from the session's one measurement of the whole ladder, the
# one notebooks 02 and 03 show. On a CPU the kernel runs only through the Triton interpreter, whose times say nothing
# about a GPU (next section, and the [notes](../docs/walkthrough/04_triton_layernorm.md#where-it-runs)).

# %%
if RUN:
    ladder = ladder_sweep(ctx)  # every rung on every row, checked and timed once per session
    display(Markdown(step_headline(ladder, "triton_ln")))
    display(step_table(ladder, "triton_ln"))

# %% [markdown]
# The most the kernel can save is small by design: one pass over a `(B, N, d)` tensor and one kernel launch per call,
# beside GEMMs and attention that move and compute far more. What it adds can be larger: a Triton launch costs the
# host more than PyTorch's two, so on the short rows, where the host sets the pace, the layer can lose more than the
# kernel could ever save (the table above says by how much here). The rest of this notebook is the evidence: can the
# kernel run here, is it right, how fast is it alone, and what changed in the layer.
#
# ## Can the kernel run here?
#
# Triton runs on recent NVIDIA GPUs, a T4 (compute capability 7.5) included. On a T4 the notebooks offer fp16 and
# fp32; **bf16** (bfloat16: a 16-bit float with fp32's exponent range and fewer mantissa bits) is native only from
# 8.0. A GPU is built of **multiprocessors** (SMs), each running many threads with its own registers and a small
# fast **shared memory**; a T4 has less shared memory per SM than a Hopper GPU (NVIDIA's design of compute
# capability 9.0: an H100 or H200), which this kernel hardly uses: it works on whole rows in registers, with no
# matrix products and so no **tensor cores** (the units that do small matrix products in one step).
#
# Without a GPU, a Triton kernel runs only through the Triton **interpreter**, on CPU tensors, if `TRITON_INTERPRET=1`
# was set before Triton was imported: it checks the code paths, and its timings mean nothing. The cell prints what
# `roofline_lib.kernels.unavailable_reason` says here.

# %%
reason = unavailable_reason(ctx.device)  # None when the kernel can run here
KERNEL = RUN and reason is None  # gates the cells that launch the kernel
if reason is not None:
    print(f"The Triton kernel cannot run here: {reason}.")
elif fused.INTERPRETED:
    print("The Triton kernel runs here through the Triton interpreter: correct results, meaningless timings.")
else:
    print(f"The Triton kernel runs on {ctx.env['device']} (triton {ctx.env['triton']}), in "
          f"{', '.join(dtype_choices(ctx.device))}.")

# %% [markdown]
# ## Where the kernel could save: add + LayerNorm after step 3
#
# The profile of `no_empty_mask` on every row that runs here (the session's, the one notebook 03 shows): the share
# of its kernel time (op time on the CPU) spent in LayerNorm and in the elementwise residual adds. Both LayerNorms and
# both adds are counted, and the kernel fuses one add with one LayerNorm, so this share is an upper bound on what it
# can save. µs are per forward call.

# %%
if RUN:
    step3 = suite_profile(ctx, "no_empty_mask")  # every row, profiled once per session
    by_category = step3.categories.pivot_table(index=["row", "shape"], columns="category", values="time_us",
                                               sort=False)
    target = by_category[["LayerNorm", "elementwise/residual"]].sum(axis=1)
    ln_share = pd.DataFrame({"total µs": by_category.sum(axis=1), "LayerNorm µs": by_category["LayerNorm"],
                             "residual add µs": by_category["elementwise/residual"],
                             "share": target / by_category.sum(axis=1)}).reset_index()
    display(ln_share)
    lo, hi = ln_share.loc[ln_share.share.idxmin()], ln_share.loc[ln_share.share.idxmax()]
    display(Markdown(f"Add + LayerNorm take {percent(lo.share)} (row {lo.row}) to {percent(hi.share)} (row {hi.row}) "
                     "of the layer's profiled time here (both LayerNorms and both adds)."))

# %% [markdown]
# ## The kernel
#
# One Triton program handles whole rows: it loads a block of `x` and `r`, writes `s = x + r` rounded to the input
# dtype (so `s` is exactly what `x + r` gives), then normalizes that `s` while it is still in registers and writes
# `y`. Mean and variance are accumulated in fp32 whatever the input dtype. Narrow rows are stacked several to a
# program, and columns past `d_model` are masked off.
#
# `HAS_RESIDUAL` is on here (the residual `r` is passed); without it the kernel is a plain LayerNorm. Two switches
# serve other rungs and are off here: `HAS_SHIFT` adds the next GEMM's bias to the stored `s` (for `residual_addmm`,
# a later rung that also folds the residual adds into the GEMMs: notebook 05 introduces it, notebook 07 lists the
# later rungs), and `PDL` (programmatic dependent launch: the next kernel may start while this one finishes) is an
# opt-in launch mode for Hopper GPUs (the walkthrough page says more).

# %%
show_source(fused._add_layer_norm_fwd_kernel)

# %% [markdown]
# The launcher picks the block (a power of two holding a whole row), how many rows one program takes, and the
# warps (groups of 32 threads):

# %%
show_source(fused.kernel_settings)

# %%
show_source(fused.add_layer_norm_fwd)

# %% [markdown]
# In the layer it replaces the add and `ln2` after attention; the rest is the `no_empty_mask` layer:

# %%
show_source(TritonLnLayer.residual_mlp)

# %% [markdown]
# ## Is the kernel right?
#
# Against PyTorch on seeded inputs: `s` must equal `x + r` **exactly** (the residual stream may not drift), and
# `y`'s error against float64 LayerNorm of that `s` may be at most twice PyTorch's own (§3's rule). The inputs are
# the token × `d_model` sizes of the rows that run here, plus awkward ones: a prime row count, a width just below a
# power of two. On a GPU every dtype offered there; through the interpreter the run's dtype only.

# %%
shapes = kernel_shapes(ctx.rows)  # (tokens, d_model) of each row, then the awkward ones
if KERNEL:
    kernel_checks = add_layer_norm_checks(ctx)  # once per session: notebook 07 recaps the call made on them
    display(Markdown(kernel_check_summary(kernel_checks)))
    assert kernel_checks.passed.all(), "the kernel failed a check: see the lines above"
elif RUN:
    print(f"Kernel check skipped: {reason}.")

# %% [markdown]
# ## The kernel alone: GB/s against the copy bandwidth
#
# Add + LayerNorm does almost no arithmetic, so on large inputs memory limits it; on small ones, the fixed cost of
# running a kernel at all. Both versions are credited with the same, fewest bytes (read `x` and `r`, write `s` and
# `y`, read the weight and bias once), so their GB/s compare directly with the copy bandwidth of this session's
# ceilings. Each call is timed on the GPU alone, from a **cold** cache (flushed before each call, so the inputs come
# from memory), with the host's launch hidden; the two versions take turns on each input. Figure 1 shows the GB/s.

# %%
if KERNEL:
    copy_gbps = measured_ceilings(ctx).copy_gbps  # the session's one measurement, as notebook 01 shows it
    alone = kernel_table(shapes, ctx.dtype, ctx.device, copy_gbps, budget_s=ctx.budget_s)
    display(Markdown(kernel_bandwidth_sentence(alone)))
    display(kernel_bandwidth_table(alone))
    display(save_figure(plot_bandwidth(alone, copy_gbps, title=f"Figure 1 — Residual add + LayerNorm on its own, "
                                                               f"{ctx.env['device']}, {ctx.dtype_name}"),
                        "04_kernel_bandwidth", ctx))
elif RUN:
    print(f"Kernel timing skipped: {reason}.")

# %% [markdown]
# What one pass is worth on the largest input: the fused kernel moves four row-sized tensors, the unfused pair five
# (the add writes `s`, then `layer_norm` reads it back).

# %%
m, n = max(shapes)
fused_mib = add_layer_norm_bytes(m, n, ctx.dtype) / 2**20
display(Markdown(f"On {m:,} × {n:,} in {ctx.dtype_name}: {three_digits(fused_mib)} MiB fused against "
                 f"{three_digits(fused_mib + m * n * ctx.dtype.itemsize / 2**20)} MiB unfused."))

# %% [markdown]
# ## Is the layer still right?
#
# The whole layer with the kernel inside, checked like every rung: against the float64 truth, with and without left
# padding, next to the rung it is built on. Where the kernel cannot run, `triton_ln` is listed as skipped, with the
# reason.

# %%
if RUN:
    checks = check_table(ctx, ["no_empty_mask", "triton_ln"], paddings=("none", "left"))
    display(Markdown(check_summary(checks)))
    skipped = checks.status.eq("skipped")
    assert (checks.passed.eq(True) | skipped).all(), "a check failed: see the summary above"

# %% [markdown]
# ## Before and after, from the profiler
#
# Step 03's profile of the largest row that runs here (the one above) and this step's, from the session's profile
# of every row, subtracted kernel by kernel on a GPU (op by op on the CPU). The residual add and the second
# LayerNorm should give way to one Triton kernel; what else moves is the noise between two profiles. A `Memset` is a
# CUDA runtime kernel that fills a block of memory with one value (zeros, say): cuDNN's attention launches one, and
# PyTorch does for some of its own ops. On a GPU the µs are kernel time, which the sentence below the table calls
# *GPU time*.

# %%
if KERNEL:
    both = suite_profile(ctx, ["no_empty_mask", "triton_ln"])  # step 03's as above; this step's, once per session
    before, after = (row_profile(both, ctx.rows[-1].row, name) for name in ("no_empty_mask", "triton_ln"))
    by = "kernel" if ctx.device.type == "cuda" else "op"
    display(diff_profiles(before, after, by=by).head(10).assign(**{by: lambda t: t[by].map(short_kernel_name)}))
    display(Markdown(attention_ran(after, "triton_ln") + " " + share_sentence(
        after, "triton_ln", ctx.rows[-1], "LayerNorm", "elementwise/residual")))
elif RUN:
    print(f"Profile skipped: {reason}.")

# %% [markdown]
# ## GPU time and the host's
#
# The ladder also timed each call's GPU time on its own, with the host kept out of the way (the timing protocol's GPU
# time per call, not the profile's kernel time above). Where the layer with the kernel is slower per call although
# its GPU time is not higher, what it adds is host time: launching a Triton kernel from Python can cost the host more
# than launching PyTorch's two. On a short row, where the GPU times are close, the difference of the two rungs' call
# times is that extra host cost plus the noise of a row whose time follows the host; it can change by 2× or more
# from row to row, so read it as an order of magnitude, not as each row's cost. The table (blank on a CPU,
# which has no GPU time to split off) and the sentence below it come from the same ladder as the result above;
# notebook 05 explains the host's share.
#
# A call's µs and its GPU µs are two separate measurements, so where the GPU is busy for almost the whole call the
# GPU µs can read a little above the call µs, by up to about a tenth: noise, not a GPU busy for longer than the
# call. A host share of "under 10%" means the GPU waits for the host less than a tenth of the call, within what two
# separate timings differ by anyway (notebook 05, section 3, says more). The share is computed from the unrounded
# times, so worked out from the rounded µs in the table, a share labelled "under 10%" can come to a little over 10%
# (10.1%, say).

# %%
if RUN:
    pair = ladder[ladder.variant.isin(["no_empty_mask", "triton_ln"])]
    display(blank_missing(host_gpu_table(pair)))
    display(Markdown(gpu_time_sentence(ladder, "triton_ln") or
                     "No GPU here: the ladder has no GPU time per call to compare."))

# %% [markdown]
# ## The decision
#
# The project's rule (`roofline_lib.core.decision.decide`): keep `triton_ln` only if the kernel passed its own checks,
# the layer passed §3 on every row, and the geometric mean of its per-row speedups over `no_empty_mask` has its whole
# p20–p80 band above 1; otherwise revert. The paragraph below is the rule's output on the result above.
# `best_variant`, the function that names the rung the project calls best on a GPU and dtype (the latest
# keep-or-revert call there), follows it for the rest of this notebook's run, which is one Python process (the
# walkthrough page says what later notebooks read). Where the paragraph says the GPU *idles for more than 10%* of a
# call, that is the ladder's GPU time over the call's time (`gpu_share`) below 0.9 for either rung (this one or
# `no_empty_mask`), not notebook 01's *waits on host* (the profile's kernels filling less than half of a call).

# %%
if RUN:
    call = ladder_call(ladder, add_layer_norm_checks(ctx))  # the kernel's checks above, none where it cannot run
    remember(ctx.device, ctx.dtype, call)
    display(Markdown(step_decision(ladder, "triton_ln", call)))  # the very call remembered, shown
    display(Markdown(f"`best_variant` on {ctx.env['device']} in {ctx.dtype_name}: "
                     f"**{best_variant(ctx.device, ctx.dtype)}**."))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter) and a dtype: the two
# rungs are timed again and the rule decides again. Unlike the *Try it* of notebooks 02, 03, 05 and 07, this one does
# not open on the ladder's lines: its opening table (the first and last rows) is itself a **new, separate run**, with
# its own decision, and so is each change. On a row where the GPU waits for the host, its times can differ from the
# ladder's above by tens of per cent or more, at times 2× or more. Compare the speedup and the decision, not the
# times: the speedup holds better than the times, though on a launch-bound row it can move by tens of per cent too.

# %%
def measure_step(rows, dtype):
    """This step's measurement, a separate run: triton_ln against no_empty_mask on `rows` in `dtype`, and the call."""
    again = head_to_head(ctx, "triton_ln", "no_empty_mask", rows=rows, dtype=dtype)
    table = pd.DataFrame({
        "row": again.row, "shape": again["shape"],
        "no_empty_mask per call": [format_us(ms * 1e3) for ms in again.baseline_ms],
        "triton_ln per call": [format_us(ms * 1e3) for ms in again.candidate_ms],
        "× no_empty_mask [p20–p80]": [with_band(*r) for r in zip(again.speedup, again.speedup_p20, again.speedup_p80)],
        "verdict": again.verdict, "passed": again.passed})
    return table, Markdown(decision_markdown(decide(again)))


if KERNEL:
    controls = step_controls(ctx, ["triton_ln"])
    display(rerun_widget(measure_step, rows=controls["rows"], dtype=controls["dtype"]))
elif RUN:
    print(f"Nothing to rerun here: {reason}.")

# %% [markdown]
# ## Exercises
#
# `check_layer` checks your layer by §3 on the first two rows, without padding and with left padding, then times it
# against a rung; its first line says whether it passed. Where the kernel cannot run (a CPU without the
# interpreter), a layer that calls it fails with the kernel's reason.

# %% [markdown]
# ### Exercise 1 — Put the kernel into the layer
#
# The starter is `no_empty_mask`'s residual block written out: the add, then `ln2`, two kernels. Replace them with
# one call of the fused kernel, `fused.add_layer_norm(x, residual, weight, bias, eps)`, which returns `(s, y)`, and
# check that the layer is still correct; its timing line compares it with `no_empty_mask`.

# %%
class MyAddNormLayer(SdpaLayer):
    """no_empty_mask with its residual block written out: the residual add, then ln2. Make them one kernel."""

    def __init__(self, ref):
        super().__init__(ref, build_empty_mask=False)

    def residual_mlp(self, x, attn_out):
        s = x + self.out_proj(attn_out)  # (B, N, C): the residual add, one kernel
        y = self.ln2(s)  # (B, N, C): LayerNorm, a second kernel, which reads s back
        return s + self.fc2(F.gelu(self.fc1(y)))


check_layer(ctx, MyAddNormLayer, baseline="no_empty_mask")

# %% [markdown]
# <details><summary>Hint</summary>
#
# The residual is `x` and the tensor added to it is `self.out_proj(attn_out)`; the LayerNorm's parameters are
# `self.ln2.weight`, `self.ln2.bias` and `self.ln2.eps`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyFusedAddNormLayer(MyAddNormLayer):
#     """no_empty_mask with the residual add and ln2 in one Triton kernel: triton_ln."""
#
#     def residual_mlp(self, x, attn_out):
#         ln2 = self.ln2
#         s, y = fused.add_layer_norm(self.out_proj(attn_out), x, ln2.weight, ln2.bias, ln2.eps)  # each (B, N, C)
#         return s + self.fc2(F.gelu(self.fc1(y)))
#
#
# check_layer(ctx, MyFusedAddNormLayer, baseline="no_empty_mask")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — The first LayerNorm through the kernel too
#
# The kernel without a residual (`residual=None`) is a plain LayerNorm: it returns `(x, y)`, writing a copy of `x`
# as `s`. The starter is `triton_ln` with its `forward` written out. Run `ln1` through the kernel as well, check the
# layer, and read its timing line against `triton_ln`: does one more Triton launch, and one more write, pay here?

# %%
class MyBothNormsLayer(TritonLnLayer):
    """triton_ln with its forward written out: ln1 is still PyTorch's. Run it through the fused kernel."""

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        h = self.ln1(x)  # (B, N, C)
        q, k, v = split_qkv(self.qkv_proj(h), self.n_heads)  # each (B, H, N, hd)
        y = merge_heads(self.attention(q, k, v, key_padding_mask))  # (B, N, C)
        return self.residual_mlp(x, y)


check_layer(ctx, MyBothNormsLayer, baseline="triton_ln")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `self.add_layer_norm(x, None, self.ln1.weight, self.ln1.bias, self.ln1.eps)` returns `(s, y)`; only `y` is needed.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyKernelNormsLayer(MyBothNormsLayer):
#     """triton_ln with ln1 through the fused kernel too (no residual): two Triton launches per call."""
#
#     @torch.no_grad()
#     def forward(self, x, key_padding_mask=None):
#         ln1 = self.ln1
#         _, h = self.add_layer_norm(x, None, ln1.weight, ln1.bias, ln1.eps)  # (B, N, C)
#         q, k, v = split_qkv(self.qkv_proj(h), self.n_heads)  # each (B, H, N, hd)
#         y = merge_heads(self.attention(q, k, v, key_padding_mask))  # (B, N, C)
#         return self.residual_mlp(x, y)
#
#
# check_layer(ctx, MyKernelNormsLayer, baseline="triton_ln")
# ```
#
# </details>
