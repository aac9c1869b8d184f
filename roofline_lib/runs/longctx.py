"""Long context: the chunked layer against the full-sequence layer at 100,000 or 1,000,000 tokens.

One run, for one shape, measures:

1. inputs, weights and the §3 sampled-row float64 truth, built with no memory cap (at 1,000,000 tokens
   the truth holds K and V of every token in float64, about 16 GiB);
2. the full-sequence "no_empty_mask" layer, uncapped: the baseline;
3. under the memory cap, if one is given: whether the full-sequence layer fits at all, then "chunked"
   for every attention strategy × chunk size;
4. uncapped again: the fastest chunked configuration that passed, interleaved with the baseline
   (A B A B …), giving the time ratio chunked / full with its spread.

Each measurement is a §3 check on the sampled rows, peak and peak extra memory, and the wall time of
that first call (which includes building kernel plans for every new chunk shape) from one call, then
CUDA-event timing with TFLOP/s over the useful FLOPs (the GEMMs and causal attention).
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from ..core.catalog import DEFAULT_CHUNK_SIZE
from ..core.correctness import Case
from ..core.decision import band_verdict
from ..core.device import (
    effective_cap_gib,
    environment,
    free_memory,
    memory_capacity,
    set_memory_cap,
    warm_up_libraries,
)
from ..core.lists import attention_spec
from ..core.numbers import with_band
from ..core.outcome import VariantUnavailable, guarded
from ..core.progress import progress_bar
from ..core.reference import naive_peak_bytes
from ..core.shapes import Shape
from ..measure.roofline import layer_flops
from ..measure.timing import Comparison, Timing, peak_memory
from ..variants.chunk_attention import STRATEGIES
from ..variants.registry import build_variant
from ..variants.sdpa_offsets import compact_copy_bytes
from .pipeline import new_case, prepare, time_modules

GIB = 2**30
SAME_AS_AUTO = "the same configuration as auto → "  # a grid line not measured again: `auto` ran it at that size
FULL = "no_empty_mask"
TARGET_RATIO = 1.15  # chunked may take at most this much longer than the full-sequence layer
COLUMNS = ["kind", "seq_len", "batch", "d_model", "n_heads", "variant", "attention", "resolved_attention",
           "chunk_size", "memory_cap_gib", "status", "err", "bound", "err_ratio", "passed", "rows_checked",
           "first_call_s", "median_ms", "p20_ms", "p80_ms", "reps", "tflops", "peak_gib", "peak_extra_gib",
           "full_ms", "ratio_vs_full", "ratio_p20", "ratio_p80", "verdict", "meets_target", "reason", "notes"]


def long_shape(seq_len: int, batch: int = 1, d_model: int = 1024, n_heads: int = 16) -> Shape:
    """A long-context shape (row label "N<seq_len>"); the suite's row 14 is long_shape(100_000)."""
    if seq_len < 1 or batch < 1:
        raise ValueError(f"seq_len and batch must be positive, got {seq_len} and {batch}")
    return Shape(f"N{seq_len}", batch, seq_len, d_model, n_heads, "long context")


def grid_strategies(spec: str, device: torch.device) -> list[str]:
    """Attention strategies from a comma-separated spec (checked by `core.lists.attention_spec`); "all" is every
    strategy that may run on `device` (on CUDA without "split_math", whose (B, H, L, S) float32 scores are too
    large at long context)."""
    spec = attention_spec(spec)
    if spec == "all":
        return [name for name, s in STRATEGIES.items()
                if device.type == "cuda" and name != "split_math" or device.type != "cuda" and not s.needs_cuda]
    return spec.split(",")


def timing_options(budget_s: float, reps: int | None) -> dict:
    """Options for `measure.timing.time_layer_calls`: a time budget, or exactly `reps` rounds (for second-long calls).

    With `reps`, no extra warm-up: every callable has run once already (the check), and
    time_interleaved's two estimate calls come before the timed rounds.
    """
    if reps is None:
        return {"budget_s": budget_s}
    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}")
    return {"budget_s": 0.0, "min_reps": reps, "max_reps": reps, "warmup": 0}


def measure_layer(case: Case, name: str, module: torch.nn.Module, label: dict, timing: dict | None) -> dict:
    """One record: §3 check, first-call time and peak memory from one call, then (with `timing`) the timing."""
    device = case.device
    record = {"kind": "measure", "variant": name, **label}
    done = []
    sizes, oom = guarded(lambda: peak_memory(lambda: done.append(prepare(case, name, lambda ref: module)), device),
                         device)
    if oom is not None:
        return {**record, "status": "oom", "reason": oom}
    record.update(done[0].as_record())
    if done[0].result is not None:
        record["bound"] = done[0].result.bound
    if done[0].module is None:
        return record
    record.update(peak_gib=sizes[0] / GIB, peak_extra_gib=sizes[1] / GIB)
    if timing is None:
        return record
    samples, oom = time_modules(case, {name: module}, **timing)
    if oom is not None:
        return {**record, "status": "oom", "reason": f"while timing: {oom}"}
    t = Timing.from_samples(samples[name])
    return {**record, **t.as_record(), "tflops": layer_flops(case.shape) / (t.median_ms * 1e-3) / 1e12}


def compare_to_full(case: Case, full: torch.nn.Module, chunked: torch.nn.Module, label: dict, timing: dict) -> dict:
    """Interleaved full-sequence vs chunked: the time ratio chunked / full with p20–p80 of per-round ratios,
    and the verdict of chunked against full ("faster": chunked is)."""
    record = {"kind": "comparison", "variant": "chunked", **label}
    samples, oom = time_modules(case, {"full": full, "chunked": chunked}, **timing)
    if oom is not None:
        return {**record, "status": "oom", "reason": oom}
    ratio = Comparison.from_samples(samples["chunked"], samples["full"])  # chunked / full, per round
    verdict = band_verdict(1 / ratio.p80, 1 / ratio.p20)  # chunked's, from the very band that is printed
    return {**record, "status": "ok", "full_ms": Timing.from_samples(samples["full"]).median_ms,
            "median_ms": Timing.from_samples(samples["chunked"]).median_ms, "reps": len(samples["full"]),
            "ratio_vs_full": ratio.speedup, "ratio_p20": ratio.p20, "ratio_p80": ratio.p80, "verdict": verdict,
            "meets_target": ratio.speedup <= TARGET_RATIO,
            "reason": f"chunked/full {with_band(ratio.speedup, ratio.p20, ratio.p80)}, target ≤ {TARGET_RATIO}"}


def run_longctx(shape: Shape, dtype: torch.dtype, device: torch.device, chunk_sizes: Sequence[int],
                strategies: Sequence[str], memory_cap_gib: float | None = None, padding: str = "none",
                seed: int = 0, budget_s: float = 1.0, reps: int | None = None,
                show_progress: bool = True, baseline: bool = True) -> pd.DataFrame:
    """Full-sequence baseline, chunked grid (strategy × chunk size) under the cap, interleaved comparison.

    Without `baseline`, the full-sequence layer is run only under the cap (if any), to record whether it
    fits there, and is neither timed uncapped nor compared: what a long run on a large GPU can skip. Where
    the uncapped full layer does not run (out of memory, as at 1M tokens on a T4), nothing is compared.

    One tidy record per measurement (kind "measure") and per comparison (kind "comparison"), with the
    GPU, torch and triton versions, dtype and date. A progress bar counts the stages (the truth, each
    measurement, the comparison) and names the one running, since one stage can take minutes.
    """
    if memory_cap_gib is not None and device.type != "cuda":
        raise ValueError("a memory cap needs a CUDA device (--memory-cap-gib emulates a smaller GPU)")
    if not chunk_sizes or min(chunk_sizes) < 1:
        raise ValueError(f"chunk sizes must be positive integers, got {list(chunk_sizes)}")
    ceiling = effective_cap_gib(device, None)  # an emulated card's memory holds even where this run sets no cap
    base = {"seq_len": shape.seq_len, "batch": shape.batch, "d_model": shape.d_model, "n_heads": shape.n_heads,
            "memory_cap_gib": ceiling}
    capped = effective_cap_gib(device, memory_cap_gib)
    timing = timing_options(budget_s, reps)
    # `auto` first, whatever its place in `strategies`: an explicit strategy it already ran is then not run again
    grid = [(a, c) for a in sorted(strategies, key=lambda a: a != "auto") for c in chunk_sizes]
    stages = progress_bar(total=2 + (memory_cap_gib is not None) + len(grid) + 1,
                          desc=f"long context N={shape.seq_len:,}", unit="stage", disable=not show_progress)

    def stage(text: str) -> None:
        stages.set_postfix_str(text)
        stages.refresh()

    if device.type == "cuda":
        set_memory_cap(device, None)
    warm_up_libraries(device, dtype)
    stage("inputs and float64 truth")
    case, oom = new_case(shape, dtype, device, padding, seed)
    stages.update()
    if case is None:
        stages.close()
        records = [{**base, "kind": "measure", "variant": FULL, "status": "oom",
                    "reason": f"building inputs and float64 truth: {oom}"}]
        return pd.DataFrame.from_records(records).reindex(columns=COLUMNS).assign(**environment(device, dtype))
    full = build_variant(FULL, case.layer)
    records = []
    if baseline:
        stage(f"{FULL}, uncapped" if ceiling is None else f"{FULL}, under the emulated card's {ceiling:g} GiB")
        records.append(measure_layer(case, FULL, full, base, timing))
    full_ran = baseline and records[0]["status"] == "ok"  # else there is nothing to compare against
    stages.update()
    try:
        if memory_cap_gib is not None:
            set_memory_cap(device, memory_cap_gib)
            free_memory(device)
            stage(f"{FULL}, under the {capped:g} GiB cap")
            records.append(measure_layer(case, FULL, full, {**base, "memory_cap_gib": capped}, None))
            stages.update()
        resolved = {}  # chunk size → the strategy `auto` ran there
        for attention, chunk_size in grid:
            stage(f"chunked, {attention}, chunks of {chunk_size:,}")
            label = {**base, "memory_cap_gib": capped}
            if resolved.get(chunk_size) == attention:  # measured already: one configuration, one line of numbers
                records.append({**label, "kind": "measure", "variant": "chunked", "attention": attention,
                                "chunk_size": chunk_size, "status": "skipped",
                                "reason": f"{SAME_AS_AUTO}{attention}, measured above"})
            else:
                records.append(_measure_chunked(case, attention, chunk_size, label, timing))
                if attention == "auto" and records[-1].get("resolved_attention"):
                    resolved[chunk_size] = records[-1]["resolved_attention"]
            stages.update()
            free_memory(device)
    finally:
        if memory_cap_gib is not None:
            set_memory_cap(device, None)
    passed = [r for r in records if r["variant"] == "chunked" and r["status"] == "ok" and "median_ms" in r]
    if passed and full_ran:
        best = min(passed, key=lambda r: r["median_ms"])
        label = {**{k: best[k] for k in (*base, "attention", "resolved_attention", "chunk_size")},
                 "memory_cap_gib": ceiling}  # compared with the run's own cap lifted
        module = build_variant("chunked", case.layer, chunk_size=best["chunk_size"], attention=best["attention"])
        stage("fastest chunked against full, interleaved")
        records.append(compare_to_full(case, full, module, label, timing))
    stages.update()
    stages.close()
    frame = pd.DataFrame.from_records(records).reindex(columns=COLUMNS)
    return frame.assign(**environment(device, dtype))


def _measure_chunked(case: Case, attention: str, chunk_size: int, base: dict, timing: dict) -> dict:
    """One grid point: the chunked layer with `attention` and `chunk_size`, built, then measured."""
    label = {**base, "attention": attention, "chunk_size": chunk_size}
    try:
        module = build_variant("chunked", case.layer, chunk_size=chunk_size, attention=attention)
    except VariantUnavailable as exc:
        return {**label, "kind": "measure", "variant": "chunked", "status": "skipped", "reason": str(exc)}
    label["resolved_attention"] = (module.attention_name if case.key_padding_mask is None
                                   else module.padded_attention_name)
    label["notes"] = "; ".join(module.attention_notes)  # why strategies were passed over
    return measure_layer(case, "chunked", module, label, timing)


TRUTH_BLOCK_BYTES = 2**30  # float64_truth's default bound on its temporaries beyond the inputs
LAYER_TENSORS = 13  # (tokens, C) activations of the layer per token it processes: qkv 3, fc1 + GELU 8, 2 more


def needs_bytes(shape: Shape, dtype: torch.dtype, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Bytes a `run_longctx` of `shape` needs for what it must run — the float64 sampled-row truth and the
    chunked layer — estimated from the code: the input and weights, plus the larger of the truth's block
    temporaries and the chunked layer's key/value cache, output and one chunk's activations. (The
    full-sequence layer, LAYER_TENSORS activations per token, is measured too; where it does not fit, its
    out-of-memory is recorded and the run goes on.)"""
    e = torch.finfo(dtype).bits // 8
    elements = shape.tokens * shape.d_model
    weights = 12 * shape.d_model ** 2 * e
    chunked = estimated_bytes("chunked", shape, dtype, chunk_size) - weights - elements * e  # cache, output, a chunk
    return weights + elements * e + max(TRUTH_BLOCK_BYTES, chunked)


MEMORY_LAYERS = ("reference", FULL, "chunked")  # the naive layer, the full-sequence layer, the chunked one
MEMORY_SEQ_LENS = (8192, 32768, 131072, 262144, 524288, 655360)  # 06's memory against N; on an H200 under a T4's
# cap the chunked layer runs them all
SMALL_GPU_MAX_SEQ_LEN = 262144  # on a small GPU (a T4) each longer call takes the better part of a minute


def memory_seq_lens(small: bool) -> tuple[int, ...]:
    """The sequence lengths of 06's memory against N: MEMORY_SEQ_LENS, on a small GPU (`core.device.small_gpu`)
    those up to SMALL_GPU_MAX_SEQ_LEN."""
    return tuple(n for n in MEMORY_SEQ_LENS if not small or n <= SMALL_GPU_MAX_SEQ_LEN)


def estimated_bytes(layer: str, shape: Shape, dtype: torch.dtype, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Peak bytes one call of `layer` needs for `shape`, estimated from the code: the naive layer's score
    tensors (N²), the full-sequence layer's activations (N), or the chunked layer's cache, output and one chunk;
    past the memory-efficient kernel's 32-bit offsets, the compact copies of keys and values (variants.sdpa_offsets)."""
    if layer == "reference":
        return naive_peak_bytes(shape, dtype)
    e = torch.finfo(dtype).bits // 8
    elements = shape.tokens * shape.d_model
    weights = 12 * shape.d_model ** 2 * e
    n, d = shape.seq_len, shape.d_model
    if layer == FULL:  # keys and values are views of the fused (B, N, 3d) projection
        return weights + elements * e + LAYER_TENSORS * elements * e + compact_copy_bytes(n, 3 * d, d, shape.batch, e)
    chunk = shape.batch * min(chunk_size, n) * d
    return (weights + elements * e + 3 * elements * e + LAYER_TENSORS * chunk * e
            + compact_copy_bytes(n, 2 * d, d, shape.batch, e))  # the (B, N, 2d) cache


def memory_against_n(seq_lens: Sequence[int], dtype: torch.dtype, device: torch.device, batch: int = 1,
                     d_model: int = 1024, n_heads: int = 16, chunk_size: int = DEFAULT_CHUNK_SIZE,
                     budget_s: float = 0.2, reps: int | None = None, show_progress: bool = True) -> pd.DataFrame:
    """Per sequence length and layer (`MEMORY_LAYERS`): the estimated peak and, where the estimate fits the
    memory this process may use, the time (the one protocol) and the measured peak (`measure.timing.peak_memory` of
    one call; NaN on the CPU, where torch keeps no count); an out-of-memory is recorded. `budget_s` or `reps`
    as in `timing_options`. No §3 check here: `run_longctx` does that at one N."""
    timing = timing_options(budget_s, reps)
    capacity = memory_capacity(device)
    records = []
    for seq_len in progress_bar(seq_lens, desc="memory against N", unit="N", disable=not show_progress):
        shape = long_shape(seq_len, batch, d_model, n_heads)
        case, oom = new_case(shape, dtype, device, truth=False)
        for layer in MEMORY_LAYERS:
            need = estimated_bytes(layer, shape, dtype, chunk_size)
            record = {"seq_len": seq_len, "layer": layer, "estimated_gib": need / GIB,
                      "capacity_gib": capacity / GIB, "fits": need <= capacity}
            if case is None:
                records.append(record | {"status": "oom", "reason": f"building inputs: {oom}"})
                continue
            if need > capacity:
                records.append(record | {"status": "skipped", "reason": "not run: the estimate exceeds the memory"})
                continue
            options = {"chunk_size": chunk_size} if layer == "chunked" else {}
            done = prepare(case, layer, options=options, check=False)
            if done.module is None:
                records.append(record | {"status": done.status, "reason": done.reason})
                continue
            sizes, oom_call = guarded(lambda: peak_memory(lambda: done.module(case.x), device), device)
            samples, oom_time = time_modules(case, {layer: done.module}, **timing) if oom_call is None \
                else ({}, None)
            if oom_call or oom_time:
                records.append(record | {"status": "oom", "reason": oom_call or oom_time})
                continue
            records.append(record | {"status": "ok", "peak_gib": sizes[0] / GIB,
                                     "median_ms": Timing.from_samples(samples[layer]).median_ms})
            done = None
        case = None
        free_memory(device)
    columns = ["seq_len", "layer", "status", "estimated_gib", "peak_gib", "capacity_gib", "fits", "median_ms",
               "reason"]
    return pd.DataFrame.from_records(records).reindex(columns=columns).assign(**environment(device, dtype))

