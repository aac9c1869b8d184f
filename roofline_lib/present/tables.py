"""Small tables computed from results: the measured ceilings beside the datasheet's, which shapes the naive
layer fits, the fastest variant per row of a sweep, timings with their bands, a profile's shares and passes, a
long-context run's lines.
No table leaves a NaN for the reader: a missing value is blank or says why (`blank_missing`)."""
from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..core.device import memory_capacity
from ..core.outcome import first_line
from ..core.reference import naive_peak_bytes, reference_fits
from ..core.shapes import Shape
from ..measure.ceilings import Ceilings, datasheet
from ..measure.profile_events import Profile
from ..measure.profile_rules import CATEGORIES, MASK_CATEGORIES
from ..runs.profile_suite import SuiteProfile
from .formatting import clipped, format_number, measured, percent, three_digits, with_band


def ceilings_table(ceilings: Ceilings, sheet: Ceilings | None = None) -> pd.DataFrame:
    """The measured ceilings next to the datasheet's (when the device is listed), with measured / datasheet."""
    def column(c: Ceilings) -> list[float]:
        return [c.matmul_tflops, c.copy_gbps, c.ridge]

    table = pd.DataFrame({"measured": column(ceilings)},
                         index=pd.Index(["matmul TFLOP/s", "copy GB/s", "ridge FLOP/B"], name=ceilings.dtype))
    if sheet is not None:
        table["datasheet"] = column(sheet)
        table["measured / datasheet"] = table.measured / table.datasheet
    return table


def _is_number(value: object) -> bool:
    """Whether a table writes `value` as a number: Python's or numpy's, not a flag (True is an int to Python)."""
    return isinstance(value, numbers.Number) and not isinstance(value, (bool, np.bool_))


def facts_table(facts: Mapping[str, object], about: str) -> pd.DataFrame:
    """One line of named facts, labelled `about`: numbers (numpy's too) as `format_number` writes every table's
    cells (99,999, not a pandas Series' 99999 and its dtype line); text and flags as they are."""
    return pd.DataFrame([{name: format_number(float(value)) if _is_number(value) else value
                          for name, value in facts.items()}], index=[about])


def feasibility_table(shapes: Sequence[Shape], dtype: torch.dtype, device: torch.device) -> pd.DataFrame:
    """Per shape: the naive layer's (B, H, N, N) score tensor and peak memory next to the memory this process
    may use on `device` (GiB), and whether the naive layer fits."""
    capacity = memory_capacity(device) / 2**30
    e = torch.finfo(dtype).bits // 8
    return pd.DataFrame([{"row": s.row, "shape": s.label, "tokens": s.tokens,
                          "scores GiB": s.batch * s.n_heads * s.seq_len ** 2 * e / 2**30,
                          "naive peak GiB": naive_peak_bytes(s, dtype) / 2**30, "capacity GiB": capacity,
                          "fits": reference_fits(s, dtype, device)} for s in shapes])


def as_measured(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """`table` with the numbers of `columns` written as measured values (`formatting.measured`: a peak of "14.0"
    MiB, an error ratio of "1.00", 6,564,864 bytes "6.56e+06" beside "1.59e+08"), where a table's display would
    read a whole number in full as a count ("14", "1", "6,564,864"); missing values stay missing, for
    `blank_missing`."""
    def cell(value: object) -> object:
        return measured(float(value)) if _is_number(value) and value == value else value
    return table.assign(**{c: table[c].map(cell).astype(object) for c in columns if c in table})


def ladder_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per row of a sweep: the fastest variant that passed §3, its median, its speedup over the reference with
    the p20–p80 spread, and its fraction of the roofline floor when the sweep has roofline columns."""
    passed = results[results.passed.eq(True) & results.median_ms.notna()]
    if passed.empty:
        raise ValueError("no variant passed §3 and was timed in these results")
    best = passed.loc[passed.groupby("row", sort=False).median_ms.idxmin()]
    columns = ["row", "shape", "variant", "median_ms", "speedup", "speedup_p20", "speedup_p80", "verdict"]
    columns += [c for c in ("floor_ms", "bound", "fraction_of_floor") if c in best]
    return best[columns].rename(columns={"variant": "fastest_passing"}).reset_index(drop=True)


MEASURED_RECORD_COLUMNS = ["median_ms", "p20_ms", "p80_ms", "speedup", "speedup_p20", "speedup_p80", "err_ratio",
                           "peak_mib", "peak_extra_mib", "held_after_mib"]  # never counts, though sometimes whole
Reason = str | Callable[[pd.Series], str]  # what a missing cell shows: a fixed text, or one computed from its line


def without_empty_columns(table: pd.DataFrame) -> pd.DataFrame:
    """`table` without the columns that hold nothing on any line (NaN, None or ""): a `reason` column where every
    line ran tells a reader nothing."""
    return table.loc[:, [table[c].replace("", np.nan).notna().any() for c in table.columns]]


def blank_missing(table: pd.DataFrame, reasons: Mapping[str, Reason] | None = None) -> pd.DataFrame:
    """`table` with no NaN or None left for a reader to puzzle over: a missing cell shows its reason from `reasons`
    (a text, or a function of the cell's line returning one) or, where none is given, stays blank. A column that
    had a missing cell becomes text, its numbers written as `format_number` writes them (3 significant digits)."""
    reasons = dict(reasons or {})
    out = table.copy()
    for column in table.columns:
        missing = table[column].isna()
        if not missing.any():
            continue
        why = reasons.get(column, "")

        def cell(value: object, line: pd.Series, gone: bool) -> str:
            if gone:
                return why(line) if callable(why) else why
            return format_number(value) if isinstance(value, (float, np.floating)) else str(value)

        out[column] = [cell(v, line, gone) for v, (_, line), gone in zip(table[column], table.iterrows(), missing)]
    return out


def _band(value: float, p20: float, p80: float) -> str:
    """A median time and its p20–p80 band, three significant digits each: "0.688 [0.677–0.697]" (a median lies in
    its own samples' band; a ratio's band is `with_band`'s)."""
    return f"{three_digits(value)} [{three_digits(p20)}–{three_digits(p80)}]"


def timing_table(results: pd.DataFrame, variants: Sequence[str] | None = None) -> pd.DataFrame:
    """One line per row of a sweep (`session.ladder_sweep`, or `notebook.sweep`): each variant's median ms with
    its p20–p80 band, then for each variant after the first its speedup over the reference with the band of the
    interleaved ratios, the verdict, and §3. A variant that did not run on a row shows why (its status), never NaN."""
    names = list(variants) if variants is not None else list(dict.fromkeys(results.variant))
    data = results[results.variant.isin(names)]
    records = []
    for row, group in data.groupby("row", sort=False):
        by = group.set_index("variant")
        record = {"row": row, "shape": group["shape"].iloc[0]}
        for name in names:
            if name not in by.index:
                record[f"{name} ms [p20–p80]"] = "not run"
                continue
            r = by.loc[name]
            ran = r.status in ("ok", "fail") and pd.notna(r.median_ms)
            record[f"{name} ms [p20–p80]"] = _band(r.median_ms, r.p20_ms, r.p80_ms) if ran else r.status
            if name == "reference":
                continue
            timed = ran and pd.notna(r.get("speedup"))
            record[f"{name} (× reference) [p20–p80]"] = (with_band(r.speedup, r.speedup_p20, r.speedup_p80) if timed
                                                   else r.status if not ran else "not compared")
            record[f"{name} verdict"] = r.verdict if timed else ""
            record[f"{name} §3"] = {True: "passed", False: "FAIL"}.get(r.passed, r.status)
        records.append(record)
    return pd.DataFrame.from_records(records)


def record_table(results: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """`columns` of a sweep's tidy records, each missing value shown with its reason: the reference's speedup
    reads "baseline" (it is what the others are compared with; its band and verdict stay blank), the CPU keeps no
    count of a call's memory, a variant that did not run has no time (its status says why). A table to read, not
    to compute with: its measured columns (MEASURED_RECORD_COLUMNS) are text, in three digits."""
    def not_timed(line: pd.Series) -> str:
        return "" if line.get("variant") == "reference" else str(line.get("status", ""))

    def memory(line: pd.Series) -> str:  # a sweep on the CPU has no GPU share either
        return "no count on the CPU" if pd.isna(line.get("gpu_share")) else str(line.get("status", "not measured"))

    reasons: dict[str, Reason] = {c: not_timed for c in ("speedup_p20", "speedup_p80", "verdict")}
    reasons["speedup"] = lambda line: "baseline" if line.get("variant") == "reference" else not_timed(line)
    reasons.update({c: memory for c in ("peak_mib", "peak_extra_mib", "held_after_mib")})
    reasons.update({c: (lambda line: str(line.get("status", ""))) for c in ("median_ms", "p20_ms", "p80_ms")})
    wanted = list(dict.fromkeys([*columns, "variant", "status", "gpu_share"]))
    picked = results[[c for c in wanted if c in results]].reset_index(drop=True)
    shown = blank_missing(as_measured(picked, MEASURED_RECORD_COLUMNS), reasons)
    return shown[list(columns)]


def datasheet_table() -> pd.DataFrame:
    """The datasheet (`ceilings.datasheet`) with readable headers, each empty cell saying why it is empty: no bf16
    below compute capability 8.0, no nominal figure for a generic CPU's fp16/bf16 rate or memory size."""
    sheet = datasheet()

    def rate(dtype: str) -> Callable[[pd.Series], str]:
        def why(line: pd.Series) -> str:
            if line.compute_capability in ("", "-"):
                return "not listed (a CPU)"
            if dtype == "bf16" and float(line.compute_capability) < 8.0:
                return f"none (bf16 needs compute capability 8.0; this is {line.compute_capability})"
            return "not listed"
        return why

    reasons = {"fp16_tflops": rate("fp16"), "bf16_tflops": rate("bf16"), "fp32_tflops": rate("fp32"),
               "memory_gb": "the host's", "bandwidth_gbps": "not listed"}
    shown = blank_missing(as_measured(sheet, [c for c in reasons if c != "memory_gb"]), reasons)  # a size: a count
    shown["compute_capability"] = shown.compute_capability.replace({"-": "none (a CPU)"})
    return shown.rename(columns={"name": "device", "fp16_tflops": "fp16 TFLOP/s", "bf16_tflops": "bf16 TFLOP/s",
                                 "fp32_tflops": "fp32 TFLOP/s", "bandwidth_gbps": "memory GB/s",
                                 "memory_gb": "memory GB", "compute_capability": "compute capability"})


def category_shares(categories: pd.DataFrame, rows: Sequence[str] | None = None) -> pd.DataFrame:
    """Row × category: the share of each row's profiled time per category (`SuiteProfile.categories`), in the
    order of `CATEGORIES`, leaving out a category that took no time on any row (an all-zero column says nothing)."""
    shares = categories.pivot_table(index="row", columns="category", values="share", aggfunc="sum", sort=False)
    order = [c for c in CATEGORIES if c in shares and shares[c].fillna(0).gt(0).any()]
    index = list(rows) if rows is not None else list(dict.fromkeys(categories.row))
    return shares.reindex(index=index, columns=order).fillna(0.0)


def largest_categories(categories: pd.DataFrame) -> pd.DataFrame:
    """Per row × variant of `SuiteProfile.categories`: the category that took the most time, its µs per call and
    its share."""
    keys = ["row", "variant"] if "variant" in categories else ["row"]
    top = categories.loc[categories.groupby(keys, sort=False).time_us.idxmax()]
    return top[[*keys, "shape", "category", "time_us", "share"]].rename(
        columns={"category": "largest category"}).reset_index(drop=True)


def baseline_headline(categories: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    """Notebook 01's first table, one line per row: from the profile (`SuiteProfile.categories` of one variant)
    the largest category with its share and the share spent on masks (building and applying them); from the
    timing (`roofline.add_roofline` of a sweep) the median ms with its p20–p80 band, the roofline floor and the
    fraction of it reached. Two measurements side by side: the profile's shares, the timing's milliseconds."""
    top = largest_categories(categories).set_index("row")
    masks = categories[categories.category.isin(MASK_CATEGORIES)].groupby("row", sort=False).share.sum()
    times = timed.set_index("row")
    records = []
    for row in dict.fromkeys(categories.row):
        record = {"row": row, "shape": top.loc[row, "shape"], "largest category": top.loc[row, "largest category"],
                  "its share": top.loc[row, "share"], "mask share": masks.get(row, 0.0)}
        if row in times.index and pd.notna(times.loc[row, "median_ms"]):
            t = times.loc[row]
            record.update({"ms [p20–p80]": _band(t.median_ms, t.p20_ms, t.p80_ms), "floor ms": t.floor_ms,
                           "fraction of floor": t.fraction_of_floor})
        else:
            record.update({"ms [p20–p80]": "not timed", "floor ms": "not timed", "fraction of floor": "not timed"})
        records.append(record)
    return pd.DataFrame.from_records(records)


def row_profile(suite: SuiteProfile, row: str, variant: str = "reference") -> Profile:
    """One row × variant of a `SuiteProfile` as the `Profile` it was made from, so that `op_roofline` and the
    sentences of `prose_profile` read the same measurement the suite's tables show, not a second profile."""
    run = suite.runs[(suite.runs.row == row) & (suite.runs.variant == variant)]
    if run.empty or not run.status.eq("ok").all():
        raise ValueError(f"no profile of {variant!r} on row {row} in this suite")

    def mine(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
        picked = table[(table.row == row) & (table.variant == variant)]
        return picked[list(columns)].reset_index(drop=True)

    ops = mine(suite.ops, [c for c in ("op", "category", "calls", "time_us", "self_cpu_us", "share") if c in suite.ops])
    kernel_columns = ["kernel", "category", "calls", "time_us", "share"]
    kernels = mine(suite.kernels, kernel_columns) if "kernel" in suite.kernels else pd.DataFrame(columns=kernel_columns)
    device_type = "cuda" if len(kernels) else "cpu"  # on the CPU a profile has op times only
    return Profile(device_type, int(run.steps.iloc[0]), float(run.step_us.iloc[0]), ops, kernels,
                   mine(suite.categories, ["category", "time_us", "share"]))


def masked_fill_passes(events: Sequence, device_type: str, total_us: float) -> pd.DataFrame:
    """Each `masked_fill` of one profiled call (the events of `torch.profiler.profile(record_shapes=True)`), in the
    order it ran: the shape of the tensor it masks and of the mask, its time (on CUDA the GPU time of its kernels,
    the clone inside it included; on the CPU its CPU time) and that time's share of `total_us`, the call's."""
    records = []
    for event in sorted((e for e in events if e.name == "aten::masked_fill"), key=lambda e: e.time_range.start):
        shapes = [tuple(s) for s in event.input_shapes]
        us = event.device_time_total if device_type == "cuda" else event.cpu_time_total
        records.append({"pass": len(records) + 1, "op": event.name, "scores shape": shapes[0] if shapes else (),
                        "mask shape": shapes[1] if len(shapes) > 1 else (), "time_us": float(us),
                        "share": float(us) / total_us if total_us > 0 else float("nan")})
    return pd.DataFrame.from_records(records, columns=["pass", "op", "scores shape", "mask shape", "time_us", "share"])


def kernel_bandwidth_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """`add_layer_norm_bench.kernel_table` for a reader, one line per input, every cell text: the MiB the operation
    must move, each version's GPU time per call and its GB/s with the share of the copy bandwidth in brackets, and
    the kernel's speedup over torch's pair with its p20–p80 band and verdict (no band: not timed)."""
    def rate(gbps: float, of_copy: float) -> str:
        return f"{three_digits(gbps)} ({percent(of_copy)})" if np.isfinite(of_copy) else three_digits(gbps)

    return pd.DataFrame({
        "input (rows × d_model)": [f"{m:,} × {n:,}" for m, n in zip(kernels.n_rows, kernels.d_model)],
        "MiB moved": [three_digits(v) for v in kernels.mib],
        "torch µs": [three_digits(v * 1e3) for v in kernels.torch_ms],
        "Triton µs": [three_digits(v * 1e3) for v in kernels.triton_ms],
        "torch GB/s (of copy)": [rate(g, c) for g, c in zip(kernels.torch_gbps, kernels.torch_of_copy)],
        "Triton GB/s (of copy)": [rate(g, c) for g, c in zip(kernels.triton_gbps, kernels.triton_of_copy)],
        "× torch [p20–p80]": [with_band(s, lo, hi) for s, lo, hi in
                              zip(kernels.speedup, kernels.speedup_p20, kernels.speedup_p80)],
        "verdict": kernels.verdict.fillna(""),
    })


LONGCTX_WORDS = {"ok": "", "skipped": "not run", "oom": "out of memory", "error": "refused", "fail": "failed §3"}


def why_not_run(status: object, reason: object) -> str:
    """A line's status and reason in a few words: blank for a line that ran, else what stopped it, shortened (an
    out-of-memory says which allocation failed)."""
    if not isinstance(status, str) or status == "ok":
        return ""
    text = first_line(reason) if isinstance(reason, str) and reason.strip() else ""
    asked = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", text)
    if status == "oom":
        return "out of memory" + (f" (one allocation of {asked.group(1)} failed)" if asked else "")
    word = LONGCTX_WORDS.get(status, status)
    return clipped(text if text.startswith(word) else f"{word}: {text}" if text else word, 90)


def longctx_table(results: pd.DataFrame, columns: Sequence[str], names: Mapping[str, str] | None = None
                  ) -> pd.DataFrame:
    """`columns` of a long-context frame (`runs.longctx.run_longctx`, `memory_against_n`) as a notebook shows them:
    numbers as `formatting.format_number` writes them (3 significant digits, counts with separators), no NaN: a
    value nothing measured is blank, and where the frame has `status` a column `why` says in a few words why a line
    did not run (blank where it did). Columns empty or zero on every line are left out; `names` renames columns."""
    wanted = [c for c in columns if c in results]
    shown = results[wanted].dropna(axis="columns", how="all")
    def empty(column: pd.Series) -> bool:  # nothing to read: blank text on every line, or zero on every line
        if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
            return bool(column.fillna(0).eq(0).all())
        return bool(column.astype(str).str.strip().eq("").all())

    shown = shown.loc[:, [c for c in shown if not empty(shown[c])]]

    def cell(value: object) -> object:
        if value is None or isinstance(value, float) and value != value:
            return ""
        if isinstance(value, (bool, np.bool_)):
            return "yes" if value else "no"
        return format_number(float(value)) if _is_number(value) else value

    table = shown.apply(lambda column: column.map(cell)).reset_index(drop=True)
    if "median_ms" in table and "memory_cap_gib" in results and "status" in results:  # a fit check, not timed
        checked_fit = (results.status.eq("ok") & results.median_ms.isna() & results.memory_cap_gib.notna()).to_numpy()
        table.loc[checked_fit, "median_ms"] = "not timed: a fit check"
    if "status" in results:
        why = [why_not_run(s, r) for s, r in zip(results["status"], results.get("reason", [None] * len(results)))]
        if any(why):
            table["why"] = why
    return table.rename(columns=dict(names or {}))
