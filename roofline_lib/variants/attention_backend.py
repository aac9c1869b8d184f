"""SDPA's attention backend, chosen per input shape by measurement (a step of the `fastest` rung).

`F.scaled_dot_product_attention` picks a backend by fixed rules (on an H100/H200: cuDNN first for
fp16 without a mask, then FlashAttention-2, then memory-efficient attention). Rules are not
measurements. `choose_backend` times every backend that accepts the inputs, on the inputs themselves,
against SDPA's own pick, and forces the fastest only where it beats that pick beyond noise: forcing
goes through `torch.nn.attention.sdpa_kernel`, which costs some microseconds of Python per call.

The timing itself is the caller's (`Timer`): a layer that chooses by measurement does not own a clock, and
`variants.registry` hands `fastest` the project's one protocol, `measure.timing.time_layer_calls`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import numpy as np
import torch

from ..core.outcome import first_line
from ..measure.timing import Comparison, Timing
from .sdpa import SDPA_BACKENDS

SDPA_PICK = "sdpa_pick"  # the name SDPA's own choice is timed under


class Timer(Protocol):
    """How a choice by measurement times its options: per-call ms samples of each callable, interleaved, in
    about `budget_s` seconds and within [min_reps, max_reps] rounds (`measure.timing.time_layer_calls`)."""

    def __call__(self, fns: dict[str, Callable[[], object]], device: torch.device, *, budget_s: float,
                 min_reps: int, max_reps: int) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class BackendChoice:
    """What `choose_backend` measured and kept."""

    backend: str | None  # forced backend, or None: SDPA's own pick is kept
    timings: dict[str, Timing]  # per timed option: SDPA_PICK and each backend that ran
    unavailable: dict[str, str]  # backend → why it cannot run these inputs
    versus_pick: Comparison | None  # fastest forced backend against SDPA's pick (None: none ran)
    fastest_forced: str | None = None  # that backend, kept or not (None: none ran)

    @property
    def label(self) -> str:
        return self.backend or SDPA_PICK


def _refusal(attend: Callable[[str | None], object], backend: str) -> str | None:
    """None when `attend` runs on `backend`; else the first line of why not."""
    try:
        attend(backend)
    except RuntimeError as exc:
        return first_line(exc)
    return None


def choose_backend(attend: Callable[[str | None], object], device: torch.device, timer: Timer,
                   budget_s: float = 0.1) -> BackendChoice:
    """Time `attend(backend)` with `timer` for SDPA's pick (None) and every backend in SDPA_BACKENDS that runs;
    keep a forced backend only if it is faster than SDPA's pick beyond noise."""
    unavailable = {name: why for name in SDPA_BACKENDS if (why := _refusal(attend, name)) is not None}
    runnable = [name for name in SDPA_BACKENDS if name not in unavailable]
    fns = {SDPA_PICK: partial(attend, None)} | {name: partial(attend, name) for name in runnable}
    samples = timer(fns, device, budget_s=budget_s, min_reps=5, max_reps=100)
    timings = {name: Timing.from_samples(s) for name, s in samples.items()}
    if not runnable:
        return BackendChoice(None, timings, unavailable, None)
    best = min(runnable, key=lambda name: timings[name].median_ms)
    versus_pick = Comparison.from_samples(samples[SDPA_PICK], samples[best])
    return BackendChoice(best if versus_pick.verdict == "faster" else None, timings, unavailable, versus_pick, best)
