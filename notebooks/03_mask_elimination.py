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
# **The question.** Notebook 01's profile found the reference building and applying a padding mask on every call,
# even when no padding is given: an all-True mask that masks nothing (the **empty mask**). Notebook 02's rung
# `sdpa_fused_qkv` still builds it, combined with the causal mask into a `(B, 1, N, N)` tensor that SDPA must read.
# How much faster is the layer without it, and does real padding still work?
#
# **What you will measure:** this rung, `no_empty_mask`, against the rung before it (`sdpa_fused_qkv`, not the
# reference), its §3 check with left padding and with holes, what the profiler sees change, and what happens to
# a call's peak memory.
#
# **Time on a T4:** about 4 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: timing
# the ladder 2.1, correctness checks 1.0, profiles 0.9; [how](../roofline_lib/present/estimate.py)).
#
# **Words used here** (all in the [glossary](../docs/glossary.md)):
#
# - **SDPA** (PyTorch's fused `scaled_dot_product_attention`), its **backends** (the kernels it picks from), a
#   **rung** (one step of the **ladder** of faster layers) and **§3** (error at most twice the reference's own,
#   plus 1e-6) are notebook 02's.
# - **Padding** marks key positions that are not real tokens: **left** padding puts them first, **holes** anywhere,
#   **right** padding last.
# - **`is_causal=True`** tells SDPA that the mask is the causal triangle, so its kernel reads no mask from memory
#   and can skip the blocks above the diagonal.
#
# Protocol details and caveats are in
# [docs/walkthrough/03_mask_elimination.md](../docs/walkthrough/03_mask_elimination.md).

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
from IPython.display import Markdown, display

from roofline_lib import VARIANTS, build_variant, diff_profiles
from roofline_lib.measure.profile_rules import MASK_CATEGORIES
from roofline_lib.present.notebook import (
    check_table,
    head_to_head,
    ladder_lines,
    save_figure,
    setup_context,
    show_source,
    speedup_view,
    sweep,
)
from roofline_lib.present.plots import plot_speedups
from roofline_lib.present.prose import check_summary
from roofline_lib.present.prose_profile import attention_change, attention_ran, share_sentence
from roofline_lib.present.widgets import rerun_widget, step_controls

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
ctx

# %%
# What this notebook uses beyond the setup cell: the session's one ladder measurement and its profiles, the
# exercises' check, and the building blocks the exercises use.
import torch
import torch.nn.functional as F

from roofline_lib.present.exercises import check_layer
from roofline_lib.present.prose import memory_summary, step_decision, step_headline
from roofline_lib.present.report import memory_table, step_table
from roofline_lib.present.session import ladder_sweep, suite_profile
from roofline_lib.present.tables import row_profile
from roofline_lib.variants.parts import causal_padding_mask, fuse_qkv, merge_heads, split_qkv
from roofline_lib.variants.sdpa import sdpa_attention

# %% [markdown]
# ## The result
#
# `no_empty_mask` against `sdpa_fused_qkv` on every row that fits here, both checked by §3, then timed in turn,
# round after round (interleaved). A row fits where the **naive layer** (the reference layer as written, which every
# step is checked against) fits in this GPU's memory; the setup cell's output names any row left out. The speedup is
# the median of the per-round ratios of the rung before's time over this rung's, with their p20–p80 band in
# brackets; `× reference` is the whole climb so far. These numbers come from the session's one measurement of the
# whole ladder, the one notebook 02 shows.

# %%
if RUN:
    ladder = ladder_sweep(ctx)  # every rung on every row, checked and timed once per session
    display(Markdown(step_headline(ladder, "no_empty_mask")))
    display(step_table(ladder, "no_empty_mask"))

# %% [markdown]
# ## The change
#
# One argument: the rung is the SDPA layer with `build_empty_mask=False`. In `sdpa_attention` (below, as in
# notebook 02) `mask` is then None when no padding is given, and SDPA is called with `is_causal=True` and no mask.
# With a real padding mask the explicit path is still taken, so padded keys are still ignored.

# %%
show_source(VARIANTS["no_empty_mask"])

# %%
show_source(sdpa_attention)

# %% [markdown]
# ## Real padding still works
#
# §3 on every row that runs here with four paddings, each check drawing its own: none, right, left and holes.
# Outputs at padded query positions are never compared. Left padding and holes are the ones that matter (next
# section).

# %%
if RUN:
    checks = check_table(ctx, ["no_empty_mask"], paddings=("none", "right", "left", "holes"))
    display(Markdown(check_summary(checks)))
    assert checks.passed.eq(True).all(), "a check failed: see the summary above"

# %% [markdown]
# ## Why right padding alone proves nothing
#
# Under the causal mask, a real token with right padding only looks at earlier positions, which are all real. So
# a layer that **ignores** the padding mask gives the right answer with right padding. Here is such a broken layer,
# checked with the same rule on the first row that runs here:

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
# It passes with right padding and fails with left padding and with holes (the cell asserts it). That is why the
# checks above, the repository's tests and `check_layer` use left padding: only it and holes catch a dropped mask.
#
# ## Where the time went: the profiler
#
# Step 02 and this step profiled on every row that runs here, once per session (a measurement separate from the
# timing; step 02's is the profile notebook 02 shows, this step's the one notebook 04 starts from). The largest
# row's two, subtracted, in **kernel time**: the sum of the profiled kernels' durations, µs per call (`removed`: only
# step 02 calls it). The mask ops should be gone, and attention's core should shrink (the paragraph below the
# tables says why); besides attention, what else moves (the GEMMs, say) is the noise between two profiles. Kernel
# time is usually lower than the timing protocol's *GPU time per call* (the decision below uses that one): the GPU
# time is read on the GPU's clock over calls run back to back, so it also counts the short gaps between one
# kernel's end and the next one's start.
#
# The sentences below the tables say which attention kernel ran before and after, and what its time did. Their
# *GPU time* is this profile's kernel time, not the timing protocol's. They may name helper kernels, charged to
# attention too. One is `Memset`, a CUDA runtime kernel that fills a block of memory with one value (zeros, say):
# cuDNN's attention launches one (other attention kernels may not), and PyTorch does for some of its own ops. With a
# mask, another is an elementwise kernel (`vectorized_elementwise_kernel`) that prepares the mask for the attention
# kernel; where the mask is dropped, it goes.

# %%
if RUN:
    big = ctx.rows[-1]
    both = suite_profile(ctx, ["sdpa_fused_qkv", "no_empty_mask"])  # every row, profiled once per session
    before, after = (row_profile(both, big.row, name) for name in ("sdpa_fused_qkv", "no_empty_mask"))
    display(diff_profiles(before, after, by="category"))
    ops = diff_profiles(before, after, by="op")
    display(ops[(ops.before_us > 0) | (ops.after_us > 0)].head(12))
    display(Markdown(" ".join([attention_ran(before, "sdpa_fused_qkv"), attention_ran(after, "no_empty_mask"),
                               share_sentence(after, "no_empty_mask", big, *MASK_CATEGORIES),
                               attention_change(before, after, ("sdpa_fused_qkv", "no_empty_mask"))])))

# %% [markdown]
# With `is_causal=True` the kernel skips the blocks above the diagonal, about half the work, and it no longer
# reads an additive mask of `B·N²` elements, so the attention kernel alone can gain more than 2×.
#
# ## Memory without the mask
#
# Each call's peak memory beyond what was already held, in MiB, from the same ladder measurement: the reference,
# step 02 and this step, and beside them the empty mask's own size (`B·N²` booleans, plus the additive copy SDPA
# makes of it in the layer's dtype).

# %%
if RUN:
    memory = memory_table(ladder, ["reference", "sdpa_fused_qkv", "no_empty_mask"], mask=True)
    if len(memory):
        display(memory)
    display(Markdown(memory_summary(ladder, "sdpa_fused_qkv", "no_empty_mask", mask=True)))

# %% [markdown]
# On most rows the peak barely moves: the mask was never part of those rows' peak. On a short row the peak can even
# be a little higher: without the mask the call's memory can be allocated in another order, or the attention kernel
# can take a workspace of its own, and either can raise the peak a little; the table above shows how much.
#
# A call's peak is its largest moment. The mask is alive only during attention: it is built for attention and freed
# before the MLP, whose activations (the `(B, N, 4d)` hidden tensor and what surrounds it) usually set the peak.
# Dropping the mask lowers the peak only on the rows where attention's moment is the larger one: where the mask
# (growing with `B·N²`) and attention's other live tensors (q, k, v and attention's output) together exceed the MLP's
# peak, which grows with `B·N·d`. Those are the rows with the longest sequences. To find them, compare the two peak
# columns, not `the mask MiB` alone: where `no_empty_mask MiB` is lower, the mask was part of the peak.
#
# ## The decision
#
# The rule for every rung (`roofline_lib.core.decision.decide`), applied to this step's own comparison, against
# `sdpa_fused_qkv`: keep it only if it passes §3 on every row and the geometric mean of its per-row speedups is a
# win beyond noise. The paragraph below is computed from the ladder measurement above. Where it says the GPU
# *idles for more than 10%* of a call, that is the ladder's GPU time over the call's time (`gpu_share`) below
# 0.9 for either rung (this one or `sdpa_fused_qkv`), not notebook 01's *waits on host* (the profile's kernels
# filling less than half of a call).
#
# The paragraph gives that share beside each row it lists: the lower of the two rungs', which on these rows is
# usually `sdpa_fused_qkv`'s, shown in no table. Notebook 04's table *GPU time and the host's* shows
# `no_empty_mask`'s on every row, as its **host share** (one minus the GPU share: a host share above 10% is a GPU
# share below 0.9), and notebook 05's tables show the short rows; the ladder's `gpu_share` column
# (`ladder[["row", "variant", "gpu_share"]]` in a cell of your own) lists it for every rung.

# %%
if RUN:
    display(Markdown(step_decision(ladder, "no_empty_mask")))

# %% [markdown]
# Figure 1: the ladder so far, against the reference, from the same measurement (the y axis is logarithmic, the
# whiskers are the p20–p80 band):

# %%
if RUN:
    display(save_figure(plot_speedups(ladder.query("variant in ['reference', 'sdpa_fused_qkv', 'no_empty_mask']"),
                                      title=f"Figure 1 — Speedup over the reference\n"
                                            f"{ctx.env['device']}, {ctx.dtype_name}"),
                        "03_mask_elimination", ctx))

# %% [markdown]
# ### What is left for the next step
#
# With attention fused and the mask gone, where does the time go? The categories of this step's profile (the
# same one) on the largest row, then the share of the LayerNorms and the elementwise adds on the smallest and the
# largest row. The sentences' *GPU time* is this profile's kernel time, as in the tables above.
# Notebook 04 fuses one pair of them: the residual add after attention and the LayerNorm that follows it.

# %%
if RUN:
    small = row_profile(both, ctx.rows[0].row, "no_empty_mask")
    display(after.categories[after.categories.time_us > 0].assign(row=big.row))
    display(Markdown(" ".join(share_sentence(prof, "no_empty_mask", shape, "LayerNorm", "elementwise/residual")
                              for prof, shape in ((small, ctx.rows[0]), (after, big)))))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter), a dtype and a
# variant: it is timed against the reference and step 02. Each speedup in the table is over the reference, not over
# step 02. It opens on the ladder's lines for the first and last rows; each change is a **new, separate run**, so its
# numbers can differ from the ladder's above, most on the rows where the GPU waits for the host (notebook 05). There
# a run that times two or three layers often reads lower than the ladder, which times every rung in turn: compare the
# speedups, which hold better than the times.

# %%
def measure_step(rows, dtype, variant):
    """This step's measurement, a separate run: the reference, step 02 and `variant` on `rows` in `dtype`."""
    return speedup_view(sweep(ctx, ["reference", "sdpa_fused_qkv", variant], rows=rows, dtype=dtype))


if RUN:
    controls = step_controls(ctx, list(VARIANTS)[1:], value="no_empty_mask")
    opening = ladder_lines(ladder, ctx, controls["rows"].value, ["reference", "sdpa_fused_qkv", "no_empty_mask"])
    display(rerun_widget(measure_step, opening=speedup_view(opening), **controls))

# %% [markdown]
# ## Exercises
#
# `check_layer` checks your layer by §3 on the first two rows, without padding and with left padding, then times
# it against a rung (here `sdpa_fused_qkv`, the rung before); its first line says whether it passed.

# %% [markdown]
# ### Exercise 1 — Find the empty mask and remove it
#
# The starter is notebook 02's rung written out: it builds a padding mask when none is given. Find that mask and
# stop building it, so that a call without padding reaches SDPA with no mask at all, and check that your layer is
# still correct; its timing line compares it with `sdpa_fused_qkv`. Run the starter first: its code is not the
# rung's own, so on these short rows, where the host's work sets the time, it can already read *faster* or
# *slower*. Compare your version's line with the starter's.

# %%
class MyMaskedLayer(torch.nn.Module):
    """Notebook 02's rung written out: it builds a padding mask that masks nothing. Remove it."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref
        self.qkv_proj = fuse_qkv(ref)

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        r = self.ref
        B, N, _ = x.shape
        q, k, v = split_qkv(self.qkv_proj(r.ln1(x)), r.n_heads)  # each (B, H, N, hd)
        if key_padding_mask is None:
            key_padding_mask = torch.ones(B, N, dtype=torch.bool, device=x.device)  # (B, N)
        mask = causal_padding_mask(key_padding_mask, N)  # (B, 1, N, N)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + r.out_proj(merge_heads(y))
        return x + r.fc2(F.gelu(r.fc1(r.ln2(x))))


check_layer(ctx, MyMaskedLayer, baseline="sdpa_fused_qkv")

# %% [markdown]
# <details><summary>Hint</summary>
#
# The all-True `key_padding_mask` is the empty mask. Without it, the only mask left is the causal triangle, and
# SDPA has a flag for that.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyMaskFreeLayer(torch.nn.Module):
#     """Fused QKV and SDPA: no mask at all without padding (is_causal), the combined mask with it."""
#
#     def __init__(self, ref):
#         super().__init__()
#         self.ref = ref
#         self.qkv_proj = fuse_qkv(ref)
#
#     @torch.no_grad()
#     def forward(self, x, key_padding_mask=None):
#         r = self.ref
#         N = x.shape[1]
#         q, k, v = split_qkv(self.qkv_proj(r.ln1(x)), r.n_heads)  # each (B, H, N, hd)
#         if key_padding_mask is None:
#             y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
#         else:
#             y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_padding_mask(key_padding_mask, N))
#         x = x + r.out_proj(merge_heads(y))
#         return x + r.fc2(F.gelu(r.fc1(r.ln2(x))))
#
#
# check_layer(ctx, MyMaskFreeLayer, baseline="sdpa_fused_qkv")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — Right padding needs no mask either
#
# The starter goes one step too far: it always calls SDPA with `is_causal=True` and never looks at
# `key_padding_mask`. Run it and read `check_layer`'s verdict: it passes without padding and with right padding,
# and fails with left padding (the section *Why right padding alone proves nothing* says why). Its pass with right
# padding is no accident: under the causal mask a real token never sees a key after it, so a call whose padding is
# all at the end needs no mask. Fix it from Exercise 1's layer with one change more: keep `is_causal=True` and no
# mask for a right-padded call too (every sequence's real tokens first), and pass the combined mask only where a
# padded key comes before a real one.

# %%
class IgnoresPadding(torch.nn.Module):
    """Causal SDPA that never reads key_padding_mask: right for no padding, wrong for left padding."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref
        self.qkv_proj = fuse_qkv(ref)

    @torch.no_grad()
    def forward(self, x, key_padding_mask=None):
        r = self.ref
        q, k, v = split_qkv(self.qkv_proj(r.ln1(x)), r.n_heads)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # key_padding_mask is ignored
        x = x + r.out_proj(merge_heads(y))
        return x + r.fc2(F.gelu(r.fc1(r.ln2(x))))


check_layer(ctx, IgnoresPadding, baseline="sdpa_fused_qkv", paddings=("none", "right", "left"))

# %% [markdown]
# <details><summary>Hint</summary>
#
# A right-padded row of `key_padding_mask` (True = a real token) never goes from False back to True along N:
# `(kpm[:, 1:] <= kpm[:, :-1]).all()`. Reading that answer on the host (`bool(...)`) waits for the GPU, a cost a
# caller that knows its padding is at the end avoids by passing no mask. `is_causal=True` and an `attn_mask`
# cannot be combined in one SDPA call: the other calls get `causal_padding_mask(kpm, N)`, shape `(B, 1, N, N)`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class HonoursPadding(IgnoresPadding):
#     """Causal SDPA and no mask where every sequence's real tokens come first (no padding, right padding); the
#     combined causal and padding mask where a padded key comes before a real one (left padding, holes)."""
#
#     @torch.no_grad()
#     def forward(self, x, key_padding_mask=None):
#         r = self.ref
#         N = x.shape[1]
#         q, k, v = split_qkv(self.qkv_proj(r.ln1(x)), r.n_heads)
#         kpm = key_padding_mask  # (B, N), True = a real token
#         if kpm is None or bool((kpm[:, 1:] <= kpm[:, :-1]).all()):  # no padding, or padding at the end only
#             y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
#         else:
#             y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_padding_mask(kpm, N))
#         x = x + r.out_proj(merge_heads(y))
#         return x + r.fc2(F.gelu(r.fc1(r.ln2(x))))
#
#
# check_layer(ctx, HonoursPadding, baseline="sdpa_fused_qkv", paddings=("none", "right", "left"))
# ```
#
# </details>
