"""roofline_lib.present.estimate: each notebook's header states the T4 estimate the estimator computes for it,
the estimator declares exactly the costed calls each notebook makes, and its cost model follows the protocol."""
import ast
from pathlib import Path

import jupytext
import pytest

from roofline_lib.core.device import T4_MEMORY_GIB
from roofline_lib.core.shapes import SUITE
from roofline_lib.measure.timing import CALLS_PER_SAMPLE
from roofline_lib.present import estimate

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("*.py"))
IDS = [p.stem for p in SOURCES]


def header_paragraph(text: str) -> str:
    """The `**Time on a T4:**` paragraph of a notebook's markdown (`text`), its lines joined; "" if none."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("**Time on a T4:**")), None)
    if start is None:
        return ""
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return " ".join(line.strip() for line in lines[start:end])


def costed_calls(source: Path) -> set[str]:
    """The COSTED_CALLS a notebook's default run makes: calls outside functions and classes (a widget's
    callback or an exercise's layer runs only when a learner asks)."""
    found = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in estimate.COSTED_CALLS:
                    found.add(name)
            visit(child)

    visit(ast.parse(source.read_text()))
    return found


def test_every_notebook_has_an_estimate():
    assert set(IDS) == set(estimate.NOTEBOOK_WORK)
    with pytest.raises(ValueError, match="declare its work"):
        estimate.notebook_work("99_new")


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_the_header_states_the_estimate(source):
    header = next(cell for cell in jupytext.read(source).cells if cell.cell_type == "markdown").source
    assert header_paragraph(header) == estimate.header_line(source.stem), (
        f"{source.name}: paste its line from `python -m roofline_lib.present.estimate` into the header")
    assert f"about {estimate.minutes(source.stem)} min" in estimate.header_line(source.stem)


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_the_estimate_declares_the_calls_the_notebook_makes(source):
    declared = {work.call for work in estimate.notebook_work(source.stem)}
    assert declared == costed_calls(source), "declare (or drop) the work of these calls in estimate.NOTEBOOK_WORK"
    assert all(work.seconds >= 0 for work in estimate.notebook_work(source.stem))


def test_a_t4_runs_the_rows_whose_naive_peak_fits_its_memory():
    assert T4_MEMORY_GIB == 14.7
    rows = estimate.t4_rows()
    assert rows == SUITE[:-1]  # row 14, 100,000 tokens, is the long-context notebook's


def test_a_timed_comparison_costs_its_budget_or_its_fewest_rounds():
    spin = estimate.timed_s([])  # the spin-up alone (no callables: the budget buys no rounds)
    short = estimate.timed_s([1e-3, 1e-3])  # two samples of 8 ms, each led in: 32 ms a round, 15 in 0.5 s
    assert short - spin == pytest.approx(2 * 2e-3 + 5 * 2 * CALLS_PER_SAMPLE * 1e-3 + 15 * 0.032)
    long = estimate.timed_s([0.1])  # a 100 ms call: timed alone, the fewest rounds (10) outlast the budget
    assert long - spin == pytest.approx(0.1 * (2 + 5 + 10))
    assert estimate.timed_s([1e-6]) - spin < 0.01  # the most rounds (200) end a budget early


def test_the_float64_truth_dominates_a_long_rows_check():
    row13 = SUITE[12]
    assert estimate.truth_s(row13) > 20 * estimate.call_s(row13, naive=True)  # fp64 at 1/260 of fp16
    assert estimate.call_s(row13, naive=True) > 5 * estimate.call_s(row13)  # the naive scores' traffic
    assert estimate.call_s(SUITE[0]) == estimate.HOST_CALL_S  # a tiny call waits for the host


def test_the_fused_gemms_tiles_are_counted(monkeypatch):
    pytest.importorskip("triton")
    from roofline_lib.kernels import fused_linear
    monkeypatch.setattr(fused_linear, "INTERPRETED", False)  # the GPU's tiles, not the interpreter's one
    from roofline_lib.kernels.launch import T4_SHARED_MEMORY
    on_t4 = [c for c in fused_linear._configs() if c.kwargs == fused_linear.T4_TILE]
    assert len(on_t4) == estimate.FUSED_GEMM_TILES == 1
    assert fused_linear.tile_shared_bytes(on_t4[0], 2) < T4_SHARED_MEMORY
    assert estimate.triton_s(SUITE[:2], ["fused_gemm"]) > estimate.triton_s(SUITE[:1], ["fused_gemm"])  # re-tuned
    assert estimate.triton_s(SUITE[:2], ["reference"]) == 0
