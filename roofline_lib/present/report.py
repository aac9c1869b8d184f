"""Tables from sweep results: what the README and the CLI print."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..core.catalog import PEERS
from ..core.decision import BASELINE, CANDIDATE, Decision, decide
from ..measure.timing import HOST_SENSITIVE
from ..variants.registry import describe
from .formatting import MISSING, format_us, measured, percent, three_digits, with_band


def speedup_table(results: pd.DataFrame) -> pd.DataFrame:
    """Row × variant: the median time (µs below 1 ms, as the ladder's tables write it), and for non-reference
    variants the speedup over the reference with its p20–p80 band (`with_band`), their headers saying so
    ("no_empty_mask (× reference)"), so that a speedup is never read as over the column beside it."""
    def cell(r: pd.Series) -> str:
        if r.status in ("infeasible", "skipped", "oom", "error"):
            return r.status
        text = format_us(r.median_ms * 1e3)
        if r.variant != "reference" and pd.notna(r.get("speedup")):
            text += f", {with_band(r.speedup, r.speedup_p20, r.speedup_p80)}"  # no parentheses in parentheses
        return text + ("" if r.passed else " FAIL")

    table = results.assign(cell=results.apply(cell, axis=1))
    wide = table.pivot(index=["row", "shape"], columns="variant", values="cell")
    wide = wide.reindex(columns=list(dict.fromkeys(results["variant"])))
    order = list(dict.fromkeys(results["row"]))
    wide = wide.rename(columns=lambda v: v if v == "reference" else f"{v} (× reference)")
    return wide.reindex(order, level="row").reset_index().rename_axis(columns=None)


def host_gpu_table(results: pd.DataFrame) -> pd.DataFrame:
    """Row × variant, long form: one call's µs under the one protocol, the GPU's µs of it (kernels back to back,
    host out of the way) and the host's share, the part of the call in which the GPU waits on the host. A
    share under 1 − HOST_SENSITIVE reads "under 10%": the two timings differ by that much without any wait."""
    timed = results[results["median_ms"].notna()]
    noise_share = 1 - HOST_SENSITIVE
    return pd.DataFrame({
        "row": timed["row"], "shape": timed["shape"], "variant": timed["variant"],
        "call µs": timed["median_ms"] * 1e3, "GPU µs": timed["gpu_ms"] * 1e3,
        "host share": (1 - timed["gpu_share"]).map(
            lambda share: "" if pd.isna(share) else f"under {noise_share:.0%}" if share < noise_share
            else percent(share)),
    }).reset_index(drop=True)


def summary_markdown(results: pd.DataFrame) -> str:
    """A markdown summary: where it ran, then the speedup table."""
    first = results.iloc[0]
    head = (f"{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['dtype']}, {first['date']}. "
            "Cells: median time per call (µs below 1 ms), speedup over the reference [p20–p80 of interleaved ratios]; "
            "FAIL marks a §3 failure.\n\n")
    return head + speedup_table(results).to_markdown(index=False) + "\n"


def versus_table(results: pd.DataFrame) -> pd.DataFrame:
    """Row × variant, long form, from a sweep run with `against`: median ms, speedup over the reference,
    time ratio against the named variant (>1: faster than it) with spread and verdict, fraction of the
    roofline floor where the results have it, compile/first-call seconds and the §3 error ratio."""
    if "against" not in results or results["against"].isna().all():
        raise ValueError("these results compare with no variant: sweep them with against=… (--against)")
    against = results["against"].dropna().iloc[0]
    fmt = lambda r, c, p20, p80: with_band(r[c], r[p20], r[p80]) if pd.notna(r.get(c)) else ""  # noqa: E731
    table = pd.DataFrame({
        "row": results["row"], "shape": results["shape"], "variant": results["variant"],
        "ms": results["median_ms"].map(measured),
        "× reference": results.apply(fmt, axis=1, args=("speedup", "speedup_p20", "speedup_p80")),
        f"× {against}": results.apply(fmt, axis=1, args=("vs_speedup", "vs_p20", "vs_p80")),
        "verdict": results["vs_verdict"].fillna(""),
        "fraction of floor": (results["fraction_of_floor"].map(measured)
                              if "fraction_of_floor" in results else ""),
        "first call s": results["first_call_s"].map(measured),
        "err ratio": results["err_ratio"].map(measured),
    })
    return table.replace("nan", "").reset_index(drop=True)


def write_results(table: pd.DataFrame, out: str | Path, stem: str, env: dict[str, str]) -> Path:
    """Write `table` as `<out>/<stem>_<device>_<dtype>_<date>.csv` (the folder made if needed); return the path.
    A benchmark's results file names where and when it was measured, as every file under results/ does."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}_{slug(env['device'])}_{env['dtype']}_{env['date']}.csv"
    table.to_csv(path, index=False)
    return path


def slug(text: str) -> str:
    """A file-name-safe lowercase form of `text` ("NVIDIA H200" → "nvidia-h200")."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def peer_summary(results: pd.DataFrame, candidate: str = "fastest") -> pd.DataFrame:
    """One line per row: `candidate` and each peer present (torch.compile …) in ms with its compile
    (first-call) seconds, the candidate's fraction of the roofline floor, and how it compares with each
    peer: the interleaved ratio [p20–p80] with its verdict against the sweep's `against` peer, the ratio
    of medians against the others (>1: the candidate is faster)."""
    peers = [name for name in PEERS if name in set(results["variant"])]
    if candidate not in set(results["variant"]) or not peers:
        raise ValueError(f"need {candidate!r} and at least one of {', '.join(PEERS)} in the results")
    twice = results[results.duplicated(["row", "variant"])]
    if len(twice):
        raise ValueError(f"row {twice.row.iloc[0]} has {twice.variant.iloc[0]!r} more than once: "
                         "one result per row and variant")
    against = results["against"].dropna().iloc[0] if "against" in results and results["against"].notna().any() else None
    records = []
    for row, group in results.groupby("row", sort=False):
        by = group.set_index("variant")
        mine = by.loc[candidate]
        record = {"row": row, "shape": mine["shape"], f"{candidate} ms": three_digits(mine.median_ms),
                  "fraction of floor": three_digits(mine.fraction_of_floor) if "fraction_of_floor" in by else ""}
        for peer in peers:
            p = by.loc[peer]
            record[f"{peer} ms (compile s)"] = f"{three_digits(p.median_ms)} ({three_digits(p.first_call_s)})"
            if peer == against:
                record[f"× {peer}"] = f"{with_band(mine.vs_speedup, mine.vs_p20, mine.vs_p80)} {mine.vs_verdict}"
            else:
                record[f"× {peer}"] = f"{three_digits(p.median_ms / mine.median_ms)}×"
        records.append(record)
    return pd.DataFrame.from_records(records)


def markdown_table(table: pd.DataFrame, floatfmt: str = ".4g", index: bool = False) -> str:
    """`table` as a markdown table with formatting.MISSING where a value is missing (tabulate writes "nan" for a
    float NaN unless it is None)."""
    cells = table.astype(object).where(table.notna(), None)
    return cells.to_markdown(index=index, floatfmt=floatfmt, missingval=MISSING)


def longctx_markdown(results: pd.DataFrame) -> str:
    """`longctx.run_longctx` results as a short markdown table (times in ms, memory in GiB): columns nothing was
    measured in (memory on a CPU, ratios without a full-sequence run) left out, and "—" where one row has no value."""
    cols = ["kind", "variant", "attention", "resolved_attention", "chunk_size", "memory_cap_gib", "status",
            "err_ratio", "first_call_s", "median_ms", "tflops", "peak_gib", "peak_extra_gib", "ratio_vs_full",
            "ratio_p20", "ratio_p80", "verdict"]
    return markdown_table(results[cols].dropna(axis="columns", how="all"))


def rung_descriptions(names: list[str]) -> str:
    """A markdown table of `names` and what each is, from its factory's docstring (`registry.describe`)."""
    return markdown_table(pd.DataFrame({"variant": names, "what it is": [describe(name) for name in names]}))


def rung_before(ladder: pd.DataFrame, variant: str) -> str:
    """The rung a ladder sweep compares `variant` with where it ran: the last one before it in the sweep's order
    that was timed on some row (the sweep's `against=PREVIOUS` passes over one that ran nowhere); "" for the first."""
    order = list(dict.fromkeys(ladder.variant))
    timed = set(ladder.variant[ladder.median_ms.notna()]) if "median_ms" in ladder else set(order)
    earlier = [name for name in order[:order.index(variant)] if name in timed]
    return earlier[-1] if earlier else ""


def ladder_step(ladder: pd.DataFrame, variant: str) -> pd.DataFrame:
    """`variant`'s rows of a ladder sweep (`session.ladder_sweep`, compared `against` the rung before it) as one
    step, in the columns of `experiment.end_to_end`: candidate and baseline (the rung before, per row), their
    medians, and the comparison with the rung before as speedup, speedup_p20, speedup_p80 and verdict, so that
    `decision.decide` reads the step itself, not what the rungs before it gained. `ref_speedup` and its band keep
    the comparison with the reference; `gpu_share` is the lower of the two rungs' (the sweep's). A row `variant`
    did not run on (the sweep names no rung there) names the rung before it in the sweep's order (`rung_before`)."""
    mine = ladder[ladder.variant == variant]
    if mine.empty:
        raise ValueError(f"no rows for {variant!r} in the ladder (it has {', '.join(ladder.variant.unique())})")
    if "against" not in mine:
        raise ValueError("this sweep compares no rung with the one before it: take it from session.ladder_sweep")
    baseline = mine["against"].fillna(rung_before(ladder, variant))
    timed = ladder.set_index(["row", "variant"])
    keys = list(zip(mine["row"], baseline))

    def lookup(column: str) -> list[float]:
        return [timed[column].get(key, float("nan")) if column in timed else float("nan") for key in keys]

    gpu_share = mine["gpu_share"] if "gpu_share" in mine else pd.Series(float("nan"), index=mine.index)
    return pd.DataFrame({
        "row": mine["row"], "shape": mine["shape"], "candidate": variant, "baseline": baseline,
        "status": mine["status"], "passed": mine["passed"], "reason": mine["reason"].fillna(""),
        "err_ratio": mine["err_ratio"], "baseline_ms": lookup("median_ms"), "candidate_ms": mine["median_ms"],
        "speedup": mine["vs_speedup"], "speedup_p20": mine["vs_p20"], "speedup_p80": mine["vs_p80"],
        "verdict": mine["vs_verdict"].fillna(""),
        "ref_speedup": mine["speedup"], "ref_p20": mine["speedup_p20"], "ref_p80": mine["speedup_p80"],
        "gpu_share": pd.concat([gpu_share.reset_index(drop=True), pd.Series(lookup("gpu_share"))], axis=1)
                       .min(axis=1, skipna=False).to_numpy(),
    }).reset_index(drop=True)


def step_table(ladder: pd.DataFrame, variant: str) -> pd.DataFrame:
    """One rung of a ladder sweep against the rung before it, a line per row, every cell text (no NaN): both
    medians per call, the speedup over the rung before with its p20–p80 band and verdict, the speedup over the
    reference (when the rung before is not the reference) and the §3 error ratio. A row that did not run shows its
    status where its time would be, and its reason in `note`."""
    step = ladder_step(ladder, variant)
    baselines = [b for b in dict.fromkeys(step.baseline) if b]
    before = baselines[0] if len(baselines) == 1 else "the rung before"

    def ms(value: float, status: str) -> str:
        return format_us(value * 1e3) if pd.notna(value) else (status if status != "ok" else "")

    table = pd.DataFrame({"row": step.row, "shape": step["shape"],
                          f"{before} per call": [ms(v, "") for v in step.baseline_ms],
                          f"{variant} per call": [ms(v, s) for v, s in zip(step.candidate_ms, step.status)],
                          f"× {before}": [with_band(*r) for r in zip(step.speedup, step.speedup_p20, step.speedup_p80)],
                          "verdict": step.verdict})
    if before != "reference":
        table["× reference"] = [with_band(*r) for r in zip(step.ref_speedup, step.ref_p20, step.ref_p80)]
    table["§3 error ratio"] = [three_digits(r) if pd.notna(r) else "" for r in step.err_ratio]
    notes = [reason if status != "ok" else "" for status, reason in zip(step.status, step.reason)]
    if any(notes):
        table["note"] = notes
    return table


DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}  # a sweep's `dtype` column → bytes per element


def mask_mib(ladder: pd.DataFrame) -> pd.Series:
    """Per line of a sweep: the MiB of the (B, 1, N, N) mask `sdpa_fused_qkv` hands SDPA, B·N² booleans, plus the
    additive copy SDPA makes of it in the layer's dtype (`where`): B·N²·(1 + bytes per element)."""
    e = ladder["dtype"].map(DTYPE_BYTES).fillna(2)
    return ladder["batch"] * ladder["seq_len"] ** 2 * (1 + e) / 2**20


def memory_table(ladder: pd.DataFrame, variants: list[str], mask: bool = False) -> pd.DataFrame:
    """Row × variant: each call's peak memory beyond what was already held (the sweep's `peak_extra_mib`), MiB
    with three significant digits; with `mask`, the empty mask's MiB (`mask_mib`) beside them. Empty (no rows)
    where no variant has a count: torch keeps none on the CPU."""
    data = ladder[ladder.variant.isin(variants)]
    if "peak_extra_mib" not in data or data.peak_extra_mib.isna().all():
        return pd.DataFrame(columns=["row", "shape", *variants])
    wide = data.pivot(index="row", columns="variant", values="peak_extra_mib")
    rows = list(dict.fromkeys(data.row))
    shapes = data.drop_duplicates("row").set_index("row")["shape"]
    table = pd.DataFrame({"row": rows, "shape": [shapes[r] for r in rows]})
    for name in variants:
        values = wide[name].reindex(rows) if name in wide else pd.Series(float("nan"), index=rows)
        table[f"{name} MiB"] = [three_digits(v) if pd.notna(v) else "" for v in values]
    if mask:
        sizes = mask_mib(data.drop_duplicates("row")).to_numpy()
        table["the mask MiB"] = [three_digits(v) for v in sizes]
    return table


def ladder_call(ladder: pd.DataFrame, kernel_checks: pd.DataFrame) -> Decision:
    """The keep-or-revert call on the project's experiment (`triton_ln` over `no_empty_mask`): `decide` on its
    step of a ladder sweep (`ladder_step`), the kernel judged by its own checks (`session.add_layer_norm_checks`; none
    where it cannot run here, so none failed). Notebook 04 makes and remembers this call and 07 recaps it, both
    from the session's one ladder and one set of checks, so the two cannot differ."""
    return decide(ladder_step(ladder, CANDIDATE), kernel_ok=bool(kernel_checks.passed.all()), candidate=CANDIDATE,
                  baseline=BASELINE)
