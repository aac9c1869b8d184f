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
# **The question.** Notebooks 01–07 ran the layer over a whole sequence at once. A model that *generates*
# text runs it differently: it reads the prompt once (the **prefill**), then produces one new token per
# sequence per **step** (the **decode**). How fast can one step go, and what stops it going faster?
#
# **What you will measure.** One step of a stack of layers for four ways of writing it, against the step's
# floor; that every one of them still computes the layer's function; and how much memory the cache takes.
#
# **Terms.** A step computes one new token per sequence, and its attention needs the keys and values of
# every earlier token. Recomputing them each step would redo the whole prompt; a **key/value cache** keeps
# them instead, one key and one value vector per position, per layer. The **floor** of a step is its bytes
# (the weights once, the cache read, the new key and value written) over the memory bandwidth
# (the glossary, `docs/glossary.md`, has the project's other words).
#
# **Time on a T4:** about 1 min, estimated from the roofline with a T4's ceilings (largest parts, in minutes: the
# decode steps 0.1, the ceilings 0.1; [how](../roofline_lib/present/estimate.py)).

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

from roofline_lib import Shape
from roofline_lib.core.device import memory_capacity
from roofline_lib.measure.ceilings import measure_ceilings
from roofline_lib.measure.decode_roofline import decode_step_bytes, decode_step_flops
from roofline_lib.measure.roofline import layer_flops, layer_min_bytes
from roofline_lib.present.notebook import save_figure, setup_context
from roofline_lib.present.plots_decode import plot_cache_memory, plot_step_against_floor
from roofline_lib.runs.decode import cache_memory, check_decoder, time_decode

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16; no GPU (or ROOFLINE_SMOKE=1): tiny shapes that check the code paths
GPU = ctx.device.type == "cuda"
CEILINGS = measure_ceilings(ctx.device, ctx.dtype) if RUN else None  # measured once, used by every table below
SHORT = Shape("short", 1, 127, 512, 8) if GPU else Shape("short", 1, 31, 64, 4)  # context 128 (32 on a CPU)
LONG = Shape("long", 1, 32767, 1024, 16) if GPU else Shape("long", 1, 255, 64, 4)  # context 32,768 (256)
LAYERS = 12 if GPU else 2
DECODERS = ["growing_cache", "static_cache", "graph_static_cache", "graph_split_kv"]
ctx

# %% [markdown]
# ## The answer first: a step against its floor
#
# Four ways to write the step, from plain to fast, each timed in a stack of layers as a model runs them
# (the token goes through every layer in turn), under the project's one timing protocol:
#
# - `growing_cache`: the cache grows by `torch.cat` — each step copies the whole cache to add one row;
# - `static_cache`: the cache is allocated once, for the longest sequence, and written in place;
# - `graph_static_cache`: the same step recorded once as a CUDA graph (notebook 05) and replayed;
# - `graph_split_kv`: replayed too, with attention over the cache done by a Triton kernel that splits the keys
#   into ranges (below: why).

# %%
if RUN:
    short = time_decode(DECODERS, SHORT, LAYERS, ctx.dtype, ctx.device, CEILINGS, ctx.budget_s)
    long = time_decode(["static_cache", "graph_static_cache", "graph_split_kv"], LONG, 2, ctx.dtype, ctx.device,
                       CEILINGS, ctx.budget_s)
    both = pd.concat([short, long], ignore_index=True)
    shown = both[["shape", "context", "layers", "decoder", "status", "us_per_layer", "floor_us", "fraction_of_floor",
                  "tokens_per_s", "reason"]]
    display(shown.astype(object).where(shown.notna(), ""))  # a decoder that cannot run here: blank, with its reason
    best_short = short.loc[short.us_per_layer.idxmin()]  # decoders that could not run here have no time
    best_long = long.loc[long.us_per_layer.idxmin()]
    display(Markdown(
        f"At context {best_short.context:,} the fastest step here is `{best_short.decoder}`: "
        f"{best_short.us_per_layer:.3g} µs per layer, {1 / best_short.fraction_of_floor:.3g}× its floor of "
        f"{best_short.floor_us:.3g} µs. At context {best_long.context:,} it is `{best_long.decoder}`, "
        f"{best_long.us_per_layer:.3g} µs per layer: {best_long.fraction_of_floor:.0%} of the floor."))
    display(save_figure(plot_step_against_floor(long), "08_step_against_floor", ctx))

# %% [markdown]
# Two regimes. At a short context a step moves few bytes — mostly the weights, a few MB — so its floor is
# short (the table's `floor_us`: about 1.5 µs on an H200, about 20 µs on a T4's 300 GB/s), and what costs is the number of kernels each layer launches: the graph removes the
# host's launches (notebook 05), but a dozen small kernels per layer still each take a few microseconds.
# At a long context the cache dominates the bytes, and the step is a read of the cache: the fraction of the
# floor says how close to the memory bandwidth that read runs.
#
# ## Still the same function
#
# Every decoder is checked by §3: a prompt is prefilled, the next tokens are stepped one by one, and the
# steps' outputs are compared with the full-sequence layer's rows on the whole input, against the float64
# truth, with left-padded prompts of different lengths in one batch (padding first, so every sequence's next
# token sits at the same position).

# %%
if RUN:
    shape = Shape("check", 4, 200, 512, 8) if GPU else Shape("check", 3, 37, 48, 4)
    checks = pd.DataFrame([check_decoder(name, shape, 6, ctx.dtype, ctx.device, "left", graphed=graphed)
                           for name in ["naive", "growing_cache", "static_cache", "split_kv"]
                           for graphed in ((False, True) if name in ("static_cache", "split_kv") else (False,))
                           if GPU or name != "split_kv"])
    display(checks[["shape", "decoder", "padding", "steps", "err_ratio", "passed"]])
    display(Markdown(f"{int(checks.passed.sum())} of {len(checks)} decoders pass §3 (error at most twice the "
                     f"reference's; the largest ratio here is {checks.err_ratio.max():.3g})."))

# %% [markdown]
# ## Why a step waits on memory
#
# A step does the same matrix products as the full layer, on one token per sequence instead of N: every
# weight is read to do two FLOPs (a multiply and an add) per sequence. Its **intensity**, FLOPs per byte,
# is therefore about the batch size — far left of the GPU's ridge, where the matmul units wait for memory.

# %%
if RUN:
    B, N, C = SHORT.batch, SHORT.seq_len + 1, SHORT.d_model
    prefill = Shape("prefill", B, N, C, SHORT.n_heads)
    intensity = pd.DataFrame([
        {"call": f"prefill of {N} tokens", "flops": layer_flops(prefill), "bytes": layer_min_bytes(prefill, ctx.dtype)},
        {"call": "one decode step", "flops": decode_step_flops(B, N, C), "bytes": decode_step_bytes(B, N, C, ctx.dtype)},
    ]).assign(flops_per_byte=lambda t: t.flops / t.bytes)
    ridge = CEILINGS.matmul_tflops * 1e12 / (CEILINGS.copy_gbps * 1e9)
    display(intensity)
    display(Markdown(f"This device's ridge is {ridge:,.0f} FLOPs per byte (its measured matmul rate over its copy "
                     f"bandwidth): a step's {intensity.flops_per_byte.iloc[1]:.2g} is far below it, so its floor "
                     "is its bytes over the bandwidth."))

# %% [markdown]
# ## Why long contexts need split keys
#
# Attention over the cache has one query per sequence and head: B·H rows. A kernel that gives each row one
# program runs 16 programs at B 1 with 16 heads — 16 of an H200's 132 multiprocessors, 16 of a T4's 40 —
# and leaves most of the memory bandwidth idle. Split-KV attention (flash-decoding) cuts each row's keys
# into ranges, runs a program per (row, range), and merges the partial softmaxes exactly by their
# log-sum-exp (`roofline_lib/kernels/decode_attention.py`). The table above shows it at the long context.
#
# ## The cache's memory
#
# Each layer keeps a key and a value of d_model numbers per position per sequence: at long contexts and
# large batches the cache, not the weights, fills the GPU.

# %%
if RUN:
    memory = cache_memory([("12 layers × d 768", 12, 768), ("8 layers × d 1024", 8, 1024)], [1, 8, 64],
                          [128, 2048, 32768, 100_000])
    capacity = memory_capacity(ctx.device) / 2**30 if GPU else None
    display(save_figure(plot_cache_memory(memory, capacity), "08_cache_memory", ctx))
    fits = memory[memory.cache_gib <= 14.7]
    display(Markdown(f"{len(fits)} of {len(memory)} of these caches fit in a T4's 14.7 GiB before the weights and "
                     "activations are counted" + (f"; {int((memory.cache_gib <= capacity).sum())} fit in this "
                                                   f"device's {capacity:,.0f} GiB." if capacity else ".")))
