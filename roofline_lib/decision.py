"""Keep or revert an experimental rung, decided by measurement; and which variant the project calls "best".

The experiment is "triton_ln" (the fused residual-add + LayerNorm kernel) against the rung it is built
on, "no_empty_mask". `end_to_end` checks the candidate by §3 and times both interleaved on each row;
`decide` keeps the candidate only if it is correct everywhere and a measured win beyond noise: the
geometric mean of the per-row speedups must have its whole noise band — the geometric means of the
per-row p20 and p80 of the interleaved ratios — above 1. Anything else reverts, with the reason.

`best_variant(device, dtype)` follows the decision measured in this process on that device and dtype;
where none was, the newest decision recorded for that GPU and dtype in the results CSVs
(`results/**/triton_ln_decision*.csv`); where there is none, the baseline.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .bench import Comparison, Timing, time_interleaved
from .correctness import Case
from .device import DTYPE_NAMES, device_name, environment, free_memory
from .shapes import Shape
from .sweep import guarded
from .variants import build_variant
from .variants.triton_ln import unavailable_reason

CANDIDATE, BASELINE = "triton_ln", "no_empty_mask"
DECISION_PREFIX = "triton_ln_decision"  # results files holding decisions start with this
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


@dataclass(frozen=True)
class Decision:
    """Keep the candidate or revert to the baseline, with the measurement behind it."""

    candidate: str
    baseline: str
    keep: bool
    speedup: float  # geometric mean over rows of baseline time / candidate time (NaN if nothing measured)
    p20: float  # geometric mean of the per-row p20 of the interleaved ratios: the noise band's low edge
    p80: float  # ... and its high edge
    rows: int  # rows measured
    reason: str

    @property
    def chosen(self) -> str:
        """The variant this decision puts on the path."""
        return self.candidate if self.keep else self.baseline

    def as_dict(self) -> dict:
        return {**asdict(self), "decision": "keep" if self.keep else "revert", "chosen": self.chosen}


def end_to_end(rows: Sequence[Shape], dtype: torch.dtype, device: torch.device, candidate: str = CANDIDATE,
               baseline: str = BASELINE, seed: int = 0, show_progress: bool = True, **timing) -> pd.DataFrame:
    """Per row: the candidate's §3 check, then candidate and baseline timed interleaved (`timing` goes to
    `time_interleaved`), with the speedup and its p20–p80 spread. Raises VariantUnavailable if either can't run."""
    records = []
    for shape in tqdm(rows, desc=f"{candidate} vs {baseline}", unit="row", disable=not show_progress):
        record = {"row": shape.row, "shape": shape.label, "tokens": shape.tokens, "d_model": shape.d_model}
        record.update(_measure_row(shape, dtype, device, candidate, baseline, seed, timing))
        records.append(record)
        free_memory(device)
    frame = pd.DataFrame.from_records(records).assign(candidate=candidate, baseline=baseline)
    return frame.assign(**environment(device, dtype))


def _measure_row(shape: Shape, dtype: torch.dtype, device: torch.device, candidate: str, baseline: str,
                 seed: int, timing: dict) -> dict:
    case, oom = guarded(lambda: Case(shape, dtype, device, "none", seed), device)
    if oom is not None:
        return {"status": "oom", "reason": oom}
    modules = {name: build_variant(name, case.layer) for name in (baseline, candidate)}
    result = case.check_module(candidate, modules[candidate])
    fns = {name: partial(m, case.x) for name, m in modules.items()}
    samples, oom = guarded(lambda: time_interleaved(fns, device, **timing), device)
    if oom is not None:
        return {"status": "oom", "reason": oom, "err": result.err, "passed": result.passed}
    base, cand = Timing.from_samples(samples[baseline]), Timing.from_samples(samples[candidate])
    cmp = Comparison.from_samples(samples[baseline], samples[candidate])
    return {"status": "ok", "baseline_ms": base.median_ms, "candidate_ms": cand.median_ms, "reps": cand.reps,
            "speedup": cmp.speedup, "speedup_p20": cmp.p20, "speedup_p80": cmp.p80, "verdict": cmp.verdict,
            "err": result.err, "ref_err": result.ref_err, "passed": result.passed, "reason": result.reason}


def _geomean(values: pd.Series) -> float:
    return float(np.exp(np.log(values.to_numpy(dtype=float)).mean()))


def decide(measured: pd.DataFrame, kernel_ok: bool = True, candidate: str = CANDIDATE,
           baseline: str = BASELINE) -> Decision:
    """Keep `candidate` only if it is correct (`kernel_ok` and §3 on every row of `measured`) and its
    geometric-mean speedup's noise band lies wholly above 1; otherwise revert to `baseline`.

    `measured` has one row per shape with columns status, passed, speedup, speedup_p20, speedup_p80
    (what `end_to_end` returns)."""
    def revert(reason: str, speedup=float("nan"), p20=float("nan"), p80=float("nan"), rows=0) -> Decision:
        return Decision(candidate, baseline, False, speedup, p20, p80, rows, reason)

    if not kernel_ok:
        return revert("the fused kernel failed its correctness check")
    ok = measured[measured["status"] == "ok"] if len(measured) else measured
    if not len(ok):
        return revert("nothing was measured")
    failed = ok[~ok["passed"].astype(bool)]
    if len(failed):
        return revert(f"failed §3 on row(s) {', '.join(map(str, failed['row']))}")
    speedup, p20, p80 = (_geomean(ok[c]) for c in ("speedup", "speedup_p20", "speedup_p80"))
    band = f"{speedup:.3f}× geometric-mean speedup over {len(ok)} row(s), noise band [{p20:.3f}, {p80:.3f}]"
    slower = ok[ok["speedup_p80"] < 1]
    worst = f"; slower beyond noise on row(s) {', '.join(map(str, slower['row']))}" if len(slower) else ""
    if p20 > 1:
        return Decision(candidate, baseline, True, speedup, p20, p80, len(ok),
                        f"a measured win: {band} lies above 1{worst}")
    verdict = "slower beyond noise" if p80 < 1 else "within noise"
    return revert(f"{verdict}: {band}{worst}", speedup, p20, p80, len(ok))


_measured: dict[tuple[str, str], Decision] = {}


def remember(device: torch.device, dtype: torch.dtype, decision: Decision) -> None:
    """Record `decision` as measured in this process on `device` in `dtype` (best_variant follows it)."""
    _measured[(device_name(device), DTYPE_NAMES[dtype])] = decision


def recorded_decisions(results_dir: Path | str = RESULTS_DIR) -> pd.DataFrame:
    """Every decision in the results CSVs under `results_dir`, oldest first (empty if there are none)."""
    files = sorted(Path(results_dir).rglob(f"{DECISION_PREFIX}*.csv"))
    if not files:
        return pd.DataFrame(columns=["device", "dtype", "date", "chosen"])
    frame = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    return frame.sort_values("date", kind="stable", ignore_index=True)


def best_variant(device: torch.device | str, dtype: torch.dtype | str, results_dir: Path | str = RESULTS_DIR) -> str:
    """The variant the project calls "best" on `device` in `dtype` (see the module docstring).

    A kept candidate that cannot run here (no Triton, say) gives way to the baseline."""
    device = torch.device(device)
    key = (device_name(device), dtype if isinstance(dtype, str) else DTYPE_NAMES[dtype])
    if key in _measured:
        chosen = _measured[key].chosen
    else:
        recorded = recorded_decisions(results_dir)
        match = recorded[(recorded["device"] == key[0]) & (recorded["dtype"] == key[1])]
        chosen = match["chosen"].iloc[-1] if len(match) else BASELINE
    if chosen == CANDIDATE and unavailable_reason(device, dtype) is not None:
        return BASELINE
    return chosen
