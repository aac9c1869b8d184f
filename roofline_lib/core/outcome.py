"""How one attempt to run something ended: the status words every table uses, and the helpers behind them.

A variant on a case ends as one of STATUSES. `VariantUnavailable` (raised by a factory that cannot run
here) becomes "skipped"; `Infeasible` (raised by the reference for a shape it cannot hold) becomes
"infeasible"; an out-of-memory error, caught by `guarded`, "oom"; any other exception on the first
call "error"; a run that the §3 check rejects "fail", and one it accepts "ok".
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from .device import free_memory, memory_state

STATUSES = ("ok", "fail", "oom", "error", "skipped", "infeasible")
T = TypeVar("T")


class VariantUnavailable(RuntimeError):
    """A variant that cannot run here (no Triton, no GPU, a dtype its kernels do not take); the message says why."""


class Infeasible(RuntimeError):
    """The reference cannot hold this shape in the memory this process may use; the message says how much it needs."""

    def __init__(self, message: str, needs_bytes: int):
        super().__init__(message)
        self.needs_bytes = needs_bytes


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's first message line (its type name when it has none), cut to `limit` characters."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


def device_failed(exc: BaseException) -> bool:
    """Whether `exc` says the device itself is out of memory or in error (a CUDA fault), so that whoever catches
    one candidate's failure to go on with the others must let it through: the device's state is not theirs."""
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or type(exc).__name__ == "AcceleratorError"


def guarded(fn: Callable[[], T], device: torch.device) -> tuple[T | None, str | None]:
    """(fn(), None), or (None, a description) if it ran out of memory; the memory is freed either way."""
    try:
        return fn(), None
    except (torch.OutOfMemoryError, MemoryError) as exc:
        message = first_line(exc, 160)
    state = memory_state(device)  # reached only after an OOM, once the traceback is released
    free_memory(device)
    return None, f"out of memory: {message} [{state}]"
