"""`check_layer`: a learner's own layer, checked by §3 and timed against a rung, with a one-line verdict.

An exercise in a notebook ends in one call, `check_layer(ctx, MyLayer)`: `MyLayer(reference_layer)` builds the
learner's module, which must compute the reference's function (`forward(x, key_padding_mask)`). It is checked on
ctx's first rows with each padding (left padding catches a mask dropped or misread), and, only if every check
passes, timed interleaved with `baseline` under the one protocol. The solutions in the notebooks are fenced
```python blocks inside a `<details><summary>Solution</summary>` fold; `solutions` finds them, for CI.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from ..core.shapes import Shape
from ..measure.timing import Comparison
from ..runs.pipeline import new_case, prepare, time_modules
from .formatting import three_digits
from .notebook import Context, _rows

YOURS = "yours"


@dataclass
class Verdict:
    """What `check_layer` found: `passed` (§3 on every case), `table` (one line per row × padding) and `line`."""

    passed: bool
    table: pd.DataFrame
    line: str

    def _repr_markdown_(self) -> str:
        return f"{self.line}\n\n{self.table.to_markdown(index=False, floatfmt='.3g')}"

    def __repr__(self) -> str:
        return f"{self.line}\n{self.table.to_string(index=False)}"


def _timing_line(comparison: Comparison, baseline: str, shape: Shape, smoke: bool) -> str:
    """How yours compares with `baseline` on `shape`: the median ratio and its p20–p80 band, and the verdict."""
    low, high = three_digits(comparison.p20), three_digits(comparison.p80)
    ratio = f"{three_digits(comparison.speedup)}× (p20–p80 {low}–{high}×)"
    verdict = {"faster": f"faster than {baseline}", "slower": f"slower than {baseline}",
               "within noise": f"within noise of {baseline}"}[comparison.verdict]
    note = " — smoke shapes: the times say nothing about a GPU" if smoke else ""
    return f"{verdict} on row {shape.row}: {ratio}{note}"


def check_layer(ctx: Context, layer: Callable[[torch.nn.Module], torch.nn.Module],
                rows: str | Sequence[Shape] | None = None, baseline: str = "no_empty_mask",
                paddings: Sequence[str] = ("none", "left"), seed: int = 0) -> Verdict:
    """§3 for `layer(reference_layer)` on `rows` (default: ctx's first two) with each padding, then, if all pass,
    its time against `baseline` (a rung's name) on the first of them; a Verdict that displays as one line + a table."""
    shapes = _rows(ctx, rows) if rows is not None else list(ctx.rows[:2])
    records, failures = [], []
    for shape in shapes:
        for padding in paddings:
            case, oom = new_case(shape, ctx.dtype, ctx.device, padding, seed)
            if case is None:
                records.append({"row": shape.row, "padding": padding, "status": "oom", "reason": oom})
                failures.append(f"row {shape.row} ({padding} padding) ran out of memory")
                continue
            done = prepare(case, YOURS, lambda ref: layer(ref))
            result = done.result
            records.append({"row": shape.row, "padding": padding, "status": done.status,
                            "err_ratio": result.err_ratio if result else None,
                            "bound": result.bound if result else None, "reason": done.reason})
            if done.status != "ok":
                failures.append(f"row {shape.row}, {padding} padding: {done.status}"
                                + (f" ({done.reason})" if done.reason else ""))
    table = pd.DataFrame.from_records(records).fillna("")
    if failures:
        return Verdict(False, table, f"❌ fails §3 — {failures[0]}" + (f" (and {len(failures) - 1} more)"
                                                                         if len(failures) > 1 else ""))
    checked = f"✅ passes §3 on rows {', '.join(s.row for s in shapes)} ({', '.join(paddings)} padding)"
    case, oom = new_case(shapes[0], ctx.dtype, ctx.device, "none", seed, truth=False)
    if case is None:
        return Verdict(True, table, f"{checked}; not timed: {oom}")
    theirs = prepare(case, baseline, check=False)
    mine = prepare(case, YOURS, lambda ref: layer(ref), check=False)
    if theirs.module is None:
        return Verdict(True, table, f"{checked}; not timed: {baseline} is {theirs.status} here ({theirs.reason})")
    samples, oom = time_modules(case, {baseline: theirs.module, YOURS: mine.module}, budget_s=ctx.budget_s)
    if oom is not None:
        return Verdict(True, table, f"{checked}; not timed: {oom}")
    comparison = Comparison.from_samples(samples[baseline], samples[YOURS])
    return Verdict(True, table, f"{checked}; {_timing_line(comparison, baseline, shapes[0], ctx.smoke)}")


SOLUTION = re.compile(r"<details>\s*<summary>\s*Solution[^<]*</summary>\s*```python\n(.*?)```\s*</details>",
                      re.DOTALL)


def solutions(markdown: str) -> list[str]:
    """The code of every folded solution in a notebook's markdown (a percent file's `# ` prefixes removed)."""
    lines = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in markdown.splitlines()]
    return [match.group(1) for match in SOLUTION.finditer("\n".join(lines))]
