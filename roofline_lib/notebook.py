"""What the walkthrough notebooks share: the run context (device, dtype, the rows that fit), verification
tables, a paragraph computed from a measured table, figures, a rerun widget, and the Colab badges.

`REPO_URL` is the one place where the repository's address is set: the README's badges are built from it,
and a test checks that every notebook's setup cell names the same address.
"""
from __future__ import annotations

import inspect
import json
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from .ceilings import Ceilings
from .correctness import Case, naive_peak_bytes, reference_feasible
from .decision import Decision, decide, end_to_end
from .device import DTYPE_NAMES, environment, free_memory, memory_capacity, resolve_device, resolve_dtype
from .profiling import SuiteProfile, profile_suite
from .shapes import SMOKE_SUITE, SUITE, Shape, select_rows
from .sweep import guarded, run_sweep
from .variants import VariantUnavailable, build_variant

REPO_URL = "https://github.com/roofline-lab/roofline"  # placeholder owner: the single place to change it
BRANCH = "main"  # the branch the Colab badges open
SMOKE_ENV = "ROOFLINE_SMOKE"  # "1": the tiny smoke suite whatever the device (what CI runs); "0" or unset: auto
FIGURES_ENV = "ROOFLINE_FIGURES"  # folder for saved figures (default: the checkout's figures/; none in smoke mode)
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
_CHECKOUT = Path(__file__).resolve().parents[1]  # the repository root when running from a checkout


def _in_checkout() -> bool:
    return (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "notebooks").is_dir()


@dataclass(frozen=True)
class Context:
    """Where and what a notebook measures."""

    device: torch.device
    dtype: torch.dtype
    rows: tuple[Shape, ...]  # rows where the reference fits in memory here, in suite order
    skipped: tuple[Shape, ...]  # asked-for rows it does not fit (the long-context notebook's territory)
    smoke: bool  # the tiny CPU-sized suite instead of the real one
    budget_s: float  # seconds of timed calls per row
    figure_dir: Path | None  # where `save_figure` writes; None: figures are shown, not saved

    @property
    def env(self) -> dict[str, str]:
        return environment(self.device, self.dtype)

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES[self.dtype]

    def _repr_markdown_(self) -> str:
        env = self.env
        mode = "smoke suite (tiny shapes: checks the code paths, times nothing meaningful)" if self.smoke else "suite"
        lines = [f"**{env['device']}**, {env['dtype']}, torch {env['torch']}, triton {env['triton']}",
                 f"- {mode}: rows {', '.join(s.row for s in self.rows)}"]
        if self.skipped:
            lines.append("- not run here (the naive layer does not fit in this device's memory): rows "
                         + ", ".join(f"{s.row} (needs ≈{naive_peak_bytes(s, self.dtype) / 2**30:,.0f} GiB)"
                                     for s in self.skipped))
        lines.append(f"- figures saved to `{self.figure_dir}`" if self.figure_dir else "- figures are not saved")
        return "\n".join(lines)


def _smoke_forced() -> bool:
    value = os.environ.get(SMOKE_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{SMOKE_ENV}={value!r}: use 1 (smoke suite) or 0 / unset (automatic)")
    return value == "1"


def setup_context(rows: str | None = None, dtype: str | None = None, budget_s: float | None = None) -> Context:
    """The context a notebook runs in: CUDA if there is a GPU (fp16 by default, a T4 included), else the CPU.

    On a GPU the suite is trimmed to the rows whose naive peak memory fits this GPU; without one, or when
    ROOFLINE_SMOKE=1, the tiny smoke suite is used. `rows` ("1,6,9", "1-13") narrows the selection, except
    under ROOFLINE_SMOKE=1, which always means the smoke suite (so CI never runs a real row on its CPU).
    """
    device = resolve_device(None)
    forced = _smoke_forced()
    smoke = forced or device.type != "cuda"
    dtype = resolve_dtype(dtype, device)
    asked = select_rows("smoke" if forced else rows, SMOKE_SUITE if smoke else SUITE)
    fits = tuple(s for s in asked if reference_feasible(s, dtype, device))
    if not fits:
        raise ValueError(f"none of rows {', '.join(s.row for s in asked)} fits the reference on {device}")
    figure_dir = os.environ.get(FIGURES_ENV)
    if figure_dir is None and not smoke:
        figure_dir = _CHECKOUT / "figures" if _in_checkout() else Path("figures")
    return Context(device, dtype, fits, tuple(s for s in asked if s not in fits), smoke,
                   budget_s if budget_s is not None else 0.05 if smoke else 0.5,
                   Path(figure_dir) if figure_dir else None)


def dtype_choices(device: torch.device) -> list[str]:
    """Dtypes worth measuring on `device`: fp16 (and bf16 where native) and fp32 on CUDA; fp32 and bf16 on the CPU."""
    if device.type != "cuda":
        return ["fp32", "bf16"]
    native_bf16 = torch.cuda.get_device_capability(device)[0] >= 8
    return ["fp16", "bf16", "fp32"] if native_bf16 else ["fp16", "fp32"]


def _rows(ctx: Context, rows: str | Sequence[Shape] | None) -> list[Shape]:
    if rows is None:
        return list(ctx.rows)
    return select_rows(rows, ctx.rows) if isinstance(rows, str) else list(rows)


def suite_table(ctx: Context, suite: Sequence[Shape] = SUITE) -> pd.DataFrame:
    """The shape suite with each row's naive peak memory in ctx's dtype and whether this notebook runs it."""
    return pd.DataFrame([{"row": s.row, "batch": s.batch, "seq_len": s.seq_len, "d_model": s.d_model,
                          "heads": s.n_heads, "head_dim": s.head_dim, "tokens": s.tokens,
                          f"naive peak GiB ({ctx.dtype_name})": naive_peak_bytes(s, ctx.dtype) / 2**30,
                          "run here": s in ctx.rows, "note": s.note} for s in suite])


Factory = Callable[[torch.nn.Module], Callable]


def _dtype(ctx: Context, dtype: str | torch.dtype | None) -> torch.dtype:
    return ctx.dtype if dtype is None else resolve_dtype(dtype, ctx.device)


def check_table(ctx: Context, variants: Sequence[str] | Mapping[str, Factory], paddings: Sequence[str] = ("none",),
                rows: str | Sequence[Shape] | None = None, seed: int = 0,
                dtype: str | torch.dtype | None = None) -> pd.DataFrame:
    """§3 verdicts, one line per row × padding × variant, on fresh seeded weights and inputs, in ctx's dtype
    (or `dtype`: "fp64" checks that a rewrite is exact, free of any rounding of its own).

    `variants` are names from VARIANTS, or a mapping name → factory(reference_layer) for a module that is
    not in the ladder (e.g. a deliberately broken one, or a variant with options).
    """
    dtype = _dtype(ctx, dtype)
    factories = dict(variants) if isinstance(variants, Mapping) else {n: partial(build_variant, n) for n in variants}
    records = []
    shapes = _rows(ctx, rows)
    progress = tqdm(total=len(shapes) * len(paddings), desc="verify", unit="case")
    for shape in shapes:
        for padding in paddings:
            base = {"row": shape.row, "shape": shape.label, "padding": padding}
            case, oom = guarded(lambda: Case(shape, dtype, ctx.device, padding, seed), ctx.device)
            for name, factory in factories.items():
                if case is None:
                    records.append(base | {"variant": name, "reason": oom})
                    continue
                try:
                    module = factory(case.layer)
                except VariantUnavailable as exc:
                    records.append(base | {"variant": name, "reason": f"skipped: {exc}"})
                    continue
                result, oom = guarded(lambda: case.check_module(name, module), ctx.device)
                records.append(base | ({"variant": name, "reason": oom} if result is None else result.as_dict()))
            progress.update()
        case = module = None  # release this row's tensors before collecting
        free_memory(ctx.device)  # once per row: a full garbage collection is not free
    progress.close()
    columns = ["row", "shape", "padding", "variant", "err", "ref_err", "err_ratio", "bound", "passed", "reason"]
    return pd.DataFrame.from_records(records).reindex(columns=columns)


def sweep(ctx: Context, variants: Sequence[str], rows: str | Sequence[Shape] | None = None,
          dtype: str | torch.dtype | None = None, padding: str = "none", options: dict | None = None) -> pd.DataFrame:
    """`run_sweep` over ctx's rows (or `rows`) in ctx's dtype (or `dtype`), with ctx's time budget per row."""
    return run_sweep(_rows(ctx, rows), list(dict.fromkeys(variants)), _dtype(ctx, dtype), ctx.device,
                     padding=padding, options=options, budget_s=ctx.budget_s)


def head_to_head(ctx: Context, candidate: str, baseline: str, rows: str | Sequence[Shape] | None = None,
                 dtype: str | torch.dtype | None = None) -> pd.DataFrame:
    """`decision.end_to_end` over ctx's rows (or `rows`) in ctx's dtype (or `dtype`): `candidate` checked by §3,
    then timed interleaved with `baseline`, ctx's time budget per row."""
    return end_to_end(_rows(ctx, rows), _dtype(ctx, dtype), ctx.device, candidate=candidate, baseline=baseline,
                      budget_s=ctx.budget_s)


def profile(ctx: Context, variants: Sequence[str], rows: str | Sequence[Shape] | None = None,
            dtype: str | torch.dtype | None = None) -> SuiteProfile:
    """`profiling.profile_suite` over ctx's rows (or `rows`) in ctx's dtype (or `dtype`): where the time goes."""
    return profile_suite(_rows(ctx, rows), list(dict.fromkeys(variants)), _dtype(ctx, dtype), ctx.device)


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
    measured = data.assign(status=data.status.replace({"fail": "ok"}))  # a sweep's "fail" rows were timed too
    call = decide(measured, candidate=candidate, baseline=baseline)
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


def save_figure(fig: Figure, name: str, ctx: Context) -> Figure:
    """Save `fig` as `<figure_dir>/<name>.png` when ctx has a figure folder; return it for inline display."""
    if ctx.figure_dir is not None:
        ctx.figure_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(ctx.figure_dir / f"{name}.png", dpi=120)
    return fig


def show_source(obj: object) -> object:
    """`obj`'s source code as highlighted markdown, for display in a notebook (a Triton kernel's included)."""
    from IPython.display import Markdown
    try:
        source = inspect.getsource(obj)
    except TypeError:  # a @triton.jit kernel is an object wrapping its Python function in `.fn`
        source = inspect.getsource(getattr(obj, "fn", obj))
    return Markdown(f"```python\n{textwrap.dedent(source).rstrip()}\n```")


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
                          "fits": reference_feasible(s, dtype, device)} for s in shapes])


TRUTH_TENSORS = 6  # (B, N, C) float64 tensors live while the sampled truth is built: x, ln1(x), k, v, temporaries
FULL_LAYER_TENSORS = 13  # (B, N, C) activations of the full-sequence layer: qkv 3, fc1 + GELU 8, attention + residual 2


def longctx_needs_bytes(shape: Shape, dtype: torch.dtype) -> int:
    """Bytes a `longctx.run_longctx` of `shape` needs at its peak, estimated from the code: the input and weights,
    plus the larger of the float64 sampled-row truth and the full-sequence layer's activations."""
    e = torch.finfo(dtype).bits // 8
    elements = shape.tokens * shape.d_model
    weights = 12 * shape.d_model ** 2 * e
    return weights + elements * e + max(TRUTH_TENSORS * elements * 8, FULL_LAYER_TENSORS * elements * e)


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
        if r.status != "ok":
            parts.append(f"{layer} ({r.variant}, {capped}) did not run ({r.status}: {r.reason}).")
        elif pd.notna(r.median_ms):
            parts.append(f"{layer} ({r.variant}, {capped}) takes {r.median_ms:.4g} ms{peak(r)}.")
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
        parts.append(f"The fastest: attention {best.attention} ({best.resolved_attention}), chunks of "
                     f"{int(best.chunk_size):,} tokens, {best.median_ms:.4g} ms{peak(best)}; "
                     f"error ratio {timed.err_ratio.max():.3g} at most (§3 allows 2).")
    wording = {"faster": "faster than", "slower": "slower than", "within noise": "within noise of"}
    for _, c in results[(results.kind == "comparison") & (results.status == "ok")].iterrows():
        parts.append(f"Interleaved, uncapped: chunked takes {c.ratio_vs_full:.3f}× the full-sequence layer's time "
                     f"[p20–p80 {c.ratio_p20:.3f}–{c.ratio_p80:.3f}], {wording[c.verdict]} it.")
    return " ".join(parts)


def parse_sizes(text: str) -> list[int]:
    """Positive integers from a comma-separated text such as "4096,16384" (ValueError naming the bad part)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in parts if not (p.isdigit() and int(p) > 0)]
    if bad or not parts:
        raise ValueError(f"expected comma-separated positive integers, got {text!r}")
    return [int(p) for p in parts]


def _widgets():
    try:
        import ipywidgets
    except ImportError as exc:
        raise ImportError("the interactive controls need ipywidgets: pip install 'roofline_lib[notebooks]'") from exc
    return ipywidgets


def step_controls(ctx: Context, variants: Sequence[str], value: str | None = None) -> dict:
    """The standard controls of a step: rows (a spec like "1,6,9", applied on Enter), dtype and variant."""
    widgets = _widgets()
    picks = list(dict.fromkeys([ctx.rows[0], ctx.rows[-1]]))  # the two ends: quick to rerun
    return {
        "rows": widgets.Text(value=",".join(s.row for s in picks), description="rows",
                             placeholder="e.g. 1,6,9 or 1-13", continuous_update=False),
        "dtype": widgets.Dropdown(options=dtype_choices(ctx.device), value=ctx.dtype_name, description="dtype"),
        "variant": widgets.Dropdown(options=list(variants), value=value or variants[-1], description="variant"),
    }


def longctx_controls(seq_len: int, chunk_sizes: Sequence[int]) -> dict:
    """Controls of a long-context run: the sequence length and the chunk sizes, each applied on Enter."""
    widgets = _widgets()
    return {
        "seq_len": widgets.BoundedIntText(value=seq_len, min=1, max=10**8, description="seq_len",
                                          continuous_update=False),
        "chunk_sizes": widgets.Text(value=",".join(map(str, chunk_sizes)), description="chunk sizes",
                                    placeholder="e.g. 4096,16384", continuous_update=False),
    }


def ladder_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per row of a sweep: the fastest variant that passed §3, its median, its speedup over the reference with
    the p20–p80 spread, and its fraction of the roofline floor when the sweep has roofline columns."""
    passed = results[results.passed.eq(True) & results.median_ms.notna()]
    if passed.empty:
        raise ValueError("no variant passed §3 and was timed in these results")
    best = passed.loc[passed.groupby("row", sort=False).median_ms.idxmin()]
    columns = ["row", "shape", "variant", "median_ms", "speedup", "speedup_p20", "speedup_p80", "verdict"]
    columns += [c for c in ("floor_ms", "bound", "fraction_of_floor") if c in best]
    return best[columns].rename(columns={"variant": "fastest"}).reset_index(drop=True)


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
    parts = ["Fastest variant that passed §3: " + "; ".join(
        f"**{name}** on {_row_list(group.row)}" for name, group in best.groupby("fastest", sort=False)) + "."]
    timed = best[best.speedup.notna()]
    if not timed.empty:
        parts.append(f"Its speedup over the reference: {_span(timed, 'speedup', '×')}.")
    floors = best[best.fraction_of_floor.notna()] if "fraction_of_floor" in best else best.iloc[:0]
    if not floors.empty:
        parts.append(f"Its fraction of the roofline floor: {_span(floors, 'fraction_of_floor')}; the closer to 1, "
                     "the less any implementation could still gain on that row.")
    return " ".join(parts)


def rerun_widget(measure: Callable[..., object], **controls) -> object:
    """Controls that rerun `measure(**values)` when one changes (text on Enter, never mid-edit) and redraw
    what it returns (a DataFrame, a Figure, or a tuple of them) in an output area below.

    The first measurement runs now, outside the output area, so an error in it fails the cell.
    """
    from IPython.display import display

    widgets = _widgets()
    out = widgets.Output()

    def show(result: object) -> None:
        out.clear_output(wait=True)
        for item in result if isinstance(result, tuple) else (result,):
            display(item)

    def rerun(_change: object = None) -> None:
        with out:
            try:
                result = measure(**{name: c.value for name, c in controls.items()})
            except ValueError as exc:  # a bad rows spec or dtype: say so, keep the controls usable
                out.clear_output()
                print(f"error: {exc}")
                return
            show(result)

    first = measure(**{name: c.value for name, c in controls.items()})
    with out:
        show(first)
    for control in controls.values():
        if hasattr(control, "continuous_update"):
            control.continuous_update = False
        control.observe(rerun, names="value")
    return widgets.VBox([widgets.HBox(list(controls.values())), out])


def colab_url(notebook: str) -> str:
    """The Colab address that opens `notebooks/<notebook>` from REPO_URL's `BRANCH`."""
    prefix = "https://github.com/"
    if not REPO_URL.startswith(prefix):
        raise ValueError(f"REPO_URL must be a GitHub address ({prefix}owner/name), got {REPO_URL!r}")
    return f"https://colab.research.google.com/github/{REPO_URL[len(prefix):]}/blob/{BRANCH}/notebooks/{notebook}"


def recorded_results(path: str) -> pd.DataFrame:
    """A results CSV committed to the repository (`path` relative to its root): read from this checkout,
    or, outside one (Colab), from REPO_URL's `BRANCH` on GitHub."""
    if _in_checkout():
        return pd.read_csv(_CHECKOUT / path, dtype={"row": str})
    prefix = "https://github.com/"
    return pd.read_csv(f"https://raw.githubusercontent.com/{REPO_URL[len(prefix):]}/{BRANCH}/{path}", dtype={"row": str})


def notebook_title(path: Path) -> str:
    """The first markdown heading of a notebook (.ipynb), without the #s."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    raise ValueError(f"{path} has no markdown heading to use as its title")


def colab_badges_markdown(notebooks_dir: Path | None = None) -> str:
    """A markdown table with one 'Open in Colab' badge per notebook in `notebooks_dir` (the checkout's notebooks/)."""
    if notebooks_dir is None:
        if not _in_checkout():
            raise ValueError("not running from a checkout: pass notebooks_dir")
        notebooks_dir = _CHECKOUT / "notebooks"
    paths = sorted(Path(notebooks_dir).glob("*.ipynb"))
    if not paths:
        raise ValueError(f"no .ipynb notebooks in {notebooks_dir}")
    lines = ["| notebook | |", "|---|---|"]
    lines += [f"| [{notebook_title(p)}](notebooks/{p.name}) | [![Open In Colab]({COLAB_BADGE})]({colab_url(p.name)}) |"
              for p in paths]
    return "\n".join(lines) + "\n"
