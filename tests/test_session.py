"""The session's one-time measurements (present.session) and the exercises' check (present.exercises)."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

import roofline_lib.present.notebook as nbl
import roofline_lib.present.session as session
from roofline_lib.core.numbers import three_digits
from roofline_lib.present.exercises import check_layer, solutions
from roofline_lib.present.tables import row_profile
from roofline_lib.variants.registry import build_variant


@pytest.fixture
def ctx(monkeypatch, tmp_path):
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.delenv(nbl.FIGURES_ENV, raising=False)
    monkeypatch.setenv(session.SESSION_ENV, str(tmp_path / "session"))
    monkeypatch.setattr(session, "LADDER", ("reference", "sdpa_fused_qkv", "no_empty_mask"))
    return dataclasses.replace(nbl.setup_context(), budget_s=0.01)


def test_the_ladder_is_measured_once_per_session_and_each_rung_is_compared_with_the_one_before(ctx, monkeypatch):
    one = dataclasses.replace(ctx, rows=ctx.rows[:1])
    first = session.ladder_sweep(one)
    assert list(first["variant"]) == ["reference", "sdpa_fused_qkv", "no_empty_mask"]
    assert list(first["against"].fillna("")) == ["", "reference", "sdpa_fused_qkv"]
    calls = []
    monkeypatch.setattr(session, "run_sweep", lambda *a, **k: calls.append(a) or first)
    assert session.ladder_sweep(one) is first and len(calls) == 1  # the cached file is what run_sweep resumes from
    monkeypatch.undo()


def test_a_changed_setting_measures_afresh(ctx):
    one = dataclasses.replace(ctx, rows=ctx.rows[:1])
    again = dataclasses.replace(one, budget_s=0.02)
    assert session._key(one, "ladder") != session._key(again, "ladder")
    assert session._key(one, "ladder") == session._key(dataclasses.replace(one), "ladder")


def test_a_notebooks_own_result_is_kept_for_a_later_notebook_of_the_session_only(ctx):
    import pandas as pd
    assert session.kept_result(ctx, "longctx") is None  # 06 did not run in this session: 07 says only the floor
    table = pd.DataFrame({"seq_len": [100_000], "median_ms": [53.3]})
    session.keep_result(ctx, "longctx", table)
    assert session.kept_result(ctx, "longctx").equals(table)
    assert session.kept_result(dataclasses.replace(ctx, budget_s=0.5), "longctx") is None  # another setting


def test_ceilings_are_measured_once(ctx, monkeypatch):
    first = session.measured_ceilings(ctx)
    monkeypatch.setattr(session, "measure_ceilings", lambda *a, **k: pytest.fail("measured twice"))
    assert session.measured_ceilings(ctx) == first


def test_a_profile_is_measured_once_per_variant_rows_and_code_version(ctx, monkeypatch):
    one = dataclasses.replace(ctx, rows=ctx.rows[:1])
    first = session.suite_profile(one, "reference")
    measured = []
    real = session.profile_suite
    monkeypatch.setattr(session, "profile_suite", lambda rows, names, *a, **k: measured.append(
        ([s.row for s in rows], list(names))) or real(rows, names, *a, **k))
    again = session.suite_profile(one, ["reference"])
    assert measured == [] and again.ops.equals(first.ops) and again.categories.equals(first.categories)
    row = one.rows[0].row
    assert row_profile(again, row).total_us == row_profile(first, row).total_us  # the one row, from the cache
    both = session.suite_profile(one, ["reference", "sdpa_fused_qkv"])  # the reference's reused, the rung's new
    assert measured == [([row], ["sdpa_fused_qkv"])]
    assert list(both.runs.variant) == ["reference", "sdpa_fused_qkv"]
    assert both.categories[both.categories.variant == "reference"].reset_index(drop=True).equals(first.categories)
    two = dataclasses.replace(ctx, rows=ctx.rows[:2])
    session.suite_profile(two, "reference")  # other rows: measured anew
    assert measured[-1] == ([s.row for s in ctx.rows[:2]], ["reference"])
    monkeypatch.setattr(session, "_code_version", lambda: "a later commit")
    session.suite_profile(one, "reference")  # a stale code version: measured anew
    assert measured[-1] == ([row], ["reference"]) and len(measured) == 3
    with pytest.raises(ValueError, match="known variant names"):
        session.suite_profile(one, "no_such_rung")


def _top_level_calls(source: Path) -> set[str]:
    """Names of the functions a notebook calls by plain name outside its functions (a widget's callback runs only
    when a learner asks)."""
    found = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
                found.add(child.func.id)
            visit(child)

    visit(ast.parse(source.read_text()))
    return found


@pytest.mark.parametrize("stem", ["01_baseline_profiling", "02_sdpa_fused_qkv", "03_mask_elimination",
                                  "04_triton_layernorm"])
def test_the_walkthrough_profiles_its_rungs_once_per_session(stem):
    calls = _top_level_calls(Path(__file__).resolve().parents[1] / "notebooks" / f"{stem}.py")
    assert "suite_profile" in calls and not calls & {"profile", "profile_variant"}, (
        f"{stem}: profile a rung with session.suite_profile (tables.row_profile for one row), not afresh")


class DropsTheMask(torch.nn.Module):
    """A layer that forgets the padding mask: right without padding, wrong with left padding."""

    def __init__(self, reference):
        super().__init__()
        self.inner = build_variant("no_empty_mask", reference)

    def forward(self, x, key_padding_mask=None):
        return self.inner(x, None)


def test_check_layer_passes_a_correct_layer_and_times_it(ctx):
    verdict = check_layer(ctx, lambda ref: build_variant("sdpa_fused_qkv", ref), rows=ctx.rows[:1])
    assert verdict.passed and verdict.line.startswith("✅ passes §3 on row s1 (no padding and left padding; error at "
                                                      "most ")
    worst = verdict.table.err_ratio.astype(float).max()  # the line names the worst case, so accuracy shows
    assert f"most {three_digits(worst)}× the reference's); " in verdict.line
    assert "no_empty_mask on row s1" in verdict.line
    assert set(verdict.table["padding"]) == {"none", "left"}


def test_check_layer_catches_a_dropped_mask_on_left_padding_only(ctx):
    verdict = check_layer(ctx, DropsTheMask, rows=ctx.rows[:1])
    assert not verdict.passed and verdict.line.startswith("❌ fails §3 — row s1, left padding: fail")
    assert list(verdict.table.set_index("padding")["status"]) == ["ok", "fail"]


def test_a_failure_without_padding_reads_no_padding(ctx):
    verdict = check_layer(ctx, lambda ref: ZeroLayer(), rows=ctx.rows[:1])
    assert verdict.line.startswith("❌ fails §3 — row s1, no padding: fail") and "none padding" not in verdict.line


class ZeroLayer(torch.nn.Module):
    """A layer that returns zeros: wrong with every padding."""

    def forward(self, x, key_padding_mask=None):
        return torch.zeros_like(x)


def test_solutions_are_found_in_a_percent_files_markdown():
    text = "# <details><summary>Solution</summary>\n#\n# ```python\n# x = 1\n# check_layer(ctx, X)\n# ```\n# </details>"
    assert solutions(text) == ["x = 1\ncheck_layer(ctx, X)\n"]


def test_an_exercise_table_writes_measured_numbers_with_three_digits():
    import pandas as pd

    from roofline_lib.present.exercises import Verdict
    table = pd.DataFrame({"row": ["s1"], "padding": ["left"], "err_ratio": [1.0], "bound": [0.00065],
                          "passed": [True], "reason": ["error 0.000323 ≤ bound 0.000650"]})
    shown = Verdict(True, table, "✅")._repr_markdown_()
    assert "| 1.00 " in shown and "0.000650 " in shown and "| 1 " not in shown
