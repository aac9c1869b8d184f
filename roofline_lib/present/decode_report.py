"""Decode in a notebook's words: a step's bytes by part, prefill and a step on the roofline, the split count
against the multiprocessors, and the sentences computed from `runs.decode.time_decode`'s table.

Every byte and FLOP count here is read from `measure.decode_roofline` and `measure.roofline` (a part is a
difference of their totals), so the rule for what a step must move is written in one place.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..core.catalog import STATIC_DECODERS
from ..core.device import multiprocessor_count
from ..core.shapes import Shape
from ..kernels import unavailable_reason
from ..measure.ceilings import Ceilings
from ..measure.decode_roofline import decode_floor_us, decode_step_bytes, decode_step_flops
from ..measure.roofline import layer_flops, layer_min_bytes
from ..runs.pipeline import new_case, prepare, time_modules
from .formatting import percent, three_digits
from .notebook import Context

MB = 1e6  # bytes in a megabyte, as bandwidths are given (GB/s = 10⁹ bytes per second)


def step_bytes_parts(batch: int, context: int, d_model: int, dtype: torch.dtype) -> dict[str, int]:
    """The bytes one step of one layer must move, by part: the weights (with the token read and the output
    written), the cache read (every key and value of `context` − 1 earlier positions and the new one), and the new
    key and value written. They sum to `decode_step_bytes`."""
    weights = layer_min_bytes(Shape("", batch, 1, d_model, 1), dtype)
    without_cache = decode_step_bytes(batch, 0, d_model, dtype)
    return {"weights": weights, "cache_read": decode_step_bytes(batch, context, d_model, dtype) - without_cache,
            "new_kv_written": without_cache - weights}


def step_bytes_table(batch: int, contexts: Sequence[int], d_model: int, dtype: torch.dtype,
                     ceilings: Ceilings) -> pd.DataFrame:
    """One line per context: a step's bytes by part (MB), its FLOPs, its intensity and its floor (µs) on one layer."""
    records = []
    for context in contexts:
        parts = step_bytes_parts(batch, context, d_model, dtype)
        total = sum(parts.values())
        flops = decode_step_flops(batch, context, d_model)
        records.append({"batch": batch, "d_model": d_model, "context": context, "weights_MB": parts["weights"] / MB,
                        "cache_read_MB": parts["cache_read"] / MB, "new_kv_written_MB": parts["new_kv_written"] / MB,
                        "total_MB": total / MB, "flops": flops, "flops_per_byte": flops / total,
                        "floor_us": decode_floor_us(batch, context, d_model, dtype, ceilings.copy_gbps,
                                                    ceilings.matmul_tflops)})
    return pd.DataFrame.from_records(records)


def prefill_us(ctx: Context, shape: Shape, rung: str = "no_empty_mask") -> tuple[float | None, str]:
    """The median µs of one layer over a prompt of `shape` (a prefill: the full-sequence layer, here the rung
    `rung`, which runs causal attention with no mask), under the one protocol; (None, why) where it cannot run."""
    case, oom = new_case(shape, ctx.dtype, ctx.device, "none", truth=False)
    if case is None:
        return None, oom
    done = prepare(case, rung, check=False)
    if done.module is None:
        return None, f"{rung} is {done.status} here ({done.reason})"
    samples, oom = time_modules(case, {rung: done.module}, budget_s=ctx.budget_s)
    if oom is not None:
        return None, oom
    return float(np.median(samples[rung])) * 1e3, ""


def fastest_step(timed: pd.DataFrame) -> pd.Series:
    """The line of `time_decode`'s table with the shortest step (decoders that could not run have no time)."""
    ran = timed[timed.us_per_layer.notna()] if "us_per_layer" in timed else timed.iloc[:0]
    if ran.empty:
        raise ValueError("no decoder was timed in this table: " + "; ".join(timed.decoder + ": " + timed.reason))
    return ran.loc[ran.us_per_layer.idxmin()]


def roofline_points(ctx: Context, timed: Sequence[tuple[Shape, pd.DataFrame]]) -> pd.DataFrame:
    """For each (prompt shape, its `time_decode` table): a prefill of the prompt and the table's fastest step,
    one layer each, as roofline points (intensity = useful FLOPs / fewest bytes, achieved TFLOP/s = useful FLOPs
    / median time). A prefill that cannot run here keeps its intensity and says why it has no time."""
    records = []
    for shape, table in timed:
        N = shape.seq_len
        us, why = prefill_us(ctx, shape)
        records.append({"call": f"prefill of {N:,} tokens", "shape": shape.label, "how": "the full-sequence layer",
                        "flops": layer_flops(shape), "bytes": layer_min_bytes(shape, ctx.dtype), "us": us,
                        "reason": why})
        best = fastest_step(table)
        records.append({"call": f"one step at context {N + 1:,}", "shape": shape.label, "how": best.decoder,
                        "flops": decode_step_flops(shape.batch, N + 1, shape.d_model),
                        "bytes": decode_step_bytes(shape.batch, N + 1, shape.d_model, ctx.dtype),
                        "us": best.us_per_layer, "reason": ""})
    points = pd.DataFrame.from_records(records).astype({"us": float})
    points["flops_per_byte"] = points.flops / points.bytes
    points["achieved_tflops"] = points.flops / (points.us * 1e6)
    return points


def roofline_sentence(points: pd.DataFrame, ceilings: Ceilings) -> str:
    """Where prefill and decode sit against the ridge, and how near each runs to its roof, from `roofline_points`."""
    ridge = ceilings.ridge
    steps = points[points.call.str.startswith("one step")]
    prefills = points[points.call.str.startswith("prefill")]
    text = (f"This device's ridge is {three_digits(ridge)} FLOPs per byte (its measured matmul rate over its copy "
            f"bandwidth). A step's intensity is {_span(steps.flops_per_byte)}, "
            f"{three_digits(ridge / steps.flops_per_byte.max())}× or more left of it: memory-bound. "
            f"A prefill's is {_span(prefills.flops_per_byte)}.")
    timed = points[points.us.notna()]
    if len(timed):
        roof = np.minimum(ceilings.matmul_tflops, ceilings.copy_gbps * timed.flops_per_byte / 1e3)
        shares = ", ".join(f"{c} {percent(timed.achieved_tflops.iloc[i] / roof.iloc[i])}"
                           for i, c in enumerate(timed.call))
        text += f" Measured, as a share of the roof above each: {shares}."
    return text


def _span(values: pd.Series) -> str:
    low, high = three_digits(values.min()), three_digits(values.max())
    return low if low == high else f"{low} to {high}"


def _sentence(clauses: Sequence[str]) -> str:
    """Clauses joined by semicolons into one sentence: its first letter capitalised, a full stop at the end."""
    text = "; ".join(clauses)
    return text[0].upper() + text[1:] + "."


def decode_headline(timed: Sequence[pd.DataFrame]) -> str:
    """One sentence per `time_decode` table: its fastest step, µs per layer, share of the floor, tokens/s."""
    parts = []
    for table in timed:
        best = fastest_step(table)
        parts.append(f"at context {int(best.context):,} ({int(best.layers)} layers) the fastest step here is "
                     f"`{best.decoder}`: {three_digits(best.us_per_layer)} µs per layer, "
                     f"its floor of {three_digits(best.floor_us)} µs is {percent(best.fraction_of_floor)} of that, "
                     f"{three_digits(best.tokens_per_s)} tokens/s")
    return _sentence(parts)


def graph_saving(timed: pd.DataFrame) -> str:
    """What replaying the step from a CUDA graph saved per token in `time_decode`'s table: for each static
    decoder timed both eagerly and graphed, the difference of the two medians over all the stack's layers. Where
    no graph was replayed (`graph_replayed` false: off a GPU the graphed name runs eagerly) there is no saving to
    claim, only the noise between two eager runs, and the sentence says so."""
    by = timed.set_index("decoder")
    sentences = []
    for name in STATIC_DECODERS:
        graphed = f"graph_{name}"
        if name not in by.index or graphed not in by.index:
            continue
        eager, replayed = by.loc[name], by.loc[graphed]
        if pd.isna(eager.get("us_per_layer")) or pd.isna(replayed.get("us_per_layer")):
            missing = eager if pd.isna(eager.get("us_per_layer")) else replayed
            sentences.append(f"`{missing.name}` was not timed here ({missing.reason})")
            continue
        layers = int(eager.layers)
        if pd.notna(replayed.get("graph_replayed")) and not bool(replayed.graph_replayed):
            sentences.append(f"`{graphed}` replayed no CUDA graph here (a CUDA graph needs a GPU): it ran eagerly, "
                             f"as `{name}` did, so the two times differ by noise only and show no saving")
            continue
        saved = (eager.us_per_layer - replayed.us_per_layer) * layers
        sentences.append(f"`{graphed}` takes {three_digits(replayed.us_per_layer * layers)} µs per token through "
                         f"{layers} layers against `{name}`'s {three_digits(eager.us_per_layer * layers)} µs: "
                         f"{three_digits(abs(saved))} µs {'saved' if saved >= 0 else 'lost'} per token "
                         f"({three_digits(abs(saved) / layers)} µs per layer)")
    if not sentences:
        return "No static decoder was timed both eagerly and graphed in this table."
    return _sentence(sentences)


def step_times(timed: pd.DataFrame, names: Sequence[str]) -> str:
    """The median µs per layer of each of `names` that `time_decode`'s table timed, in one sentence (a name it
    did not time is left out; names that could not run are grouped by their reason, given once)."""
    by = timed.set_index("decoder")
    said, not_timed = [], {}  # not_timed: reason → the names it kept from running, in `names`' order
    for name in names:
        if name not in by.index:
            continue
        line = by.loc[name]
        if pd.notna(line.get("us_per_layer")):
            said.append(f"`{name}` {three_digits(line.us_per_layer)} µs per layer")
        else:
            if line.reason not in not_timed:
                said.append(line.reason)  # a placeholder, filled in below once its names are known
            not_timed.setdefault(line.reason, []).append(f"`{name}`")
    said = [f"{', '.join(not_timed[part])} not timed ({part})" if part in not_timed else part for part in said]
    if not said:
        return f"None of {', '.join(names)} was timed in this table."
    return f"At context {int(timed.context.iloc[0]):,}: " + ", ".join(said) + "."


def split_table(device: torch.device, dtype: torch.dtype, n_heads: int, capacity: int,
                batches: Sequence[int]) -> pd.DataFrame:
    """For each batch: the (sequence, head) pairs of a step's attention, the multiprocessors, and the programs
    one per pair would launch against those split-KV launches (`kernels.decode_attention.split_count`). Where
    the split kernel cannot run, its three columns are left empty (blank under `blank_missing`): the reason
    (`kernels.unavailable_reason`) is for one sentence beside the table, not for every row."""
    sms = multiprocessor_count(device)
    available = unavailable_reason(device, dtype) is None
    if available:
        from ..kernels.decode_attention import split_count
    records = []
    for batch in batches:
        pairs = batch * n_heads
        record = {"batch": batch, "pairs_B_x_H": pairs, "multiprocessors": sms, "programs_unsplit": pairs,
                  "pairs_per_multiprocessor": pairs / sms, "n_splits": None, "programs_split": None,
                  "keys_per_range": None}
        if available:
            splits = split_count(pairs, capacity, device)
            record.update(n_splits=splits, programs_split=pairs * splits, keys_per_range=-(-capacity // splits))
        records.append(record)
    return pd.DataFrame.from_records(records)
