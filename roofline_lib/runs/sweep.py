"""Variants × shapes: verify each, time them interleaved, record memory; one tidy row per pair.

An out-of-memory error on one row is caught, recorded with the allocator's state, and freed, and a
variant that fails on its first call (a kernel refusing this GPU, say) is recorded as an error; the
sweep goes on, and the memory still held after each row is recorded so leaks show up in the data.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..core.catalog import PEERS
from ..core.correctness import Case
from ..core.device import allocated_bytes, environment, free_memory, warm_up_libraries
from ..core.outcome import guarded
from ..core.progress import progress_bar
from ..core.shapes import Shape
from ..measure.timing import VERSUS, Comparison, Timing, cold_call_ms, peak_memory
from .pipeline import gpu_ms, new_case, prepare, time_modules

MIB = 2**20


def _new_record(shape: Shape, variant: str, padding: str, seed: int) -> dict:
    return {"row": shape.row, "shape": shape.label, "batch": shape.batch, "seq_len": shape.seq_len,
            "d_model": shape.d_model, "n_heads": shape.n_heads, "padding": padding, "seed": seed, "variant": variant,
            "status": "", "reason": ""}


def _prepare_and_size(case: Case, name: str, options: dict, record: dict) -> torch.nn.Module | None:
    """Build, verify and measure the peak memory of one variant; fill `record`; return it if it runs."""
    done = prepare(case, name, options=options)
    record.update(done.as_record())
    if done.module is None:
        return None
    sizes, oom = guarded(lambda: peak_memory(lambda: done.module(case.x, case.key_padding_mask), case.device),
                         case.device)
    if oom is not None:
        record.update(status="oom", reason=oom)
        return None
    cold, oom = guarded(lambda: cold_call_ms(lambda: done.module(case.x, case.key_padding_mask), case.device),
                        case.device)
    record.update(peak_mib=sizes[0] / MIB, peak_extra_mib=sizes[1] / MIB, cold_ms=cold,
                  gpu_ms=gpu_ms(case, done.module),
                  detail=getattr(done.module, "detail", ""))
    return done.module


def sweep_row(shape: Shape, names: Sequence[str], dtype: torch.dtype, device: torch.device,
              padding: str = "none", seed: int = 0, options: dict[str, dict] | None = None,
              budget_s: float = 1.0, progress=None, against: str | None = None) -> list[dict]:
    """Records for every variant in `names` on one shape (see `run_sweep`)."""
    options = options or {}
    records = {name: _new_record(shape, name, padding, seed) for name in names}
    case, oom = new_case(shape, dtype, device, padding, seed)
    if case is None:
        for record in records.values():
            record.update(status="oom", reason=f"building inputs and truth: {oom}")
        return list(records.values())
    modules = {}
    for name in names:
        if progress is not None:
            progress.set_postfix_str(f"row {shape.row}: {name}")
        module = _prepare_and_size(case, name, options.get(name, {}), records[name])
        if module is not None:
            modules[name] = module
    samples, oom = time_modules(case, modules, budget_s=budget_s)
    if oom is not None:
        for name in modules:
            records[name].update(status="oom", reason=f"while timing: {oom}")
    for name, ms in samples.items():
        records[name].update(Timing.from_samples(ms).as_record())
        gpu_share = records[name].get("gpu_ms", float("nan")) / records[name]["median_ms"]
        records[name]["gpu_share"] = float(np.minimum(gpu_share, 1.0))  # NaN stays NaN (no GPU)
        if "reference" in samples and name != "reference":
            records[name].update(Comparison.from_samples(samples["reference"], ms).as_record())
        baseline = _baseline(list(samples), name, against)
        if baseline in samples:
            records[name].update(against=baseline, **Comparison.from_samples(samples[baseline], ms).as_record(VERSUS))
    return list(records.values())


PREVIOUS = "previous"  # `against` for a ladder: each variant against the one timed just before it


def _baseline(timed: list[str], name: str, against: str | None) -> str | None:
    """What `name` is compared with besides the reference: `against`, or with PREVIOUS the variant timed just
    before it (`timed` in the sweep's order; one that did not run, skipped on this GPU, say, is passed over)."""
    if against == PREVIOUS:
        at = timed.index(name)
        return timed[at - 1] if at > 0 else None
    return against if against != name else None


def run_sweep(rows: Sequence[Shape], names: Sequence[str], dtype: torch.dtype, device: torch.device,
              padding: str = "none", seed: int = 0, options: dict[str, dict] | None = None,
              budget_s: float = 1.0, show_progress: bool = True,
              checkpoint: Path | str | None = None, against: str | None = None,
              resume: bool = False) -> pd.DataFrame:
    """Verify (§3), time (§4) and size every variant on every row; one record per variant × row.

    Every variant is timed interleaved with the others, and compared with "reference" (`speedup`,
    `verdict`) and, when `against` names another of `names`, with that one too (`vs_speedup`, `vs_verdict`);
    `against=PREVIOUS` compares each variant with the one timed before it in `names` (a ladder's steps).

    With `checkpoint`, the records so far are written there as CSV after every row, so a run that is
    stopped part-way still leaves its finished rows behind, and the sweep's settings beside it
    (`settings_file`); with `resume` too, a run picks them up from there and sweeps only the rows still
    missing, provided it is the same sweep: rows, variants, seed, padding, budget, `against`, options, GPU,
    versions and dtype (else ValueError saying what differs).
    """
    if against not in (None, PREVIOUS, *names):
        raise ValueError(f"against={against!r} must be one of the variants swept ({', '.join(names)})")
    warm_up_libraries(device, dtype)
    baseline = allocated_bytes(device)  # memory held after a row beyond this is a leak
    env = environment(device, dtype)
    settings = json.loads(json.dumps({"rows": [s.row for s in rows], "variants": list(names), "seed": seed,
                                      "padding": padding, "budget_s": budget_s, "against": against,
                                      "options": options or {}}))  # as the file will read back
    records = finished_records(checkpoint, settings, env) if resume and checkpoint is not None else []
    done = {record["row"] for record in records}
    rows = [shape for shape in rows if shape.row not in done]
    progress = progress_bar(rows, desc="sweep", unit="row", disable=not show_progress)
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
            settings_file(checkpoint).write_text(json.dumps(settings, indent=1) + "\n")
    return _frame(records, env)


def settings_file(checkpoint: Path | str) -> Path:
    """Where a checkpoint's sweep settings are kept: beside it, as JSON."""
    return Path(checkpoint).with_suffix(".json")


def finished_records(checkpoint: Path | str, settings: dict, env: dict[str, str]) -> list[dict]:
    """The records of a stopped sweep's checkpoint, if there is one and it is the same sweep (else ValueError)."""
    if not Path(checkpoint).exists():
        return []
    done = pd.read_csv(checkpoint, dtype={"row": str})
    saved_file = settings_file(checkpoint)
    saved = json.loads(saved_file.read_text()) if saved_file.exists() else {}
    differ = [f"{key} ({saved[key]!r}, now {value!r})" if key in saved else f"{key} (not recorded)"
              for key, value in settings.items() if saved.get(key, object()) != value]
    differ += [key for key, value in env.items()
               if key != "date" and set(done[key].astype(str)) != {str(value)}]
    if differ:
        raise ValueError(f"cannot resume from {checkpoint}: its {', '.join(differ)} differ from this run's; "
                         "move it away to start afresh")
    return done.to_dict("records")


def _frame(records: list[dict], env: dict[str, str]) -> pd.DataFrame:
    columns = ["row", "shape", "batch", "seq_len", "d_model", "n_heads", "padding", "seed", "variant", "status",
               "median_ms",
               "p20_ms", "p80_ms", "reps", "cold_ms", "gpu_ms", "gpu_share", "speedup", "speedup_p20", "speedup_p80",
               "verdict", "against",
               "vs_speedup", "vs_p20", "vs_p80", "vs_verdict", "err", "ref_err",
               "err_ratio", "passed", "rows_checked", "peak_mib", "peak_extra_mib", "held_after_mib",
               "needs_gib", "first_call_s", "chosen", "attention_backend", "detail", "reason"]
    frame = pd.DataFrame.from_records(records).reindex(columns=columns)
    for key, value in env.items():  # resumed records keep their own date
        own = pd.Series([record.get(key) for record in records], index=frame.index, dtype=object)
        frame[key] = own.where(own.notna(), str(value))
    return frame
