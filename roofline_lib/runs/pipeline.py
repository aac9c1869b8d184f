"""One variant on one case, the way every table here gets it: build, first call with the §3 check, size, time.

`prepare` builds a module and makes its first call (which compiles, autotunes or captures, and is
timed as `first_call_s`), checked by §3 unless asked not to, and ends with one of
`outcome.STATUSES`; `time_modules` times the modules that ran, interleaved. The sweep, the
keep-or-revert experiment, profiling, long context and the notebooks' check tables all go through
these two, so a status word means the same everywhere.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..core.correctness import Case, VerifyResult
from ..core.device import free_memory
from ..core.outcome import Infeasible, VariantUnavailable, first_line, guarded
from ..core.progress import progress_bar
from ..core.shapes import Shape
from ..measure.timing import gpu_call_ms, time_layer_calls
from ..variants.attention_backend import SDPA_PICK
from ..variants.fastest import FastestLayer
from ..variants.registry import build_variant
from ..variants.sdpa import SdpaLayer

Factory = Callable[..., nn.Module]  # factory(reference_layer, **options) → module


@dataclass
class Prepared:
    """A variant built and called once on a case: its status, and the module when it ran."""

    name: str
    status: str
    reason: str = ""
    module: nn.Module | None = None
    result: VerifyResult | None = None  # the §3 verdict, when checked
    first_call_s: float = float("nan")  # build excluded: the first call, with its compile, tuning or capture
    extra: dict = field(default_factory=dict)  # e.g. needs_gib for an infeasible reference
    choices: dict[str, str] = field(default_factory=dict)  # CHOICE_COLUMNS, once it ran (`choices`)

    def as_record(self) -> dict:
        """The fields of a results table: status and reason, the §3 fields, first_call_s, what it chose, extras."""
        record = {"status": self.status, "reason": self.reason, **self.extra}
        if self.result is not None:
            record |= self.result.as_record()
        if self.module is not None:
            record |= {"first_call_s": self.first_call_s, **self.choices}
        return record


CHOICE_COLUMNS = ("chosen", "attention_backend")


def choices(module: nn.Module, case: Case) -> dict[str, str]:
    """What `module` runs on the case's shape, as CHOICE_COLUMNS: `chosen`, the candidate `fastest` chose, and
    `attention_backend`, SDPA's backend (the one forced, or SDPA_PICK: SDPA's own); "" where one does not
    apply (no choice, no SDPA). Read from the layer's attributes, after its first call on the case."""
    if isinstance(module, FastestLayer):
        chosen, backend = module.choice_on(case.x, case.key_padding_mask)
    else:
        chosen, backend = "", (module.attention_backend or SDPA_PICK) if isinstance(module, SdpaLayer) else ""
    return dict(zip(CHOICE_COLUMNS, (chosen, backend)))


def prepare(case: Case, name: str, factory: Factory | None = None, options: dict | None = None,
            check: bool = True) -> Prepared:
    """Build `name` (from the registry, or with `factory`) on `case.layer` and call it once on the case's input,
    judged by §3 when `check`. Never raises for the variant's sake: its status says what happened."""
    device = case.device
    make = factory if factory is not None else partial(build_variant, name)
    try:
        module = make(case.layer, **(options or {}))
    except VariantUnavailable as exc:
        return Prepared(name, "skipped", str(exc))
    call = (lambda: case.check_module(name, module)) if check else (lambda: module(case.x, case.key_padding_mask))
    start = time.perf_counter()
    try:
        ran, oom = guarded(call, device)
    except Infeasible as exc:
        return Prepared(name, "infeasible", str(exc), extra={"needs_gib": exc.needs_bytes / 2**30})
    except Exception as exc:  # a kernel or compiler refusing this GPU or shape: recorded, the caller goes on
        free_memory(device)
        return Prepared(name, "error", f"{type(exc).__name__}: {first_line(exc)}")
    if oom is not None:
        return Prepared(name, "oom", oom)
    first_call_s = time.perf_counter() - start
    chose = choices(module, case)
    if not check:
        return Prepared(name, "ok", "", module, first_call_s=first_call_s, choices=chose)
    status = "ok" if ran.passed else "fail"
    return Prepared(name, status, ran.reason, module, ran, first_call_s, choices=chose)


def time_modules(case: Case, modules: Mapping[str, nn.Module], **timing) -> tuple[dict[str, np.ndarray], str | None]:
    """Per-call ms samples of each module on the case's input, interleaved, under the one protocol
    (`measure.timing.time_layer_calls`, which `timing` goes to); ({}, why) if that ran out of memory."""
    if not modules:
        return {}, None
    fns = {name: partial(m, case.x, case.key_padding_mask) for name, m in modules.items()}
    samples, oom = guarded(lambda: time_layer_calls(fns, case.device, **timing), case.device)
    return ({}, oom) if oom is not None else (samples, None)


def gpu_ms(case: Case, module: nn.Module) -> float:
    """GPU ms of one call of `module` on the case's input with the host out of the way (`measure.timing.gpu_call_ms`):
    NaN on a CPU, or where measuring it ran out of memory, so that tables can divide by it."""
    ms, _ = guarded(lambda: gpu_call_ms(partial(module, case.x, case.key_padding_mask), case.device), case.device)
    return float("nan") if ms is None else ms


def new_case(shape: Shape, dtype: torch.dtype, device: torch.device, padding: str = "none", seed: int = 0,
             truth: bool = True) -> tuple[Case | None, str | None]:
    """(case, None), or (None, why) if building its inputs (and, with `truth`, the float64 truth) ran out of memory."""
    return guarded(lambda: Case(shape, dtype, device, padding, seed).compute_truth() if truth
                   else Case(shape, dtype, device, padding, seed), device)


def check_variant(case: Case, name: str, **options) -> VerifyResult:
    """§3 for variant `name` (built with `options`) on `case`."""
    return case.check_module(name, build_variant(name, case.layer, **options))


def verify(variant: str, shape: Shape, dtype: torch.dtype, device: torch.device,
           padding: str = "none", seed: int = 0, **options) -> VerifyResult:
    """§3 for one variant on one shape: error vs float64 truth, the reference's own error, ratio, verdict."""
    return check_variant(Case(shape, dtype, device, padding, seed), variant, **options)


CHECK_COLUMNS = ["row", "shape", "padding", "variant", "status", "err", "ref_err", "err_ratio", "bound", "passed",
                 "reason"]


def check_cases(shapes: Sequence[Shape], factories: Mapping[str, Factory], dtype: torch.dtype,
                device: torch.device, paddings: Sequence[str] = ("none",), seed: int = 0,
                show_progress: bool = True) -> pd.DataFrame:
    """§3 verdicts, one line per row × padding × variant, on fresh seeded weights and inputs (`CHECK_COLUMNS`)."""
    records = []
    progress = progress_bar(total=len(shapes) * len(paddings), desc="verify", unit="case", disable=not show_progress)
    for shape in shapes:
        for padding in paddings:
            base = {"row": shape.row, "shape": shape.label, "padding": padding}
            case, oom = new_case(shape, dtype, device, padding, seed)
            for name, factory in factories.items():
                if case is None:
                    records.append(base | {"variant": name, "status": "oom", "reason": f"building the case: {oom}"})
                    continue
                done = prepare(case, name, factory)
                bound = {"bound": done.result.bound} if done.result is not None else {}
                records.append(base | {"variant": name} | done.as_record() | bound)
                done = None  # release the module before the next one is built
            progress.update()
        case = None  # release this row's tensors before collecting
        free_memory(device)  # once per row: a full garbage collection is not free
    progress.close()
    return pd.DataFrame.from_records(records).reindex(columns=CHECK_COLUMNS)
