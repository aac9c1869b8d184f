"""What a walkthrough notebook runs in: the context (device, dtype, the rows that fit), the run wrappers that
take it, saved figures and shown source. Prose lives in `prose`, controls in `widgets`, badges in `colab`."""
from __future__ import annotations

import inspect
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure

from ..core.device import (
    DTYPE_NAMES,
    T4_MEMORY_GIB,
    capability,
    emulate_t4,
    environment,
    memory_capacity,
    resolve_device,
    resolve_dtype,
)
from ..core.reference import naive_peak_bytes, reference_fits
from ..core.shapes import SMOKE_SUITE, SUITE, Shape, select_rows
from ..measure.timing import PROTOCOL
from ..runs.experiment import end_to_end
from ..runs.pipeline import check_cases
from ..runs.profile_suite import SuiteProfile, profile_suite
from ..runs.sweep import run_sweep
from ..variants.registry import build_variant
from .colab import CHECKOUT, in_checkout
from .formatting import format_number, three_digits
from .plots import plot_speedups
from .report import speedup_table

EMULATE_ENV = "ROOFLINE_EMULATE"  # "t4": on a larger GPU, choose as on a Colab T4 (device.emulate_t4)
SMOKE_ENV = "ROOFLINE_SMOKE"  # "1": the tiny smoke suite whatever the device (what CI runs); "0" or unset: auto
BUDGET_ENV = "ROOFLINE_BUDGET"  # seconds of timed calls per row (default: GPU_BUDGET_S, SMOKE_BUDGET_S)
GPU_BUDGET_S, SMOKE_BUDGET_S = 0.5, 0.05  # seconds of timed calls per row on a GPU, on the smoke suite
FIGURES_ENV = "ROOFLINE_FIGURES"  # folder for saved figures (default: the checkout's figures/; none in smoke mode)
SHARED_ENV = "ROOFLINE_SHARED"  # notebooks run side by side on this one GPU (benchmarks/run_notebooks.py --jobs)


@dataclass(frozen=True, repr=False)
class Context:
    """Where and what a notebook measures."""

    device: torch.device
    dtype: torch.dtype
    rows: tuple[Shape, ...]  # rows where the reference fits in memory here, in suite order
    skipped: tuple[Shape, ...]  # asked-for rows it does not fit (the long-context notebook's territory)
    smoke: bool  # the tiny CPU-sized suite instead of the real one
    budget_s: float  # seconds of timed calls per row
    figure_dir: Path | None  # where `save_figure` writes; None: figures are shown, not saved
    emulated: str = ""  # "" or what an emulation (ROOFLINE_EMULATE=t4) does not reach
    shared: int = 1  # up to this many notebooks side by side on this GPU (ROOFLINE_SHARED): slower timings

    @property
    def env(self) -> dict[str, str]:
        return environment(self.device, self.dtype)

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES[self.dtype]

    def __repr__(self) -> str:  # the plain-text form of a displayed context: the same lines, no machine paths
        return self._repr_markdown_().replace("**", "")

    def _repr_markdown_(self) -> str:
        env = self.env
        mode = "smoke suite (tiny shapes: checks the code paths, times nothing meaningful)" if self.smoke else "suite"
        lines = [f"**{env['device']}**, {env['dtype']}, torch {env['torch']}, triton {env['triton']}",
                 f"- {mode}: rows {', '.join(s.row for s in self.rows)}",
                 f"- timing: {PROTOCOL}" + (" On the CPU the same protocol runs on the host's clock: there is no "
                                            "GPU to spin up or to idle." if self.device.type != "cuda" else "")]
        if self.emulated:
            lines.append(f"- T4 emulation: compute capability 7.5 for the library's choices, SDPA's flash and cuDNN "
                         f"backends off, a {T4_MEMORY_GIB:g} GiB memory cap; not emulated: {self.emulated}")
        if self.shared > 1 and not self.smoke:
            lines.append(f"- shared: up to {self.shared} notebooks ran side by side on this GPU, so times and measured "
                         "ceilings here can be slower than the GPU alone, by an amount that varies from cell to cell")
        if self.skipped:
            needs = ", ".join(f"{s.row} (needs ≈{three_digits(naive_peak_bytes(s, self.dtype) / 2**30)} GiB)"
                              for s in self.skipped)
            lines.append("- not run here (the reference layer does not fit in this device's memory): "
                         + ("row " if len(self.skipped) == 1 else "rows ") + needs)
        lines.append(f"- figures saved to `{shown_path(self.figure_dir)}`" if self.figure_dir
                     else "- figures are not saved")
        return "\n".join(lines)


def shown_path(path: Path) -> str:
    """`path` as a reader should see it: relative to the checkout when inside it, never a machine's absolute path."""
    try:
        return str(path.resolve().relative_to(CHECKOUT))
    except ValueError:
        return path.name


def _budget(smoke: bool) -> float:
    """Seconds of timed calls per row: ROOFLINE_BUDGET if set (the runner's --budget), else SMOKE_BUDGET_S on the
    smoke suite and GPU_BUDGET_S on a GPU."""
    value = os.environ.get(BUDGET_ENV, "").strip()
    if not value:
        return SMOKE_BUDGET_S if smoke else GPU_BUDGET_S
    try:
        budget = float(value)
    except ValueError:
        budget = -1.0
    if not budget >= 0:
        raise ValueError(f"{BUDGET_ENV}={value!r}: give seconds of timed calls per row, e.g. 0.2")
    return budget


def _smoke_forced() -> bool:
    value = os.environ.get(SMOKE_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{SMOKE_ENV}={value!r}: use 1 (smoke suite) or 0 / unset (automatic)")
    return value == "1"


def as_displayed(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as a notebook shows it: integer columns as floats, so that pandas' float format writes them too
    (pandas has no display format for integers: 5.80e+10 FLOPs rather than 57982058496), and an unnamed
    integer index left over from filtering or sorting (574, 575, …) renumbered from 0, so it does not read as data."""
    ints = frame.select_dtypes("integer").columns
    shown = frame.astype({c: float for c in ints}) if len(ints) else frame
    index = shown.index
    leftover = (index.name is None and not isinstance(index, pd.MultiIndex) and pd.api.types.is_integer_dtype(index)
                and not index.equals(pd.RangeIndex(len(index))))
    return shown.reset_index(drop=True) if leftover else shown


def readable_tables() -> None:
    """pandas' display options for the walkthrough: numbers as `formatting.format_number` writes them (16,384
    tokens, 5.80e+10 FLOPs, 0.0471 ms, errors near 1e-7; empty for NaN), long text such as reasons not
    cut (the notebooks shorten kernel names themselves: `profiling.short_kernel_name`). A notebook displays
    every table through `as_displayed`."""
    pd.set_option("display.float_format", format_number)
    pd.set_option("display.max_colwidth", None)
    try:
        from IPython import get_ipython
    except ImportError:  # a script: nothing displays tables
        return
    shell = get_ipython()
    if shell is not None:
        formatters = shell.display_formatter.formatters
        formatters["text/html"].for_type(pd.DataFrame, lambda frame: as_displayed(frame)._repr_html_())
        formatters["text/plain"].for_type(pd.DataFrame, lambda frame, printer, cycle: printer.text(
            repr(as_displayed(frame))))


def setup_context(rows: str | None = None, dtype: str | None = None, budget_s: float | None = None) -> Context:
    """The context a notebook runs in: CUDA if there is a GPU (fp16 by default, a T4 included), else the CPU.

    On a GPU the suite is trimmed to the rows whose naive peak memory fits this GPU; without one, or when
    ROOFLINE_SMOKE=1, the tiny smoke suite is used. `rows` ("1,6,9", "1-13") narrows the selection, except
    under ROOFLINE_SMOKE=1, which always means the smoke suite (so CI never runs a real row on its CPU).
    It also sets pandas' display options for the walkthrough's tables (`readable_tables`).
    """
    device = resolve_device(None)
    readable_tables()
    emulate = os.environ.get(EMULATE_ENV, "").strip().lower()
    if emulate not in ("", "t4"):
        raise ValueError(f"{EMULATE_ENV}={emulate!r}: the one emulation is 't4'")
    emulated = emulate_t4(device) if emulate == "t4" else ""
    forced = _smoke_forced()
    smoke = forced or device.type != "cuda"
    dtype = resolve_dtype(dtype, device)
    asked = select_rows("smoke" if forced else rows, SMOKE_SUITE if smoke else SUITE)
    fits = tuple(s for s in asked if reference_fits(s, dtype, device))
    if not fits:
        raise ValueError(f"none of rows {', '.join(s.row for s in asked)} fits the reference on {device}")
    figure_dir = os.environ.get(FIGURES_ENV)
    if figure_dir is None and not smoke:
        figure_dir = CHECKOUT / "figures" if in_checkout() else Path("figures")
    shared = os.environ.get(SHARED_ENV, "1").strip()
    if not shared.isdigit() or int(shared) < 1:
        raise ValueError(f"{SHARED_ENV}={shared!r}: the number of notebooks sharing this GPU, at least 1")
    return Context(device, dtype, fits, tuple(s for s in asked if s not in fits), smoke,
                   budget_s if budget_s is not None else _budget(smoke),
                   Path(figure_dir) if figure_dir else None, emulated, int(shared))


def dtype_choices(device: torch.device) -> list[str]:
    """Dtypes worth measuring on `device`: fp16 (and bf16 where native) and fp32 on CUDA; fp32 and bf16 on the CPU."""
    if device.type != "cuda":
        return ["fp32", "bf16"]
    native_bf16 = capability(device)[0] >= 8
    return ["fp16", "bf16", "fp32"] if native_bf16 else ["fp16", "fp32"]


def _rows(ctx: Context, rows: str | Sequence[Shape] | None) -> list[Shape]:
    """ctx's rows, or those `rows` names (a spec, shapes of one's own included); ValueError for a shape
    the naive layer cannot hold here, since every step is checked against it."""
    if rows is None:
        return list(ctx.rows)
    shapes = select_rows(rows, ctx.rows) if isinstance(rows, str) else list(rows)
    for shape in shapes:
        if not reference_fits(shape, ctx.dtype, ctx.device):
            raise ValueError(f"{shape.label} does not fit here: the naive layer needs "
                             f"≈{naive_peak_bytes(shape, ctx.dtype) / 2**30:,.1f} GiB in {ctx.dtype_name}, this "
                             f"device allows {memory_capacity(ctx.device) / 2**30:,.1f} GiB (the long-context "
                             "notebook runs longer sequences chunk by chunk)")
    return shapes


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
    factories = dict(variants) if isinstance(variants, Mapping) else {n: partial(build_variant, n) for n in variants}
    return check_cases(_rows(ctx, rows), factories, _dtype(ctx, dtype), ctx.device, paddings, seed)


def sweep(ctx: Context, variants: Sequence[str], rows: str | Sequence[Shape] | None = None,
          dtype: str | torch.dtype | None = None, padding: str = "none", options: dict | None = None) -> pd.DataFrame:
    """`run_sweep` over ctx's rows (or `rows`) in ctx's dtype (or `dtype`), with ctx's time budget per row."""
    return run_sweep(_rows(ctx, rows), list(dict.fromkeys(variants)), _dtype(ctx, dtype), ctx.device,
                     padding=padding, options=options, budget_s=ctx.budget_s)


def speedup_view(results: pd.DataFrame) -> tuple[pd.DataFrame, Figure]:
    """A sweep's speedups as the steps' Try-it widgets show them: `report.speedup_table` and `plots.plot_speedups`."""
    return speedup_table(results), plot_speedups(results)


def ladder_lines(ladder: pd.DataFrame, ctx: Context, rows: str, variants: Sequence[str]) -> pd.DataFrame:
    """The session ladder's lines of `variants` on `rows` (a rows control's text), in the ladder's order: what a
    widget opens on, so that a saved notebook shows each measurement once, with one value, where a new sweep
    would time the same layers again and read a little differently."""
    wanted = {s.row for s in _rows(ctx, rows)}
    lines = ladder[ladder.row.astype(str).isin(wanted) & ladder.variant.isin(variants)]
    if lines.empty:
        raise ValueError(f"the ladder has no line of {', '.join(variants)} on rows {rows}")
    return lines


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


def save_figure(fig: Figure, name: str, ctx: Context) -> Figure:
    """Save `fig` as `<figure_dir>/<name>.png` when ctx has a figure folder; return it for inline display."""
    if ctx.figure_dir is not None:
        ctx.figure_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(ctx.figure_dir / f"{name}.png", dpi=120)
    return fig


def figure_file(ctx: Context, name: str) -> Path | None:
    """`<figure_dir>/<name>` for a file saved beside the figures (a profiler trace), or None when ctx saves none."""
    if ctx.figure_dir is None:
        return None
    ctx.figure_dir.mkdir(parents=True, exist_ok=True)
    return ctx.figure_dir / name


def show_source(obj: object) -> object:
    """`obj`'s source code as highlighted markdown, for display in a notebook (a Triton kernel's included)."""
    from IPython.display import Markdown
    try:
        source = inspect.getsource(obj)
    except TypeError:  # a @triton.jit kernel is an object wrapping its Python function in `.fn`
        source = inspect.getsource(getattr(obj, "fn", obj))
    return Markdown(f"```python\n{textwrap.dedent(source).rstrip()}\n```")
