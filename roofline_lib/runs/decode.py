"""Decode checked and timed: a prompt prefilled, T tokens stepped through a decoder, the steps compared with the
full-sequence layer by §3; a step of a stack of layers timed under the one protocol, beside its floor; both
in one resumable run (`run_decode`).

The check builds one case of N + T tokens: the prompt is its first N (left-padded, so each sequence ends in a
real token), the steps feed the last T one at a time, and the truth is the float64 layer's rows N … N+T−1 on
the whole input — exactly what the steps must reproduce.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..core.correctness import Case, Judgement, padding_mask, random_reference, section3_judgement
from ..core.device import DTYPE_NAMES, environment, synchronize
from ..core.outcome import VariantUnavailable, first_line
from ..core.progress import progress_bar
from ..core.shapes import Shape
from ..measure.decode_roofline import decode_floor_us, decode_step_bytes
from ..measure.timing import VERSUS, Comparison, time_layer_calls
from ..variants.decode_stack import DecodeStack
from .sweep import finished_records, settings_file

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


def judge_decoder(decoder, case: Case, prompt_len: int) -> tuple[float, Judgement]:
    """§3 on a decoder: the case's first `prompt_len` tokens prefilled, the rest stepped, the steps' rows against
    the case's truth → (their error, the judgement); one rule for the runs' check and a learner's."""
    err = case.rows_error(run_decoder(decoder, case, prompt_len))
    return err, section3_judgement(err, case.ref_err)


def check_decoder(name: str, shape: Shape, steps: int, dtype: torch.dtype, device: torch.device,
                  padding: str = "left", seed: int = 0, graphed: bool = False, **options) -> dict:
    """§3 for decoder `name` on `shape` (prompt length = its seq_len) and `steps` tokens: one record; `options`
    go to the decoder's constructor (a tuning run's configurations)."""
    case = decode_case(shape, steps, dtype, device, padding, seed)
    record = {"row": shape.row, "shape": shape.label, "decoder": name + (" (graphed)" if graphed else ""),
              "dtype": DTYPE_NAMES[dtype], "padding": padding, "steps": steps}
    try:
        decoder = DecodeStack(name, [case.layer], capacity=case.shape.seq_len, graphed=graphed, **options)
    except VariantUnavailable as exc:  # split_kv without a GPU or Triton's interpreter: nothing to judge
        return {**record, "status": "skipped", "passed": None, "reason": first_line(exc)}
    if graphed and not decoder.graphed:
        return {**record, "status": "skipped", "passed": None, "reason": "a CUDA graph needs a GPU"}
    err, judged = judge_decoder(decoder, case, shape.seq_len)
    return {**record, "status": "ok" if judged.passed else "fail", "err": err, "ref_err": case.ref_err,
            "err_ratio": judged.ratio, "passed": judged.passed, "reason": judged.reason}


def _timed_kind(name: str) -> tuple[str, str]:
    """A timed name's (kind, decoder): "graph_D" → ("graph", D), "compile_D" → ("compile", D), "D" → ("eager", D);
    a label after a space ("graph_D 16x32x128/4", one of several builds of D) is not part of it."""
    name = name.split(" ", 1)[0]
    return tuple(name.split("_", 1)) if name.startswith(("graph_", "compile_")) else ("eager", name)


def decode_stack(name: str, refs: list, capacity: int, **options) -> DecodeStack:
    """The stack a timed name stands for: "DECODER" eager, "graph_DECODER" replayed from one CUDA graph,
    "compile_DECODER" through `torch.compile(mode="reduce-overhead")` (the peer); `options` go to the decoders'
    constructor."""
    kind, decoder = _timed_kind(name)
    stack = DecodeStack(decoder, refs, capacity, graphed=kind == "graph", **options)
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
                ceilings, budget_s: float = 1.0, seed: int = 0, show_progress: bool = False,
                options: Mapping[str, Mapping] | None = None, against: str = PEER) -> pd.DataFrame:
    """µs per layer per step of each decoder in `names` ("NAME" eager, "graph_NAME" replayed), interleaved, on a
    stack of `layers` after a prompt of `shape.seq_len` tokens; beside each, the step's floor (`ceilings`), the
    seconds its first call took (build, prefill and first step: capture, autotuning, compilation) and, where the
    decoder `against` (the peer, `PEER`, by default) is timed too, its speedup over that one with the p20–p80 band
    of the per-round ratios; `graph_replayed` says whether the step really was replayed from a CUDA graph (a
    "graph_" name off a GPU runs eagerly, so its time is one more eager run). `options`: per name, the decoders'
    build options (a tuning run's configurations, each name labelled after a space: `_timed_kind`)."""
    B, N, C = shape.batch, shape.seq_len, shape.d_model
    gen = torch.Generator().manual_seed(seed + 3)
    prompt = torch.randn(B, N, C, generator=gen).to(device=device, dtype=dtype)  # (B, N, C)
    x_t = torch.randn(B, 1, C, generator=gen).to(device=device, dtype=dtype)  # (B, 1, C)
    fns, failed, first_call, replayed = {}, {}, {}, {}
    for name in progress_bar(names, desc="decode build", unit="decoder", disable=not show_progress):
        # each built, prefilled and stepped once (compiled, captured) before any is timed
        try:
            refs = [random_reference(shape, seed + i, dtype, device) for i in range(layers)]
            synchronize(device)
            started = time.perf_counter()
            stack = decode_stack(name, refs, N + 1, **(options or {}).get(name, {}))
            stack.prefill(prompt)
            fns[name], replayed[name] = stepper(stack, x_t), stack.graphed
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
                          tokens_per_s=B / (per_layer * layers * 1e-6), first_call_s=first_call[name],
                          graph_replayed=replayed[name])
            if against in times and name != against:
                record.update(Comparison.from_samples(times[against], times[name]).as_record(VERSUS))
        records.append(record)
    return pd.DataFrame.from_records(records)


def fastest_graphed(timed: pd.DataFrame) -> pd.DataFrame:
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


def checked_forms(names: Sequence[str]) -> list[tuple[str, bool]]:
    """(decoder, graphed) of each timed name, once each: as it is timed; the peer ("compile_…") compiles the
    eager step's function, so its decoder is checked eagerly."""
    return list(dict.fromkeys((decoder, kind == "graph") for kind, decoder in map(_timed_kind, names)))


def run_decode(names: Sequence[str], shape: Shape, check_shape: Shape, layers: int, steps: int, dtype: torch.dtype,
               device: torch.device, ceilings, budget_s: float = 1.0, seed: int = 0,
               checkpoint: Path | str | None = None, resume: bool = False,
               show_progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """§3 of each decoder of `names` as it is timed (on `check_shape`, left-padded, `steps` tokens), then one
    interleaved timing of them all (`time_decode` on `shape` and `layers`) → (checks, timed).

    With `checkpoint`, the records so far are written there as CSV after every check and after the timing
    (column `part`), the run's settings beside it (`sweep.settings_file`); with `resume` too, a stopped run
    keeps its finished checks (and its timing, if done) and does only the rest, provided it is the same run
    (else ValueError saying what differs). The timing is one unit: its decoders are interleaved, so a stopped
    timing starts again whole."""
    env = environment(device, dtype)
    settings = json.loads(json.dumps({"decoders": list(names), "shape": shape.label, "check_shape": check_shape.label,
                                      "layers": layers, "steps": steps, "seed": seed, "budget_s": budget_s}))
    records = finished_records(checkpoint, settings, env) if resume and checkpoint is not None else []

    def save() -> None:
        if checkpoint is not None:
            frame = pd.DataFrame.from_records(records)
            for key, value in env.items():  # resumed records keep their own date
                frame[key] = frame[key].fillna(str(value)) if key in frame else str(value)
            frame.to_csv(checkpoint, index=False)
            settings_file(checkpoint).write_text(json.dumps(settings, indent=1) + "\n")

    done = {record["decoder"] for record in records if record["part"] == "check"}
    todo = [(name, graphed) for name, graphed in checked_forms(names)
            if name + (" (graphed)" if graphed else "") not in done]
    for name, graphed in progress_bar(todo, desc="decode §3", unit="decoder", disable=not show_progress):
        records.append({"part": "check", **check_decoder(name, check_shape, steps, dtype, device, "left", seed,
                                                         graphed)})
        save()
    if not any(record["part"] == "timed" for record in records):
        timed = time_decode(names, shape, layers, dtype, device, ceilings, budget_s, seed, show_progress)
        records += [{"part": "timed", **record} for record in timed.to_dict("records")]
        save()
    frame = pd.DataFrame.from_records(records)
    checks, timed = (frame[frame.part == part].drop(columns="part").dropna(axis=1, how="all").reset_index(drop=True)
                     for part in ("check", "timed"))
    return checks, timed
