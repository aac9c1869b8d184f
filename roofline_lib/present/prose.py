"""Prose and small tables computed from measured tables: what a notebook says about its own results.

Each function takes a results table (a sweep, an end-to-end comparison, a profile, a long-context
run) and returns a markdown paragraph or a small DataFrame, so the text never carries a number
measured on another GPU.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..measure.timing import HOST_SENSITIVE
from ..measure.ceilings import Ceilings
from ..core.decision import Decision, decide
from ..core.device import memory_capacity
from ..measure.profile_events import Profile
from ..core.reference import naive_peak_bytes, reference_fits
from ..core.shapes import Shape
from ..variants.fastest import CANDIDATES, chosen_in


def _row_list(rows: pd.Series) -> str:
    return "row " + rows.iloc[0] if len(rows) == 1 else "rows " + ", ".join(rows)


def speedup_summary(table: pd.DataFrame, candidate: str) -> str:
    """A markdown paragraph computed from a sweep (`variant` column, against the reference) or an
    `decision.end_to_end` table (`candidate` and `baseline` columns): on how many rows `candidate` is faster,
    within noise or slower, its speedup range, its §3 failures, and the keep / revert call of `decision.decide`.
    """
    column = "variant" if "variant" in table else "candidate"
    data = table[table[column] == candidate]
    if data.empty:
        raise ValueError(f"no rows for {candidate!r} in the table (it has {', '.join(table[column].unique())})")
    baseline = data.baseline.iloc[0] if "baseline" in data else "reference"
    timed = data[data.speedup.notna()]
    failed = data[data.passed.eq(False)].row  # a missing verdict (OOM, skipped) is not a failure
    parts = [f"**{candidate}** against {baseline}, {len(timed)} of {len(data)} rows timed:"]
    for verdict in ("faster", "within noise", "slower"):
        rows = timed[timed.verdict == verdict].row
        listed = f" ({_row_list(rows)})" if 0 < len(rows) < len(timed) else ""
        parts.append(f"{verdict} on {len(rows)}{listed}{'.' if verdict == 'slower' else ','}")
    if not timed.empty:
        lo, hi = timed.loc[timed.speedup.idxmin()], timed.loc[timed.speedup.idxmax()]
        parts.append(f"Speedup from {lo.speedup:.2f}× (row {lo.row}) to {hi.speedup:.2f}× (row {hi.row}).")
    parts.append(f"§3 failed on {_row_list(failed)}." if len(failed) else "§3 passed on every row checked.")
    if "gpu_share" in table and column == "variant":
        share = table[table.variant.isin([candidate, baseline])].groupby("row", sort=False).gpu_share.min()
        host = share[share < HOST_SENSITIVE]
        if len(host):
            parts.append(f"On {_row_list(pd.Series(host.index.astype(str)))} the GPU idles for more than "
                         f"{1 - HOST_SENSITIVE:.0%} of a call (the sweep's `gpu_share`): there a call's time follows "
                         f"the host's speed, and another cell can measure it differently by more than this band.")
    call = decide(data, candidate=candidate, baseline=baseline)
    return " ".join(parts) + "\n\n" + decision_markdown(call)


def decision_markdown(call: Decision) -> str:
    """The keep / revert call as one markdown line, true whichever way it went: the verb, why, and what stays."""
    verb = "keep" if call.keep else "revert"
    return f"→ **{verb}**: {call.reason}. The ladder goes on from **{call.chosen}**."


def mask_share_summary(shares: pd.DataFrame, before: str = "reference", after: str = "sdpa_fused_qkv") -> str:
    """A markdown paragraph from `profiling.mask_share_table`: the share of op time `before` and `after` spend
    building and applying masks (its range over rows), and on how many rows `after` still spends time on them."""
    parts, per_row = [], {}
    for name in (before, after):
        data = shares[(shares.variant == name) & shares.mask_share.notna()]
        if data.empty:
            have = ", ".join(shares.variant.unique())
            raise ValueError(f"no profiled rows for {name!r} in the table (it has {have})")
        lo, hi = data.loc[data.mask_share.idxmin()], data.loc[data.mask_share.idxmax()]
        parts.append(f"**{name}** spends {100 * lo.mask_share:.1f}% (row {lo.row}) to {100 * hi.mask_share:.1f}% "
                     f"(row {hi.row}) of its op time building and applying masks.")
        per_row[name] = data.set_index("row").mask_ms
    both = pd.concat(per_row, axis=1).dropna()
    still = both[both[after] > 0]
    if still.empty:
        parts.append(f"{after} spends no measurable time on masks: nothing is left to remove there.")
    else:
        kept = still[after] / still[before].where(still[before] > 0)
        parts.append(f"{after} still spends time on masks on {len(still)} of {len(both)} rows, "
                     f"{kept.min():.2f}× to {kept.max():.2f}× the time {before} spends on them.")
    return " ".join(parts)


ATTENTION_FAMILIES = (("cudnn", "cuDNN's fused attention"), ("flash", "FlashAttention"),
                      ("fmha|cutlass|mem_eff|efficient", "the memory-efficient (CUTLASS) kernel"))


def attention_family(kernel: str) -> str:
    """Which implementation a GPU kernel's name belongs to (cuDNN is tested first: its names contain "flash")."""
    for pattern, family in ATTENTION_FAMILIES:
        if re.search(pattern, kernel, flags=re.I):
            return family
    return "PyTorch's own kernels (matmuls and softmax: the math path)"


def clipped(text: str, width: int) -> str:
    """`text` cut to at most `width` characters, with an ellipsis where it was cut (long kernel names)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def attention_ran(profile: Profile, name: str) -> str:
    """A sentence naming what ran for `name`'s attention core in `profile`, from the kernel names it saw."""
    ran = profile.ran("attention core")
    if not ran:
        return f"`{name}` spent no measurable time in an attention kernel here."
    if profile.device_type != "cuda":
        return f"On the CPU `{name}`'s attention ran as aten ops: " + ", ".join(f"`{op}`" for op in ran[:3]) + "."
    return (f"`{name}`'s attention ran `{clipped(ran[0], 110)}` — {attention_family(ran[0])}"
            + (f" (and {len(ran) - 1} more kernel{'s' * (len(ran) > 2)})" if len(ran) > 1 else "") + ".")


def attention_change(before: Profile, after: Profile, names: tuple[str, str]) -> str:
    """Whether the attention kernel changed between two profiles, and its time before and after."""
    first, second = before.ran("attention core"), after.ran("attention core")
    if not first or not second:
        return ""
    us = [float(p.categories.set_index("category").loc["attention core", "time_us"]) for p in (before, after)]
    what = "kernel" if before.device_type == "cuda" else "op"
    same = (f"The same attention {what} ran for both" if first[0] == second[0] else
            f"The attention {what} changed from `{clipped(first[0], 110)}` to `{clipped(second[0], 110)}`")
    return f"{same}: attention takes {format_us(us[0])} per call in `{names[0]}`, {format_us(us[1])} in `{names[1]}`."


def share_sentence(profile: Profile, name: str, shape: Shape, *categories: str) -> str:
    """What share of `name`'s GPU time (op time on the CPU) on `shape` goes to `categories`, in µs per call."""
    table = profile.categories.set_index("category")
    us = float(table.loc[list(categories), "time_us"].sum())
    return (f"On row {shape.row} ({shape.label}) {' and '.join(categories)} take {profile.share(*categories):.0%} "
            f"of `{name}`'s {'GPU' if profile.device_type == 'cuda' else 'op'} time: {format_us(us)} of "
            f"{format_us(profile.total_us)} per call.")


MISSING = "—"  # what a sentence or table cell shows where nothing was measured


def format_us(us: float) -> str:
    """Microseconds with 3 significant digits and no exponent, as µs below 1 ms, else as ms ("1.00 ms",
    "4,892 ms"); MISSING where nothing was measured."""
    if not np.isfinite(us):
        return MISSING
    value, unit = (us, "µs") if abs(float(f"{us:.3g}")) < 1000 else (us / 1e3, "ms")
    return f"{three_digits(value)} {unit}"


def three_digits(x: float) -> str:
    """`x` with 3 significant digits, no exponent and thousands separators ("1.00", "29.8", "4,892"); MISSING for
    a value that is not a finite number (nothing measured)."""
    if not np.isfinite(x):
        return MISSING
    if x == 0:
        return "0"
    digits = max(0, 2 - int(np.floor(np.log10(abs(float(f"{x:.3g}"))))))  # of x rounded: 999.7 reads "1,000"
    return f"{x:,.{digits}f}"


def ceilings_table(measured: Ceilings, sheet: Ceilings | None = None) -> pd.DataFrame:
    """The measured ceilings next to the datasheet's (when the device is listed), with measured / datasheet."""
    def column(c: Ceilings) -> list[float]:
        return [c.matmul_tflops, c.copy_gbps, c.ridge]

    table = pd.DataFrame({"measured": column(measured)},
                         index=pd.Index(["matmul TFLOP/s", "copy GB/s", "ridge FLOP/B"], name=measured.dtype))
    if sheet is not None:
        table["datasheet"] = column(sheet)
        table["measured / datasheet"] = table.measured / table.datasheet
    return table


def feasibility_table(shapes: Sequence[Shape], dtype: torch.dtype, device: torch.device) -> pd.DataFrame:
    """Per shape: the naive layer's (B, H, N, N) score tensor and peak memory next to the memory this process
    may use on `device` (GiB), and whether the naive layer fits."""
    capacity = memory_capacity(device) / 2**30
    e = torch.finfo(dtype).bits // 8
    return pd.DataFrame([{"row": s.row, "shape": s.label, "tokens": s.tokens,
                          "scores GiB": s.batch * s.n_heads * s.seq_len ** 2 * e / 2**30,
                          "naive peak GiB": naive_peak_bytes(s, dtype) / 2**30, "capacity GiB": capacity,
                          "fits": reference_fits(s, dtype, device)} for s in shapes])


def longctx_summary(results: pd.DataFrame) -> str:
    """A markdown paragraph from `longctx.run_longctx` results: the full-sequence layer (and whether it fits under
    the memory cap), how many chunked configurations passed §3, the fastest of them, and chunked against full."""
    measured = results[results.kind == "measure"]
    full = measured[measured.variant != "chunked"]
    chunked = measured[measured.variant == "chunked"]
    first = results.iloc[0]
    parts = [f"At **{int(first.seq_len):,} tokens** ({first['device']}, {first['dtype']}):"]

    def peak(r: pd.Series) -> str:
        return f", peak {r.peak_gib:.3g} GiB" if pd.notna(r.peak_gib) else ""

    for i, (_, r) in enumerate(full.iterrows()):
        capped = f"under the {r.memory_cap_gib:.3g} GiB cap" if pd.notna(r.memory_cap_gib) else "uncapped"
        layer = f"{'tT'[i > 0]}he full-sequence layer"  # the first sentence continues "At … tokens:"
        if r.status == "oom":
            asked = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", str(r.reason))
            parts.append(f"{layer} ({r.variant}, {capped}) did not fit: out of memory"
                         + (f", with {asked.group(1)} more asked for." if asked else "."))
        elif r.status != "ok":
            parts.append(f"{layer} ({r.variant}, {capped}) did not run ({r.status}: {r.reason}).")
        elif pd.notna(r.median_ms):
            parts.append(f"{layer} ({r.variant}, {capped}) takes {format_us(r.median_ms * 1e3)}{peak(r)}.")
        else:
            parts.append(f"{layer} ({r.variant}) fits {capped}{peak(r)}.")
    passed = chunked[chunked.status == "ok"]
    counts = chunked.status.value_counts()
    others = ", ".join(f"{n} {status}" for status, n in counts.items() if status != "ok")
    parts.append(f"{len(passed)} of {len(chunked)} chunked configurations ran and passed §3"
                 + (f" ({others})." if others else "."))
    timed = passed[passed.median_ms.notna()]
    if not timed.empty:
        best = timed.loc[timed.median_ms.idxmin()]
        where = f" under the {best.memory_cap_gib:.3g} GiB cap" if pd.notna(best.memory_cap_gib) else ""
        parts.append(f"The fastest: attention {best.attention} ({best.resolved_attention}), chunks of "
                     f"{int(best.chunk_size):,} tokens, {format_us(best.median_ms * 1e3)}{where}{peak(best)}; "
                     f"error ratio {timed.err_ratio.max():.3g} at most (§3 allows 2).")
    wording = {"faster": "faster than", "slower": "slower than", "within noise": "within noise of"}
    no_cap = float("inf")
    baseline_cap = full.memory_cap_gib.iloc[0] if len(full) and pd.notna(full.memory_cap_gib.iloc[0]) else no_cap
    tighter = (chunked.memory_cap_gib.fillna(no_cap) < baseline_cap).any()  # chunked under a cap the baseline was not
    for _, c in results[(results.kind == "comparison") & (results.status == "ok")].iterrows():
        outside = c.ratio_vs_full < c.ratio_p20 or c.ratio_vs_full > c.ratio_p80  # False where a bound is NaN
        where = f"under the {c.memory_cap_gib:.3g} GiB cap" if pd.notna(c.memory_cap_gib) else "uncapped"
        parts.append(f"Interleaved, {where}: chunked takes {c.ratio_vs_full:.3f}× the full-sequence layer's time "
                     f"[p20–p80 {c.ratio_p20:.3f}–{c.ratio_p80:.3f}], {wording[c.verdict]} it"
                     + (" (the ratio of the medians sits outside the band of per-round ratios, which a few noisy "
                        "rounds can do: notebook 00)" if outside else "")
                     + ". That ratio, from calls of the two taken in turn, is the comparison; the medians above come "
                     "from separate runs" + (", the chunked ones under the cap." if tighter else "."))
    return " ".join(parts)


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


def _span(table: pd.DataFrame, column: str, unit: str = "") -> str:
    """"from <min> (row a) to <max> (row b)" of `column`, or "<value> (row a)" when one row holds both."""
    lo, hi = table.loc[table[column].idxmin()], table.loc[table[column].idxmax()]
    if lo.row == hi.row:
        return f"{lo[column]:.2f}{unit} (row {lo.row})"
    return f"from {lo[column]:.2f}{unit} (row {lo.row}) to {hi[column]:.2f}{unit} (row {hi.row})"


def ladder_summary(results: pd.DataFrame) -> str:
    """A markdown paragraph from `ladder_table`: which variant is fastest where, the speedup range over the
    reference, and (with roofline columns) how far the fastest stays from the floor."""
    best = ladder_table(results)
    parts = ["Of the variants measured here, the fastest that passed §3: " + "; ".join(
        f"**{name}** on {_row_list(group.row)}" for name, group in best.groupby("fastest_passing", sort=False)) + "."]
    timed = best[best.speedup.notna()]
    if not timed.empty:
        parts.append(f"Its speedup over the reference: {_span(timed, 'speedup', '×')}.")
    floors = best[best.fraction_of_floor.notna()] if "fraction_of_floor" in best else best.iloc[:0]
    if not floors.empty:
        parts.append(f"Its fraction of the roofline floor: {_span(floors, 'fraction_of_floor')}; the closer to 1, "
                     "the less any implementation could still gain on that row.")
        above = floors[floors.fraction_of_floor > 1]
        if not above.empty:
            parts.append(f"No implementation can pass 1, so above it ({_row_list(above.row.astype(str))}) the "
                         "ceiling that bounds the row was measured low (the GPU shared with other work, or at a "
                         "lower clock, while it was timed), and every fraction it bounds is too high with it.")
    return " ".join(parts + [_fastest_ties(results, best), _fastest_losses(results)]).strip()


def _fastest_ties(results: pd.DataFrame, best: pd.DataFrame, candidate: str = "fastest") -> str:
    """Rows where another variant has the lowest median but `candidate` is within noise of it (their speedup
    bands overlap): one sentence naming them, "" where there are none."""
    mine = results[(results.variant == candidate) & results.speedup.notna() & results.passed.ne(False)].set_index("row")
    tied = [(r.row, r.fastest_passing) for r in best.itertuples()
            if r.fastest_passing != candidate and r.row in mine.index
            and mine.loc[r.row, "speedup_p80"] >= r.speedup_p20]
    if not tied:
        return ""
    rows = ", ".join(f"{row} (`{name}`)" for row, name in tied)
    return (f"On row{'s' * (len(tied) > 1)} {rows} the lower median is within noise of `{candidate}`'s: their "
            "p20–p80 bands overlap, so another run may order them the other way.")


def _fastest_losses(results: pd.DataFrame, candidate: str = "fastest") -> str:
    """Where `candidate` is slower beyond noise than another variant of the same sweep (its whole speedup band
    below the other's): both times with their bands, and what it chose. "" where it never is."""
    ok = results[results.speedup.notna() & results.passed.ne(False)
                 & (results.status.eq("ok") if "status" in results else True)]
    mine = ok[ok.variant == candidate].set_index("row")
    lines = []
    for row, r in mine.iterrows():
        better = ok[(ok.row == row) & ok.variant.isin(CANDIDATES) & (ok.speedup_p20 > r.speedup_p80)]
        if better.empty:
            continue
        b = better.loc[better.median_ms.idxmin()]
        ran = chosen_in(r.detail) if isinstance(r.get("detail"), str) else ""
        why = (f"it ran `{ran}` itself, so two measurements of one layer disagree beyond their bands here"
               if ran == b.variant else f"`{candidate}` chose on its first call with this shape, under its own short "
               "timing, and this sweep measured otherwise")
        lines.append(f"On row {row} `{candidate}`" + (f" (it ran {ran})" if ran else "")
                     + f" took {format_us(r.median_ms * 1e3)} ({r.speedup:.2f}× [{r.speedup_p20:.2f}–"
                     f"{r.speedup_p80:.2f}]) against `{b.variant}`'s {format_us(b.median_ms * 1e3)} ({b.speedup:.2f}× "
                     f"[{b.speedup_p20:.2f}–{b.speedup_p80:.2f}]): slower beyond noise; {why}.")
    return " ".join(lines)


def host_time_losses(step: pd.DataFrame) -> str:
    """From an `experiment.end_to_end` table: the rows where the candidate is slower beyond noise although its
    GPU time per call is at most the baseline's (within 5 %) and its GPU idles for part of its call (less than
    HOST_SENSITIVE of it busy), so that what it adds is the host's time; "" where there are none, or no GPU
    times (a CPU)."""
    if "candidate_gpu_ms" not in step:
        return ""
    slower = step[step.verdict.eq("slower") & step.candidate_gpu_ms.notna()
                  & (step.candidate_gpu_ms <= 1.05 * step.baseline_gpu_ms)
                  & (step.candidate_gpu_ms < HOST_SENSITIVE * step.candidate_ms)]
    if slower.empty:
        return ""
    candidate, baseline = step.candidate.iloc[0], step.baseline.iloc[0]
    rows = ", ".join(f"{r.row} ({format_us(r.candidate_gpu_ms * 1e3)} against {format_us(r.baseline_gpu_ms * 1e3)})"
                     for r in slower.itertuples())
    return (f"On row{'s' * (len(slower) > 1)} {rows} `{candidate}` is slower beyond noise although its GPU time per "
            f"call (in parentheses, against `{baseline}`'s) is no more than 5 % higher: what it adds there is host "
            "time, the cost of launching its kernels.")


def check_summary(checks: pd.DataFrame) -> str:
    """One markdown line for a check table (`notebook.check_table`): how many cases pass and the worst error
    ratio, per variant; then every case that did not pass, in full (status, error ratio, reason)."""
    lines = []
    for name, mine in checks.groupby("variant", sort=False):
        passed = mine[mine.passed.eq(True)]
        worst = f", worst error ratio {mine.err_ratio.max():#.3g}" if mine.err_ratio.notna().any() else ""
        lines.append(f"**{name}**: {len(passed)} of {len(mine)} cases pass{worst}.")
    failing = checks[~checks.passed.eq(True)]
    for r in failing.itertuples():
        ratio = f", error ratio {r.err_ratio:#.3g}" if pd.notna(r.err_ratio) else ""
        lines.append(f"- row {r.row} ({r.shape}), padding {r.padding}, {r.variant}: {r.status}{ratio}: {r.reason}")
    return "\n".join(lines)


def kernel_check_summary(checks: pd.DataFrame) -> str:
    """One markdown line per dtype for `kernels.bench.check_add_layer_norm` records (a `dtype` column added):
    how many inputs pass, on how many `s` is exact, the worst ratio of y's error to torch's own; then every
    input that did not pass, in full."""
    lines = []
    for dtype, mine in checks.groupby("dtype", sort=False):
        ratio = (mine.y_err / mine.torch_y_err).max()
        lines.append(f"**{dtype}**: {int(mine.passed.sum())} of {len(mine)} inputs pass; `s` exact on "
                     f"{int(mine.s_exact.sum())}; y's error at most {ratio:.3g}× torch's own (2× allowed).")
    for r in checks[~checks.passed].itertuples():
        lines.append(f"- {r.dtype} {r.n_rows:,} × {r.d_model:,}: `s` exact {r.s_exact}, y error {r.y_err:.3g} "
                     f"against torch's {r.torch_y_err:.3g}")
    return "\n".join(lines)


def format_number(x: float) -> str:
    """A table cell as a reader wants it: counts and sizes as integers with thousands separators, other values
    with 3 significant digits and no exponent between 0.001 and 10⁶ (errors near 1e-7 keep one)."""
    if x != x:
        return ""
    if float(x).is_integer() and abs(x) >= 1:
        return f"{x:,.0f}"
    if 1e-3 <= abs(x) < 1e6:
        return three_digits(x)
    return f"{x:.3g}"


def lowest_per_row(table: pd.DataFrame, column: str, variants: Sequence[str]) -> str:
    """Which of `variants` has the lowest `column` on each row of a long table (row, variant, column), as
    "row 1 `a`, row 2 `b`"; rows where none of them has a value are left out."""
    rows = table[table.variant.isin(variants)].dropna(subset=[column])
    lowest = rows.loc[rows.groupby("row", sort=False)[column].idxmin()]
    return ", ".join(f"row {r.row} `{r.variant}`" for r in lowest.itertuples())


def error_ratio_sides(checks: pd.DataFrame) -> str:
    """Which variants' §3 error ratio (error / the reference's own) rose above 1 on some row, which stayed below
    1 on every row, and which stayed at 1 within the two decimals shown, from a `check_table`: the rounding each
    adds or saves against the reference."""
    worst = checks[checks.variant != "reference"].dropna(subset=["err_ratio"]).groupby("variant", sort=False).err_ratio.max()
    above = [f"`{name}` (up to {top:.2f})" for name, top in worst.items() if top >= 1.005]
    below = [f"`{name}`" for name, top in worst.items() if top < 0.995]
    level = [f"`{name}`" for name, top in worst.items() if 0.995 <= top < 1.005]
    return " ".join([f"Above 1 on some row here: {', '.join(above)}." if above else "No ratio above 1 here.",
                     f"Below 1 on every row: {', '.join(below)}." if below else "",
                     f"At 1.00 at most (the reference's rounding, give or take 0.005): {', '.join(level)}."
                     if level else ""]).strip()


def op_roofline_summary(points: pd.DataFrame, ceilings: Ceilings, name: str, min_share: float = 0.02) -> str:
    """Where the ops of `name` land, from an `op_roofline` table: each op with FLOPs (the matrix products) by its
    TFLOP/s against the roof at its intensity (the matmul ceiling right of the ridge, the bandwidth slope left
    of it); each op without FLOPs that takes `min_share` or more of the time by its GB/s against a copy's. Past
    its roof by more than a tenth (an elementwise pass can stream a little better than the plain copy that set
    the line), the ceiling was measured low."""
    shown = points[(points.flops > 0) | (points.share >= min_share)].sort_values("time_us", ascending=False)
    if shown.empty:
        return f"No op of `{name}` was placed on the roofline."
    ridge, parts, past = ceilings.ridge, [], []
    for p in shown.itertuples():
        op = f"`{p.op.removeprefix('aten::')}`"
        if p.flops > 0 and p.intensity >= ridge:
            of_roof = p.tflops / ceilings.matmul_tflops
            parts.append(f"{op} {three_digits(p.tflops)} TFLOP/s at {three_digits(p.intensity)} FLOPs per byte, "
                         f"right of the ridge: {of_roof:.2f} of the matmul ceiling")
        elif p.flops > 0:
            of_roof = p.tflops * 1e3 / (p.intensity * ceilings.copy_gbps)  # the roof there: intensity × bandwidth
            parts.append(f"{op} {three_digits(p.tflops)} TFLOP/s at {three_digits(p.intensity)} FLOPs per byte, "
                         f"left of the ridge: {of_roof:.2f} of the bandwidth roof there")
        else:
            of_roof = p.gbps / ceilings.copy_gbps
            parts.append(f"{op} {three_digits(p.gbps)} GB/s with no arithmetic, {of_roof:.2f} of a copy's")
        if of_roof > 1.1:
            past.append(op)
    text = (f"`{name}` on this device's measured ceilings ({three_digits(ceilings.matmul_tflops)} TFLOP/s, "
            f"{three_digits(ceilings.copy_gbps)} GB/s; ridge {three_digits(ridge)} FLOPs per byte), its matrix "
            f"products and the ops of {min_share:.0%} or more of its time: " + "; ".join(parts) + ".")
    if past:
        text += (f" {', '.join(past)} past the roof by more than a tenth: a ceiling was measured low (the GPU "
                 "shared with other work, or at a lower clock, while it was timed).")
    return text
