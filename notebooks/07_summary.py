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
# # 07 — Summary: the whole ladder, row by row, against the roofline
#
# Every rung side by side on every row that runs here: checked, timed interleaved against the reference,
# placed on the roofline, and sized in memory. Then what a user would reach for instead of hand work,
# `torch.compile`, measured the same way.
#
# **In this notebook you will learn**
#
# - how far each rung takes each row, with its noise, and which rung is fastest where;
# - how close the fastest gets to the roofline floor, and which rows are compute- or memory-bound;
# - how much memory each rung needs, and that nothing leaks from one row into the next;
# - how the hand-made ladder compares with `torch.compile` of the naive layer and of the best rung.

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

from roofline_lib import VARIANTS, add_roofline, datasheet_ceilings, fraction_table, measure_ceilings
from roofline_lib.core.recorded import recorded_results
from roofline_lib.measure.timing import WAITS_ON_HOST
from roofline_lib.present.formatting import format_us
from roofline_lib.present.notebook import check_table, save_figure, setup_context, sweep
from roofline_lib.present.plots import plot_roofline, plot_speedups
from roofline_lib.present.prose import check_summary, error_ratio_sides, ladder_summary
from roofline_lib.present.report import peer_summary, rung_descriptions, speedup_table
from roofline_lib.present.tables import ladder_table
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.runs.backends import backend_records, backend_summary
from roofline_lib.variants.best import best_variant
from roofline_lib.variants.peers import PEERS

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
LADDER = list(VARIANTS)
ctx

# %% [markdown]
# ## The ladder
#
# Each rung, as its own docstring describes it:

# %%
display(Markdown(rung_descriptions(LADDER)))

# %% [markdown]
# ## Correct, every rung
#
# The sweep below checks every rung without padding before timing it. Here every rung is also checked with
# left padding, the pattern that catches a dropped mask. A rung that cannot run here (no Triton, no GPU) is
# listed as skipped, with the reason. The table gives each error as a ratio to the reference's own (§3
# passes up to 2).

# %%
if RUN:
    checks = check_table(ctx, LADDER, paddings=("left",))
    skipped = checks.status.eq("skipped")
    display(Markdown(check_summary(checks[~skipped])))
    display(checks.pivot(index="row", columns="variant", values="err_ratio").reindex(
        index=[s.row for s in ctx.rows], columns=LADDER))
    if skipped.any():
        display(checks[skipped][["row", "variant", "reason"]].drop_duplicates("variant"))
    display(Markdown(error_ratio_sides(checks)))
    assert (checks.passed.eq(True) | skipped).all(), "a check failed: see the tables above"

# %% [markdown]
# A ratio above 1 means more rounding than the reference, still inside §3's factor of 2, so the function is
# the same by the project's rule. `residual_addmm` is built to show one: it rounds the residual stream once
# more (`x + b_o` is stored in the input dtype before the GEMM adds its product onto it). A ratio below 1
# means less rounding: `fused_gemm` rounds once per GEMM where torch rounds once per op. The line under the
# table says which rungs did which here. `fastest` has the error
# ratio of the candidate it chose on its first call with that input (with left padding here, so it need not
# be the one the sweep's `fastest` picks below for inputs without padding; the sweep checks its own too).

# %% [markdown]
# ## The sweep
#
# Every rung interleaved with the reference on each row: each cell reads `median ms (speedup [p20–p80])` (the
# speedup is the ratio of the medians and the band that of the per-round ratios, so it can sit outside its band,
# by more where the host's speed drifted between rounds on a launch-bound row: notebook 00). The roofline
# columns come from the device's ceilings, measured here: a GEMM and a copy timed now, at whatever clock the GPU
# reaches under a GEMM after the notebooks before, so they can differ from the ones notebook 01 measured by a
# few percent or more, and every floor and fraction of it with them. `fused_gemm`, which notebook 05 timed only
# in a graphed stack of the first rows, here on every row, moves LayerNorm into its GEMMs' prologue and the
# bias, GELU and residual adds into their epilogue: one Triton kernel per Linear, so fewer kernels and no
# separate passes over the activations. Its GEMMs are Triton's tiles, though (autotuned per shape, K split over
# several programs where the output has few tiles), not cuBLAS's: where it is slower than `no_empty_mask` below,
# they cost more than the passes it saves (`fastest` does not use it).

# %%
if RUN:
    ceilings = measure_ceilings(ctx.device, ctx.dtype, budget_s=ctx.budget_s)
    results = add_roofline(sweep(ctx, LADDER), ceilings)
    display(speedup_table(results))
    display(save_figure(plot_speedups(results), "07_speedups", ctx))
    assert results.status.isin(["ok", "skipped"]).all(), results[["row", "variant", "status", "reason"]]

# %% [markdown]
# ## Against the roofline
#
# For each row, the floor (`max(FLOPs / matmul rate, bytes / bandwidth)`, with the measured ceilings) and
# the fraction of it each rung reaches (`floor_ms / median_ms`; 1 is the best any implementation could do).
# The table has every rung; the figure the reference and `fastest` on each row, joined by a line: the climb
# each row made. Where rows' highest points crowd together, a second panel draws the grey box closer, and
# those rows are numbered there. A row's number sits by its `fastest` point: follow the grey line down from it
# to that row's reference.

# %%
if RUN:
    display(fraction_table(results))
    sheet = datasheet_ceilings(ceilings.device, ctx.dtype)
    display(save_figure(plot_roofline(results, ceilings, sheet, variants=["reference", "fastest"]), "07_roofline",
                        ctx))

# %% [markdown]
# Where the fastest rung's fraction of the floor is far below 1, look at the row's size: on short rows,
# launching kernels one by one can cost more than the work itself, which is what the CUDA graphs of the
# `fastest` rung attack (notebook 05). Where it is close to 1, little is left for any implementation. The
# long-context row (notebook 06) lies far right of the ridge: its floor is compute, mostly attention.
#
# The fastest correct rung per row, and what that means, computed from the table:

# %%
if RUN:
    display(ladder_table(results))
    display(Markdown(ladder_summary(results)))

# %% [markdown]
# ## The attention backend, chosen per row
#
# SDPA picks its attention backend by fixed rules. `fastest` measures instead: for each new input shape it
# times causal attention of that shape on SDPA's own pick and on each backend forced (cuDNN,
# FlashAttention-2, memory-efficient; `sdpa_kernel`), in shuffled interleaved rounds, and forces one only
# where it beats SDPA's pick beyond noise. Forcing costs Python time on every call (the `sdpa_kernel`
# context), and wherever the attention itself takes a few tens of µs or less that can be as much as the
# attention: a forced column slower than the pick there may be paying for the forcing, not for its kernel,
# even where the pick is that very backend. There the bands are wide too, so a ratio far from 1 can still
# read "within noise". Each cell is `median ms (TFLOP/s)`;
# "refused" is a backend that does not run these inputs here; the last column is the fastest forced
# backend's speedup over the pick (below 1: slower). Below it, what the sweep above chose per row: the
# candidate and the backend (the sweep's `chosen` and `attention_backend` columns).

# %%
if RUN:
    backends = pd.DataFrame([r for shape in ctx.rows
                             for r in backend_records(shape, ctx.dtype, ctx.device, ctx.budget_s, ceilings.matmul_tflops)])
    display(backend_summary(backends))
    display(results.query("variant == 'fastest'")[["row", "shape", "chosen", "attention_backend"]])

# %% [markdown]
# Recorded on an NVIDIA H200 in fp16 (`python -m benchmarks.attention_backends --out results/attention_backends`).
# That run, too, predates the one protocol: each sample was a single call after an L2 flush. On its
# shortest rows the forced columns are several times its own SDPA-pick column: the cost of forcing, not of
# the kernels, which shows on other rows in the two runs since the protocols differ. Read its long rows, where the kernel dominates and the two runs agree,
# and not its short rows' times against the live table (the peers' recorded run at the end is read the
# same way).
# Its file does not record which forced backend was fastest, so its last column gives the speedup alone.

# %%
display(backend_summary(recorded_results(
    "results/attention_backends/attention_backends_nvidia-h200_fp16_2026-11-29.csv")))

# %% [markdown]
# ## Memory
#
# Peak memory per call beyond what was already held (MiB; the reference's grows with the square of the
# sequence length), and the memory still held after each row, which must stay flat: a sweep must not leak
# into the next row. A graph-replayed call (`fastest` where it replays a graph) allocated its intermediates
# once, when it was captured, into a memory pool the graph keeps: its peak per call leaves that pool out,
# so it looks small, but the layer holds that memory between calls. On the CPU torch keeps no count, and the
# columns are empty.

# %%
if RUN:
    display(results.pivot(index="row", columns="variant", values="peak_extra_mib").reindex(
        index=[s.row for s in ctx.rows], columns=LADDER))
    held = results.drop_duplicates("row").set_index("row").held_after_mib
    if ctx.device.type == "cuda":
        display(Markdown("Memory held after a row, beyond what was held before the sweep: "
                         + (f"at most {held.max():.3g} MiB (row {held.idxmax()})." if held.max() >= 1 else
                            "under 1 MiB after every row: each row gave back what it took.")))

# %% [markdown]
# ## Which rung is "best" here
#
# The rung that later code (and `compile_kept` below) builds on: the Triton experiment's keep or revert
# decision measured in this session, else the one recorded for this GPU and dtype in the results, else the
# rung it was built on. It is not the fastest rung of every row: only `triton_ln` goes through that
# decision (`chunked`, `fused_gemm`, `residual_addmm` and `fastest` do not), so the sweep above can show
# others ahead of it.

# %%
best = best_variant(ctx.device, ctx.dtype)
display(Markdown(f"`best_variant` on {ctx.env['device']} in {ctx.dtype_name}: **{best}**."))

# %% [markdown]
# ## `torch.compile` peers
#
# What a user would reach for instead of hand work: `torch.compile` of the naive layer, and of the best
# rung. They are checked and timed exactly like the rungs, on the first row here only, since compiling
# takes a while for every new shape (the sweep reports that first call as `first_call_s`); the recorded
# table below has every row.
# `compile_reference_max_autotune` is left out by default: its GEMM autotuning takes minutes per shape.
# On the CPU the peers are off by default (set `WITH_PEERS = True` to try them; compiling there is slow
# and says nothing about a GPU).
#
# Row 1 is launch-bound: most of a call is the host's work, and the host's speed drifts. On an H200 host,
# `benchmarks/host_noise.py` timed the same row-1 layers again and again: the reference took 0.40 to 0.89 ms
# per call from one quarter-second measurement to the next, with or without `torch.compile` having run in
# the process and with Python's garbage collector off, while its GPU share stayed within 1 %
# (`results/protocol/host_noise_nvidia-h200_fp16_2026-12-01_4f6029c.csv`). Compare the peers with the
# ladder within this table, where they are timed interleaved, not against the sweep above. The line under
# the table ranks only what this table times: `fastest` is not in it (the sweep above has it), and a lead
# whose p20–p80 band overlaps another's is within noise.

# %%
WITH_PEERS = ctx.device.type == "cuda"
PEER_NAMES = [name for name in PEERS if name != "compile_reference_max_autotune"]
peer_rows = [ctx.rows[0]]  # one row: compiling costs seconds to minutes per shape
if RUN and WITH_PEERS:
    peers = sweep(ctx, ["reference", best, *PEER_NAMES], rows=peer_rows)
    display(speedup_table(peers))
    display(peers.pivot(index="row", columns="variant", values="first_call_s").reindex(
        index=[s.row for s in peer_rows]).rename_axis(columns="first call, s"))
    display(Markdown(ladder_summary(peers)))
    mine, base = (peers[peers.variant == name].iloc[0] for name in ("compile_kept", best))
    if mine.speedup_p80 < base.speedup_p20:  # whole bands apart: slower beyond noise
        display(Markdown(
            f"`compile_kept` ({format_us(mine.median_ms * 1e3)}) is slower beyond noise than `{best}` "
            f"({format_us(base.median_ms * 1e3)}), the rung it compiles."
            + (f" {mine.gpu_share:.0%} of its call is GPU time, so the call is mostly the host's work: the compiled "
               "module's own (checking its guards, launching its generated Triton kernels from Python, which "
               "notebook 05 shows costs the host more than a PyTorch kernel's launch) outweighs what its fusions "
               "save on the GPU." if mine.gpu_share < WAITS_ON_HOST else "")))
elif RUN:
    print(f"Peers off on {ctx.device.type} (WITH_PEERS = False): {', '.join(PEER_NAMES)} not measured.")

# %% [markdown]
# ## Recorded on an H200: every row against every peer
#
# The peers above ran on one row, without `max-autotune`. Here is the whole suite as recorded on an
# NVIDIA H200 in fp16 (committed under `results/past_seed/`), read from the repository: the ladder with
# `compile_reference` and `compile_kept`, timed interleaved in one run
# (`python -m roofline_lib run --rows 1-13 --variants reference,sdpa_fused_qkv,no_empty_mask,triton_ln,chunked,residual_addmm,fastest,compile_reference,compile_kept --against compile_kept --budget 0.5`),
# and `compile_reference_max_autotune` from a separate run of the same command with it added, split over
# three GPUs of one host (`--gpus 3`; on that H200 its GEMM autotuning took up to two minutes per row, cold). Against
# `compile_kept` the ratio is interleaved, with its p20–p80 spread and verdict; against the other peers it
# is the ratio of medians (>1: `fastest` is faster).
#
# That run predates the one protocol of these notebooks: each of its samples was a single call, where
# now a sample is 8 calls back to back. On the launch-bound rows its times therefore differ from a live
# run's; read the ratios within it, not its times against the live ones. Its `fastest` also chose its
# candidates under that
# protocol (docs/history.md, section 2).

# %%
LADDER_RUN = "results/past_seed/run_nvidia-h200_fp16_2026-11-29.csv"
ALL_PEERS_RUN = "results/past_seed/all_peers/run_nvidia-h200_fp16_2026-11-29.csv"
recorded = recorded_results(LADDER_RUN)
max_autotune = recorded_results(ALL_PEERS_RUN).query("variant == 'compile_reference_max_autotune'")
first = recorded.iloc[0]
display(Markdown(f"{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['dtype']}, {first['date']}."))
display(peer_summary(pd.concat([recorded, max_autotune], ignore_index=True)))

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter) and a
# dtype: the whole ladder is swept again and the plot is redrawn.

# %%
def measure_step(rows, dtype):
    """The whole ladder against the reference on `rows` in `dtype`."""
    again = sweep(ctx, LADDER, rows=rows, dtype=dtype)
    return speedup_table(again), plot_speedups(again)


if RUN:
    controls = step_controls(ctx, LADDER)
    display(rerun_widget(measure_step, rows=controls["rows"], dtype=controls["dtype"]))
