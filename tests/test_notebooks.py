"""The walkthrough notebooks and roofline_lib.present.notebook: every .py/.ipynb pair in sync, one repository URL,
no helper re-defined in a notebook, each notebook run headless end to end in smoke mode, and the helpers."""
import ast
import dataclasses
import json
import os
import re
import runpy
from collections.abc import Sequence
from pathlib import Path

import jupytext
import nbclient
import nbformat
import pandas as pd
import pytest
import torch

import roofline_lib
from roofline_lib import SMOKE_SUITE, SUITE, VariantUnavailable, build_variant
from roofline_lib.present import colab, formatting, widgets
from roofline_lib.present import notebook as nbl
from roofline_lib.present.exercises import solutions
from roofline_lib.present.session import SESSION_ENV

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("*.py"))
IDS = [p.stem for p in SOURCES]


def setup_cell_urls(text: str) -> list[str]:
    return re.findall(r'^REPO_URL = "([^"]+)"', text, flags=re.M)


def ipynb_text(path: Path) -> str:
    return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])


def test_every_notebook_is_a_pair():
    assert SOURCES, "no notebooks found"
    assert {p.stem for p in SOURCES} == {p.stem for p in NOTEBOOKS.glob("*.ipynb")}


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_pair_in_sync(source):
    rendered = jupytext.writes(jupytext.read(source.with_suffix(".ipynb")), fmt="py:percent")
    assert rendered == source.read_text(), (
        f"{source.name} and its .ipynb differ: run `jupytext --sync notebooks/{source.name}`")


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_setup_cell_names_the_one_repository_url(source):
    for text in (source.read_text(), ipynb_text(source.with_suffix(".ipynb"))):
        assert setup_cell_urls(text) == [colab.REPO_URL]


@pytest.mark.parametrize("path", [*SOURCES, *(p.with_suffix(".ipynb") for p in SOURCES)], ids=lambda p: p.name)
def test_the_first_code_cell_is_the_one_setup_cell(path):
    first = next(cell for cell in jupytext.read(path).cells if cell.cell_type == "code")
    assert first.source == colab.setup_cell().rstrip("\n"), (
        f"{path.name}'s first code cell is not roofline_lib.present.colab.setup_cell(): paste that text in")


def library_names() -> set[str]:
    names = set()
    for path in Path(roofline_lib.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_no_helper_redefined_in_a_notebook(source):
    tree = ast.parse(source.read_text())
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & library_names(), "use roofline_lib's helper instead of re-defining it"


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_imports_cleanly(source, monkeypatch):
    """Heavy cells are gated on RUN: importing the .py only sets up the context."""
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.chdir(NOTEBOOKS)
    namespace = runpy.run_path(str(source), run_name="imported")
    assert namespace["RUN"] is False and namespace["ctx"].smoke


@pytest.mark.notebook
@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_runs_headless_in_smoke_mode(source, tmp_path, monkeypatch, shared_session):
    """Every cell runs, then every exercise's folded solution after them, each ending in a verdict."""
    answers = solutions(source.read_text())
    cells = _smoke_cells(source.with_suffix(".ipynb"), tmp_path, monkeypatch, answers, shared_session)
    outputs = [o for cell in cells for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"], [o.get("evalue") for o in outputs]
    silent = [cell.source for cell in cells if re.match(r"if RUN\b", cell.source) and not cell.outputs]
    assert not silent, f"a cell run here shows nothing (print why it is empty here):\n{silent}"
    for cell in cells[len(cells) - len(answers):]:
        assert any("§3" in str(o.get("data", {})) for o in cell.outputs), f"no check_layer verdict:\n{cell.source}"
    assert any("text/html" in o.get("data", {}) for o in outputs), "no table rendered"
    for name in re.findall(r'save_figure\(.*"(\w+)", ctx\)', source.read_text()):
        assert (tmp_path / f"{name}.png").is_file()
        assert any("image/png" in o.get("data", {}) for o in outputs), "no plot rendered inline"


@pytest.fixture(scope="module")
def shared_session(tmp_path_factory) -> Path:
    """One session folder for the notebooks executed here, as in a run of them all: the ladder is swept once."""
    return tmp_path_factory.mktemp("session")


def _smoke_outputs(notebook: Path, figures: Path, monkeypatch) -> list:
    """Every code cell's outputs of `notebook` executed headless in smoke mode (`_smoke_cells`)."""
    return [o for cell in _smoke_cells(notebook, figures, monkeypatch) for o in cell.outputs]


def _smoke_cells(notebook: Path, figures: Path, monkeypatch, answers: Sequence[str] = (),
                 session: Path | None = None) -> list:
    """Every code cell's outputs of `notebook` executed headless in smoke mode from the checkout, with the least
    time budget (the fewest timed rounds): smoke timings mean nothing, only the code paths are checked. `answers`
    run after the notebook's own cells, one cell each, and come last."""
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.setenv(nbl.BUDGET_ENV, "0")
    monkeypatch.setenv(nbl.FIGURES_ENV, str(figures))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(SESSION_ENV, str(session or figures / "session"))
    nb = nbformat.read(notebook, as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(answer) for answer in answers]
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,  # 06's long-context cell on a busy 2-core CPU
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return [cell for cell in nb.cells if cell.cell_type == "code"]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the Triton kernel runs")
def test_the_triton_notebook_runs_on_a_learners_cpu_without_the_interpreter(tmp_path, monkeypatch):
    """Without a GPU and without TRITON_INTERPRET (a laptop), the Triton parts are skipped with their reason."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    outputs = _smoke_outputs(NOTEBOOKS / "04_triton_layernorm.ipynb", tmp_path, monkeypatch)
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("needs a CUDA GPU" in str(o.get("text", "")) + str(o.get("data", {})) for o in outputs)


# --- roofline_lib.present.notebook ------------------------------------------------------------------------------

@pytest.fixture
def smoke(monkeypatch) -> nbl.Context:
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.delenv(nbl.FIGURES_ENV, raising=False)
    return nbl.setup_context()


def test_smoke_context(smoke):
    assert smoke.smoke and smoke.rows == SMOKE_SUITE and smoke.figure_dir is None
    if not torch.cuda.is_available():
        assert smoke.device.type == "cpu" and smoke.dtype == torch.float32
    assert "smoke suite" in smoke._repr_markdown_()


def test_context_rows_and_bad_input(monkeypatch):
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    assert nbl.setup_context(rows="1").rows == SMOKE_SUITE  # CI's smoke mode wins over a notebook's rows
    monkeypatch.setenv(nbl.SMOKE_ENV, "yes")
    with pytest.raises(ValueError, match="ROOFLINE_SMOKE"):
        nbl.setup_context()
    monkeypatch.setenv(nbl.SMOKE_ENV, "0")
    with pytest.raises(ValueError, match="unknown row"):
        nbl.setup_context(rows="99")
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.setenv(nbl.SHARED_ENV, "two")
    with pytest.raises(ValueError, match="ROOFLINE_SHARED='two'"):
        nbl.setup_context()
    monkeypatch.setenv(nbl.SHARED_ENV, "4")
    shared = nbl.setup_context()
    assert shared.shared == 4 and "side by side" not in shared._repr_markdown_()  # smoke times nothing anyway
    assert "up to 4 notebooks ran side by side" in dataclasses.replace(shared, smoke=False)._repr_markdown_()


def test_an_emulated_t4_context_names_the_t4_once_and_the_gpu_it_runs_on(smoke, emulated_t4):
    emulated = dataclasses.replace(smoke, device=emulated_t4, dtype=torch.float16, emulated="timings are the GPU's")
    shown = emulated._repr_markdown_()
    assert shown.startswith("**T4 (emulated on NVIDIA H100 80GB HBM3)**, fp16") and shown.count("T4 (") == 1
    assert "- T4 emulation: compute capability 7.5" in shown


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU fallback")
def test_cpu_falls_back_to_smoke_suite_and_honours_rows(monkeypatch):
    monkeypatch.delenv(nbl.SMOKE_ENV, raising=False)
    assert nbl.setup_context().rows == SMOKE_SUITE
    assert [s.row for s in nbl.setup_context(rows="s2").rows] == ["s2"]


def test_dropping_the_mask_is_caught_by_left_padding_and_holes_only(smoke):
    def drops_mask(ref):
        layer = build_variant("no_empty_mask", ref)
        return lambda x, key_padding_mask=None: layer(x)

    table = nbl.check_table(smoke, {"drops_mask": drops_mask}, paddings=("right", "left", "holes"), rows="s2")
    assert table.set_index("padding").passed.to_dict() == {"right": True, "left": False, "holes": False}
    good = nbl.check_table(smoke, ["no_empty_mask"], paddings=("left", "holes"), rows="s2")
    assert good.passed.all() and (good.err_ratio < 2).all()


def test_check_table_records_unavailable_variant(smoke):
    def unavailable(ref):
        raise VariantUnavailable("needs a GPU")

    table = nbl.check_table(smoke, {"gpu_only": unavailable}, rows=smoke.rows[:1])
    assert (table.passed.isna().all() and table.status.eq("skipped").all()
            and table.reason.str.contains("needs a GPU").all())


def test_save_figure(smoke, tmp_path):
    from matplotlib.figure import Figure
    fig = Figure()
    assert nbl.save_figure(fig, "x", smoke) is fig and not list(tmp_path.iterdir())
    ctx = dataclasses.replace(smoke, figure_dir=tmp_path / "figs")
    nbl.save_figure(fig, "x", ctx)
    assert (tmp_path / "figs" / "x.png").is_file()


def test_rerun_widget_reruns_on_change_and_reports_bad_input(smoke):
    calls = []

    def measure(rows, dtype, variant):
        calls.append((rows, dtype, variant))
        if rows == "bad":
            raise ValueError("bad rows")
        return pd.DataFrame({"rows": [rows]})

    controls = widgets.step_controls(smoke, ["sdpa_fused_qkv", "no_empty_mask"], value="sdpa_fused_qkv")
    box = widgets.rerun_widget(measure, **controls)
    assert controls["rows"].continuous_update is False
    assert calls == [("s1", smoke.dtype_name, "sdpa_fused_qkv")]  # smoke mode: one row, quick
    controls["variant"].value = "no_empty_mask"
    controls["rows"].value = "bad"  # reported in the output area, not raised
    assert calls[1:] == [("s1", smoke.dtype_name, "no_empty_mask"), ("bad", smoke.dtype_name, "no_empty_mask")]
    assert len(box.children) == 2
    assert repr(box) == ("[controls: rows, dtype, variant. Change one (type, then press Enter) to run a new, separate "
                         "measurement, shown below the controls; they work where the notebook runs live, in Jupyter "
                         "or Colab]")  # a saved notebook's text
    assert box._repr_mimebundle_()["text/plain"] == repr(box)


def test_a_widget_opens_on_the_ladders_lines_and_measures_only_when_a_control_changes(smoke):
    calls = []
    ladder = pd.DataFrame({"row": ["s1", "s1", "s2"], "variant": ["reference", "fastest", "fastest"],
                           "median_ms": [1.0, 0.5, 0.7]})
    controls = widgets.step_controls(smoke, ["fastest", "reference"], value="fastest")
    opening = nbl.ladder_lines(ladder, smoke, controls["rows"].value, ["reference", "fastest"])
    assert list(opening.median_ms) == [1.0, 0.5]  # row s1's two lines, as measured once
    widgets.rerun_widget(lambda **values: calls.append(values) or pd.DataFrame(), opening=opening, **controls)
    assert calls == []  # nothing timed again for the opening values
    controls["variant"].value = "reference"
    assert calls == [{"rows": "s1", "dtype": smoke.dtype_name, "variant": "reference"}]
    with pytest.raises(ValueError, match="the ladder has no line of no_empty_mask on rows s1"):
        nbl.ladder_lines(ladder, smoke, "s1", ["no_empty_mask"])


def test_colab_badges_from_the_one_url(monkeypatch):
    url = colab.colab_url("00_overview.ipynb")
    assert url == ("https://colab.research.google.com/github/" + colab.REPO_URL.removeprefix("https://github.com/")
                   + f"/blob/{colab.BRANCH}/notebooks/00_overview.ipynb")
    badges = colab.colab_badges_markdown()
    assert badges.count("colab-badge.svg") == len(SOURCES)
    for source in SOURCES:
        assert colab.colab_url(source.with_suffix(".ipynb").name) in badges
    assert "[00 — Overview" in badges
    monkeypatch.setattr(colab, "REPO_URL", "https://gitlab.com/x/y")
    with pytest.raises(ValueError, match="GitHub"):
        colab.colab_url("00_overview.ipynb")


@pytest.mark.parametrize("gib, dropped", [(15, ["14"]), (5, ["13", "14"])])
def test_context_on_a_simulated_small_gpu(monkeypatch, gib, dropped):
    """What a Colab T4 (14.7 GiB) gets, checked without one: fp16, no bf16 offered, the suite trimmed to
    the rows whose naive peak fits (and more trimmed on a smaller card)."""
    from types import SimpleNamespace

    import roofline_lib.core.device as device_module
    monkeypatch.delenv(nbl.SMOKE_ENV, raising=False)
    monkeypatch.setattr(nbl, "resolve_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(device_module, "memory_fraction", lambda device: 1.0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=gib * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    ctx = nbl.setup_context()
    assert ctx.dtype == torch.float16 and not ctx.smoke
    assert [s.row for s in ctx.skipped] == dropped
    assert [s.row for s in ctx.rows] == [s.row for s in SUITE if s.row not in dropped]
    assert nbl.dtype_choices(ctx.device) == ["fp16", "fp32"]


def test_a_learners_own_shape_runs_and_one_that_cannot_fit_is_refused(smoke):
    table = nbl.check_table(smoke, ["no_empty_mask"], rows="B2 N20 d16 H2", paddings=("left",))
    assert table.row.tolist() == ["B2 N20 d16 H2"] and table.passed.all()
    with pytest.raises(ValueError, match="does not fit here: the naive layer needs"):
        nbl.check_table(smoke, ["no_empty_mask"], rows="B64 N1000000 d1024 H16")


def test_the_context_sets_readable_table_options(smoke):
    assert pd.get_option("display.float_format") is formatting.format_number
    assert pd.get_option("display.max_colwidth") is None  # kernel names and reasons whole


def test_a_displayed_table_has_separators_and_no_leftover_index():
    frame = pd.DataFrame({"flops": [57_982_058_496, 2], "ms": [0.5, 1.25], "op": ["addmm", "gelu"]}, index=[574, 3])
    shown = nbl.as_displayed(frame)
    assert shown.flops.dtype == float and shown.op.tolist() == ["addmm", "gelu"] and frame.flops.dtype != float
    assert "5.80e+10" in shown.to_string(float_format=formatting.format_number)  # FLOPs: 3 significant digits
    assert shown.index.tolist() == [0, 1]  # 574 and 3 were the rows' places in a larger table
    pivot = frame.set_index("op")
    assert nbl.as_displayed(pivot).index.tolist() == ["addmm", "gelu"]  # a meaningful index stays


@pytest.mark.notebook
@pytest.mark.parametrize("stem", ["00_overview", "01_baseline_profiling"])
def test_the_overview_and_the_profile_show_no_nan_cell(stem, tmp_path, monkeypatch):
    """A table cell is a value, blank, or the reason it is empty: never NaN, nan or None."""
    outputs = _smoke_outputs(NOTEBOOKS / f"{stem}.ipynb", tmp_path, monkeypatch)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs if o.output_type != "stream")
    assert html and not re.findall(r"<td>\s*(?:NaN|nan|None)\s*</td>", html)
