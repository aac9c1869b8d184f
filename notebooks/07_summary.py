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
# # 07 — Summary: what the ladder bought, where the time still goes, and what a compiler gives
#
# **The question.** Notebooks 00–06 made the naive layer faster one checked step at a time; notebook 08, after
# this one, takes it to decode (its line in the recap below is its floor, computed here from the session's
# ceilings). How much faster is the last rung, `fastest`, than the reference on each row, what did each step teach,
# how far is `fastest` still from the roofline floor, and what would `torch.compile` have given instead?
#
# **What you will measure:** nothing new for the ladder: its numbers are the session's one ladder sweep, the same ones
# notebooks 02–05 show, and the session's measured ceilings, the ones 01 and 06 use, when the notebooks run in one
# session (headless from one command, or one after another in one Jupyter server; in Colab each notebook has its own
# runtime and measures them afresh). The `torch.compile` peers are measured live, in a run of their own, beside
# `fastest`.
#
# **Time on a T4:** about 5 min, estimated from a T4's peak compute and memory speeds (largest parts, in minutes:
# timing the ladder 2.1, the peers' sweep 1.2, the exercises' checks 1.0; [how](../roofline_lib/present/estimate.py)).
#
# **Words used here** (all in the [glossary](../docs/glossary.md)):
#
# - a **rung** is one step of the **ladder** of faster layers; `fastest`, the last, picks per shape the quickest of
#   a few candidates by measuring them (`no_empty_mask` and, where Triton runs, `triton_ln` and `residual_addmm`,
#   each also replayed from a CUDA graph; from compute capability 9.0 on and on shapes of at most 256 tokens,
#   `whole_layer`, the whole layer as one kernel);
# - **§3**: a layer's error against the float64 truth is at most twice the reference's own, plus 1e-6;
# - a speedup's **p20–p80 band** is the middle of its per-round ratios: a difference inside it is noise;
# - the **floor** is the least time any implementation could take, from the device's measured **ceilings** (its
#   matmul rate and memory bandwidth);
# - a **peer** is a layer made by a tool (here `torch.compile`), not by hand;
# - **SDPA** is PyTorch's fused attention; the **host** is the CPU that launches the GPU's kernels; a **CUDA
#   graph** replays a recorded call's kernel launches with one launch.
#
# Protocol details and caveats are in [docs/walkthrough/07_summary.md](../docs/walkthrough/07_summary.md).

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

from roofline_lib import VARIANTS, add_roofline, datasheet_ceilings, fraction_table, measure_ceilings
from roofline_lib.core.recorded import recorded_results
from roofline_lib.measure.timing import WAITS_ON_HOST
from roofline_lib.present.formatting import format_us
from roofline_lib.present.notebook import check_table, ladder_lines, save_figure, setup_context, speedup_view, sweep
from roofline_lib.present.plots import plot_roofline, plot_speedups
from roofline_lib.present.prose import check_summary, error_ratio_sides, ladder_summary, longctx_recap, own_reason
from roofline_lib.present.report import peer_summary, rung_descriptions
from roofline_lib.present.tables import ladder_table
from roofline_lib.present.widgets import rerun_widget, step_controls
from roofline_lib.runs.backends import backend_records, backend_summary
from roofline_lib.variants.best import best_variant
from roofline_lib.variants.peers import PEERS

RUN = __name__ == "__main__"  # heavy cells run in a notebook or as a script, not when this file is imported
ctx = setup_context()  # GPU: fp16 and the rows that fit its memory; no GPU (or ROOFLINE_SMOKE=1): smoke suite
LADDER = list(VARIANTS)
ctx

# %%
# What this notebook uses beyond the setup cell: the session's one ladder and ceilings, the peers' own run, the
# decode floor of notebook 08, and the exercises' check.
import torch

from roofline_lib import SUITE, build_variant
from roofline_lib.core.device import capability, small_gpu
from roofline_lib.core.reference import naive_peak_bytes
from roofline_lib.measure.decode_roofline import decode_floor_us, decode_step_bytes, decode_step_flops
from roofline_lib.measure.roofline import layer_flops, layer_min_bytes
from roofline_lib.present.exercises import check_layer
from roofline_lib.present.formatting import line_speedup, percent, three_digits, with_band
from roofline_lib.present.report import ladder_call
from roofline_lib.present.session import add_layer_norm_checks, kept_result, ladder_sweep, measured_ceilings
from roofline_lib.runs.sweep import run_sweep

GPU = ctx.device.type == "cuda"


def ratio_in_band(line, ratio="speedup", verdict=True):
    """A ladder line's speedup with its band (`line_speedup`) and, with `verdict`, its verdict; "vs_speedup":
    against the rung before."""
    against = ratio == "vs_speedup"
    said = f", {line['vs_verdict' if against else 'verdict']}" if verdict else ""
    return line_speedup(line, against) + said


def section3(lines):
    """Each line's §3 verdict as the tables show it: passes, FAILS, or the status of a line that did not run."""
    return lines.passed.map({True: "passes", False: "FAILS"}).fillna(lines.status)


if RUN:
    ladder = ladder_sweep(ctx)  # every rung on every row, checked and timed once per session (notebooks 02–06's)
    ceilings = measured_ceilings(ctx)  # the session's ceilings: the floors here are notebook 01's and 06's
    results = add_roofline(ladder, ceilings)
    rows = [s.row for s in ctx.rows]
    fast = results[results.variant == "fastest"].set_index("row").reindex(rows)
    ref = results[results.variant == "reference"].set_index("row").reindex(rows)

# %% [markdown]
# ## The result: `fastest` against the reference
#
# Each row's reference and `fastest`, from the session's ladder: both checked by §3, then timed in turn, round
# after round. `runs` is the candidate `fastest` chose for that shape; `fraction of floor` is the floor over its
# time (1 would be the best any implementation could do). Besides the rungs of notebooks 02–04, `runs` and the *Try it*
# table below name later ones:
#
# - `residual_addmm`: `triton_ln` with the two residual adds folded into the GEMMs that produce them (each product
#   accumulated onto its residual), one kernel fewer per call (notebook 05);
# - `fused_gemm`: every GEMM with its LayerNorm, bias, GELU and residual add fused in, in Triton; a measured rung,
#   but not a candidate of `fastest`: it lost to `no_empty_mask` on every row where the project measured it
#   (notebook 05, and [docs/history.md](../docs/history.md));
# - `graph_` before a rung's name (`graph_residual_addmm`): that rung replayed from a CUDA graph, one launch per
#   call, which pays on short rows (notebook 05);
# - `whole_layer`: the whole layer in one persistent Triton kernel, a candidate of `fastest` from compute
#   capability 9.0 on shapes of few tokens (notebook 05);
# - `chunked`: the layer chunk by chunk against a key/value cache (notebook 06).

# %%
if RUN:
    headline = pd.DataFrame({
        "shape": fast["shape"], "reference ms": ref.median_ms, "fastest ms": fast.median_ms,
        "× reference [p20–p80]": [ratio_in_band(r) if r.status == "ok" else r.status for _, r in fast.iterrows()],
        "§3": section3(fast),
        "runs": fast.chosen.fillna(""), "fraction of floor": fast.fraction_of_floor}).reset_index()
    display(headline)
    timed = fast[fast.speedup.notna()]
    lo, hi = timed.speedup.idxmin(), timed.speedup.idxmax()
    display(Markdown(
        f"On this {ctx.env['device']} in {ctx.dtype_name}, `fastest` passes §3 on {int(fast.passed.eq(True).sum())} "
        f"of {len(fast)} rows and is from {ratio_in_band(timed.loc[lo], verdict=False)} (row {lo}) to "
        f"{ratio_in_band(timed.loc[hi], verdict=False)} "
        f"(row {hi}) as fast as the reference; faster beyond noise on {int(timed.verdict.eq('faster').sum())} of "
        f"{len(timed)} rows."))
    rungs = results[(results.status == "ok") & ~results.variant.isin(["reference", "fastest"])].set_index("row")
    beaten = [(r, line.variant) for r in timed.index if r in rungs.index
              for line in [rungs.loc[[r]].sort_values("speedup_p20").iloc[-1]]
              if line.speedup_p20 > timed.loc[r, "speedup_p80"]]  # the best rung's band above fastest's
    display(Markdown(
        ("Beyond both bands, another rung beat `fastest` on "
         + ", ".join(f"row {r} (`{name}`)" for r, name in beaten)
         + ": `fastest` chooses by timing its candidates once, when it is built, a measurement apart from the "
           "ladder's, and the two can disagree."
         if beaten else "On every row `fastest` is as fast as the quickest rung, within their bands.")))

# %% [markdown]
# ## The walkthrough in one table
#
# One line per notebook: what it did, this run's number for it (from the same ladder and ceilings), and the lesson
# behind it. A step's speedup is against the rung before it, on the last row that runs here, unless the line says
# otherwise. 06's line gives 06's own run where 06 ran earlier in this session (else only the floor); 08 runs after
# this notebook, so its line is its floor. Line 00's band can be wide: row 1 is short enough to be launch-bound,
# and there the host's speed, which varies from round to round, moves the call's time (notebook 05).

# %%
if RUN:
    last, first = rows[-1], rows[0]
    by = {name: sub.set_index("row") for name, sub in results.groupby("variant")}

    def step_number(name, row):
        line = by[name].loc[row]
        if line.status != "ok":
            return f"`{name}` {line.status} here: {own_reason(name, line.reason)}"
        return f"`{name}` on row {row}: {ratio_in_band(line, 'vs_speedup')} against `{line.against}`"

    call = ladder_call(ladder, add_layer_norm_checks(ctx))  # notebook 04's call: the same ladder, the same checks
    fractions = ref.fraction_of_floor
    row14 = SUITE[-1]
    floor14 = ceilings.floor_ms(layer_flops(row14), layer_min_bytes(row14, ctx.dtype))
    bound14 = ("compute" if layer_flops(row14) / ceilings.matmul_tflops / 1e12
               >= layer_min_bytes(row14, ctx.dtype) / ceilings.copy_gbps / 1e9 else "memory")
    naive_gib = naive_peak_bytes(row14, ctx.dtype) / 2**30  # the reference's N × N scores and the rest, at row 14
    context, width = (32768, 1024) if GPU else (256, 64)  # notebook 08's long context
    decode_us = decode_floor_us(1, context, width, ctx.dtype, ceilings.copy_gbps, ceilings.matmul_tflops)
    intensity = decode_step_flops(1, context, width) / decode_step_bytes(1, context, width, ctx.dtype)
    share = by["no_empty_mask"].loc[first, "gpu_share"]
    long_run = kept_result(ctx, "longctx")  # 06's own run, where 06 ran earlier in this session
    long_number = (f"{longctx_recap(long_run)} (notebook 06's run); " if long_run is not None else "")
    recap = pd.DataFrame([
        ("00 overview", "the layer, the suite, §3 and the timing protocol",
         f"the reference on row {first}: {three_digits(ref.loc[first, 'median_ms'])} ms, p20–p80 "
         f"{three_digits(ref.loc[first, 'p20_ms'])}–{three_digits(ref.loc[first, 'p80_ms'])} ms",
         "time what you compare in turn, round after round, and read a speedup with its band"),
        ("01 baseline profiling", "where the reference's time goes, and its floor",
         f"the reference reaches {three_digits(fractions.min())} (row {fractions.idxmin()}) to "
         f"{three_digits(fractions.max())} (row "
         f"{fractions.idxmax()}) of its floor; ceilings "
         f"{three_digits(ceilings.matmul_tflops)} TFLOP/s and {three_digits(ceilings.copy_gbps)} GB/s",
         "measure first: the floor says how much any rewrite could still gain"),
        ("02 SDPA, fused QKV", "one QKV matmul, a fused attention kernel", step_number("sdpa_fused_qkv", last),
         "a fused kernel never writes the N × N scores: on long rows that was most of the time and memory"),
        ("03 the empty mask", "no mask where nothing is padded", step_number("no_empty_mask", last),
         "a mask that masks nothing still costs its bytes; test padding on the left, where a dropped mask fails"),
        ("04 Triton LayerNorm", "residual add and LayerNorm in one kernel",
         (f"geometric mean over {call.rows} rows: {with_band(call.speedup, call.p20, call.p80)}, "
          f"{'kept' if call.keep else 'reverted'}") if call.rows else
         step_number("triton_ln", last),
         "keep a kernel only if the whole layer gets faster beyond noise"),
        ("05 launch overhead", "CUDA graphs" + (", fused GEMMs, the whole layer in one kernel"
                                                if GPU and capability(ctx.device) >= (9, 0) else ""),
         f"row {first}: " + (f"the GPU is busy {percent(share)} of a `no_empty_mask` call; " if share == share else "")
         + f"`fastest` runs `{fast.loc[first, 'chosen']}`, {ratio_in_band(fast.loc[first])} against the reference",
         "on short rows the GPU waits for the host's launches: replay the call from a CUDA graph"),
        ("06 long context", "the layer chunk by chunk against a key/value cache",
         f"{long_number}row 14's floor: {three_digits(floor14)} ms ({bound14}-bound); the reference would need "
         f"≈{three_digits(naive_gib)} GiB there, for scores `chunked` never builds whole",
         "chunk the queries, keep a cache: memory grows with N, not N², and §3 is checked on sampled rows"),
        ("08 decode", "one token per step through a key/value cache",
         f"a step's floor at context {context:,} (B1 d{width}): {three_digits(decode_us)} µs per layer, at "
         f"{three_digits(intensity)} FLOP per byte against a ridge of {three_digits(ceilings.ridge)}",
         "a decode step reads every weight and the whole cache for a few FLOPs: its floor is bytes over bandwidth"),
    ], columns=["notebook", "what it did", "this run's number", "the lesson"])
    display(recap)

# %% [markdown]
# ## Where the remaining time goes
#
# The roofline of the reference and `fastest` on every row: each row's two points joined by a line, the climb it
# made. Below it, `fastest`'s call split three ways: the floor, the GPU's time above the floor (kernels below the
# ceilings, passes over memory the floor does not count), and the time the GPU waits for the host. The sentence
# under the table names the rows where that wait is more than half of the call: the ladder's GPU share below
# one half, a stricter mark than the 10% idle of notebooks 02–04's decisions (GPU share below 0.9), and a
# different measure from notebook 01's, which reads the profile. The GPU time and the call's are measured apart; where
# the GPU time came out at or above the call's, the wait reads 0.

# %%
if RUN:
    sheet = datasheet_ceilings(ceilings.device, ctx.dtype)
    display(save_figure(plot_roofline(results, ceilings, sheet, variants=["reference", "fastest"]), "07_roofline",
                        ctx))
    gpu = fast.gpu_ms.clip(upper=fast.median_ms)
    split = pd.DataFrame({
        "shape": fast["shape"], "bound": fast.bound, "floor ms": fast.floor_ms, "fastest ms": fast.median_ms,
        "fraction of floor": fast.fraction_of_floor,
        "GPU above the floor": ((gpu - fast.floor_ms).clip(lower=0) / fast.median_ms),
        "waiting for the host": (fast.median_ms - gpu) / fast.median_ms}).reset_index()
    display(split.astype(object).where(split.notna(), "no GPU time here"))
    host = split[split["waiting for the host"] > 1 - WAITS_ON_HOST]
    low, top = (split.loc[split["fraction of floor"].idxmin()], split.loc[split["fraction of floor"].idxmax()])
    display(Markdown(
        f"`fastest` reaches from {three_digits(low['fraction of floor'])} of its floor (row {low.row}, {low.bound}-bound) "
        f"to {three_digits(top['fraction of floor'])} (row {top.row}, {top.bound}-bound). "
        + (f"On row{'s' * (len(host) > 1)} {', '.join(map(str, host.row))} the GPU waits for the host for more than "
           f"half of the call: what is left there is launching, not arithmetic." if len(host) else
           "On no row does the GPU wait for the host for more than half of the call: what is left is kernels "
           "running below the ceilings." if split["waiting for the host"].notna().any() else
           "Without a GPU there is no GPU time to split the call by.")))

# %% [markdown]
# ## What carries over to your own models
#
# - **Check before you time.** A float64 truth and a rule for the error allowed (§3) catch a wrong rewrite that a
#   speed-up would hide; left padding catches a dropped mask, right padding does not.
# - **Time in turn, read the band.** Interleave what you compare, take medians, and call a difference real only
#   outside the p20–p80 band of the per-round ratios.
# - **Know the floor.** FLOPs over the matmul rate and bytes over the bandwidth bound any implementation: far from
#   it, look for passes over memory (fuse them) or for the host (graph it); close to it, stop.
# - **Use the fused kernels first.** SDPA and one QKV matmul are a few lines of code (the recap's line 02 says what
#   they bought here, line 03 what dropping the empty mask added). A hand-written kernel stays only where a
#   measurement says it pays (line 04). Where line 04 reads *reverted*, the Triton add + LayerNorm kernel is
#   not the rung the ladder keeps, though `fastest` still times it as a candidate and can pick it on a row; it
#   also comes back inside `residual_addmm`. There it runs both LayerNorms and also
#   writes the residual stream plus the bias of the GEMM that later adds onto it (out_proj's, fc2's). That GEMM
#   then adds its product onto it in place, and the separate residual add is gone. `fastest` picks its candidate
#   per shape by timing, so the measurement still decides: the rows whose `runs` column in the result table above
#   reads `residual_addmm` or `graph_residual_addmm` are the rows where that rung paid when `fastest` was built
#   (a later measurement can disagree, as the line under the result table says when it does).
#
# ## What to try next
#
# - The rows where `fastest` is furthest from its floor (the table above): profile them as notebook 01 does.
# - `torch.compile` on your own model: the peers below, `mode="reduce-overhead"` among them, show what it gives here
#   and where `fastest`'s hand-made graph still beats it.
# - Longer sequences or several GPUs: notebook 06's chunked layer and its context-parallel ring.
# - Generation: notebook 08's decode step, where the cache and the bandwidth, not the FLOPs, set the pace.
#
# ## `torch.compile` peers, in a run of their own
#
# What a user would reach for instead of hand work: `torch.compile` of the naive layer (`compile_reference`), of
# the rung notebook 04's call kept (`compile_kept`), and of that rung replayed from a CUDA graph
# (`mode="reduce-overhead"`: `compile_kept_reduce_overhead`), each checked by §3 and timed in turn with `fastest`
# on the shortest row and the longest. On a GPU of 16 GiB or less (a T4), where each compile takes up to about half
# a minute with a cold compile cache (the first compile in a fresh runtime; seconds with a warm one, since
# `torch.compile` keeps what it built on disk), only `compile_kept_reduce_overhead` runs (the peer a user would pick
# for a launch-bound model), so that the notebook stays near the time in its header.
#
# In this separate run `fastest` is timed again: on a launch-bound row, where the host's time per call sets the pace,
# its time can differ from the ladder's by much more than the ladder's band, so compare only the ratios within this
# table. The same holds for every separate measurement of a variant: on launch-bound rows (row 1, the shortest, above
# all) `fastest`'s time in the ladder above, in this table and in *Try it* below once you change its rows or dtype can
# move by tens of percent from one measurement to the next, so compare times and ratios only within one table.
# `fastest` is also built again for this run, and it chooses among its candidates again by timing them. It can choose
# differently from the ladder's `fastest` (the `runs` column above; this table's `runs` column says what it chose
# here), so on any row, launch-bound or not, its time here can differ from the ladder's. `first call s` is the seconds
# of a layer's first call: compilation, autotuning or graph capture, paid once per shape. On the CPU the peers are off
# (`WITH_PEERS`); more in the [notes](../docs/walkthrough/07_summary.md#the-torchcompile-peers).

# %%
best = best_variant(ctx.device, ctx.dtype)
WITH_PEERS = GPU
SMALL_GPU = small_gpu(ctx.device)  # a T4: compiles of half a minute each
LEFT_OUT = {"compile_reference_max_autotune"} | ({"compile_reference", "compile_kept"} if SMALL_GPU else set())
# GEMM autotuning: minutes a shape; on a T4 all but the reduce-overhead peer, each compile half a minute
PEER_NAMES = [name for name in PEERS if name not in LEFT_OUT]
peer_rows = list(dict.fromkeys([ctx.rows[0], ctx.rows[-1]]))  # the shortest row and the longest
kept_peer = "compile_kept_reduce_overhead" if SMALL_GPU else "compile_kept"
display(Markdown(f"`{kept_peer}` compiles **{best}**, the rung kept on {ctx.env['device']} in {ctx.dtype_name}. "
                 "`compile_reference_max_autotune` is left out: its GEMM autotuning takes minutes per shape."
                 + (" `compile_reference` and `compile_kept` are left out on this GPU of 16 GiB or less."
                    if SMALL_GPU else "")))
if RUN and WITH_PEERS:
    peers = run_sweep(peer_rows, ["fastest", *PEER_NAMES], ctx.dtype, ctx.device, budget_s=ctx.budget_s,
                      against="fastest")
    peers_shown = pd.DataFrame({
        "row": peers.row, "shape": peers["shape"], "variant": peers.variant,
        "runs": peers.chosen.fillna("").where(peers.variant == "fastest", ""),  # fastest chooses again in this run
        "§3": section3(peers),
        "ms": peers.median_ms, "first call s": peers.first_call_s,
        "× fastest [p20–p80]": [ratio_in_band(r, "vs_speedup") if r.variant != "fastest" and r.status == "ok" else ""
                                for _, r in peers.iterrows()]})
    display(peers_shown.astype(object).where(peers_shown.notna(), ""))
    verdicts = peers[peers.variant != "fastest"].groupby("variant", sort=False).vs_verdict.value_counts()
    display(Markdown("In this run, against `fastest` (below 1×: the peer is slower): " + "; ".join(
        f"`{name}` " + ", ".join(f"{verdict} on {n} row{'s' * (n > 1)}" for (_, verdict), n in counts.items())
        for name, counts in verdicts.groupby(level=0, sort=False)) + "."))
elif RUN:
    print(f"Peers off on {ctx.device.type} (WITH_PEERS = False): {', '.join(PEER_NAMES)} not measured.")

# %% [markdown]
# ## Try it
#
# Pick rows (`1,6,9`, `1-5`, or a shape of your own such as `B4 N1000 d512 H8`, applied on Enter) and a dtype: the
# whole ladder is swept again, in a run of its own, and the plot redrawn. It opens on the session ladder's lines for
# the first and last rows, the ones above.

# %%
def measure_step(rows, dtype):
    """The whole ladder against the reference on `rows` in `dtype`."""
    return speedup_view(sweep(ctx, LADDER, rows=rows, dtype=dtype))


if RUN:
    controls = step_controls(ctx, LADDER)
    opening = ladder_lines(ladder, ctx, controls["rows"].value, LADDER)
    display(rerun_widget(measure_step, opening=speedup_view(opening), rows=controls["rows"], dtype=controls["dtype"]))

# %% [markdown]
# ## Exercises
#
# `check_layer(ctx, layer, rows=ctx.rows[:1], baseline="fastest")` checks your layer by §3 on the first row,
# without padding and with left padding, then times it in turn with `fastest`. On the CPU the starters compile with
# `backend="eager"`: `torch.compile` traces the layer but generates no code, which checks the path, not the speed.
#
# ### Exercise 1 — `torch.compile` the naive layer
#
# The starter returns the reference as it is. Wrap it in `torch.compile` (with `dynamic=False`, one graph per
# shape, as the peers do) and compare it with `fastest`: how much of the ladder's gain does the compiler find on
# its own?

# %%
COMPILE = {} if GPU else {"backend": "eager"}  # on the CPU: trace only, no code generation


def my_compiled(ref):
    """The naive layer, as it is: the task is to compile it."""
    return ref


check_layer(ctx, my_compiled, rows=ctx.rows[:1], baseline="fastest")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `torch.compile(module, dynamic=False, **COMPILE)` returns a module with the same `forward`. Its first call with
# each shape compiles; `check_layer` times later calls only.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# def my_compiled(ref):
#     return torch.compile(ref, dynamic=False, **COMPILE)
#
#
# check_layer(ctx, my_compiled, rows=ctx.rows[:1], baseline="fastest")
# ```
#
# </details>

# %% [markdown]
# ### Exercise 2 — compile plus CUDA graphs: `mode="reduce-overhead"`
#
# The starter compiles the kept rung in the default mode, which still launches every kernel from the host.
# `mode="reduce-overhead"` records the compiled call as a CUDA graph and replays it, as `fastest` does by hand on
# short rows (notebook 05). Switch to it on a GPU and compare with `fastest` on the first row.

# %%
def my_graphed(ref):
    """The kept rung, compiled in the default mode: the task is mode="reduce-overhead"."""
    return torch.compile(build_variant(best, ref), dynamic=False, **COMPILE)


check_layer(ctx, my_graphed, rows=ctx.rows[:1], baseline="fastest")

# %% [markdown]
# <details><summary>Hint</summary>
#
# `mode` and `backend` cannot both be given: on a GPU pass `mode="reduce-overhead"` alone, and keep `COMPILE` for
# the CPU, where there are no CUDA graphs.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# def my_graphed(ref):
#     options = {"mode": "reduce-overhead"} if GPU else COMPILE
#     return torch.compile(build_variant(best, ref), dynamic=False, **options)
#
#
# check_layer(ctx, my_graphed, rows=ctx.rows[:1], baseline="fastest")
# ```
#
# </details>
