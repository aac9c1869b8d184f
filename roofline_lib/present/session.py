"""Measurements made once per session and reused by every notebook of it: the ceilings, the ladder's sweep, the
Triton kernel's own checks and each variant's profile; and a notebook's own result that a later one recaps (06's
long-context run, in 07).

A number that several cells or notebooks show (row 1's reference time, the matmul ceiling, a rung's speedup, a
rung's GEMM µs in one notebook's "after" and the next one's "before") is then one measurement, shown with its
own band, instead of a fresh one per cell that drifts with the GPU's clock. A session is a folder:
ROOFLINE_SESSION when set (the notebook runner gives each run a fresh one), else the checkout's runs/session/
(git-ignored), else ./roofline_session (Colab). What is stored there is keyed by everything the measurement
depends on (GPU, versions, dtype, emulation, rows, budget, the library's commit), so a change of any of them
measures afresh rather than reusing a stale number.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from ..core.catalog import LADDER
from ..core.device import DTYPES
from ..kernels import unavailable_reason
from ..measure.ceilings import Ceilings, measure_ceilings
from ..runs.add_layer_norm_bench import check_add_layer_norm, kernel_shapes
from ..runs.profile_suite import SuiteProfile, profile_suite
from ..runs.sweep import PREVIOUS, run_sweep
from ..variants.registry import factories
from .colab import CHECKOUT, in_checkout
from .notebook import Context, dtype_choices

SESSION_ENV = "ROOFLINE_SESSION"  # the folder one session's notebooks share


def session_dir() -> Path:
    """The folder this session's measurements are kept in (created on first use)."""
    given = os.environ.get(SESSION_ENV, "").strip()
    folder = Path(given) if given else CHECKOUT / "runs" / "session" if in_checkout() else Path("roofline_session")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _code_version() -> str:
    """The installed library's version, or in a git checkout its commit (with a mark when the tree has changes)."""
    if not in_checkout():
        try:
            return importlib.metadata.version("roofline_lib")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CHECKOUT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "roofline_lib"], cwd=CHECKOUT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "checkout"
    return f"{head[:12]}{'.dirty' if dirty else ''}"


def _key(ctx: Context, what: str) -> str:
    """A file stem for measurement `what` under ctx: the same only when everything it depends on is."""
    env = {k: v for k, v in ctx.env.items() if k != "date"}
    facts = {"what": what, "env": env, "emulated": ctx.emulated, "smoke": ctx.smoke, "budget_s": ctx.budget_s,
             "rows": [s.row for s in ctx.rows], "shared": ctx.shared, "code": _code_version()}
    digest = hashlib.sha1(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
    return f"{what}_{ctx.dtype_name}_{digest}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (notebooks run side by side measure a thing once, not twice)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): notebooks there run one at a time anyway
        yield
        return
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def measured_ceilings(ctx: Context) -> Ceilings:
    """The matmul and copy ceilings of ctx's device and dtype, measured on the session's first call."""
    folder = session_dir()
    stem = _key(ctx, "ceilings")
    path = folder / f"{stem}.json"
    with _locked(folder / f"{stem}.lock"):
        if path.exists():
            return Ceilings(**json.loads(path.read_text()))
        ceilings = measure_ceilings(ctx.device, ctx.dtype, budget_s=ctx.budget_s)
        path.write_text(json.dumps(ceilings.as_dict(), indent=1) + "\n")
    return ceilings


def ladder_sweep(ctx: Context) -> pd.DataFrame:
    """Every rung of LADDER on ctx's rows, verified (§3) and timed interleaved once per session.

    `speedup` and its band are against the reference; `vs_speedup` and its band against the rung timed just
    before it (`against` names it). A session stopped part-way keeps its finished rows and goes on from them."""
    folder = session_dir()
    stem = _key(ctx, "ladder")
    with _locked(folder / f"{stem}.lock"):
        return run_sweep(list(ctx.rows), list(LADDER), ctx.dtype, ctx.device, budget_s=ctx.budget_s,
                         against=PREVIOUS, checkpoint=folder / f"{stem}.csv", resume=True)


def add_layer_norm_checks(ctx: Context) -> pd.DataFrame:
    """The fused add + LayerNorm kernel against torch (`check_add_layer_norm`), once per session: on
    `kernel_shapes` of ctx's rows, in every dtype offered on a GPU, ctx's dtype through the interpreter. Empty
    where the kernel cannot run here (`kernels.unavailable_reason`): nothing was checked, so nothing failed.
    Notebook 04 shows these checks and makes its keep-or-revert call on them; 07 recaps that call from them."""
    if unavailable_reason(ctx.device) is not None:
        return pd.DataFrame(columns=["dtype", "n_rows", "d_model", "s_exact", "y_err", "torch_y_err", "passed"])
    folder = session_dir()
    stem = _key(ctx, "kernel_checks")
    path = folder / f"{stem}.csv"
    with _locked(folder / f"{stem}.lock"):
        if path.exists():
            return pd.read_csv(path)
        dtypes = dtype_choices(ctx.device) if ctx.device.type == "cuda" else [ctx.dtype_name]
        checks = pd.DataFrame([{"dtype": d, **check_add_layer_norm(m, n, DTYPES[d], ctx.device)}
                               for d in dtypes for m, n in kernel_shapes(ctx.rows)])
        checks.to_csv(path, index=False)
    return checks


def keep_result(ctx: Context, what: str, table: pd.DataFrame) -> None:
    """Keep a notebook's own result `what` for a later notebook of the session (07's recap reads 06's run); written
    whole or not at all, so a notebook running beside it never reads half of it."""
    path = session_dir() / f"{_key(ctx, what)}.pkl"
    partial = path.with_suffix(".partial")
    pd.to_pickle(table, partial)
    os.replace(partial, path)


def kept_result(ctx: Context, what: str) -> pd.DataFrame | None:
    """The result `what` that an earlier notebook of this session kept, or None where none did: a notebook opened
    on its own, one that runs later, or (notebooks run side by side) one that has not got there yet."""
    path = session_dir() / f"{_key(ctx, what)}.pkl"
    return pd.read_pickle(path) if path.exists() else None


def _variant_profile(ctx: Context, name: str) -> SuiteProfile:
    """The profile of variant `name` on ctx's rows, measured on the session's first call (kept as a pickle: the
    four tables as they were, with their types)."""
    folder = session_dir()
    stem = _key(ctx, f"profile_{name}")
    path = folder / f"{stem}.pkl"
    with _locked(folder / f"{stem}.lock"):
        if path.exists():
            return SuiteProfile(**pd.read_pickle(path))
        measured = profile_suite(list(ctx.rows), [name], ctx.dtype, ctx.device)
        pd.to_pickle(vars(measured), path)
    return measured


def suite_profile(ctx: Context, variants: str | Sequence[str]) -> SuiteProfile:
    """The profiles of `variants` (a name or names) on ctx's rows, each variant profiled once per session and
    reused by every cell and notebook that shows it; take one row out with `tables.row_profile`. Lines are in
    `runs.profile_suite`'s order: by row, then by variant in the order given."""
    names = [variants] if isinstance(variants, str) else list(dict.fromkeys(variants))
    unknown = [n for n in names if n not in factories()]
    if not names or unknown:
        raise ValueError(f"suite_profile takes known variant names, got {variants!r}: known are "
                         f"{', '.join(factories())}")
    parts = [_variant_profile(ctx, name) for name in names]
    order = {s.row: i for i, s in enumerate(ctx.rows)}

    def joined(attr: str) -> pd.DataFrame:
        frames = [getattr(p, attr) for p in parts]  # a variant that ran on no row has empty tables: left out
        frame = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
        return frame.sort_values("row", key=lambda rows: rows.map(order), kind="stable", ignore_index=True)

    return SuiteProfile(*(joined(attr) for attr in ("runs", "ops", "kernels", "categories")))
