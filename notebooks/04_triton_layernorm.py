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
# After attention, the layer updates the residual stream and normalizes it at once for the MLP:
# `s = x + out_proj(y)`, then `ln2(s)`. In PyTorch that is two kernels: the add reads `x` and `r` and
# writes `s`, then `layer_norm` reads `s` back and writes its output. One Triton kernel can do both in a
# single pass over each row, saving a read of `s` and a kernel launch. This step is an **experiment**:
# it stays on the ladder only if the measurement says it is faster beyond noise, and correct.
#
# **In this notebook you will learn**
#
# - how a fused row-wise Triton kernel is written (in the style of the Triton tutorial's layer norm);
# - how to check a kernel against PyTorch with the same rule as the layer (no accuracy loss), and exactly
#   where it must be exact;
# - how to time a memory-bound kernel: GB/s against the device's copy bandwidth;
# - how to decide keep or revert from an interleaved end-to-end measurement, whichever way it goes.
#
# **Time on a T4:** about 2 min, estimated from the roofline with a T4's ceilings (largest parts, in minutes: the
# keep-or-revert measurement 0.6, profiles 0.5, §3 checks 0.5; [how](../roofline_lib/present/estimate.py)).

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

from roofline_lib import diff_profiles, measure_ceilings, profile_variant
from roofline_lib.core.decision import decide
from roofline_lib.core.device import DTYPES
from roofline_lib.kernels import add_layer_norm as fused
from roofline_lib.kernels import unavailable_reason
from roofline_lib.measure.profile_rules import short_kernel_name
from roofline_lib.present.notebook import (
    check_table,
    dtype_choices,
    head_to_head,
    profile,
    save_figure,
    setup_context,
    show_source,
)
from roofline_lib.present.plots import plot_bandwidth
from roofline_lib.present.prose import check_summary, decision_markdown, host_time_losses, kernel_check_summary
from roofline_lib.present.prose_profile import attention_ran, share_sentence
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.runs.add_layer_norm_bench import add_layer_norm_bytes, check_add_layer_norm, kernel_table
from roofline_lib.variants.best import best_variant, remember
from roofline_lib.variants.triton_ln import TritonLnLayer

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## What add + LayerNorm costs after step 3
#
# Before writing a kernel, the profile of the layer it would go into: `no_empty_mask`, on every row that
# runs here, with the share of its GPU time (op time on the CPU) that goes to LayerNorm and to the
# elementwise residual adds, the two things the fused kernel merges into one pass. µs are per forward call.

# %%
if RUN:
    step3 = profile(ctx, ["no_empty_mask"])
    by_category = step3.categories.pivot_table(index=["row", "shape"], columns="category", values="time_us",
                                               sort=False)
    target = by_category[["LayerNorm", "elementwise/residual"]].sum(axis=1)
    ln_share = pd.DataFrame({"total µs": by_category.sum(axis=1), "LayerNorm µs": by_category["LayerNorm"],
                             "residual add µs": by_category["elementwise/residual"],
                             "share": target / by_category.sum(axis=1)}).reset_index()
    display(ln_share)
    lo, hi = ln_share.loc[ln_share.share.idxmin()], ln_share.loc[ln_share.share.idxmax()]
    display(Markdown(f"Add + LayerNorm take {lo.share:.0%} (row {lo.row}) to {hi.share:.0%} (row {hi.row}) of "
                     "the layer's time here (both LayerNorms and both adds): an upper bound on what this kernel, which fuses "
                     "the second add with the second LayerNorm, could save."))

# %% [markdown]
# ## Can the kernel run here?
#
# On a GPU, yes. Without one, a Triton kernel runs only through the Triton interpreter, on CPU tensors,
# and only if `TRITON_INTERPRET=1` was set before Triton was imported (set it in the environment before
# starting the notebook). The interpreter checks the code paths; its timings mean nothing. Where the
# kernel cannot run, the cells below say why and the step is reported as skipped.

# %%
reason = unavailable_reason(ctx.device)  # None when the kernel can run here
KERNEL = RUN and reason is None  # gates the cells that launch the kernel
if reason is not None:
    print(f"The Triton kernel cannot run here: {reason}.")
elif fused.INTERPRETED:
    print("The Triton kernel runs here through the Triton interpreter: correct results, meaningless timings.")
else:
    print(f"The Triton kernel runs on {ctx.env['device']} (triton {ctx.env['triton']}).")

# %% [markdown]
# ## The kernel
#
# One program handles whole rows: it loads a block of `x` and `r`, writes `s = x + r` rounded to the input
# dtype (so `s` is exactly what `x + r` gives), then normalizes that `s` while it is still in registers
# and writes `y`. Mean and variance are accumulated in fp32 whatever the input dtype. Narrow rows are
# stacked several to a program; columns past `d_model` are masked off. Three switches in its signature
# serve other rungs and are off here: without `HAS_RESIDUAL` it is a plain LayerNorm of `x` (the first
# LayerNorm of `residual_addmm`); with `HAS_SHIFT` the stored `s` also gets the next GEMM's bias, so that
# GEMM can add its product onto `s` in place (`residual_addmm` again); `PDL` launches it with programmatic
# dependent launch on GPUs that have it, an experiment that is off unless switched on (`kernels.launch`).

# %%
show_source(fused._add_layer_norm_fwd_kernel)

# %% [markdown]
# The launcher picks the block (a power of two holding a whole row), how many rows one program takes,
# and the warps:

# %%
show_source(fused.kernel_settings)

# %%
show_source(fused.add_layer_norm_fwd)

# %% [markdown]
# In the layer, it replaces the add and `ln2` after attention; the rest is the `no_empty_mask` layer:

# %%
show_source(TritonLnLayer.residual_mlp)

# %% [markdown]
# ## Is the kernel right?
#
# Against PyTorch on seeded inputs: `s` must equal `x + r` **exactly** (the residual stream may not drift),
# and `y`'s error against float64 LayerNorm of that `s` may be at most twice PyTorch's own plus 1e-6,
# the rule every variant of the layer obeys. The inputs are the token × `d_model` sizes of the rows that
# run here, plus awkward ones (a prime row count, a width just below a power of two). On the GPU every
# dtype it supports; through the interpreter the run dtype only.

# %%
shapes = list(dict.fromkeys([(s.tokens, s.d_model) for s in ctx.rows] + [(7, 131), (129, 1023)]))
if KERNEL:
    dtypes = dtype_choices(ctx.device) if ctx.device.type == "cuda" else [ctx.dtype_name]
    kernel_checks = pd.DataFrame([{"dtype": d, **check_add_layer_norm(m, n, DTYPES[d], ctx.device)}
                                  for d in dtypes for m, n in shapes])
    display(Markdown(kernel_check_summary(kernel_checks)))
    assert kernel_checks.passed.all(), "the kernel failed a check: see the lines above"
elif RUN:
    print(f"Kernel check skipped: {reason}.")

# %% [markdown]
# ## The kernel alone: GB/s against the copy bandwidth
#
# Add + LayerNorm does almost no arithmetic: on large inputs its speed limit is memory; on small ones it is
# the fixed cost of running a kernel at all (one Triton kernel against PyTorch's two, the add and the
# LayerNorm), and the GB/s below say only that. Each call is queued behind a spin of the GPU and a cache
# flush, so the host has launched it before the GPU gets to it, however long the launch takes: these are GPU
# times from a cold L2, and what a launch costs the host is not in them (notebook 05 measures that). Both
# versions are credited with the same, fewest bytes (read `x` and `r`, write `s` and `y`, read the weight
# and bias once), so their GB/s compare directly with what a plain device-to-device copy reaches on this
# device, measured here. The two are timed interleaved on each input. The columns: `mib`, the bytes each
# moves; `torch_ms` and `triton_ms`, the GPU time per call; `*_gbps`, those bytes over that time;
# `*_of_copy`, that rate as a share of the copy's (1 would be as fast as a copy); `speedup`, torch time over
# kernel time, with its p20–p80 band and verdict.

# %%
if KERNEL:
    copy_gbps = measure_ceilings(ctx.device, ctx.dtype, budget_s=ctx.budget_s).copy_gbps
    alone = kernel_table(shapes, ctx.dtype, ctx.device, copy_gbps, budget_s=ctx.budget_s)
    display(alone[["n_rows", "d_model", "mib", "torch_ms", "triton_ms", "torch_gbps", "triton_gbps",
                   "torch_of_copy", "triton_of_copy", "speedup", "speedup_p20", "speedup_p80", "verdict"]])
    display(save_figure(plot_bandwidth(alone, copy_gbps), "04_kernel_bandwidth", ctx))
elif RUN:
    print(f"Kernel timing skipped: {reason}.")

# %% [markdown]
# For scale, the bytes of the largest input: the fused kernel moves four row-sized passes, the unfused pair
# five (the add writes `s`, then `layer_norm` reads it back). That one pass is all the kernel can save.

# %%
m, n = max(shapes)
fused_mib = add_layer_norm_bytes(m, n, ctx.dtype) / 2**20
pd.Series({"fused MiB": fused_mib, "unfused MiB": fused_mib + m * n * ctx.dtype.itemsize / 2**20},
          name=f"{m} × {n}, {ctx.dtype_name}")

# %% [markdown]
# ## Is the layer still right?
#
# The whole layer with the kernel inside, checked like every rung: against the float64 truth, with and
# without left padding, next to the rung it is built on. Where the kernel cannot run, `triton_ln` is listed
# as skipped, with the reason.

# %%
if RUN:
    checks = check_table(ctx, ["no_empty_mask", "triton_ln"], paddings=("none", "left"))
    display(Markdown(check_summary(checks)))
    skipped = checks.status.eq("skipped")
    assert (checks.passed.eq(True) | skipped).all(), "a check failed: see the summary above"

# %% [markdown]
# ## Before and after, from the profiler
#
# Step 03 and this step, profiled on the largest row that runs here and subtracted, kernel by kernel on a
# GPU (op by op on the CPU): the residual add and the second LayerNorm should give way to one Triton
# kernel, and everything else, attention included, should stay as it was; what else moves is the noise
# between two profiles, larger where other work shares the GPU.

# %%
if KERNEL:
    before = profile_variant("no_empty_mask", ctx.rows[-1], ctx.dtype, ctx.device)
    after = profile_variant("triton_ln", ctx.rows[-1], ctx.dtype, ctx.device)
    by = "kernel" if ctx.device.type == "cuda" else "op"
    display(diff_profiles(before, after, by=by).head(10).assign(**{by: lambda t: t[by].map(short_kernel_name)}))
    display(Markdown(attention_ran(after, "triton_ln") + " " + share_sentence(
        after, "triton_ln", ctx.rows[-1], "LayerNorm", "elementwise/residual")))
elif RUN:
    print(f"Profile skipped: {reason}.")

# %% [markdown]
# ## End to end: `triton_ln` against `no_empty_mask`
#
# The question is not whether the kernel is fast on its own, but whether the layer is faster with it. The
# saving is one pass over a `(B, N, d)` tensor and one launch per call, while the GEMMs and attention around
# it move and compute far more: whether that shows beyond noise is what this measurement decides. Each row:
# §3 check of `triton_ln`, then both layers timed interleaved, speedup = `no_empty_mask` time / `triton_ln`
# time with its p20–p80 spread.

# %%
if KERNEL:
    step = head_to_head(ctx, "triton_ln", "no_empty_mask")
    display(step[["row", "shape", "baseline_ms", "candidate_ms", "speedup", "speedup_p20", "speedup_p80",
                  "verdict", "baseline_gpu_ms", "candidate_gpu_ms", "err", "ref_err", "passed"]])
elif RUN:
    step = pd.DataFrame()  # nothing measured: the rule below then reverts
    print(f"End-to-end comparison skipped: {reason}.")

# %% [markdown]
# ## The decision
#
# The project's rule (`roofline_lib.core.decision.decide`): keep `triton_ln` only if the kernel passed its own
# checks, the layer passed §3 on every row, and the geometric mean of the per-row speedups has its whole
# p20–p80 band above 1. Otherwise revert to `no_empty_mask`. The line below is the rule's output on the
# table above, so it holds whichever way the measurement went. `best_variant` follows it for the rest of
# this kernel's session; a later notebook, in a fresh session, reads the decision recorded for this GPU that
# the package ships instead (`no_empty_mask` where none is recorded, as on a T4). The table above also has
# each layer's GPU time per call (`*_gpu_ms`, the host out of the way; empty on a CPU, which has no GPU time
# to split off): where the layer with the kernel is slower although its GPU time is not, and its GPU idles
# for part of the call, the difference is host time, what launching the kernel costs the host; the line
# under the decision names those rows.
# Notebook 05 splits each call into the host's and the GPU's share, and measures the same kernel inside a
# CUDA graph, where the host is out of the way.

# %%
if RUN:
    call = decide(step, kernel_ok=bool(kernel_checks.passed.all()) if KERNEL else True)
    remember(ctx.device, ctx.dtype, call)
    display(Markdown(decision_markdown(call) + ("\n\n" + host_time_losses(step) if KERNEL else "")))
    display(Markdown(f"`best_variant` on {ctx.env['device']} in {ctx.dtype_name}: "
                     f"**{best_variant(ctx.device, ctx.dtype)}**."))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter) and a
# dtype: the end-to-end comparison reruns, and the rule decides again on what was measured.

# %%
def measure_step(rows, dtype):
    """This step's measurement: triton_ln against no_empty_mask on `rows` in `dtype`, and the rule's call."""
    again = head_to_head(ctx, "triton_ln", "no_empty_mask", rows=rows, dtype=dtype)
    table = again[["row", "shape", "baseline_ms", "candidate_ms", "speedup", "speedup_p20", "speedup_p80",
                   "verdict", "passed"]]
    return table, Markdown(decision_markdown(decide(again)))


if KERNEL:
    controls = step_controls(ctx, ["triton_ln"])
    display(rerun_widget(measure_step, rows=controls["rows"], dtype=controls["dtype"]))
elif RUN:
    print(f"Nothing to rerun here: {reason}.")
