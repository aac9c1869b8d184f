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
# # 03 — Stop building the empty mask
#
# When it is called without a padding mask, the reference builds an all-True one anyway, and the SDPA
# layer of step 02 still combines it with the causal mask into a `(B, 1, N, N)` boolean tensor on every
# call. That mask masks nothing, costs memory traffic to build and read, and makes the attention kernel
# compute the scores of the upper triangle only to mask them. This step drops it: without padding, attention is called with `is_causal=True` and
# no mask at all; real padding is still honoured.
#
# **In this notebook you will learn**
#
# - why an explicit mask is expensive even when it masks nothing;
# - how to check that real padding still works, and why right padding alone proves nothing;
# - what the profiler sees change: the mask ops gone, the attention kernel SDPA can pick now;
# - how to time one step on its own (this variant against the previous one), not only against the reference;
# - how the measured table decides whether the step is kept.

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

from roofline_lib import VARIANTS, build_variant, diff_profiles, profile_variant
from roofline_lib.measure.profile_rules import MASK_CATEGORIES
from roofline_lib.present.notebook import check_table, head_to_head, save_figure, setup_context, show_source, sweep
from roofline_lib.present.plots import plot_speedups
from roofline_lib.present.prose import check_summary, speedup_summary
from roofline_lib.present.prose_profile import attention_change, attention_ran, share_sentence
from roofline_lib.present.report import speedup_table
from roofline_lib.present.widgets import rerun_widget, step_controls

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %% [markdown]
# ## The change
#
# One branch in the SDPA layer's attention: with no padding mask and `build_empty_mask=False`, call SDPA
# with `is_causal=True`. SDPA then knows the mask's structure instead of reading it from memory, and may
# pick a fused causal kernel that skips the masked upper triangle altogether (which ones exist depends on
# the GPU: FlashAttention and cuDNN need compute capability 8.0 or more, so a T4 gets the memory-efficient
# kernel; a profile's kernel names say which one ran). With a real padding mask the explicit path is still
# taken, so padded keys are still ignored. The branch was already in `sdpa_attention` (notebook 02 shows
# it): `mask` is None when no padding is given and the empty mask is not built, and then SDPA gets
# `is_causal=True`. The whole change is the rung's one argument, `build_empty_mask=False`:

# %%
show_source(VARIANTS["no_empty_mask"])

# %% [markdown]
# ## Real padding still works
#
# Each check draws its own padding: `left` puts the padding first, `holes` scatters padded positions
# anywhere, `right` puts real tokens first. Outputs at padded query positions are never compared.

# %%
if RUN:
    checks = check_table(ctx, ["no_empty_mask"], paddings=("none", "right", "left", "holes"))
    display(Markdown(check_summary(checks)))
    assert checks.passed.eq(True).all(), "a check failed: see the summary above"

# %% [markdown]
# ## Before and after, from the profiler
#
# Step 02 and this step, profiled on the largest row that runs here, and subtracted (µs per forward call;
# `removed`: only step 02 calls it). Without padding the mask ops should be gone, and SDPA, now told
# `is_causal=True` instead of given a mask, may pick another kernel or keep the same one and skip the
# blocks above the diagonal (the last sentence below says which happened here). Skipping them halves the
# work; with the mask gone the kernel also stops reading an additive mask of `B·N²` elements, so the
# attention kernel can gain more than 2×:

# %%
if RUN:
    big = ctx.rows[-1]
    before = profile_variant("sdpa_fused_qkv", big, ctx.dtype, ctx.device)
    after = profile_variant("no_empty_mask", big, ctx.dtype, ctx.device)
    display(diff_profiles(before, after, by="category"))
    display(diff_profiles(before, after, by="op").head(12))
    display(Markdown(" ".join([attention_ran(before, "sdpa_fused_qkv"), attention_ran(after, "no_empty_mask"),
                               share_sentence(after, "no_empty_mask", big, *MASK_CATEGORIES),
                               attention_change(before, after, ("sdpa_fused_qkv", "no_empty_mask"))])))

# %% [markdown]
# ### What is left for the next step
#
# With attention fused and the mask gone, what else is there? The categories of this step's profile on the
# largest row, and under the table, on the smallest and the largest, the share of the pair below. Notebook 04 takes on one pair in them: the residual add after
# attention and the LayerNorm that follows it (`ln2`), fused into one kernel.

# %%
if RUN:
    small = profile_variant("no_empty_mask", ctx.rows[0], ctx.dtype, ctx.device)
    display(after.categories[after.categories.time_us > 0].assign(row=big.row))
    display(Markdown(" ".join(share_sentence(prof, "no_empty_mask", shape, "LayerNorm", "elementwise/residual")
                              for prof, shape in ((small, ctx.rows[0]), (after, big)))))

# %% [markdown]
# ## Why right padding alone proves nothing
#
# Under the causal mask, a real token with right padding only ever looks at earlier positions, which
# are all real: the padding sits after it. So a layer that **ignores** the padding mask gives exactly
# the right answer with right padding. Here is such a broken layer, checked with the same rule on the
# first row that runs here:

# %%
def drops_mask(ref):
    """A deliberately broken variant: the no-empty-mask layer, called as if there were no padding."""
    layer = build_variant("no_empty_mask", ref)
    return lambda x, key_padding_mask=None: layer(x)


if RUN:
    broken = check_table(ctx, {"drops_mask": drops_mask}, paddings=("right", "left", "holes"), rows=ctx.rows[:1])
    display(broken)
    verdicts = broken.set_index("padding").passed
    assert verdicts["right"] and not verdicts["left"] and not verdicts["holes"], verdicts

# %% [markdown]
# It passes with right padding and fails with left padding and with holes (the cell asserts it). That
# is why the checks above (and the tests) use left padding and holes: only they catch a dropped mask.
#
# ## Measured: the ladder so far
#
# The reference, step 02 and this step, interleaved on every row that runs here.

# %%
if RUN:
    results = sweep(ctx, ["reference", "sdpa_fused_qkv", "no_empty_mask"])
    display(speedup_table(results))
    display(save_figure(plot_speedups(results), "03_mask_elimination", ctx))

# %% [markdown]
# ## Measured: this step on its own
#
# Against the reference, a step inherits every gain of the steps before it. The question for this step
# is narrower: is it faster than step 02? So the two are timed head to head, interleaved, after this
# step passes §3 again.

# %%
if RUN:
    step = head_to_head(ctx, candidate="no_empty_mask", baseline="sdpa_fused_qkv")
    display(step[["row", "shape", "baseline_ms", "candidate_ms", "speedup", "speedup_p20", "speedup_p80",
                  "verdict", "err", "ref_err", "passed"]])

# %% [markdown]
# ## The decision
#
# The project's rule (`roofline_lib.core.decision.decide`), applied to the head-to-head table: keep the step
# only if it passes §3 on every row and the geometric mean of its per-row speedups is a win beyond noise
# (the whole p20–p80 band above 1). The mask costs passes over `B · N²` booleans, and with `is_causal`
# the attention kernel skips the upper triangle instead of computing and masking it (the profile above
# names the kernel before and after), so the largest gains are on the longest rows; on short rows a call
# is mostly the host launching kernels, and removing the mask's kernels saves their launches too. The verdicts below say, row by row,
# what this GPU measured.

# %%
if RUN:
    display(Markdown(speedup_summary(step, "no_empty_mask")))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter), a dtype
# and a variant: it is timed against the reference and against step 02, and the plot is redrawn. Its first
# result is measured again here.
#
# As in notebook 02: on the rows where the GPU idles for part of a call, compare times within one table,
# not across cells (the host's share moves with the host's speed; notebook 05).

# %%
def measure_step(rows, dtype, variant):
    """This step's measurement: the reference, step 02 and `variant` on `rows` in `dtype`."""
    results = sweep(ctx, ["reference", "sdpa_fused_qkv", variant], rows=rows, dtype=dtype)
    return speedup_table(results), plot_speedups(results)


if RUN:
    display(rerun_widget(measure_step, **step_controls(ctx, list(VARIANTS)[1:], value="no_empty_mask")))
