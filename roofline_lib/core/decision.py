"""The keep-or-revert rule for an experimental rung: a pure function of what was measured.

`decide` keeps the candidate only if it is correct everywhere and a measured win beyond noise: the
geometric mean of the per-row speedups must have its whole noise band — the geometric means of the
per-row p20 and p80 of the interleaved ratios — above 1. Anything else reverts, with the reason.
Measuring is `experiment.end_to_end`'s job; remembering the call, `best`'s.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from .numbers import row_list, with_band

CANDIDATE, BASELINE = "triton_ln", "no_empty_mask"  # the project's experiment and the rung it is built on
MEASURED = ("ok", "fail")  # statuses of a row that was checked and timed
NOTHING_MEASURED = "nothing was measured"  # the reason where no row was timed: no call was made


def band_verdict(p20: float, p80: float) -> str:
    """A speedup's verdict from its p20–p80 band: "faster" where the whole band lies above 1, "slower" where it lies
    below, "within noise" where it holds 1; "" where no band was measured (NaN)."""
    if not (np.isfinite(p20) and np.isfinite(p80)):
        return ""
    return "faster" if p20 > 1 else "slower" if p80 < 1 else "within noise"


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
    def verdict(self) -> str:
        """The geometric mean's verdict from its band (`band_verdict`): "faster" is the only one `decide` keeps;
        "" where nothing was measured or a §3 failure reverted it before any band was taken."""
        return band_verdict(self.p20, self.p80)

    @property
    def decided(self) -> bool:
        """False where no row was timed: the baseline stays because nothing was compared, not because it won."""
        return self.reason != NOTHING_MEASURED

    @property
    def chosen(self) -> str:
        """The variant this decision puts on the path."""
        return self.candidate if self.keep else self.baseline

    def as_dict(self) -> dict:
        return {**asdict(self), "decision": "keep" if self.keep else "revert", "chosen": self.chosen}


def _geomean(values: pd.Series) -> float:
    return float(np.exp(np.log(values.to_numpy(dtype=float)).mean()))


def decide(measured: pd.DataFrame, kernel_ok: bool = True, candidate: str = CANDIDATE,
           baseline: str = BASELINE) -> Decision:
    """Keep `candidate` only if it is correct (`kernel_ok` and §3 on every row of `measured`) and its
    geometric-mean speedup's noise band lies wholly above 1; otherwise revert to `baseline`.

    `measured` has one row per shape with columns status, passed, speedup, speedup_p20, speedup_p80
    (what `experiment.end_to_end` or a sweep returns); rows with a status other than "ok" or "fail"
    (not measured) are left out."""
    def revert(reason: str, speedup=float("nan"), p20=float("nan"), p80=float("nan"), rows=0) -> Decision:
        return Decision(candidate, baseline, False, speedup, p20, p80, rows, reason)

    if not kernel_ok:
        return revert("the fused kernel failed its correctness check")
    ok = measured[measured["status"].isin(MEASURED) & measured["speedup"].notna()] if len(measured) else measured
    if not len(ok):
        return revert(NOTHING_MEASURED)
    failed = ok[~ok["passed"].astype(bool)]
    if len(failed):
        return revert(f"failed §3 on {row_list(failed['row'])}")
    speedup, p20, p80 = (_geomean(ok[c]) for c in ("speedup", "speedup_p20", "speedup_p80"))
    band = f"geometric-mean speedup over {len(ok)} {'row' if len(ok) == 1 else 'rows'} {with_band(speedup, p20, p80)}"
    slower = ok[ok["speedup_p80"] < 1]
    worst = f"; slower beyond noise on {row_list(slower['row'])}" if len(slower) else ""
    verdict = band_verdict(p20, p80)
    if verdict == "faster":
        return Decision(candidate, baseline, True, speedup, p20, p80, len(ok),
                        f"a measured win: {band}, its p20–p80 band above 1{worst}")
    said = {"slower": "slower beyond noise"}.get(verdict, "within noise")
    return revert(f"{said}: {band}{worst}", speedup, p20, p80, len(ok))
