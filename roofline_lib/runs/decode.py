"""Decode checked and timed: a prompt prefilled, T tokens stepped through a decoder, the steps compared with the
full-sequence layer by §3; a step of a stack of layers timed under the one protocol, beside its floor.

The check builds one case of N + T tokens: the prompt is its first N (left-padded, so each sequence ends in a
real token), the steps feed the last T one at a time, and the truth is the float64 layer's rows N … N+T−1 on
the whole input — exactly what the steps must reproduce.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from ..core.correctness import Case, padding_mask, random_reference, section3_judgement
from ..core.device import DTYPE_NAMES, synchronize
from ..core.outcome import VariantUnavailable, first_line
from ..core.shapes import Shape
from ..measure.decode_roofline import decode_floor_us, decode_step_bytes
from ..measure.timing import VERSUS, Comparison, time_layer_calls
from ..variants.decode_stack import DecodeStack

PADDINGS = ("none", "left")  # a decode batch is left-padded: every sequence's next token at one position


def decode_case(shape: Shape, steps: int, dtype: torch.dtype, device: torch.device, padding: str = "left",
                seed: int = 0) -> Case:
    """A case of `shape.seq_len` prompt tokens plus `steps` more, its truth on the last `steps` rows only."""
    if padding not in PADDINGS:
        raise ValueError(f"decode prompts are padded 'left' or not at all ('none'), not {padding!r}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    B, N = shape.batch, shape.seq_len
    case = Case(Shape(shape.row, B, N + steps, shape.d_model, shape.n_heads), dtype, device, "none", seed)
    if padding == "left":  # padding in the prompt only: the stepped tokens are all real
        prompt = padding_mask(B, N, "left", torch.Generator().manual_seed(seed + 2))  # (B, N)
        case.key_padding_mask = torch.cat([prompt, torch.ones(B, steps, dtype=torch.bool)], 1).to(device)
    case.padding = padding
    case.rows = torch.arange(N, N + steps, device=device)  # the truth of the stepped rows only
    return case


def run_decoder(decoder, case: Case, prompt_len: int) -> torch.Tensor:
    """Prefill the case's first `prompt_len` tokens, then step the rest one by one → their outputs (B, T, C)."""
    x, mask = case.x, case.key_padding_mask
    decoder.prefill(x[:, :prompt_len], None if mask is None else mask[:, :prompt_len])
    return torch.cat([decoder.step(x[:, t:t + 1]) for t in range(prompt_len, x.shape[1])], dim=1)


def check_decoder(name: str, shape: Shape, steps: int, dtype: torch.dtype, device: torch.device,
                  padding: str = "left", seed: int = 0, graphed: bool = False) -> dict:
    """§3 for decoder `name` on `shape` (prompt length = its seq_len) and `steps` tokens: one record."""
    case = decode_case(shape, steps, dtype, device, padding, seed)
    record = {"row": shape.row, "shape": shape.label, "decoder": name + (" (graphed)" if graphed else ""),
              "dtype": DTYPE_NAMES[dtype], "padding": padding, "steps": steps}
    try:
        decoder = DecodeStack(name, [case.layer], capacity=case.shape.seq_len, graphed=graphed)
    except VariantUnavailable as exc:  # split_kv without a GPU or Triton's interpreter: nothing to judge
        return {**record, "status": "skipped", "passed": None, "reason": first_line(exc)}
    if graphed and not decoder.graphed:
        return {**record, "status": "skipped", "passed": None, "reason": "a CUDA graph needs a GPU"}
    err = case.rows_error(run_decoder(decoder, case, shape.seq_len))
    judged = section3_judgement(err, case.ref_err)
    return {**record, "status": "ok" if judged.passed else "fail", "err": err, "ref_err": case.ref_err,
            "err_ratio": judged.ratio, "passed": judged.passed, "reason": judged.reason}


def decode_stack(name: str, refs: list, capacity: int) -> DecodeStack:
    """The stack a timed name stands for: "DECODER" eager, "graph_DECODER" replayed from one CUDA graph,
    "compile_DECODER" through `torch.compile(mode="reduce-overhead")` (the peer)."""
    kind, decoder = name.split("_", 1) if name.startswith(("graph_", "compile_")) else ("eager", name)
    stack = DecodeStack(decoder, refs, capacity, graphed=kind == "graph")
    if kind == "compile":
        stack.compile()
    return stack


def stepper(stack: DecodeStack, x_t: torch.Tensor) -> Callable[[], None]:
    """One timed call: a step of the stack, then its rewind (the rewind is one tiny kernel on a static cache)."""
    def call() -> None:
        stack.step(x_t)
        stack.rewind()
    return call


PEER = "compile_static_cache"  # torch.compile(mode="reduce-overhead") of the static-cache step: gpt-fast's way


def time_decode(names: Sequence[str], shape: Shape, layers: int, dtype: torch.dtype, device: torch.device,
                ceilings, budget_s: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """µs per layer per step of each decoder in `names` ("NAME" eager, "graph_NAME" replayed), interleaved, on a
    stack of `layers` after a prompt of `shape.seq_len` tokens; beside each, the step's floor (`ceilings`), the
    seconds its first call took (build, prefill and first step: capture, autotuning, compilation) and, where the
    peer (`PEER`) is timed too, its speedup over the peer with the p20–p80 band of the per-round ratios."""
    B, N, C = shape.batch, shape.seq_len, shape.d_model
    gen = torch.Generator().manual_seed(seed + 3)
    prompt = torch.randn(B, N, C, generator=gen).to(device=device, dtype=dtype)  # (B, N, C)
    x_t = torch.randn(B, 1, C, generator=gen).to(device=device, dtype=dtype)  # (B, 1, C)
    fns, failed, first_call = {}, {}, {}
    for name in names:  # each built, prefilled and stepped once (compiled, captured) before any is timed
        try:
            refs = [random_reference(shape, seed + i, dtype, device) for i in range(layers)]
            synchronize(device)
            started = time.perf_counter()
            stack = decode_stack(name, refs, N + 1)
            stack.prefill(prompt)
            fns[name] = stepper(stack, x_t)
            fns[name]()
            synchronize(device)
            first_call[name] = time.perf_counter() - started
        except (RuntimeError, ValueError) as exc:  # a peer that cannot compile, a kernel that cannot run here
            fns.pop(name, None)
            failed[name] = ("skipped" if isinstance(exc, VariantUnavailable) else "error", first_line(exc))
    synchronize(device)
    times = time_layer_calls(fns, device, budget_s=budget_s) if fns else {}
    floor = decode_floor_us(B, N + 1, C, dtype, ceilings.copy_gbps, ceilings.matmul_tflops)
    records = []
    for name in names:
        record = {"row": shape.row, "shape": shape.label, "context": N + 1, "layers": layers, "decoder": name,
                  "status": failed.get(name, ("ok",))[0], "reason": failed.get(name, ("", ""))[1], "floor_us": floor,
                  "bytes_per_layer": decode_step_bytes(B, N + 1, C, dtype)}
        if name in times:
            per_layer = float(np.median(times[name])) * 1e3 / layers
            record.update(us_per_layer=per_layer, fraction_of_floor=floor / per_layer,
                          tokens_per_s=B / (per_layer * layers * 1e-6), first_call_s=first_call[name])
            if PEER in times and name != PEER:
                record.update(Comparison.from_samples(times[PEER], times[name]).as_record(VERSUS))
        records.append(record)
    return pd.DataFrame.from_records(records)


def fastest(timed: pd.DataFrame) -> pd.DataFrame:
    """Per shape of a `time_decode` table, the graphed decoder ("graph_…") of least µs per layer: what a decode
    `fastest` runs there, chosen by that measurement; its first call's seconds come with it."""
    graphed = timed[timed.decoder.str.startswith("graph_") & (timed.status == "ok")]
    if graphed.empty:
        return graphed
    return graphed.loc[graphed.groupby("shape", sort=False).us_per_layer.idxmin()].reset_index(drop=True)


def cache_memory(stacks: Sequence[tuple[str, int, int]], batches: Sequence[int], contexts: Sequence[int],
                 dtype: torch.dtype = torch.float16) -> pd.DataFrame:
    """The cache's GiB for each stack (name, layers, d_model) × batch × context: every layer keeps a key and a
    value of d_model numbers per position per sequence."""
    element = torch.finfo(dtype).bits // 8
    return pd.DataFrame([{"stack": name, "batch": batch, "context": context,
                          "cache_gib": layers * 2 * batch * context * d * element / 2**30}
                         for name, layers, d in stacks for batch in batches for context in contexts])
