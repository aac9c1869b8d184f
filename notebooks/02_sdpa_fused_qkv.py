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
# # 02 — Fused QKV and scaled_dot_product_attention
#
# The reference computes attention by hand: three projections, a materialized `(B, H, N, N)` score
# tensor, two `masked_fill` passes, a softmax, a second matmul. This step replaces that with one fused
# QKV projection and PyTorch's `F.scaled_dot_product_attention` (SDPA), while still building the
# combined causal and padding mask on every call, as the reference does.
#
# **In this notebook you will learn**
#
# - what changes in the code, and what stays (the same weights, copied; the same function);
# - how to check the new layer against the float64 truth, with and without real padding;
# - what the profiler sees change: the ops removed, the attention kernel SDPA picked on this GPU, the
#   mask work that is left for the next step;
# - how to measure it against the reference, interleaved, with its noise;
# - how to decide, from the measured table alone, whether the step is kept.

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
from IPython.display import Markdown, display

from roofline_lib import VARIANTS, diff_profiles, mask_share_table, profile_variant
from roofline_lib.measure.profile_rules import MASK_CATEGORIES
from roofline_lib.present.notebook import check_table, profile, save_figure, setup_context, show_source, sweep
from roofline_lib.present.plots import plot_mask_share, plot_speedups
from roofline_lib.present.prose import check_summary, speedup_summary
from roofline_lib.present.prose_profile import attention_ran, mask_share_summary, share_sentence
from roofline_lib.present.report import speedup_table
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.variants.parts import fuse_qkv
from roofline_lib.variants.sdpa import SdpaLayer, sdpa_attention

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## The change
#
# **Fused QKV.** The three `(d, d)` projections become one `(d, 3d)` projection whose weights are the
# reference's, stacked. One larger GEMM reads the normalized input once instead of three times and keeps
# the GPU busier than three small ones:

# %%
show_source(fuse_qkv)

# %% [markdown]
# **SDPA.** The attention core becomes one call. SDPA picks a backend at run time from what the GPU has and
# what the inputs allow: with an explicit boolean mask SDPA's FlashAttention backend (which only knows
# "causal" or "no mask") is out, and the fused kernels that take a mask compute the softmax block by block
# without materializing the score tensor; a profile's kernel names say which one ran on this GPU. (cuDNN's
# fused attention, where it runs, takes the mask, and its kernel's name can still contain "flash": it is
# cuDNN's own kernel in the FlashAttention style, not SDPA's FlashAttention backend.) The mask
# itself is still built on every call: that is the next step's business. The function below serves this
# step and the later ones. In this step `build_empty_mask` is True, so a mask always exists and SDPA always
# gets it; `is_causal=mask is None` is the next step's path (notebook 03). `backend` forces one of SDPA's
# kernels, which the `fastest` rung uses to choose per shape (notebook 05), and `sdpa` is SDPA with its
# inputs kept inside the memory-efficient kernel's 32-bit offsets at very long context (notebook 06).

# %%
show_source(sdpa_attention)

# %%
show_source(SdpaLayer.forward)

# %% [markdown]
# ## Is it still the same function?
#
# Checked before anything is timed: on every row that runs here, without padding and with left padding
# (padding first, the pattern that a mistake in the mask cannot hide from; see notebook 03).

# %%
if RUN:
    checks = check_table(ctx, ["sdpa_fused_qkv"], paddings=("none", "left"))
    display(Markdown(check_summary(checks)))
    assert checks.passed.eq(True).all(), "a check failed: see the summary above"

# %% [markdown]
# ## Before and after, from the profiler
#
# The reference and this step, profiled the same way (notebook 01's `torch.profiler` tables) on the largest
# row that runs here, and subtracted: per category, then per op (`removed`: only the reference calls it;
# `added`: only the new layer does; `in both`: both do). µs are per forward call, GPU kernel time on a GPU.
# The mask is still built (`ge`, `bitwise_and`: the causal and padding mask of shape (B, 1, N, N), now in
# one step instead of `tril` and `ones`), and SDPA turns the boolean mask into an additive one (`where`)
# that its kernel reads, so mask construction can grow while applying the mask inside the kernel replaces
# the two `masked_fill` passes.

# %%
if RUN:
    big = ctx.rows[-1]
    before = profile_variant("reference", big, ctx.dtype, ctx.device)
    after = profile_variant("sdpa_fused_qkv", big, ctx.dtype, ctx.device)
    display(diff_profiles(before, after, by="category"))
    display(diff_profiles(before, after, by="op").head(12))

# %% [markdown]
# Which attention kernel SDPA chose is read from the profile's kernel names (on a T4, without
# FlashAttention or cuDNN's fused attention, a different one runs than on a newer GPU):

# %%
if RUN:
    display(Markdown(attention_ran(after, "sdpa_fused_qkv") + " " + share_sentence(after, "sdpa_fused_qkv", big,
                                                                                     *MASK_CATEGORIES)))

# %% [markdown]
# ### What is left for the next step
#
# The mask that is built on every call, though without padding it masks nothing, is still there. Its two
# categories (building masks, applying them) on every row, for both layers:

# %%
if RUN:
    both = profile(ctx, ["reference", "sdpa_fused_qkv"])
    masks = mask_share_table(both.categories)
    display(masks[["row", "shape", "variant", "total_ms", "mask_construction_ms", "masking_ms", "mask_share"]])
    display(save_figure(plot_mask_share(masks), "02_mask_share", ctx))
    display(Markdown(mask_share_summary(masks, "reference", "sdpa_fused_qkv")))

# %% [markdown]
# ## Measured against the reference
#
# The reference and the new layer, interleaved on each row; the speedup is the ratio of medians, with
# the p20–p80 spread of the per-round ratios as whiskers. The y axis is logarithmic.

# %%
if RUN:
    results = sweep(ctx, ["reference", "sdpa_fused_qkv"])
    display(speedup_table(results))
    display(save_figure(plot_speedups(results), "02_sdpa_fused_qkv", ctx))

# %% [markdown]
# Peak memory per call, in MiB, beyond what was already held (inputs, weights, the other layers of the
# sweep): what the call itself allocates. The reference's grows with the square of the sequence length
# (the `(B, H, N, N)` score tensor); the difference is what SDPA saves. `sdpa_fused_qkv` still builds a
# `(B, 1, N, N)` boolean mask every call, `B·N²` bytes (the next step removes it), but beside its
# activations, which grow with `B·N·d`, that is the smaller part on most rows: its column follows the
# token count and `d_model` more than `B·N²`, except on the longest rows, where the mask is a visible share
# (notebook 03 shows the peak without it).
# On the CPU torch keeps no count, and the column is empty.

# %%
if RUN:
    display(results.pivot(index="row", columns="variant", values="peak_extra_mib").reindex(
        [s.row for s in ctx.rows]))

# %% [markdown]
# ## The decision
#
# The rule for every step (`roofline_lib.core.decision.decide`): keep it only if it passes §3 on every row and
# the geometric mean of its per-row speedups is a win beyond noise (the whole p20–p80 band above 1). The
# paragraph below is computed from the table above. To read it, compare the score work with the GEMM work
# on each row: the score tensor the reference materializes costs `B·H·N²` per pass, the GEMMs `B·N·d²`, so
# the ratio grows with `H·N/d²`, and the gains should be largest where it is largest; on the short rows
# the layer's time is mostly GEMMs and kernel launches, which this step changes less. It is a rule of
# thumb: where the GPU waits on the host (the short rows), a row's speedup also follows the host's
# speed, and the table above can order rows differently.

# %%
if RUN:
    display(Markdown(speedup_summary(results, "sdpa_fused_qkv")))

# %% [markdown]
# ## Try it
#
# Pick rows (a list like `1,6,9`, a range like `1-5`, or a shape of your own such as `B4 N1000 d512 H8`,
# applied on Enter), a dtype and a variant: the measurement reruns against the reference and the plot is
# redrawn. Its first result is measured again here.
#
# On the rows where the GPU idles for part of a call (each summary names them, from the sweep's `gpu_share`;
# notebook 05 splits a call into the host's share and the GPU's) a call's time is partly the host's:
# Python and kernel launches. It moves with the host's speed, which can differ from one cell to the next
# by more than the p20–p80 band of one table, while the GPU's own µs per call stay put. Compare those rows
# within one table, not across cells.

# %%
def measure_step(rows, dtype, variant):
    """This step's measurement: the reference against `variant` on `rows` in `dtype`."""
    results = sweep(ctx, ["reference", variant], rows=rows, dtype=dtype)
    return speedup_table(results), plot_speedups(results)


if RUN:
    display(rerun_widget(measure_step, **step_controls(ctx, list(VARIANTS)[1:], value="sdpa_fused_qkv")))
