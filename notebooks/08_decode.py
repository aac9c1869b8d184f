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
# # 08 — Decode: one token at a time, through a key/value cache
#
# **The question.** Notebooks 01–07 ran the layer over a whole sequence at once. A model that *generates* text
# runs it differently: it reads the prompt once, then produces one new token per sequence at a time. How fast can
# one such step go, and what stops it going faster?
#
# **What you will measure:** one step of a stack of layers for each way of writing it, against the step's floor;
# that every one still computes the layer's function; where a step and a prompt sit on the roofline; what a CUDA
# graph saves per token; why a long context needs its keys split; and how much memory the cache takes.
#
# **Time on a T4:** about 1 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes: the
# decode steps 0.2, the exercises' checks 0.2, the ceilings 0.1; [how](../roofline_lib/present/estimate.py)).
#
# **Words used here** (all in the [glossary](../docs/glossary.md)):
#
# - The **prefill** runs the prompt, N tokens per sequence, through the layer in one call, as notebooks 01–07 did.
#   A **decode step** then takes one new token per sequence and computes its output; a model repeats it for
#   every token it generates.
# - A step's attention needs the keys and values of every earlier token. The **key/value cache** (KV cache) keeps
#   them, one key and one value vector per position, per layer, so a step computes only the new token's.
#   The positions a step attends, the new one included, are its **context**.
# - **Tokens/s** is the batch over the time of one step through every layer: how many tokens the stack produces
#   per second.
# - A call is **memory-bound** when moving its bytes takes longer than doing its FLOPs: its **intensity** (FLOPs
#   per byte) is below the device's **ridge** (its matmul rate over its memory bandwidth).
# - The **HBM floor** of a step is the bytes it must move over the measured bandwidth of the GPU's main memory
#   (HBM, or GDDR6 on a T4): no way of writing the step runs faster.
#
# The code cell that starts with the comment *What this notebook uses* prints the names of the **decoders**, the
# ways of writing the step timed here; the first section explains each (a name that starts with `graph_` is the
# step replayed from a CUDA graph, notebook 05).
#
# Protocol details and caveats are in [docs/walkthrough/08_decode.md](../docs/walkthrough/08_decode.md).

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

from roofline_lib.present.notebook import save_figure, setup_context

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16; no GPU (or ROOFLINE_SMOKE=1): tiny shapes that check the code paths
ctx

# %%
# What this notebook uses beyond the setup cell: the decoders' names (from the catalog, so a new one shows up
# here by itself), the session's one measurement of the ceilings, the shapes, and the exercises' building blocks.
import math

import pandas as pd
import torch
import torch.nn.functional as F

from roofline_lib import Shape
from roofline_lib.core.catalog import DECODERS, DEFAULT_DECODERS, STATIC_DECODERS
from roofline_lib.core.device import T4_MEMORY_GIB, memory_capacity, multiprocessor_count
from roofline_lib.core.shapes import parse_shape
from roofline_lib.present.decode_report import (
    decode_headline,
    graph_saving,
    roofline_points,
    roofline_sentence,
    split_table,
    step_bytes_table,
    step_times,
)
from roofline_lib.present.exercises import DECODE_CHECK, DECODE_SMOKE, check_own_decoder
from roofline_lib.present.formatting import three_digits
from roofline_lib.present.plots_decode import (
    plot_cache_memory,
    plot_prefill_and_decode,
    plot_step_against_floor,
)
from roofline_lib.present.session import measured_ceilings
from roofline_lib.present.tables import as_measured, blank_missing, without_empty_columns
from roofline_lib.present.widgets import decode_controls, rerun_widget
from roofline_lib.runs.decode import cache_memory, check_decoder, time_decode
from roofline_lib.variants.decode import Decoder, SplitKVDecoder, StaticCacheDecoder
from roofline_lib.variants.parts import merge_heads

GPU = ctx.device.type == "cuda"
CEILINGS = measured_ceilings(ctx) if RUN else None  # the session's one measurement: 01, 04, 06 and 07 read it too
SHORT = Shape("short", 1, 127, 512, 8) if GPU else Shape("short", 1, 31, 64, 4)  # context 128 (32 on a CPU)
LONG = Shape("long", 1, 32767, 1024, 16) if GPU else Shape("long", 1, 255, 64, 4)  # context 32,768 (256)
LAYERS = 12 if GPU else 2  # a short context's step through a stack, as a model runs it
LONG_LAYERS = 2  # at a long context every layer's step is the same cache read: two show it
CHECK = DECODE_SMOKE if ctx.smoke else DECODE_CHECK  # the §3 check's prompt
TIMED = list(DEFAULT_DECODERS)  # the decoders timed below, plain to fast
STEP_COLUMNS = ["shape", "context", "layers", "decoder", "us_per_layer", "floor_us", "fraction_of_floor",
                "tokens_per_s", "status", "reason"]  # what the step tables show
TIMED

# %% [markdown]
# ## The result: a step against its floor
#
# Each decoder in the list above is one way of writing the step, timed in a stack of layers as a model runs them
# (the token goes through every layer in turn), interleaved, under the project's one protocol: each time in the
# table, `us_per_layer`, is the median over interleaved rounds of one step through the stack, divided by its number
# of layers. A name that starts with `graph_` is replayed from one **CUDA graph** (notebook 05: the step's kernel
# launches recorded once, replayed by the GPU in one call). The decoders, from the simplest to the most elaborate,
# which is not always the fastest (the table says which is, here; `roofline_lib/variants/decode.py` has the code):
#
# - `naive`: no cache, the reference layer over the whole sequence so far at every step (checked below, not timed);
# - `growing_cache`: the cache grows by `torch.cat`, so every step copies the whole cache to append one position;
# - `static_cache`: a cache allocated once for every position and written in place; the step attends over all of it
#   with the unwritten positions masked, so its shapes never change and a CUDA graph can replay it. Run **eager** (as
#   written, each kernel launched from Python one by one, not replayed from a graph), each step still launches every
#   kernel. Where those launches set the pace (a **launch-bound** step: the GPU waits for the host), as at a short
#   context on a fast GPU, it is about as fast as `growing_cache`, faster or slower by some per cent: both take about
#   the host's time, and that moves between runs. Its fixed-size cache saves the `torch.cat` copies, which grow with
#   the context (at context 32,768, d 1024 and fp16, a layer's cache is 134 MB (128 MiB), read and written again every
#   step). At a short context the copies hide in the wait for the host; at the longest context timed here they can
#   show even on a fast GPU (compare the two at 32,768), and on a slower GPU, where copying the cache takes longer
#   than the host's launches, they make `growing_cache` clearly slower. It is made to be replayed;
# - `split_kv`: the static cache with a Triton split-KV attention kernel (the keys cut into ranges, section *Why
#   long contexts need split keys*);
# - `fused_split_kv`: split-KV attention between four fused Triton GEMMs (the LayerNorms, GELU and residual adds
#   folded into them): fewer kernels per layer. With one sequence (B = 1, as in both rows here) each GEMM is a
#   **GEMV**, a matrix times one row. Its **programs** (the blocks of threads a kernel runs side by side) read
#   whole rows of the weight on the **CUDA cores**, the GPU's ordinary arithmetic units, not on its **tensor
#   cores**, the units that multiply small blocks of matrices in one step: with one row, such a block would be
#   mostly empty (both in the [glossary](../docs/glossary.md));
# - `layer_kernel`: the whole step of a layer in one persistent Triton kernel (one launch whose programs stay
#   resident and wait for each other between the phases, instead of a launch per phase), one launch per layer. On
#   a GPU it runs only from compute capability 9.0 (an H100 or H200), in fp16 or bf16; elsewhere (a T4, say) it is
#   skipped, with its reason. One launch is not always the fastest: its grid barriers need every program resident
#   at once, so it runs only one or two programs per SM, too few to keep the memory busy in attention over a long
#   cache (the split-KV kernel runs four or more), and every phase waits at a barrier for its slowest program.
#
# On a T4 (compute capability 7.5) Triton runs the split-KV kernels and the fused GEMMs in fp16, without Hopper's
# dependent launch (PDL in the glossary: the next kernel may start while this one finishes); from two sequences on,
# the GEMMs take one fixed tile instead of the **autotuner**'s search (Triton's autotuner times a list of tile sizes
# on a shape's first call and keeps the fastest; tuning took minutes there). So on a T4, or any GPU before compute
# capability 8.0, with several sequences (the widget's batch) `graph_fused_split_kv` can be slower than
# `graph_split_kv`: its one-tile GEMMs are slower than the cuBLAS GEMMs `split_kv` calls, and that can outweigh the
# kernels it saves.
#
# `fraction_of_floor` is the HBM floor over the measured time: 1 would be a step that moves its bytes at the full
# measured bandwidth. The two contexts run stacks of different depth (the `layers` column), and tokens/s counts
# the whole stack, so across the two contexts compare `us_per_layer`, not tokens/s.

# %%
if RUN:
    short = time_decode(TIMED, SHORT, LAYERS, ctx.dtype, ctx.device, CEILINGS, ctx.budget_s)
    long = time_decode(TIMED, LONG, LONG_LAYERS, ctx.dtype, ctx.device, CEILINGS, ctx.budget_s)
    both = pd.concat([short, long], ignore_index=True)[STEP_COLUMNS]
    display(blank_missing(without_empty_columns(both)))  # a decoder that cannot run here: its status and reason
    display(Markdown(decode_headline([short, long])))
    display(save_figure(plot_step_against_floor([short, long]), "08_step_against_floor", ctx))

# %% [markdown]
# Two regimes. At a short context a step moves few bytes, mostly the weights, so its floor is short (`floor_us`), and
# what costs is the dozen kernels each layer launches: in an eager step, the host's work around each (PyTorch's
# dispatch of the op, its allocations, the small ops between the kernels), more than the launch call itself; in a
# graph replay, which removes that, the kernels' own chains of memory latency. At a long context the cache is most of
# the bytes: the step is a read of the cache, and `fraction_of_floor` says how close to the bandwidth that read runs.
# The sections below take these apart.
#
# ## Still the same function
#
# Every decoder is checked by **§3** (error against the float64 truth at most twice the reference's own, plus 1e-6): a
# prompt is prefilled, the next tokens are stepped one by one, and the steps' outputs are compared with the
# full-sequence layer's rows on the whole input. With left padding (padding first) prompts of different lengths share
# one batch, and every sequence's next token sits at the same position. In the table, `(graphed)` after a name is that
# decoder's step replayed from a CUDA graph: the `graph_` decoder of the timed tables.

# %%
if RUN:
    checks = pd.DataFrame([check_decoder(name, CHECK, 6, ctx.dtype, ctx.device, padding, graphed=graphed)
                           for name in DECODERS for padding in ("none", "left")
                           for graphed in ((False, True) if name in STATIC_DECODERS else (False,))])
    display(blank_missing(checks[["shape", "decoder", "padding", "steps", "status", "err_ratio", "passed", "reason"]]))
    judged = checks[checks.passed.notna()]
    skipped = len(checks) - len(judged)
    could_not = f"; {skipped} could not run here (the table says why)." if skipped else "."
    display(Markdown(f"{int(judged.passed.sum())} of {len(judged)} checks pass §3 (the largest error ratio is "
                     f"{three_digits(judged.err_ratio.max())})" + could_not))
    assert judged.passed.astype(bool).all(), "a decoder failed §3: see the table above"

# %% [markdown]
# ## Prefill against decode on the roofline
#
# A step does the layer's four matrix products on one token per sequence instead of N: each weight is read from memory
# to do two FLOPs (a multiply and an add) per sequence. So its intensity is about the batch size in fp16 (two bytes
# per weight), half of it in fp32 (four), and at a long context the cache read, two FLOPs per element, keeps it there.
# A prefill reads the same weights once for N tokens per sequence. The bytes a step must move: the weights once, the
# cache read, the new key and value written.

# %%
if RUN:
    contexts = sorted({SHORT.seq_len + 1, 16 * (SHORT.seq_len + 1), LONG.seq_len + 1})  # a step's bytes as it grows
    parts = step_bytes_table(LONG.batch, contexts, LONG.d_model, ctx.dtype, CEILINGS)
    display(parts)
    points = roofline_points(ctx, [(SHORT, short), (LONG, long)])
    shown = points[["call", "shape", "how", "flops", "bytes", "flops_per_byte", "us", "achieved_tflops", "reason"]]
    display(blank_missing(as_measured(shown, ["flops", "bytes"])))  # 6.56e+06 beside 1.59e+08, not 6,564,864
    display(Markdown(roofline_sentence(points, CEILINGS)))
    display(save_figure(plot_prefill_and_decode(points, parts, CEILINGS), "08_prefill_and_decode", ctx))

# %% [markdown]
# Panel (a): the long prompt's prefill sits right of the ridge, under the matmul ceiling; the short prompt's, of far
# lower intensity, sits left of the ridge or near it, where its roof is lower (the sentence above gives the ridge and
# each intensity). The steps sit far left, under the bandwidth slope, where the matmul units wait for memory. Panel
# (b): at a short context the weights are most of a step's bytes, at a long one the cache read is; the new key and
# value are a sliver. More sequences per step (a larger batch) share one read of the weights, which is why servers
# batch; the cache they do not share. Panel (b) is at the long shape's width (d 1024 on a GPU) at every context: its
# shortest-context bar is not panel (a)'s short step, which is the short shape's (d 512 on a GPU). Each prefill is
# timed here on its own, `no_empty_mask` alone: the short prompt is launch-bound, so its time can differ from the
# ladder's row 1 (128 tokens, timed among every rung) by more than either band (notebook 05 says why).
#
# ## What a CUDA graph saves per token
#
# An eager step launches every kernel of every layer from Python, one by one: the host's time per launch, from a few
# microseconds on a fast host to tens on a slow one, is paid per kernel whether the kernel is long or not. A graph
# replays the whole stack's step in one launch. From the table above, at the short context, where the kernels are
# short:

# %%
if RUN:
    display(Markdown(graph_saving(short)))
    display(Markdown("At the long context: " + graph_saving(long)))

# %% [markdown]
# A layer launches the same kernels whatever its cache, so the launches themselves cost the host the same at both
# contexts. What the graph saves can still differ between the two lines above: an eager step does more than launch,
# and its work around each kernel grows with the cache too, so read the saving from the lines, not from the kernel
# count. At a long context, what the graph saves depends on how long the eager step's launches take against the
# attention's read of the cache. Where the GPU reads the cache faster than the host launches the step's kernels,
# the step is still launch-bound and the graph saves most of it. Where the read takes longer (a slower GPU, or a
# slow attention kernel), the host keeps ahead of the GPU: the graph, which saves only the launches and does not
# shorten the read, saves little, nothing, or within the noise of a launch-bound step less than nothing. The long
# context's line above says which holds on this GPU.
#
# ## Why long contexts need split keys
#
# Attention over the cache has one query row per sequence and head: B·H **pairs**. A kernel that gives each pair
# one program (a block of threads on one of the GPU's **multiprocessors**, SMs) runs B·H programs: at B 1 with
# 16 heads, 16 of a T4's 40 SMs, 16 of an H100 SXM's or H200's 132, and most of the memory bandwidth idles. **Split-KV**
# attention (flash-decoding) cuts each pair's keys into ranges and runs a program per (pair, range). The
# library's own count (`split_count`): enough ranges for 4 programs per SM when the pairs are fewer than the SMs,
# else 16 per SM, and no range shorter than a block of 64 keys; the table below gives it for a few batch sizes.

# %%
if RUN:
    display(blank_missing(split_table(ctx.device, ctx.dtype, LONG.n_heads, LONG.seq_len + 1, [1, 4, 16, 64])))
    display(Markdown(step_times(long, [f"graph_{name}" for name in STATIC_DECODERS])))

# %% [markdown]
# Each range returns its partial softmax: its largest score m, its denominator (the sum of exp(score − m)) and its
# numerator (the values weighted by exp(score − m)). The **LSE merge** (log-sum-exp) combines them exactly:
# with M the largest m, out = Σ exp(m − M)·numerator / Σ exp(m − M)·denominator. The kernel is
# `roofline_lib/kernels/decode_attention.py`; Exercise 2 writes the merge in PyTorch.
#
# The line under the split table compares, at the long context, the graphed static cache (one SDPA call over the whole
# cache) with the split kernels. Where one cannot run, it says why
# ([notes](../docs/walkthrough/08_decode.md#split-keys)).
#
# ## The cache's memory
#
# Each layer keeps a key and a value of d_model numbers per position per sequence. At long contexts and large
# batches the cache, not the weights, fills the GPU; the black dashed line is what PyTorch can use on a Colab T4:
# 14.7 GiB.

# %%
if RUN:
    memory = cache_memory([("12 layers × d 768", 12, 768), ("8 layers × d 1024", 8, 1024)], [1, 8, 64],
                          [128, 2048, 32768, 100_000])
    capacity = memory_capacity(ctx.device) / 2**30 if GPU else None
    display(save_figure(plot_cache_memory(memory, capacity), "08_cache_memory", ctx))
    fits = memory[memory.cache_gib <= T4_MEMORY_GIB]
    own = capacity is not None and abs(capacity - T4_MEMORY_GIB) > 0.05  # a T4's own memory: said once
    display(Markdown(f"{len(fits)} of {len(memory)} of these caches fit in a T4's {T4_MEMORY_GIB:g} GiB before "
                     "the weights and activations are counted"
                     + (f"; {int((memory.cache_gib <= capacity).sum())} fit in this device's "
                        f"{three_digits(capacity)} GiB." if own else ".")))

# %% [markdown]
# ## Try it
#
# Pick a batch, a context and a layer's shape (`d1024 H16`: d_model and heads), applied on Enter. The widget opens
# on a **separate run** of its own: every decoder above on a stack of two layers, at B 1 and context 4,096 on a GPU,
# which is not a row of the table above. Each change is another new run. The decode tables show medians without
# bands, and an eager, launch-bound step can move by tens of per cent between runs, so compare decoders within one
# table. A separate run at a shorter context can read as slow as the table's at a longer one. A larger
# batch raises a step's intensity; a longer context raises its bytes.

# %%
def measure_decode(batch, context, shape):
    """A separate run: every timed decoder's step at `batch` × `context` on a two-layer stack of `shape`."""
    prompt = parse_shape(f"B{batch} N{context - 1} {shape}")  # a bad shape: one clear line
    timed = time_decode(TIMED, prompt, 2, ctx.dtype, ctx.device, CEILINGS, ctx.budget_s)
    return blank_missing(without_empty_columns(timed[STEP_COLUMNS])), plot_step_against_floor([timed])


if RUN:
    start = (1, 256, "d64 H4") if ctx.smoke else (1, 4096, "d1024 H16")  # quick to rerun
    display(rerun_widget(measure_decode, **decode_controls(*start)))

# %% [markdown]
# ## Exercises
#
# Each starter below already computes the layer's function, slowly. `check_own_decoder(ctx, MyDecoder)` builds
# `MyDecoder(reference_layer, capacity)`, where the **capacity** is the number of positions the cache holds (the
# prompt's and the steps'). It checks it by §3 (prefill, six steps, without and with left padding), then times one
# layer's step against a decoder of the **catalog** (the project's decoders, the ones this notebook checks and
# times): replayed from a CUDA graph where both keep a static cache and a GPU runs them, eagerly otherwise (the
# line says which). Its first line says whether it passed. Each timed call is a step and then `_rewind`, which
# takes that step back, so that every timed step sees the same context, not a cache one longer each time.
#
# ### Exercise 1 — Keep the keys and values
#
# The starter keeps the tokens, not their keys and values: every step projects the whole sequence again. Keep the
# prompt's `k` and `v` in `_keep_prompt`, and in `_step` project only the new token and append its key and value
# with `torch.cat`. Is it faster than the starter, and how does it compare with `growing_cache`? Run the starter
# first: its own timing line against `growing_cache` is the one to compare yours with (at this short prompt the
# starter can already read *within noise*, or even *faster*).

# %%
class MyCache(Decoder):
    """A decoder with no cache: each step projects every token so far again. Keep the keys and values instead."""

    def _keep_prompt(self, k, v, real, x):
        self.x, self.real, self.prompt_len = x, real, x.shape[1]  # (B, N, C), (B, N)

    def _step(self, x_t):
        self.x = torch.cat([self.x, x_t], dim=1)  # (B, L, C)
        self.real = torch.cat([self.real, torch.ones_like(self.real[:, :1])], dim=1)  # (B, L)
        q, k, v = self._project(self.x)  # each (B, H, L, hd): every token projected again
        y = F.scaled_dot_product_attention(q[:, :, -1:], k, v, attn_mask=self.real[:, None, None, :])  # (B, H, 1, hd)
        return self._finish(x_t, merge_heads(y))

    def _rewind(self):
        self.x, self.real = self.x[:, :-1], self.real[:, :-1]


check_own_decoder(ctx, MyCache, baseline="growing_cache")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `_keep_prompt` is given the prompt's `k` and `v`, each `(B, H, N, hd)`. In `_step`, `self._project(x_t)` gives
# the new token's `q, k, v`, each `(B, H, 1, hd)`; append along dimension 2. `_rewind` must drop the last position
# of everything `_step` appended.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyGrowingCache(Decoder):
#     """The keys and values kept, the new token's appended with torch.cat (each step copies the whole cache)."""
#
#     def _keep_prompt(self, k, v, real, x):
#         self.k, self.v, self.real, self.prompt_len = k, v, real, x.shape[1]  # (B, H, N, hd) ×2, (B, N)
#
#     def _step(self, x_t):
#         q, k, v = self._project(x_t)  # each (B, H, 1, hd)
#         self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)  # (B, H, L, hd)
#         self.real = torch.cat([self.real, torch.ones_like(self.real[:, :1])], dim=1)  # (B, L)
#         y = F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=self.real[:, None, None, :])
#         return self._finish(x_t, merge_heads(y))
#
#     def _rewind(self):
#         self.k, self.v, self.real = self.k[:, :, :-1], self.v[:, :, :-1], self.real[:, :-1]
#
#
# check_own_decoder(ctx, MyGrowingCache, baseline="growing_cache")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — Split the keys, merge by log-sum-exp
#
# The starter attends over the static cache in one softmax. Cut the cache's positions into `n_splits` ranges,
# compute each range's largest score, denominator and numerator, and merge them as the section on split keys says.
# §3 tells you whether the merge is exact (the unwritten positions and the padding are masked: a range can hold
# none that are visible).

# %%
class MySplitKeys(StaticCacheDecoder):
    """Attention over the static cache in one softmax: split it into ranges and merge them instead."""

    n_splits = 4

    def attend(self, q):  # q (B, H, 1, hd) → (B, H, 1, hd)
        cache = self.cache
        visible = (cache.real != 0) & (self.slots <= cache.position)  # (B, S): written, real positions
        scores = (q.float() @ cache.k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, 1, S)
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
        return (torch.softmax(scores, dim=-1) @ cache.v.float()).to(q.dtype)


check_own_decoder(ctx, MySplitKeys, baseline="static_cache")

# %% [markdown]
# <details><summary>Hint</summary>
#
# For a range of scores `s` (its slice of the last dimension), `m = s.amax(-1, keepdim=True)`; clamp it to a large
# finite negative number (`clamp_min(-1e30)`) so that a range with no visible key gives `exp(-inf) = 0`, not
# `exp(-inf + inf)`. Then `p = torch.exp(s - m)`, `den = p.sum(-1, keepdim=True)`, `num = p @ v_range`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyLseMerge(StaticCacheDecoder):
#     """Attention over the static cache in `n_splits` ranges, merged exactly by their log-sum-exp."""
#
#     n_splits = 4
#
#     def attend(self, q):  # q (B, H, 1, hd) → (B, H, 1, hd)
#         cache = self.cache
#         visible = (cache.real != 0) & (self.slots <= cache.position)  # (B, S)
#         scores = (q.float() @ cache.k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, 1, S)
#         scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
#         size = -(-scores.shape[-1] // self.n_splits)
#         ms, dens, nums = [], [], []
#         for start in range(0, scores.shape[-1], size):
#             s = scores[..., start:start + size]  # (B, H, 1, R)
#             m = s.amax(-1, keepdim=True).clamp_min(-1e30)  # finite even where no key is visible
#             p = torch.exp(s - m)
#             ms.append(m)
#             dens.append(p.sum(-1, keepdim=True))
#             nums.append(p @ cache.v[:, :, start:start + size].float())  # (B, H, 1, hd)
#         top = torch.stack(ms).amax(0)  # M, (B, H, 1, 1)
#         weights = [torch.exp(m - top) for m in ms]
#         out = sum(w * n for w, n in zip(weights, nums)) / sum(w * d for w, d in zip(weights, dens))
#         return out.to(q.dtype)
#
#
# check_own_decoder(ctx, MyLseMerge, baseline="static_cache")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 3 — Pick the split count
#
# The starter is the split-KV decoder with one range per pair: B·H programs. Choose `n_splits` in `_keep_prompt`
# from the pairs (`k.shape[0] * k.shape[1]`), the multiprocessors (`multiprocessor_count(k.device)`) and the
# capacity, the positions the cache holds (no range shorter than the kernel's block of 64 keys), and check it
# against `split_kv` at B 1 and context 16,384, where reading the cache is most of a step's bytes. It needs Triton:
# where Triton cannot run, the check says so.
#
# Run the starter first. Both are static-cache decoders, so on a GPU each step is replayed from a CUDA graph, as the
# `graph_` decoders above are: the host's launches, which can take longer than the cache read, are out of the way,
# and the line compares what the GPU does with the starter's 16 programs (B 1 × 16 heads) against `split_kv`'s own
# split count. Compare your line with the starter's own.

# %%
SPLIT_CHECK = Shape("B1 N16383 d1024 H16", 1, 16383, 1024, 16) if GPU else None  # one sequence: few pairs


class MySplitCount(SplitKVDecoder):
    """Split-KV attention with one key range per (sequence, head) pair: pick a better count."""

    def _keep_prompt(self, k, v, real, x):
        super()._keep_prompt(k, v, real, x)
        self.n_splits = 1


check_own_decoder(ctx, MySplitCount, baseline="split_kv", shape=SPLIT_CHECK)

# %% [markdown]
# <details><summary>Hint</summary>
#
# Aim for several programs per multiprocessor, so that each has loads in flight while others wait: pairs ×
# n_splits ≈ a few × the SM count. But a range shorter than a block wastes its loads: cap n_splits at
# capacity / 64.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# class MyFullSplits(SplitKVDecoder):
#     """Split-KV attention with enough key ranges for four programs per multiprocessor, none shorter than a block."""
#
#     def _keep_prompt(self, k, v, real, x):
#         super()._keep_prompt(k, v, real, x)
#         pairs = k.shape[0] * k.shape[1]
#         wanted = -(-4 * multiprocessor_count(k.device) // pairs)
#         self.n_splits = max(1, min(wanted, -(-self.capacity // 64)))
#
#
# check_own_decoder(ctx, MyFullSplits, baseline="split_kv", shape=SPLIT_CHECK)
# ```
#
# </details>
