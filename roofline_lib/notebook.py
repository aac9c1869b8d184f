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

from .correctness import Case, naive_peak_bytes, reference_feasible
from .decision import decide
from .device import DTYPE_NAMES, environment, free_memory, resolve_device, resolve_dtype
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


def check_table(ctx: Context, variants: Sequence[str] | Mapping[str, Factory], paddings: Sequence[str] = ("none",),
                rows: str | Sequence[Shape] | None = None, seed: int = 0) -> pd.DataFrame:
    """§3 verdicts, one line per row × padding × variant, on fresh seeded weights and inputs.

    `variants` are names from VARIANTS, or a mapping name → factory(reference_layer) for a module that is
    not in the ladder (e.g. a deliberately broken one).
    """
    factories = dict(variants) if isinstance(variants, Mapping) else {n: partial(build_variant, n) for n in variants}
    records = []
    shapes = _rows(ctx, rows)
    progress = tqdm(total=len(shapes) * len(paddings), desc="verify", unit="case")
    for shape in shapes:
        for padding in paddings:
            base = {"row": shape.row, "shape": shape.label, "padding": padding}
            case, oom = guarded(lambda: Case(shape, ctx.dtype, ctx.device, padding, seed), ctx.device)
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
    dtype = ctx.dtype if dtype is None else resolve_dtype(dtype, ctx.device)
    return run_sweep(_rows(ctx, rows), list(dict.fromkeys(variants)), dtype, ctx.device, padding=padding,
                     options=options, budget_s=ctx.budget_s)


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
    return " ".join(parts) + f"\n\n→ **{'keep' if call.keep else 'revert'}**: {call.reason}."


def save_figure(fig: Figure, name: str, ctx: Context) -> Figure:
    """Save `fig` as `<figure_dir>/<name>.png` when ctx has a figure folder; return it for inline display."""
    if ctx.figure_dir is not None:
        ctx.figure_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(ctx.figure_dir / f"{name}.png", dpi=120)
    return fig


def show_source(obj: object) -> object:
    """`obj`'s source code as highlighted markdown, for display in a notebook."""
    from IPython.display import Markdown
    return Markdown(f"```python\n{textwrap.dedent(inspect.getsource(obj)).rstrip()}\n```")


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
