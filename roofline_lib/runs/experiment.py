"""The keep-or-revert experiment, measured: a candidate rung checked (§3) and timed against its baseline, row by row.

`end_to_end` gives the table that `decision.decide` turns into a keep or revert call.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from ..core.decision import BASELINE, CANDIDATE
from ..core.device import environment, free_memory
from ..core.progress import progress_bar
from ..core.shapes import Shape
from ..measure.timing import Comparison, Timing
from .pipeline import gpu_ms, new_case, prepare, time_modules


def end_to_end(rows: Sequence[Shape], dtype: torch.dtype, device: torch.device, candidate: str = CANDIDATE,
               baseline: str = BASELINE, seed: int = 0, show_progress: bool = True, **timing) -> pd.DataFrame:
    """Per row: both rungs checked by §3, then timed interleaved (`timing` goes to
    `measure.timing.time_layer_calls`), with the speedup of `candidate` over `baseline` and its p20–p80
    spread, and each one's GPU ms per call. The row's status and §3 fields are the candidate's; a baseline
    that does not run leaves the row untimed, with its status and reason."""
    records = []
    for shape in progress_bar(rows, desc=f"{candidate} vs {baseline}", unit="row", disable=not show_progress):
        record = {"row": shape.row, "shape": shape.label, "tokens": shape.tokens, "d_model": shape.d_model}
        record.update(_measure_row(shape, dtype, device, candidate, baseline, seed, timing))
        records.append(record)
        free_memory(device)
    frame = pd.DataFrame.from_records(records).assign(candidate=candidate, baseline=baseline)
    return frame.assign(**environment(device, dtype))


def _measure_row(shape: Shape, dtype: torch.dtype, device: torch.device, candidate: str, baseline: str,
                 seed: int, timing: dict) -> dict:
    case, oom = new_case(shape, dtype, device, "none", seed)
    if case is None:
        return {"status": "oom", "reason": oom}
    done = {name: prepare(case, name) for name in (baseline, candidate)}
    record = done[candidate].as_record()
    if done[baseline].module is None:
        return record | {"status": done[baseline].status, "reason": f"{baseline}: {done[baseline].reason}"}
    if done[candidate].module is None:
        return record
    samples, oom = time_modules(case, {name: d.module for name, d in done.items()}, **timing)
    if oom is not None:
        return record | {"status": "oom", "reason": oom}
    base, cand = Timing.from_samples(samples[baseline]), Timing.from_samples(samples[candidate])
    cmp = Comparison.from_samples(samples[baseline], samples[candidate])
    gpu = {name: gpu_ms(case, d.module) for name, d in done.items()}  # the GPU's share of each call
    return record | {"baseline_ms": base.median_ms, "candidate_ms": cand.median_ms, "reps": cand.reps,
                     "baseline_gpu_ms": gpu[baseline], "candidate_gpu_ms": gpu[candidate], **cmp.as_record()}
