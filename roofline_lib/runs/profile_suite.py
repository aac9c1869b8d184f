"""Profiles of variants × rows: each variant built and first called through the pipeline, then profiled."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from ..core.correctness import Case
from ..core.device import environment, free_memory
from ..core.outcome import guarded
from ..core.progress import progress_bar
from ..core.shapes import Shape
from ..measure.profile_events import Profile
from ..measure.profiler import profile_layer
from ..variants.registry import build_variant
from .pipeline import new_case, prepare


def profile_variant(name: str, shape: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0,
                    options: dict | None = None, **schedule_steps) -> Profile:
    """Profile variant `name` on `shape` (no padding mask), with seeded weights and input."""
    case = Case(shape, dtype, device, "none", seed)
    return profile_layer(build_variant(name, case.layer, **(options or {})), case.x, **schedule_steps)



@dataclass
class SuiteProfile:
    """Profiles of variants × rows as tidy tables, each with row, shape, variant and the environment columns."""

    runs: pd.DataFrame  # one per variant × row: status, reason, steps, step_us, total_us
    ops: pd.DataFrame
    kernels: pd.DataFrame
    categories: pd.DataFrame


def _profile_run(case: Case | None, shape: Shape, name: str, oom: str | None, options: dict,
                 schedule_steps: dict) -> tuple[dict, Profile | None]:
    """The run record of one variant on one row, and its profile if it ran."""
    run = {"row": shape.row, "shape": shape.label, "variant": name, "status": "ok", "reason": ""}
    if case is None:
        run.update(status="oom", reason=f"building inputs: {oom}")
        return run, None
    done = prepare(case, name, options=options, check=False)  # the first call: compiles, tunes, or refuses
    if done.module is None:
        run.update(status=done.status, reason=done.reason)
        return run, None
    profile, oom = guarded(lambda: profile_layer(done.module, case.x, **schedule_steps), case.device)
    if profile is None:
        run.update(status="oom", reason=oom)
    else:
        run.update(steps=profile.steps, step_us=profile.step_us, total_us=profile.total_us)
    return run, profile


def profile_suite(rows: Sequence[Shape], names: Sequence[str], dtype: torch.dtype, device: torch.device,
                  seed: int = 0, options: dict[str, dict] | None = None, show_progress: bool = True,
                  **schedule_steps) -> SuiteProfile:
    """Profile every variant in `names` on every row; infeasible, unavailable or out-of-memory runs are recorded."""
    options = options or {}
    env = environment(device, dtype)
    leading = ["row", "shape", "variant"]
    runs, tables = [], {"ops": [], "kernels": [], "categories": []}
    progress = progress_bar(rows, desc="profile", unit="row", disable=not show_progress)
    for shape in progress:
        case, oom = new_case(shape, dtype, device, seed=seed, truth=False)
        for name in names:
            progress.set_postfix_str(f"row {shape.row}: {name}")
            run, profile = _profile_run(case, shape, name, oom, options.get(name, {}), schedule_steps)
            runs.append(run)
            for attr, frames in tables.items():
                if profile is not None:
                    frames.append(getattr(profile, attr).assign(**{k: run[k] for k in leading}))
        case = None  # release this row's tensors before collecting
        free_memory(device)

    def tidy(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=leading)
        return frame[leading + [c for c in frame.columns if c not in leading]].assign(**env)

    runs_frame = pd.DataFrame.from_records(runs).reindex(
        columns=leading + ["status", "reason", "steps", "step_us", "total_us"]).assign(**env)
    return SuiteProfile(runs_frame, tidy(tables["ops"]), tidy(tables["kernels"]), tidy(tables["categories"]))

