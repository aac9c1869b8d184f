"""Which rung the project calls "best" on a device and dtype: the keep-or-revert call, remembered.

`best_variant(device, dtype)` follows the decision measured in this process on that device and dtype;
where none was, the newest decision recorded for that GPU and dtype in the decision CSVs the package
ships (`recorded.DATA`, copies of `results/**/triton_ln_decision*.csv`); where there is none, the baseline.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from ..core.decision import BASELINE, CANDIDATE, Decision
from ..core.device import DTYPE_NAMES, DTYPES, device_name
from ..core.recorded import DATA
from ..kernels import unavailable_reason

DECISION_PREFIX = "triton_ln_decision"  # results files holding decisions start with this
RESULTS_DIR = DATA  # where recorded decisions are read from (the shipped copies)


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
    dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
    key = (device_name(device), DTYPE_NAMES[dtype])
    if key in _measured:
        chosen = _measured[key].chosen
    else:
        recorded = recorded_decisions(results_dir)
        match = recorded[(recorded["device"] == key[0]) & (recorded["dtype"] == key[1])]
        chosen = match["chosen"].iloc[-1] if len(match) else BASELINE
    if chosen == CANDIDATE and unavailable_reason(device, dtype) is not None:
        return BASELINE
    return chosen
