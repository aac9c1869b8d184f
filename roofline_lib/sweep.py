"""Variants × shapes: verify each, time them interleaved, record memory; one tidy row per pair.

An out-of-memory error on one row is caught, recorded with the allocator's state, and freed, and a
variant that fails on its first call (a kernel refusing this GPU, say) is recorded as an error; the
sweep goes on, and the memory still held after each row is recorded so leaks show up in the data.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from .bench import Comparison, Timing, peak_memory, time_interleaved
from .device import allocated_bytes, environment, free_memory, memory_capacity, memory_state, warm_up_libraries
from .peers import PEERS
from .shapes import Shape
from .variants import VariantUnavailable, build_variant
from .correctness import Case, naive_peak_bytes

MIB = 2**20


def guarded(fn: Callable[[], object], device: torch.device) -> tuple[object | None, str | None]:
    """(fn(), None), or (None, a description) if it ran out of memory; the memory is freed either way."""
    try:
        return fn(), None
    except (torch.OutOfMemoryError, MemoryError) as exc:
        message = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
    state = memory_state(device)  # reached only after an OOM, once the traceback is released
    free_memory(device)
    return None, f"out of memory: {message} [{state}]"


def _new_record(shape: Shape, variant: str) -> dict:
    return {"row": shape.row, "shape": shape.label, "batch": shape.batch, "seq_len": shape.seq_len,
            "d_model": shape.d_model, "n_heads": shape.n_heads, "variant": variant, "status": "", "reason": ""}


def _check_and_size(case: Case, name: str, options: dict, record: dict) -> torch.nn.Module | None:
    """Build, verify and measure the peak memory of one variant; fill `record`; return it if it runs."""
    device = case.device
    if name == "reference" and not case.reference_feasible:
        need = naive_peak_bytes(case.shape, case.dtype)
        record.update(status="infeasible", needs_gib=need / 2**30,
                      reason=f"needs ≈{need / 2**30:,.0f} GiB, {memory_capacity(device) / 2**30:,.0f} GiB available")
        return None
    try:
        module = build_variant(name, case.layer, **options)
    except VariantUnavailable as exc:
        record.update(status="skipped", reason=str(exc))
        return None
    start = time.perf_counter()
    try:
        result, oom = guarded(lambda: case.check_module(name, module), device)  # first call: compiles, tunes
    except Exception as exc:  # a kernel or compiler refusing this GPU or shape: recorded, the sweep goes on
        record.update(status="error", reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
        free_memory(device)
        return None
    first_call_s = time.perf_counter() - start
    if oom is None:
        sizes, oom = guarded(lambda: peak_memory(lambda: module(case.x, case.key_padding_mask), device), device)
    if oom is not None:
        record.update(status="oom", reason=oom)
        return None
    record.update(status="ok" if result.passed else "fail", reason=result.reason, err=result.err,
                  ref_err=result.ref_err, err_ratio=result.err_ratio, passed=result.passed,
                  rows_checked=result.rows_checked, peak_mib=sizes[0] / MIB, peak_extra_mib=sizes[1] / MIB,
                  first_call_s=first_call_s, detail=getattr(module, "detail", ""))
    return module


def sweep_row(shape: Shape, names: Sequence[str], dtype: torch.dtype, device: torch.device,
              padding: str = "none", seed: int = 0, options: dict[str, dict] | None = None,
              budget_s: float = 1.0, progress: tqdm | None = None, against: str | None = None) -> list[dict]:
    """Records for every variant in `names` on one shape (see `run_sweep`)."""
    options = options or {}
    records = {name: _new_record(shape, name) for name in names}
    case, oom = guarded(lambda: Case(shape, dtype, device, padding, seed), device)
    if case is None:
        for record in records.values():
            record.update(status="oom", reason=f"building inputs and truth: {oom}")
        return list(records.values())
    modules = {}
    for name in names:
        if progress is not None:
            progress.set_postfix_str(f"row {shape.row}: {name}")
        module = _check_and_size(case, name, options.get(name, {}), records[name])
        if module is not None:
            modules[name] = module
    fns = {name: partial(m, case.x, case.key_padding_mask) for name, m in modules.items()}
    samples, oom = guarded(lambda: time_interleaved(fns, device, budget_s=budget_s), device) if fns else ({}, None)
    if oom is not None:
        for name in modules:
            records[name].update(status="oom", reason=f"while timing: {oom}")
        samples = {}
    for name, ms in samples.items():
        timing = Timing.from_samples(ms)
        records[name].update(median_ms=timing.median_ms, p20_ms=timing.p20_ms, p80_ms=timing.p80_ms,
                             reps=timing.reps)
        if "reference" in samples and name != "reference":
            cmp = Comparison.from_samples(samples["reference"], ms)
            records[name].update(speedup=cmp.speedup, speedup_p20=cmp.p20, speedup_p80=cmp.p80,
                                 verdict=cmp.verdict)
        if against in samples and name != against:
            cmp = Comparison.from_samples(samples[against], ms)
            records[name].update(against=against, vs_speedup=cmp.speedup, vs_p20=cmp.p20, vs_p80=cmp.p80,
                                 vs_verdict=cmp.verdict)
    return list(records.values())


def run_sweep(rows: Sequence[Shape], names: Sequence[str], dtype: torch.dtype, device: torch.device,
              padding: str = "none", seed: int = 0, options: dict[str, dict] | None = None,
              budget_s: float = 1.0, show_progress: bool = True,
              checkpoint: Path | str | None = None, against: str | None = None,
              resume: bool = False) -> pd.DataFrame:
    """Verify (§3), time (§4) and size every variant on every row; one record per variant × row.

    Every variant is timed interleaved with the others, and compared with "reference" (`speedup`,
    `verdict`) and, when `against` names another of `names`, with that one too (`vs_speedup`, `vs_verdict`).

    With `checkpoint`, the records so far are written there as CSV after every row, so a run that is
    stopped part-way still leaves its finished rows behind; with `resume` too, a run picks them up from
    there (same variants, GPU, versions and dtype) and sweeps only the rows still missing.
    """
    if against is not None and against not in names:
        raise ValueError(f"against={against!r} must be one of the variants swept ({', '.join(names)})")
    warm_up_libraries(device, dtype)
    baseline = allocated_bytes(device)  # memory held after a row beyond this is a leak
    env = environment(device, dtype)
    records = _finished(checkpoint, names, env) if resume and checkpoint is not None else []
    done = {record["row"] for record in records}
    rows = [shape for shape in rows if shape.row not in done]
    progress = tqdm(rows, desc="sweep", unit="row", disable=not show_progress)
    compiles = any(name in PEERS for name in names)
    for shape in progress:
        if compiles:  # each row compiles its peers afresh, as a user compiling for one shape would
            torch._dynamo.reset()  # (and dynamo's per-function recompile limit never silently leaves them eager)
        row_records = sweep_row(shape, names, dtype, device, padding, seed, options, budget_s, progress, against)
        free_memory(device)
        held = (allocated_bytes(device) - baseline) / MIB
        for record in row_records:
            record["held_after_mib"] = held
        records += row_records
        if checkpoint is not None:
            _frame(records, env).to_csv(checkpoint, index=False)
    return _frame(records, env)


def _finished(checkpoint: Path | str, names: Sequence[str], env: dict[str, str]) -> list[dict]:
    """The records of a stopped sweep's checkpoint, if there is one and it is the same sweep (else ValueError)."""
    if not Path(checkpoint).exists():
        return []
    done = pd.read_csv(checkpoint, dtype={"row": str})
    same = {key: set(done[key].astype(str)) == {str(value)} for key, value in env.items() if key != "date"}
    same["variants"] = list(dict.fromkeys(done["variant"])) == list(names)
    if not all(same.values()):
        differ = ", ".join(key for key, ok in same.items() if not ok)
        raise ValueError(f"cannot resume from {checkpoint}: its {differ} differ from this run's; "
                         "move it away to start afresh")
    return done.to_dict("records")


def _frame(records: list[dict], env: dict[str, str]) -> pd.DataFrame:
    columns = ["row", "shape", "batch", "seq_len", "d_model", "n_heads", "variant", "status", "median_ms",
               "p20_ms", "p80_ms", "reps", "speedup", "speedup_p20", "speedup_p80", "verdict", "against",
               "vs_speedup", "vs_p20", "vs_p80", "vs_verdict", "err", "ref_err",
               "err_ratio", "passed", "rows_checked", "peak_mib", "peak_extra_mib", "held_after_mib",
               "needs_gib", "first_call_s", "detail", "reason"]
    frame = pd.DataFrame.from_records(records).reindex(columns=columns)
    for key, value in env.items():  # resumed records keep their own date
        own = pd.Series([record.get(key) for record in records], index=frame.index, dtype=object)
        frame[key] = own.where(own.notna(), str(value))
    return frame
