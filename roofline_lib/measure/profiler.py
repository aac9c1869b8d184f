"""Running `torch.profiler` around a layer: a scheduled profile of several calls, or one call on a time axis.

A profile runs `wait + warmup + active` forward calls under `torch.profiler.profile` with a schedule, so only
the `active` calls are recorded; `profile_events.Profile` turns their events into tables.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, schedule

from ..core.device import synchronize
from .profile_events import Profile, chain_of
from .profile_rules import categorize, charge_category


def leave_no_cupti_behind() -> None:
    """Ask the profiler to detach CUPTI when it stops (TEARDOWN_CUPTI=1, unless set otherwise). Left attached,
    CUPTI keeps slowing every kernel launch after the profile ends (pytorch/pytorch#144455), and every
    launch-bound timing after a profile would pay for it. Only with CUDA 12.6 or later: before, a CUDA graph
    captured after a teardown could crash on CUPTI's re-init."""
    cuda = torch.version.cuda
    if cuda and tuple(int(part) for part in cuda.split(".")[:2]) >= (12, 6):
        os.environ.setdefault("TEARDOWN_CUPTI", "1")


KINETO_QUIET = "6"  # above kineto's highest log level (USDT, 5): none of its lines is printed


def quiet_profiler() -> None:
    """Keep the profiler's own log lines (kineto's "USDT: … profiler_start", "STAGE: … Completed Stage: Warm Up",
    printed to the process's stderr, where a notebook shows them under the cell) from being printed
    (KINETO_LOG_LEVEL, unless set otherwise). Kineto reads it when the process's first profile starts, so this
    comes before every profile here. Its error lines go too: a profile whose CUPTI failed on a GPU then shows it
    as a profile with no kernel in it."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)


def profile_layer(module: torch.nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                  wait: int = 1, warmup: int = 2, active: int = 3) -> Profile:
    """Profile `module(x, key_padding_mask)`: `wait + warmup` unrecorded calls, then `active` recorded ones."""
    if wait < 0 or warmup < 0 or active < 1:
        raise ValueError(f"need wait ≥ 0, warmup ≥ 0 and active ≥ 1, got {wait}, {warmup}, {active}")
    device = x.device
    leave_no_cupti_behind()
    quiet_profiler()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    steps = schedule(wait=wait, warmup=warmup, active=active, repeat=1)  # one cycle: its events stay readable
    with warnings.catch_warnings(), torch.profiler.profile(activities=activities, schedule=steps) as prof:
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")  # one cycle here
        for _ in range(wait + warmup + active):
            module(x, key_padding_mask)
            synchronize(device)
            prof.step()
    return Profile.from_events(prof.events(), device.type)


def kernel_timeline(module: Callable[[torch.Tensor, torch.Tensor | None], object], x: torch.Tensor,
                    key_padding_mask: torch.Tensor | None = None, trace: str | None = None,
                    warmup: int = 2) -> pd.DataFrame:
    """One call of `module` (a layer, or any callable taking `x` and the mask: a graph's replay) on a time
    axis: every GPU kernel (on the CPU, every aten op the layer called) with its start and end in µs from the
    first, its category and the idle gap before it. With `trace`, the profiler's Chrome trace is written there
    too (open it in Perfetto or chrome://tracing)."""
    device = x.device
    for _ in range(warmup):
        module(x, key_padding_mask)
    synchronize(device)
    leave_no_cupti_behind()
    quiet_profiler()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        module(x, key_padding_mask)
        synchronize(device)
    if trace is not None:
        prof.export_chrome_trace(trace)
        path = Path(trace)  # the trace names its own file: keep the name, not the machine's path
        path.write_text(path.read_text().replace(str(path.resolve()), path.name).replace(str(trace), path.name))
    if device.type == "cuda":
        events = [e for e in prof.events()  # kernels and copies, not the spans of annotations (nccl:…)
                  if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
        names = [(e.name, categorize(e.name)) for e in events]
    else:
        events = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith("aten::")
                  and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
        names = [(e.name, charge_category(chain_of(e))) for e in events]
    records = sorted(({"name": n, "category": c, "start_us": e.time_range.start, "end_us": e.time_range.end}
                      for e, (n, c) in zip(events, names)), key=lambda r: r["start_us"])
    frame = pd.DataFrame.from_records(records, columns=["name", "category", "start_us", "end_us"])
    if frame.empty:
        return frame.assign(duration_us=[], gap_before_us=[])
    origin = frame.start_us.iloc[0]
    frame[["start_us", "end_us"]] -= origin
    previous_end = frame.end_us.cummax().shift(1).fillna(0.0)
    return frame.assign(duration_us=frame.end_us - frame.start_us,
                        gap_before_us=(frame.start_us - previous_end).clip(lower=0.0))

