"""How long each notebook's default run takes on a Colab T4, estimated from the roofline with a T4's ceilings.

Each notebook states the estimate in its header (`header_line`; a test keeps the two equal, and checks that
every costed call a notebook makes, `COSTED_CALLS`, is declared here and none is declared that it does not make).
The work is declared per notebook in `NOTEBOOK_WORK`, from the rows its context has on a T4 (`t4_rows`: the
suite rows whose naive peak fits a T4's memory, as `setup_context` picks them) and the calls its cells make.

What a piece of work costs:

- a layer call: its floor on a T4 (FLOPs at the datasheet's fp16 rate or bytes at its bandwidth, the larger;
  the naive reference's FLOPs over the whole N × N square, and its scores moved SCORE_PASSES times), at least
  HOST_CALL_S, what Colab's CPU takes to launch an eager call;
- a timed comparison: what `measure.timing.time_layer_calls` spends on those calls (the spin-up, one call each,
  the warm-up and estimate samples, then rounds for `budget_s` within its fewest and most rounds);
- a §3 check: the float64 truth (the naive layer at a T4's fp64 rate, FP64_TFLOPS: it dominates long rows) and
  a call of the reference and of each variant;
- a Triton kernel: a compile per specialization (TRITON_S; the fused GEMM's autotuner compiles each of its
  tiles for each of its four GEMMs) and, for the autotuned GEMM, a benchmark of every tile per new shape
  (AUTOTUNE_S each, Triton's do_bench);
- a profile, a `torch.compile`: fixed seconds (PROFILE_S, COMPILE_S).

The fixed seconds are guesses for Colab's two CPU cores, not derived. A notebook opened on its own (from its
Colab badge) measures the session's ladder sweep, ceilings and profiles itself, so each one counts them.

Floors are lower bounds (a T4 reaches a fraction of its datasheet rates) and the fixed costs are guesses, so the
estimate says which cells cost and roughly how much, not what a stopwatch will read. Not included: installing
the package (the setup cell) and Colab's start-up.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..core.catalog import DECODERS, DEFAULT_DECODERS, LADDER, STATIC_DECODERS
from ..core.device import T4_MEMORY_GIB
from ..core.reference import naive_peak_bytes
from ..core.shapes import SMOKE_SUITE, SUITE, Shape
from ..measure.ceilings import datasheet_spec
from ..measure.roofline import layer_flops, layer_min_bytes, op_costs
from ..measure.timing import CALLS_PER_SAMPLE, LONG_CALL_MS, SPIN_UP_CYCLES, WARMUP, round_count
from ..runs.longctx import MEMORY_LAYERS, estimated_bytes, long_shape, memory_seq_lens
from .notebook import GPU_BUDGET_S

T4 = datasheet_spec("Tesla T4")
FP16 = torch.float16
FP64_TFLOPS = T4.fp32_tflops / 32  # a T4's fp64 rate is 1/32 of its fp32 one: 0.25 TFLOP/s
CLOCK_HZ = 1.59e9  # a T4's boost clock: how long the spin-up's cycles last
HOST_CALL_S = 3e-4  # Colab's CPU launching one eager layer call (about 20 kernels)
SCORE_PASSES = 8  # the naive layer's (B, H, N, N) scores: written, masked twice, softmaxed, read (bytes each way)
PREPARE_CALLS = 13  # a swept variant's calls before timing: §3 (1), peak memory (1), cold calls (3), GPU time (8)
PROFILE_S = 2.0  # one profiled layer: the profiler's start, six calls, reading its events back
TRITON_S = 2.0  # one Triton kernel compiled for one specialization
AUTOTUNE_S = 0.15  # Triton's do_bench of one tile for one shape (25 ms warm-up, 100 ms of repeats, its compile done)
FUSED_GEMM_TILES = 1  # kernels.fused_linear's tiles on a T4 (its T4_TILE; a test checks); its GEMMs: qkv, out,
# fc1, fc2
COMPILE_S = 30.0  # one torch.compile of the layer for one shape and mask (Inductor, Colab's two cores)
LAYER_NORM_RUNGS = {"triton_ln", "residual_addmm", "fastest"}  # the Triton LayerNorm (fastest's candidates have it)
FASTEST_CHOICE_S = 0.4  # fastest's first call per row: its backend and candidate choices (budgets 0.1 s + 0.3 s)


def t4_rows() -> tuple[Shape, ...]:
    """The suite rows a notebook's context has on a T4: those whose naive peak fits its memory, in fp16."""
    return tuple(s for s in SUITE if naive_peak_bytes(s, FP16) <= T4_MEMORY_GIB * 2**30)


def call_s(shape: Shape, naive: bool = False) -> float:
    """One layer call on a T4: its roofline floor at the datasheet's ceilings, at least HOST_CALL_S; `naive`: the
    reference, with its full N × N attention and its scores moved SCORE_PASSES times."""
    flops, nbytes = layer_flops(shape), layer_min_bytes(shape, FP16)
    if naive:
        flops = int(op_costs(shape, FP16).loc["layer", "naive_flops"])
        nbytes += SCORE_PASSES * shape.batch * shape.n_heads * shape.seq_len**2 * FP16.itemsize
    return max(flops / (T4.fp16_tflops * 1e12), nbytes / (T4.bandwidth_gbps * 1e9), HOST_CALL_S)


def variant_call_s(name: str, shape: Shape) -> float:
    """`call_s` of the rung `name`: the naive cost for the reference, the floor for the others."""
    return call_s(shape, naive=name == "reference")


def timed_s(calls: Sequence[float], budget_s: float = GPU_BUDGET_S) -> float:
    """Seconds `measure.timing.time_layer_calls` spends on callables of these call times (s)."""
    long = [c * 1e3 >= LONG_CALL_MS for c in calls]
    samples = [c if is_long else CALLS_PER_SAMPLE * c for c, is_long in zip(calls, long)]
    per_round = sum(s if is_long else 2 * s for s, is_long in zip(samples, long))  # a lead-in sample each
    reps = round_count(budget_s, per_round)
    return SPIN_UP_CYCLES / CLOCK_HZ + 2 * sum(calls) + (WARMUP + 2) * sum(samples) + reps * per_round


def truth_s(shape: Shape) -> float:
    """The float64 truth of one case: the naive layer in float64."""
    return int(op_costs(shape, FP16).loc["layer", "naive_flops"]) / (FP64_TFLOPS * 1e12)


def checks_s(rows: Sequence[Shape], variants: int, paddings: int = 1) -> float:
    """§3 on each row × padding: the truth, the reference's call and one call per variant."""
    return sum(paddings * (truth_s(s) + call_s(s, naive=True) + variants * call_s(s)) for s in rows)


def block_widths(rows: Sequence[Shape]) -> set[int]:
    """The Triton LayerNorm's block widths for `rows` (a power of two at least d_model): one compile each."""
    return {1 << (s.d_model - 1).bit_length() for s in rows}


def triton_s(rows: Sequence[Shape], names: Sequence[str]) -> float:
    """Triton's compiles and tuning for `names` on `rows` in one notebook: the LayerNorm kernel once per block
    width, the fused GEMM's every tile for each of its four GEMMs, then each tile benchmarked per GEMM and row."""
    seconds = 0.0
    if LAYER_NORM_RUNGS & set(names):
        seconds += TRITON_S * len(block_widths(rows))
    if "fused_gemm" in names:
        seconds += 4 * FUSED_GEMM_TILES * (TRITON_S + AUTOTUNE_S * len(rows))
    return seconds


def sweep_s(rows: Sequence[Shape], names: Sequence[str], budget_s: float = GPU_BUDGET_S) -> float:
    """`runs.sweep.run_sweep`: per row the truth, each variant prepared (PREPARE_CALLS) and all timed together;
    fastest's choice per row; the Triton rungs' compiles and tuning (`triton_s`)."""
    per_row = sum(truth_s(s) + sum(PREPARE_CALLS * variant_call_s(n, s) for n in names)
                  + FASTEST_CHOICE_S * ("fastest" in names) + timed_s([variant_call_s(n, s) for n in names], budget_s)
                  for s in rows)
    return per_row + triton_s(rows, names)


def profiles_s(rows: Sequence[Shape], names: Sequence[str]) -> float:
    """One profile per row × variant: PROFILE_S and a prepare call each."""
    return sum(PROFILE_S + variant_call_s(n, s) for s in rows for n in names)


def check_layer_s(rows: Sequence[Shape], paddings: int = 2, compiles: int = 0) -> float:
    """`present.exercises.check_layer`: §3 on its rows × paddings, then a timed pair on the first row."""
    return checks_s(rows, 1, paddings) + timed_s([call_s(rows[0])] * 2) + compiles * COMPILE_S


@dataclass(frozen=True)
class Work:
    """One call of a notebook's default run and its estimated seconds on a T4."""

    call: str  # the notebook's call (a name in COSTED_CALLS)
    seconds: float


COSTED_CALLS = {"ladder_sweep": "timing the ladder", "sweep": "the sweep", "run_sweep": "the peers' sweep",
                "head_to_head": "the keep-or-revert measurement", "check_table": "correctness checks",
                "verify": "correctness checks",
                "check_layer": "the exercises' checks", "profile": "profiles", "profile_variant": "profiles",
                "suite_profile": "profiles",
                "measured_ceilings": "the ceilings", "measure_ceilings": "the ceilings",
                "kernel_table": "the kernel alone", "add_layer_norm_checks": "the kernel's checks",
                "kernel_timeline": "timelines", "launch_bound_table": "the launch-bound stacks",
                "run_longctx": "the 100,000-token run", "memory_against_n": "memory against N",
                "float64_truth": "§3 checks", "time_decode": "the decode steps", "check_decoder": "§3 checks",
                "roofline_points": "the prefills", "check_own_decoder": "the exercises' checks"}


def _ceilings() -> float:
    """Two timed calls: an 8192² fp16 matmul and a 1 GiB copy (read and written)."""
    return timed_s([2 * 8192**3 / (T4.fp16_tflops * 1e12)]) + timed_s([2 * 2**30 / (T4.bandwidth_gbps * 1e9)])


def _overview(rows: Sequence[Shape]) -> list[Work]:
    return [Work("ladder_sweep", sweep_s(rows, LADDER)), Work("verify", checks_s(rows[:1], 0)),
            Work("check_table", checks_s(rows, 1)), Work("check_layer", 2 * check_layer_s(rows[:2]))]


def _baseline_profiling(rows: Sequence[Shape]) -> list[Work]:
    return [Work("suite_profile", profiles_s(rows, ["reference", "fastest"])),  # the reference's and the best rung's
            Work("measured_ceilings", _ceilings()), Work("ladder_sweep", sweep_s(rows, LADDER)),
            Work("profile", profiles_s(rows[-1:], ["reference"])),  # torch.profiler's one call, with its shapes
            Work("check_layer", check_layer_s(rows[-1:]) + check_layer_s(rows[:2]))]


def _sdpa(rows: Sequence[Shape]) -> list[Work]:
    return [Work("ladder_sweep", sweep_s(rows, LADDER)), Work("check_table", checks_s(rows, 1, 2)),
            Work("suite_profile", profiles_s(rows, ["reference", "sdpa_fused_qkv"])),
            Work("check_layer", 2 * check_layer_s(rows[:2]))]


def _mask(rows: Sequence[Shape]) -> list[Work]:
    return [Work("ladder_sweep", sweep_s(rows, LADDER)),
            Work("check_table", checks_s(rows, 1, 4) + checks_s(rows[:1], 1, 3)),
            Work("suite_profile", profiles_s(rows, ["sdpa_fused_qkv", "no_empty_mask"])),
            Work("check_layer", check_layer_s(rows[:2]) + check_layer_s(rows[:2], 3))]


def kernel_checks_s(rows: Sequence[Shape]) -> float:
    """`session.add_layer_norm_checks`: the Triton add + LayerNorm compiled for the rows' block widths and two odd
    widths (131, 1023: other specializations), in fp16 and fp32."""
    return (len(block_widths(rows)) + 2) * 2 * TRITON_S


def _triton_ln(rows: Sequence[Shape]) -> list[Work]:
    sizes = {(s.tokens, s.d_model) for s in rows}  # the kernel alone: x and r read, s and out written
    kernel = [4 * tokens * d * FP16.itemsize / (T4.bandwidth_gbps * 1e9) for tokens, d in sizes]
    return [Work("suite_profile", profiles_s(rows, ["no_empty_mask", "triton_ln"])),
            Work("add_layer_norm_checks", kernel_checks_s(rows)),
            Work("ladder_sweep", sweep_s(rows, LADDER)), Work("measured_ceilings", _ceilings()),
            Work("kernel_table", sum(timed_s([max(k, 2e-5)] * 2) for k in kernel) + 2 * timed_s([2e-5] * 2)),
            Work("check_table", checks_s(rows, 2, 2)),
            Work("check_layer", 2 * check_layer_s(rows[:2]))]


def _launch(rows: Sequence[Shape]) -> list[Work]:
    short = rows[:5]
    rungs = ["no_empty_mask", "triton_ln", "residual_addmm", "fastest"]
    stacks = sum(timed_s([12 * call_s(s)] * len(rungs), 0.3) for s in short)  # 12-layer stacks, budget 0.3 s
    fused = sum(timed_s([12 * call_s(s)], 0.3) for s in short) + triton_s(short, ["fused_gemm"])
    return [Work("ladder_sweep", sweep_s(rows, LADDER)), Work("kernel_timeline", 2 * PROFILE_S),
            Work("launch_bound_table", stacks + fused),  # whole_layer: capability 9.0 only, refused on a T4
            Work("check_layer", 2 * check_layer_s(rows[:2]))]


def _long_context(rows: Sequence[Shape]) -> list[Work]:
    row14 = SUITE[-1]
    full = call_s(row14)  # the full-sequence layer and the chunked one: the same floor
    truth = 2 * 3 * row14.tokens * row14.d_model**2 / (FP64_TFLOPS * 1e12)  # K and V of every token in float64
    longctx = truth + 4 * full + 4 * (2 + 3) * full  # a checked call each of the full layer and 3 chunk sizes, 3 reps
    memory = 0.0
    for n in memory_seq_lens(small=True):  # the notebook's SEQ_LENS on a T4, at row 14's width
        shape = long_shape(n, d_model=row14.d_model, n_heads=row14.n_heads)
        for layer in MEMORY_LAYERS:
            if estimated_bytes(layer, shape, FP16) <= T4_MEMORY_GIB * 2**30:  # the ones that run under the cap
                memory += (1 + 1 + 2 + 3) * call_s(shape, naive=layer == "reference")  # prepare, peak, 3 reps
    tiny = SMOKE_SUITE[1:3]
    return [Work("measured_ceilings", _ceilings()), Work("run_longctx", longctx),
            Work("memory_against_n", memory), Work("check_table", checks_s(tiny[:1], 4, 3)),
            Work("float64_truth", truth_s(tiny[1])), Work("check_layer", 2 * check_layer_s(tiny[:1]))]


def _summary(rows: Sequence[Shape]) -> list[Work]:
    peer_rows = list(dict.fromkeys([rows[0], rows[-1]]))
    # one compiled peer on a T4 (07 keeps only compile_kept_reduce_overhead there), compiled afresh per row; once
    # compiled, a call runs about as a fused rung
    peers = sweep_s(peer_rows, ["fastest", "no_empty_mask"]) + len(peer_rows) * COMPILE_S
    return [Work("ladder_sweep", sweep_s(rows, LADDER)), Work("measured_ceilings", _ceilings()),
            Work("run_sweep", peers), Work("add_layer_norm_checks", kernel_checks_s(rows)),
            Work("check_layer", check_layer_s(rows[:1]) + check_layer_s(rows[:1], compiles=2))]  # the second
    # exercise's stub compiles the kept rung: once per padding (a new mask recompiles)


def _decode(rows: Sequence[Shape]) -> list[Work]:
    def step_s(layers: int, context: int, d: int) -> float:  # one decode step of a stack: weights and cache read
        nbytes = layers * (12 * d * d + 2 * context * d) * FP16.itemsize
        return max(nbytes / (T4.bandwidth_gbps * 1e9), layers * HOST_CALL_S)
    short, long = Shape("short", 1, 127, 512, 8), Shape("long", 1, 32767, 1024, 16)
    timed = len(DEFAULT_DECODERS)  # each built and prefilled, then all stepped interleaved, at both contexts
    prefill = timed * (12 * call_s(short) + 2 * call_s(long) + 2 * call_s(Shape("try", 1, 4095, 1024, 16)))
    steps = (timed_s([step_s(12, 128, 512)] * timed) + timed_s([step_s(2, 32768, 1024)] * timed)
             + timed_s([step_s(2, 4096, 1024)] * timed))  # the widget's first measurement too
    checks = sum(1 + (name in STATIC_DECODERS) for name in DECODERS) * 2  # each padding; static ones graphed too
    check = Shape("check", 4, 206, 512, 8)
    mine = (2 * 2 * truth_s(check) + timed_s([step_s(1, 206, 512)] * 2)  # exercises 1 and 2: §3 twice, a pair
            + 2 * truth_s(Shape("split", 1, 16389, 1024, 16)) + timed_s([step_s(1, 16384, 1024)] * 2))  # exercise 3
    return [Work("measured_ceilings", _ceilings()), Work("time_decode", prefill + steps + 3 * TRITON_S),  # split-KV
            Work("roofline_points", timed_s([call_s(short)]) + timed_s([call_s(long)])),
            Work("check_decoder", checks * (truth_s(check) + 7 * HOST_CALL_S * 2)),
            Work("check_own_decoder", mine)]


NOTEBOOK_WORK: dict[str, Callable[[Sequence[Shape]], list[Work]]] = {
    "00_overview": _overview, "01_baseline_profiling": _baseline_profiling, "02_sdpa_fused_qkv": _sdpa,
    "03_mask_elimination": _mask, "04_triton_layernorm": _triton_ln, "05_launch_overhead": _launch,
    "06_long_context": _long_context, "07_summary": _summary, "08_decode": _decode}


def notebook_work(stem: str) -> list[Work]:
    """The costed calls of notebook `stem`'s default run on a T4, with their estimated seconds."""
    if stem not in NOTEBOOK_WORK:
        raise ValueError(f"no estimate for notebook {stem!r}: declare its work in NOTEBOOK_WORK")
    return NOTEBOOK_WORK[stem](t4_rows())


def minutes(stem: str) -> int:
    """The estimate of notebook `stem` on a T4, in whole minutes (at least 1)."""
    return max(1, round(sum(w.seconds for w in notebook_work(stem)) / 60))


def header_line(stem: str) -> str:
    """The notebook header's `**Time on a T4:**` paragraph: the estimate and its largest parts (up to three of
    at least 0.1 min)."""
    parts: dict[str, float] = {}
    for work in notebook_work(stem):
        parts[COSTED_CALLS[work.call]] = parts.get(COSTED_CALLS[work.call], 0.0) + work.seconds
    largest = [(what, s / 60) for what, s in sorted(parts.items(), key=lambda p: -p[1])[:3] if s / 60 >= 0.05]
    shown = ", ".join(f"{what} {m:.1f}" for what, m in largest)
    return (f"**Time on a T4:** about {minutes(stem)} min, estimated from a T4's peak compute and memory speeds "
            f"(largest parts, in minutes: {shown}; [how](../roofline_lib/present/estimate.py)).")


if __name__ == "__main__":  # the header lines to paste, one per notebook
    for name in NOTEBOOK_WORK:
        print(f"{name}: {header_line(name)}")
