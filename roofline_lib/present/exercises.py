"""`check_layer`: a learner's own layer, checked by §3 and timed against a rung, with a one-line verdict;
`check_own_decoder`: the same for a learner's decoder (notebook 08), stepped through a key/value cache.

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

from ..core.outcome import VariantUnavailable, first_line
from ..core.shapes import Shape
from ..measure.timing import Comparison, time_layer_calls
from ..runs.decode import decode_case, judge_decoder, stepper
from ..runs.pipeline import new_case, prepare, time_modules
from ..variants.decode import DECODERS, StaticCacheDecoder
from ..variants.decode_stack import DecodeStack
from .formatting import three_digits, with_band
from .notebook import Context, _rows
from .tables import as_measured

YOURS = "yours"


@dataclass
class Verdict:
    """What `check_layer` found: `passed` (§3 on every case), `table` (one line per row × padding) and `line`."""

    passed: bool
    table: pd.DataFrame
    line: str

    def _repr_markdown_(self) -> str:
        shown = as_measured(self.table, list(self.table.select_dtypes("floating").columns))  # 1.00, not 1
        return f"{self.line}\n\n{shown.to_markdown(index=False, disable_numparse=True)}"

    def __repr__(self) -> str:
        return f"{self.line}\n{self.table.to_string(index=False)}"


def _padding(padding: str) -> str:
    """A padding pattern in words: "no padding" for "none", else "left padding" and the like."""
    return "no padding" if padding == "none" else f"{padding} padding"


def _paddings(paddings: Sequence[str]) -> str:
    """The paddings checked, in words: "no padding and left padding"."""
    words = [_padding(p) for p in paddings]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _worst(err_ratios: pd.Series) -> str:
    """The largest error ratio of the cases, in words: an exercise about accuracy is done when it drops below 1."""
    return f"; error at most {three_digits(err_ratios.astype(float).max())}× the reference's"


def _failed_line(failures: Sequence[str], where: str = "") -> str:
    """The verdict of a failed check: the first failure, and how many more there were."""
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return f"❌ fails §3{where} — {failures[0]}{more}"


def _timing_line(comparison: Comparison, baseline: str, shape: Shape, smoke: bool, how: str = "") -> str:
    """How yours compares with `baseline` on `shape` (timed `how`, where said): the median ratio and its p20–p80
    band, and the verdict."""
    ratio = with_band(comparison.speedup, comparison.p20, comparison.p80)
    verdict = {"faster": f"faster than {baseline}", "slower": f"slower than {baseline}",
               "within noise": f"within noise of {baseline}"}[comparison.verdict]
    note = " — smoke shapes: the times say nothing about a GPU" if smoke else ""
    return f"{verdict} on row {shape.row}{how}: {ratio}{note}"


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
                failures.append(f"row {shape.row}, {_padding(padding)}: ran out of memory")
                continue
            done = prepare(case, YOURS, lambda ref: layer(ref))
            result = done.result
            records.append({"row": shape.row, "padding": padding, "status": done.status,
                            "err_ratio": result.err_ratio if result else None,
                            "bound": result.bound if result else None, "reason": done.reason})
            if done.status != "ok":
                failures.append(f"row {shape.row}, {_padding(padding)}: {done.status}"
                                + (f" ({done.reason})" if done.reason else ""))
    table = pd.DataFrame.from_records(records).fillna("")
    if failures:
        return Verdict(False, table, _failed_line(failures))
    where = ("row " if len(shapes) == 1 else "rows ") + ", ".join(s.row for s in shapes)
    checked = f"✅ passes §3 on {where} ({_paddings(paddings)}{_worst(table.err_ratio)})"
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


DECODE_CHECK = Shape("B4 N200 d512 H8", 4, 200, 512, 8, "a prompt of 200 tokens, four sequences")  # on a GPU
DECODE_SMOKE = Shape("B3 N37 d48 H4", 3, 37, 48, 4, "a tiny prompt: the code paths only")  # smoke mode, a CPU


def check_own_decoder(ctx: Context, decoder: Callable[[torch.nn.Module, int], object], baseline: str = "static_cache",
                      shape: Shape | None = None, steps: int = 6, paddings: Sequence[str] = ("none", "left"),
                      seed: int = 0) -> Verdict:
    """§3 for a learner's decoder, `decoder(reference_layer, capacity)` (a `variants.decode.Decoder`: prefill,
    step, rewind): the prompt of `shape` prefilled, `steps` tokens stepped, the steps' outputs against the
    full-sequence truth (`runs.decode`'s case) with each padding; then, if all pass, one layer's step timed
    interleaved against the decoder `baseline` (a name of `core.catalog.DECODERS`) after the same prompt.

    Where both are static-cache decoders, both steps are replayed from a CUDA graph on a GPU, as the "graph_"
    decoders of `runs.decode.time_decode` are: eagerly, the host's launches can outlast the cache read a step
    exists for, and hide what a faster attention buys. Otherwise (a cache that changes shape, or a CPU, where
    there are no graphs) both are timed eagerly; the verdict's line says which."""

    shape = shape if shape is not None and not ctx.smoke else DECODE_SMOKE if ctx.smoke else DECODE_CHECK
    where = f"{shape.label}, {steps} steps"
    records, failures, case = [], [], None
    for padding in paddings:
        case = decode_case(shape, steps, ctx.dtype, ctx.device, padding, seed)
        try:
            _, judged = judge_decoder(decoder(case.layer, case.shape.seq_len), case, shape.seq_len)
        except VariantUnavailable as exc:  # a Triton decoder where Triton cannot run: nothing to judge
            return Verdict(False, pd.DataFrame(records), f"⏭ not checked by §3 here: {first_line(exc)}")
        except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
            records.append({"shape": shape.label, "padding": padding, "status": "error", "reason": first_line(exc)})
            failures.append(f"{_padding(padding)}: {type(exc).__name__}: {first_line(exc)}")
            continue
        records.append({"shape": shape.label, "padding": padding, "status": "ok" if judged.passed else "fail",
                        "err_ratio": judged.ratio, "reason": judged.reason})
        if not judged.passed:
            failures.append(f"{_padding(padding)}: {judged.reason}")
    table = pd.DataFrame.from_records(records).fillna("")
    if failures:
        return Verdict(False, table, _failed_line(failures, f" on {where}"))
    checked = f"✅ passes §3 on {where} ({_paddings(paddings)}{_worst(table.err_ratio)})"
    N = shape.seq_len
    prompt, x_t = case.x[:, :N], case.x[:, N:N + 1]  # (B, N, C), (B, 1, C)
    graphed = all(isinstance(make, type) and issubclass(make, StaticCacheDecoder)
                  for make in (DECODERS.get(baseline), decoder))
    try:
        theirs = DecodeStack(baseline, [case.layer], N + 1, graphed)  # off a GPU a stack steps eagerly
    except VariantUnavailable as exc:
        return Verdict(True, table, f"{checked}; not timed: {baseline} cannot run here ({first_line(exc)})")
    fns = {}
    for name, stack in ((baseline, theirs), (YOURS, DecodeStack(YOURS, [case.layer], N + 1, graphed, decoder))):
        stack.prefill(prompt)
        fns[name] = stepper(stack, x_t)
        try:
            fns[name]()  # built, stepped (captured) once before either is timed
        except RuntimeError as exc:  # §3 passed eagerly: a step a graph cannot capture (one that syncs, say)
            if not stack.graphed:
                raise
            return Verdict(True, table, f"{checked}; not timed: {name}'s step cannot be captured in a CUDA graph "
                                        f"({first_line(exc)})")
    samples = time_layer_calls(fns, ctx.device, budget_s=ctx.budget_s)
    comparison = Comparison.from_samples(samples[baseline], samples[YOURS])
    how = ", one layer's step replayed from a CUDA graph" if theirs.graphed else ", eager steps (launches included)"
    return Verdict(True, table, f"{checked}; {_timing_line(comparison, baseline, shape, ctx.smoke, how)}")
