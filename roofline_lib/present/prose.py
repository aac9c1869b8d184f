"""Sentences and paragraphs computed from measured tables: what a notebook says about its own results.

Each function takes a results table (a sweep, an end-to-end comparison, a check table, a long-context
run) and returns markdown, so the text never carries a number measured on another GPU. Sentences about
profiles are in `prose_profile`, small tables in `tables`, number formats in `formatting`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from ..core.decision import Decision, decide
from ..core.numbers import row_list
from ..measure.timing import HOST_SENSITIVE, WAITS_ON_HOST
from ..runs.longctx import SAME_AS_AUTO
from ..variants.fastest import CANDIDATES
from .formatting import format_us, line_speedup, measured, percent, three_digits, with_band
from .report import ladder_step, mask_mib
from .tables import ladder_table, why_not_run


def decision_markdown(call: Decision) -> str:
    """The keep / revert call as one markdown line, true whichever way it went: the verb, why, and what stays;
    where no row was timed (`Decision.decided` false), that nothing was decided and that the baseline stays."""
    if not call.decided:
        return (f"→ **nothing decided**: no row of **{call.candidate}** was timed against **{call.baseline}**, so "
                f"the ladder goes on from **{call.baseline}**.")
    verb = "keep" if call.keep else "revert"
    return f"→ **{verb}**: {call.reason}. The ladder goes on from **{call.chosen}**."


def longctx_summary(results: pd.DataFrame) -> str:
    """A markdown paragraph from `longctx.run_longctx` results: the full-sequence layer (and whether it fits under
    the memory cap), how many chunked configurations passed §3, the fastest of them, and chunked against full."""
    runs = results[results.kind == "measure"]
    full = runs[runs.variant != "chunked"]
    chunked, timed = _chunked_runs(results)
    repeats = int((runs.variant == "chunked").sum()) - len(chunked)  # lines that are auto's run again
    first = results.iloc[0]
    parts = [f"At **{int(first.seq_len):,} tokens** ({first['device']}, {first['dtype']}):"]

    def peak(r: pd.Series) -> str:
        return f", peak {three_digits(r.peak_gib)} GiB" if pd.notna(r.peak_gib) else ""

    for i, (_, r) in enumerate(full.iterrows()):
        capped = f"under the {three_digits(r.memory_cap_gib)} GiB cap" if pd.notna(r.memory_cap_gib) else "uncapped"
        layer = f"{'tT'[i > 0]}he full-sequence layer"  # the first sentence continues "At … tokens:"
        if r.status == "oom":
            asked = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", str(r.reason))
            parts.append(f"{layer} ({r.variant}, {capped}) did not fit: out of memory"
                         + (f": one allocation of {asked.group(1)} failed." if asked else "."))
        elif r.status != "ok":
            parts.append(f"{layer} ({r.variant}, {capped}) did not run ({r.status}: {r.reason}).")
        elif pd.notna(r.median_ms):
            parts.append(f"{layer} ({r.variant}, {capped}) takes {format_us(r.median_ms * 1e3)}{peak(r)}.")
        else:
            parts.append(f"{layer} ({r.variant}) fits {capped}{peak(r)}.")
    passed = chunked[chunked.status == "ok"]
    counts = chunked.status.value_counts()
    others = ", ".join(f"{n} {status}" for status, n in counts.items() if status != "ok")
    if len(chunked) == 1 and not repeats:  # one configuration tried: nothing to count
        r = chunked.iloc[0]
        ran = ("The one chunked configuration ran and passed §3" if r.status == "ok" else
               f"The one chunked configuration has no result: {why_not_run(r.status, r.reason)}")
    else:
        ran = (f"{len(passed)} of {len(chunked)} chunked configurations ran and passed §3"
               + (f" ({others})" if others else ""))
    parts.append(ran
                 + (f"; {repeats} more {'was' if repeats == 1 else 'were'} auto's choice, not run again."
                    if repeats else "."))
    if not timed.empty:
        best = timed.loc[timed.median_ms.idxmin()]
        where = f" under the {three_digits(best.memory_cap_gib)} GiB cap" if pd.notna(best.memory_cap_gib) else ""
        lead, errors = (("The fastest", f"the {len(timed)} timed configurations' error ratio at most")
                        if len(timed) > 1 else ("Timed", "its error ratio"))  # of one, nothing was picked
        parts.append(f"{lead}: attention {best.attention} ({best.resolved_attention}), chunks of "
                     f"{int(best.chunk_size):,} tokens, {format_us(best.median_ms * 1e3)}{where}{peak(best)}; "
                     f"{errors} {three_digits(timed.err_ratio.max())} (§3 allows 2).")
    wording = {"faster": "faster than", "slower": "slower than", "within noise": "within noise of"}
    no_cap = float("inf")
    baseline_cap = full.memory_cap_gib.iloc[0] if len(full) and pd.notna(full.memory_cap_gib.iloc[0]) else no_cap
    tighter = (chunked.memory_cap_gib.fillna(no_cap) < baseline_cap).any()  # chunked under a cap the baseline was not
    for _, c in results[(results.kind == "comparison") & (results.status == "ok")].iterrows():
        where = f"under the {three_digits(c.memory_cap_gib)} GiB cap" if pd.notna(c.memory_cap_gib) else "uncapped"
        parts.append(f"Interleaved, {where}: chunked takes {with_band(c.ratio_vs_full, c.ratio_p20, c.ratio_p80)} "
                     f"the full-sequence layer's time, {wording[c.verdict]} it. That ratio, from calls of the two "
                     "taken in turn, is the comparison; the medians above come from separate runs"
                     + (", the chunked ones under the cap." if tighter else "."))
    return " ".join(parts)


def _span(table: pd.DataFrame, column: str, unit: str = "") -> str:
    """"from <min> (row a) to <max> (row b)" of `column`, or "<value> (row a)" when one row holds both."""
    lo, hi = table.loc[table[column].idxmin()], table.loc[table[column].idxmax()]
    if lo.row == hi.row:
        return f"{three_digits(lo[column])}{unit} (row {lo.row})"
    return f"from {three_digits(lo[column])}{unit} (row {lo.row}) to {three_digits(hi[column])}{unit} (row {hi.row})"


def ladder_summary(results: pd.DataFrame) -> str:
    """A markdown paragraph from `ladder_table`: which variant is fastest where, the speedup range over the
    reference, and (with roofline columns) how far the fastest stays from the floor."""
    best = ladder_table(results)
    parts = ["Of the variants measured here, the fastest that passed §3: " + "; ".join(
        f"**{name}** on {row_list(group.row)}" for name, group in best.groupby("fastest_passing", sort=False)) + "."]
    timed = best[best.speedup.notna()]
    if not timed.empty:
        parts.append(f"Its speedup over the reference: {_span(timed, 'speedup', '×')}.")
    floors = best[best.fraction_of_floor.notna()] if "fraction_of_floor" in best else best.iloc[:0]
    if not floors.empty:
        parts.append(f"Its fraction of the roofline floor: {_span(floors, 'fraction_of_floor')}; the closer to 1, "
                     "the less any implementation could still gain on that row.")
        above = floors[floors.fraction_of_floor > 1]
        if not above.empty:
            parts.append(f"No implementation can pass 1, so above it ({row_list(above.row.astype(str))}) the "
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
    below the other's): both times with their bands, and what it chose (the sweep's `chosen` column; a sweep
    recorded before that column existed names no choice). "" where it never is."""
    ok = results[results.speedup.notna() & results.passed.ne(False)
                 & (results.status.eq("ok") if "status" in results else True)]
    mine = ok[ok.variant == candidate].set_index("row")
    lines = []
    for row, r in mine.iterrows():
        better = ok[(ok.row == row) & ok.variant.isin(CANDIDATES) & (ok.speedup_p20 > r.speedup_p80)]
        if better.empty:
            continue
        b = better.loc[better.median_ms.idxmin()]
        ran = r.get("chosen")
        ran = ran if isinstance(ran, str) else ""  # NaN: not recorded (or read back empty from a CSV)
        why = ("these results do not record which candidate it ran" if not ran else
               f"it ran `{ran}` itself, so two measurements of one layer disagree beyond their bands here"
               if ran == b.variant else f"`{candidate}` chose on its first call with this shape, under its own short "
               "timing, and this sweep measured otherwise")
        lines.append(f"On row {row} `{candidate}`" + (f" (it ran {ran})" if ran else "")
                     + f" took {format_us(r.median_ms * 1e3)} ({line_speedup(r)})"
                     f" against `{b.variant}`'s {format_us(b.median_ms * 1e3)} "
                     f"({line_speedup(b)}): slower beyond noise; {why}.")
    return " ".join(lines)




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
                     f"{int(mine.s_exact.sum())}; y's error at most {three_digits(ratio)}× torch's own (2× allowed).")
    for r in checks[~checks.passed].itertuples():
        lines.append(f"- {r.dtype} {r.n_rows:,} × {r.d_model:,}: `s` exact {r.s_exact}, y error {measured(r.y_err)} "
                     f"against torch's {measured(r.torch_y_err)}")
    return "\n".join(lines)


def own_reason(variant: str, reason: object) -> str:
    """A variant's reason for not running without the "name: " its message starts with (`VariantUnavailable`'s), for
    a sentence that has named the variant already; "" for a missing one."""
    return str(reason).removeprefix(f"{variant}: ") if isinstance(reason, str) else ""


def reasons_by_variant(table: pd.DataFrame) -> str:
    """One sentence per distinct reason in a table of `variant` and `reason` columns, blank reasons left out: the
    variants it concerns, then the reason once ("`triton_ln`, `residual_addmm`: needs a GPU."). Where the table has
    rows and a reason holds on some of a variant's rows only, those rows are named: "`fastest` (rows 1, 2): …"."""
    reasons = table.assign(reason=[own_reason(v, r) for v, r in zip(table.variant, table.reason)])
    sentences = []
    for reason, lines in reasons[reasons.reason != ""].groupby("reason", sort=False):
        names = []
        for variant in dict.fromkeys(lines.variant):
            rows = list(lines.row[lines.variant == variant]) if "row" in lines else []
            some = 0 < len(rows) < (table.variant == variant).sum()
            names.append(f"`{variant}`" + (f" (row{'s' * (len(rows) > 1)} {', '.join(map(str, rows))})" if some
                                          else ""))
        sentences.append(", ".join(names) + f": {reason.rstrip('.')}.")
    return " ".join(sentences)


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
    others = checks[checks.variant != "reference"].dropna(subset=["err_ratio"])
    worst = others.groupby("variant", sort=False).err_ratio.max()
    above = [f"`{name}` (up to {three_digits(top)})" for name, top in worst.items() if top >= 1.005]
    below = [f"`{name}`" for name, top in worst.items() if top < 0.995]
    level = [f"`{name}`" for name, top in worst.items() if 0.995 <= top < 1.005]
    return " ".join([f"Above 1 on some row here: {', '.join(above)}." if above else "No ratio above 1 here.",
                     f"Below 1 on every row: {', '.join(below)}." if below else "",
                     f"At 1.00 at most (the reference's rounding, give or take 0.005): {', '.join(level)}."
                     if level else ""]).strip()


def step_headline(ladder: pd.DataFrame, variant: str) -> str:
    """One markdown sentence from a ladder sweep (`session.ladder_sweep`): `variant`'s speedup over the rung before
    it, as the geometric mean over the rows timed with its band (`decision.decide`'s), where it ran, the lowest and
    the highest row with their bands, on how many rows it is faster beyond noise, and whether §3 passed."""
    step = ladder_step(ladder, variant)
    timed = step[step.speedup.notna()]
    baselines = [b for b in dict.fromkeys(step.baseline) if b]
    before = f"**{baselines[0]}**" if len(baselines) == 1 else "the rung before it"
    first = ladder.iloc[0]
    where = f"on this {first['device']} in {first['dtype']}" if "device" in ladder else "here"
    if timed.empty:
        said = step.assign(reason=[own_reason(variant, r) for r in step.reason])
        why = said.groupby(["status", "reason"], sort=False).row.apply(lambda rows: row_list(rows.astype(str)))
        return f"**{variant}** was not timed against {before} {where}: " + "; ".join(
            f"{rows} {status}" + (f" ({reason})" if reason else "") for (status, reason), rows in why.items()) + "."
    call = decide(step, candidate=variant, baseline=baselines[0] if len(baselines) == 1 else "")
    lo, hi = timed.loc[timed.speedup.idxmin()], timed.loc[timed.speedup.idxmax()]
    spread = (f"row {lo.row} ({lo['shape']}) at {line_speedup(lo)}"
              if lo.row == hi.row else
              f"from {line_speedup(lo)} on row {lo.row} ({lo['shape']}) to "
              f"{line_speedup(hi)} on row {hi.row} ({hi['shape']})")
    faster = int(timed.verdict.eq("faster").sum())
    failed = step[step.passed.eq(False)].row
    checked = f"§3 failed on {row_list(failed)}" if len(failed) else "§3 passed on every row"
    if call.rows <= 1 and not len(failed):
        ratio = line_speedup(lo)
        return (f"{where[0].upper()}{where[1:]}, **{variant}** is {ratio} as fast as {before} on row {lo.row} "
                f"({lo['shape']}): {lo.verdict}; {checked}.")
    return (f"{where[0].upper()}{where[1:]}, **{variant}** is {with_band(call.speedup, call.p20, call.p80)} as fast as "
            f"{before} (the geometric mean over {call.rows} rows): {spread}; faster beyond noise on {faster} of "
            f"{len(timed)} rows, and {checked}.")


def step_decision(ladder: pd.DataFrame, variant: str, call: Decision | None = None) -> str:
    """The keep-or-revert paragraph for one rung from a ladder sweep: the rows on which it is faster, within noise
    or slower than the rung before it, the rows whose time follows the host's speed (the GPU idles for more than
    1 − HOST_SENSITIVE of a call), and the call: `call` where the notebook made it (with its kernel's own check,
    say, and remembered it), so the paragraph shows that very call; else `decision.decide`'s on the step itself.
    Where the rung before differs from row to row (a rung in between ran on some rows only), each is named with
    its rows."""
    step = ladder_step(ladder, variant)
    timed = step[step.speedup.notna()]
    named = step[step.baseline != ""].groupby("baseline", sort=False).row  # a rung in between ran on some rows
    baseline = (next(iter(named.groups)) if named.ngroups == 1 else  # one rung before on every row, or each named
                ", ".join(f"{b} on {row_list(rows.astype(str))}" for b, rows in named))
    if call is not None and call.candidate != variant:
        raise ValueError(f"the call given decides {call.candidate!r}, not {variant!r}")
    parts = []
    for verdict in ("faster", "within noise", "slower"):
        rows = timed[timed.verdict == verdict].row
        if len(rows):
            parts.append(f"{verdict} on {row_list(rows.astype(str))}")
    text = f"Against {baseline}: " + "; ".join(parts) + "." if parts else ""  # none timed: the call says so
    host = timed[timed.gpu_share < HOST_SENSITIVE]
    if len(host):
        shares = ", ".join(f"{percent(share)} on row {row}" for row, share in zip(host.row, host.gpu_share))
        text += (f" On {row_list(host.row.astype(str))} the GPU idles for more than {1 - HOST_SENSITIVE:.0%} of a "
                 f"call (GPU share {shares}, the lower of the two rungs'), so there a call's time follows the "
                 "host's speed and may differ in another run by more than its band.")
    call = call if call is not None else decide(step, candidate=variant, baseline=baseline)
    return (text + "\n\n" if text else "") + decision_markdown(call)


def memory_summary(ladder: pd.DataFrame, before: str, after: str, mask: bool = False) -> str:
    """One or two markdown sentences from a ladder sweep's `peak_extra_mib`: `after`'s peak memory per call as a
    share of `before`'s (lowest and highest row), and the most it saves; with `mask`, that saving beside the empty
    mask's own MiB on the same row (`report.mask_mib`). On the CPU, where torch keeps no count, says so."""
    data = ladder[ladder.variant.isin([before, after])]
    wide = data.pivot(index="row", columns="variant", values="peak_extra_mib") if "peak_extra_mib" in data else None
    if wide is None or before not in wide or after not in wide or wide[[before, after]].isna().all().all():
        return ("torch keeps no count of a call's memory on the CPU, so this run has no memory table; on a GPU it "
                "shows each call's peak.")
    both = wide[[before, after]].dropna()
    both = both[both[before] > 0]
    if both.empty:
        return f"Neither **{before}** nor **{after}** allocated anything measurable beyond its inputs here."
    share = both[after] / both[before]
    saved = both[before] - both[after]
    lo, hi, most = share.idxmin(), share.idxmax(), saved.idxmax()
    spread = (f"{percent(share[lo])} of **{before}**'s on row {lo}" if lo == hi else
              f"from {percent(share[lo])} of **{before}**'s (row {lo}) to {percent(share[hi])} (row {hi})")
    text = f"**{after}**'s peak memory per call, beyond what was already held, is {spread}."
    if saved[most] <= 0:
        return text + " It saves none on any row."
    text += (f" The most it saves is {three_digits(saved[most])} MiB, on row {most} "
             f"({three_digits(both.loc[most, before])} → {three_digits(both.loc[most, after])} MiB).")
    if mask:
        sizes = dict(zip(ladder.drop_duplicates("row").row, mask_mib(ladder.drop_duplicates("row"))))
        text += (f" The empty mask on that row, B·N² booleans and SDPA's additive copy in {ladder['dtype'].iloc[0]}, "
                 f"is {three_digits(sizes[most])} MiB.")
    return text


def gpu_time_sentence(ladder: pd.DataFrame, variant: str) -> str:
    """From a ladder sweep: on which rows `variant`'s GPU time per call (its kernels back to back, the host out of
    the way: the sweep's `gpu_ms`) is lower, the same (to three digits) or higher than the rung before's, and the
    rows where it is slower per call beyond noise while its GPU time is not higher, so that what it adds there is
    the host's time. Each claim is read from the table; "" where no GPU time was measured (a CPU)."""
    step = ladder_step(ladder, variant)
    timed = ladder.set_index(["row", "variant"])
    if "gpu_ms" not in timed or timed["gpu_ms"].isna().all():
        return ""
    mine = [timed["gpu_ms"].get((row, variant), float("nan")) for row in step.row]
    theirs = [timed["gpu_ms"].get((row, before), float("nan")) for row, before in zip(step.row, step.baseline)]
    both = step.assign(mine=mine, theirs=theirs).dropna(subset=["mine", "theirs"])
    if both.empty:
        return ""
    same = both.apply(lambda r: three_digits(r.mine * 1e3) == three_digits(r.theirs * 1e3), axis=1)
    baseline = both.baseline.iloc[0] if both.baseline.nunique() == 1 else "the rung before"
    sides = {f"lower than `{baseline}`'s": both[~same & (both.mine < both.theirs)],
             f"the same as `{baseline}`'s to three digits": both[same],
             f"higher than `{baseline}`'s": both[~same & (both.mine > both.theirs)]}
    text = (f"GPU time per call (the kernels back to back, the host out of the way): `{variant}`'s is "
            + "; ".join(f"{side} on {row_list(rows.row.astype(str))}" for side, rows in sides.items() if len(rows))
            + ".")
    host = both[both.verdict.eq("slower") & (both.mine <= both.theirs)]
    if len(host):
        text += (f" On {row_list(host.row.astype(str))} `{variant}` is slower per call beyond noise although its "
                 "GPU time is not higher: what it adds there is host time, the cost of launching its kernels "
                 "(notebook 05 splits a call into the host's share and the GPU's).")
    return text


def host_share_headline(ladder: pd.DataFrame, variant: str, rows: Sequence[str]) -> str:
    """One markdown sentence from a ladder sweep on `rows`: `variant`'s GPU time per call (kernels back to back, the
    host out of the way), its whole call's time, and the rows on which the GPU waits for the host during most of the
    call (`timing.WAITS_ON_HOST`). On a CPU, which has no GPU time to split off, says so."""
    data = ladder[(ladder.variant == variant) & ladder.row.isin(list(rows)) & ladder.median_ms.notna()]
    if data.empty:
        raise ValueError(f"no timed rows of {variant!r} among rows {', '.join(rows)} in the ladder")
    if data.gpu_ms.isna().all():
        return (f"No GPU here: a `{variant}` call is all the CPU's work, with no GPU time to split off; on a GPU "
                "this sentence gives each row's GPU time per call and the host's share of the call.")
    first = ladder.iloc[0]
    where = f"On this {first['device']}" if "device" in ladder else "Here"
    gpu = data.gpu_ms * 1e3
    call = data.median_ms * 1e3
    waits = data[data.gpu_share < WAITS_ON_HOST].row

    def span(us: pd.Series) -> str:
        return f"{format_us(us.min())} to {format_us(us.max())}" if len(us) > 1 else format_us(us.iloc[0])

    text = (f"{where}, on {row_list(data.row.astype(str))}, a `{variant}` call keeps the GPU busy for "
            f"{span(gpu)} (its GPU time per call) and takes {span(call)} from start to end. ")
    if len(waits):
        return text + (f"On {row_list(waits.astype(str))} the GPU waits for the host during most of the call: "
                       "there the host, not the GPU, sets the time.")
    return text + "On none of them does the GPU wait for the host during most of the call."


def kernel_bandwidth_sentence(kernels: pd.DataFrame) -> str:
    """From `add_layer_norm_bench.kernel_table`: on how many inputs the fused kernel alone is faster than torch's add
    then layer_norm, within noise or slower (its p20–p80 band), and the largest share of the copy bandwidth each
    reaches, on which input."""
    counts = ", ".join(f"{verdict} on {int(kernels.verdict.eq(verdict).sum())}"
                       for verdict in ("faster", "within noise", "slower"))
    text = f"The fused kernel alone, against torch's add then `layer_norm`, on {len(kernels)} inputs: {counts}."
    if kernels.torch_of_copy.notna().any():
        def best(name: str) -> str:
            r = kernels.loc[kernels[f"{name}_of_copy"].idxmax()]
            return f"{percent(r[f'{name}_of_copy'])} ({r.n_rows:,} × {r.d_model:,})"
        text += (f" The most of the copy bandwidth each reaches: the kernel {best('triton')}, torch's pair "
                 f"{best('torch')}.")
    return text


def _full_name(full: pd.DataFrame) -> str:
    """The full-sequence layer's name in a long-context run's lines of it (`no_empty_mask`)."""
    return str(full.variant.iloc[0]) if len(full) else "no_empty_mask"


def _chunked_runs(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`runs.longctx.run_longctx` results' chunked configurations (a line that repeats `auto`'s is not another), and
    those of them that passed §3 and were timed."""
    chunked = results[(results.kind == "measure") & (results.variant == "chunked")
                      & ~results.reason.fillna("").astype(str).str.startswith(SAME_AS_AUTO)]
    return chunked, chunked[chunked.status.eq("ok") & chunked.median_ms.notna()]


def longctx_recap(results: pd.DataFrame) -> str:
    """A few words for 07's recap from `runs.longctx.run_longctx` results: the fastest chunked configuration that
    passed §3 and its peak; where it was timed in turn with the full-sequence layer, its time from those calls beside
    their ratio (the numbers of 06's headline), else its time from its own run."""
    chunked, passed = _chunked_runs(results)
    head = f"{int(results.seq_len.iloc[0]):,} tokens"
    if passed.empty:
        return f"{head}: no chunked configuration ran and passed §3"
    best = passed.loc[passed.median_ms.idxmin()]
    peak = f" at a peak of {three_digits(best.peak_gib)} GiB" if pd.notna(best.peak_gib) else ""
    versus = results[(results.kind == "comparison") & results.status.eq("ok")]
    c = versus.iloc[0] if len(versus) else None
    ms = best.median_ms if c is None else c.median_ms
    text = (f"{head}, chunks of {int(best.chunk_size):,}: {format_us(ms * 1e3)} per call{peak}, "
            + ("§3 passed" if len(chunked) == 1 else f"§3 passed in {len(passed)} of {len(chunked)} configurations"))
    if c is not None:
        text += (f"; {with_band(c.ratio_vs_full, c.ratio_p20, c.ratio_p80)} the full layer's time "
                 f"({format_us(c.full_ms * 1e3)}), the two timed in turn")
    return text


def longctx_headline(results: pd.DataFrame) -> str:
    """Markdown sentences from `runs.longctx.run_longctx` results: how many chunked configurations ran and passed
    §3 (the worst error ratio), the fastest one and both peaks, then its time and the full-sequence layer's from the
    calls taken in turn, beside the ratio and its p20–p80 band from those same calls (never times from another
    run beside that ratio); where the full-sequence layer did not run, why."""
    chunked, passed = _chunked_runs(results)
    head = f"At **{int(results.seq_len.iloc[0]):,} tokens**"
    if passed.empty:
        why = "; ".join(f"{r.attention}, chunks of {int(r.chunk_size):,}: {why_not_run(r.status, r.reason)}"
                        for r in chunked.itertuples())
        return f"{head} no chunked configuration ran and passed §3 here ({why or 'none was tried'})."
    best = passed.loc[passed.median_ms.idxmin()]
    full = results[(results.kind == "measure") & (results.variant != "chunked")]
    baseline = full.iloc[0] if len(full) else None  # the first line of it: uncapped, or under the run's own cap

    def peak(r: pd.Series) -> str:
        return f"{three_digits(r.peak_gib)} GiB" if pd.notna(r.peak_gib) else ""

    versus = results[(results.kind == "comparison") & results.status.eq("ok")]
    setup = f"chunks of {int(best.chunk_size):,} tokens with `{best.resolved_attention}` attention"
    if len(chunked) == 1:  # one configuration tried: nothing to pick from
        text = (f"{head} the chunked layer, {setup}, passes §3 (error ratio "
                f"{three_digits(best.err_ratio)}; §3 allows 2)")
    else:
        text = (f"{head} the chunked layer passes §3 in {len(passed)} of {len(chunked)} configurations (error "
                f"ratio at most {three_digits(passed.err_ratio.max())}; §3 allows 2). "
                + ("The fastest is" if len(passed) > 1 else "The one that passed is") + f" {setup}")
    if peak(best):
        text += f", at a peak of {peak(best)}"
        if baseline is not None and baseline.status == "ok" and peak(baseline):
            text += f" (the full-sequence layer's: {peak(baseline)})"
    if len(versus):  # the times beside the ratio come from the same interleaved calls as the ratio
        c = versus.iloc[0]
        wording = {"faster": "faster than it", "slower": "slower than it", "within noise": "within noise of it"}
        rounds = f" of {int(c.reps)} rounds" if "reps" in c and pd.notna(c.reps) else ""
        text += (f". Timed in turn with the full-sequence layer (`{_full_name(full)}`), it takes "
                 f"{format_us(c.median_ms * 1e3)} per call against {format_us(c.full_ms * 1e3)}: "
                 f"{with_band(c.ratio_vs_full, c.ratio_p20, c.ratio_p80)} its time (median and p20–p80 of the "
                 f"per-round ratios{rounds}), {wording.get(c.verdict, c.verdict)}. The figure and the table below time "
                 "each configuration in a run of its own.")
    else:
        text += f"; it takes {format_us(best.median_ms * 1e3)} per call."
    for r in full.itertuples():  # whether the full layer ran at all, and under the cap
        if r.status == "ok" and pd.isna(r.memory_cap_gib):
            continue  # the uncapped baseline: its time is in the comparison
        where = f"Under a {three_digits(r.memory_cap_gib)} GiB cap the" if pd.notna(r.memory_cap_gib) else "The"
        did = ("fits" if r.status == "ok" else f"does not fit: {why_not_run(r.status, r.reason)}" if r.status == "oom"
               else f"did not run: {why_not_run(r.status, r.reason)}")
        text += f" {where} full-sequence layer {did}."
    if not len(versus) and not full.status.eq("ok").any():
        text += " With no run of the full-sequence layer to time it against, nothing is compared."
    return text
