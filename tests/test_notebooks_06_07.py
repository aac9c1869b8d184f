"""Notebooks 06 and 07 and what they show: the long-context table and headline (`present.tables`,
`present.prose`), numbered panels, 06's opt-in million-token run, the exercises' format, and their starters and
solutions run on smoke rows."""
import re
import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofline_lib.core.catalog import ATTENTION_CHOICES
from roofline_lib.present import notebook as nbl
from roofline_lib.present.plots_longctx import plot_longctx, plot_memory_against_n, strategy_look
from roofline_lib.present.prose import longctx_headline, longctx_recap, longctx_summary
from roofline_lib.present.tables import longctx_table
from roofline_lib.runs.longctx import COLUMNS, SAME_AS_AUTO

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OWNED = [NOTEBOOKS / "06_long_context.py", NOTEBOOKS / "07_summary.py"]


def long_run(full_status="ok", compared=True, cap=15.0) -> pd.DataFrame:
    """A `run_longctx` frame: the full layer uncapped and under `cap`, two chunked configurations, the comparison."""
    rows = [dict(kind="measure", variant="no_empty_mask", status=full_status, err_ratio=1.01 if full_status == "ok"
                 else np.nan, median_ms=30.0 if full_status == "ok" else np.nan, peak_gib=2.9,
                 reason="" if full_status == "ok" else "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 …"),
            dict(kind="measure", variant="no_empty_mask", status="oom", memory_cap_gib=cap,
                 reason="CUDA out of memory. Tried to allocate 1.50 GiB."),
            dict(kind="measure", variant="chunked", attention="auto", resolved_attention="split_cudnn", chunk_size=4096,
                 memory_cap_gib=cap, status="ok", err_ratio=1.0, median_ms=33.0, p20_ms=32.0, p80_ms=34.0,
                 peak_gib=1.1),
            dict(kind="measure", variant="chunked", attention="mask", chunk_size=4096, memory_cap_gib=cap,
                 status="skipped", reason="chunked: the mask strategy failed its self-check\nmore")]
    if compared:
        rows.append(dict(kind="comparison", variant="chunked", attention="auto", resolved_attention="split_cudnn",
                         chunk_size=4096, status="ok", median_ms=33.0, full_ms=30.0, ratio_vs_full=1.1,
                         ratio_p20=1.05, ratio_p80=1.12, verdict="slower"))
    return pd.DataFrame(rows).reindex(columns=COLUMNS).assign(seq_len=100_000, batch=1, d_model=1024, n_heads=16,
                                                              device="NVIDIA H200", dtype="fp16")


def test_a_fit_check_under_the_cap_reads_not_timed_and_nothing_else_does():
    run = long_run()
    run.loc[1, ["status", "reason", "peak_gib"]] = ["ok", "", 2.9]  # the full layer fits under the cap, untimed
    table = longctx_table(run[run.kind == "measure"], ["variant", "status", "median_ms"], {"median_ms": "ms"})
    assert list(table.ms) == ["30", "not timed: a fit check", "33", ""]  # a skipped line stays blank, with its why


def test_a_long_context_table_has_no_nan_and_says_why_a_line_did_not_run():
    table = longctx_table(long_run(), ["variant", "attention", "chunk_size", "status", "err_ratio", "median_ms",
                                       "tflops", "peak_gib"], {"chunk_size": "chunk", "median_ms": "ms per call"})
    assert "tflops" not in table  # empty on every line: left out
    assert not table.isna().any().any() and "nan" not in table.to_string().lower()
    assert list(table.why) == ["", "out of memory (one allocation of 1.50 GiB failed)", "",
                               "not run: chunked: the mask strategy failed its self-check", ""]  # the comparison ran
    assert table.loc[0, "ms per call"] == "30" and table.loc[2, "chunk"] == "4,096"


def test_the_headline_states_the_check_the_ratio_with_its_band_and_the_peaks():
    text = longctx_headline(long_run())
    assert "100,000 tokens" in text and "1 of 2 configurations" in text
    assert ("it takes 33.0 ms per call against 30.0 ms: 1.10× [1.05–1.12] its time (median and p20–p80 of the "
            "per-round ratios), slower than it.") in text  # the times of the same interleaved calls as the ratio
    assert "1.10 GiB (the full-sequence layer's: 2.90 GiB)" in text
    assert ("Under a 15.0 GiB cap the full-sequence layer does not fit: out of memory (one allocation of 1.50 GiB "
            "failed).") in text
    assert "nothing is compared" not in text


def test_a_headline_of_one_configuration_picks_no_fastest():
    run = long_run()
    one = run[(run.variant != "chunked") | (run.kind != "measure") | run.status.eq("ok")]
    assert len(one[(one.kind == "measure") & (one.variant == "chunked")]) == 1
    text = longctx_headline(one)
    assert "the chunked layer, chunks of" in text and "passes §3 (error ratio" in text
    assert "The fastest" not in text and "1 of 1" not in text
    summary, recap = longctx_summary(one), longctx_recap(one)
    assert "The one chunked configuration ran and passed §3" in summary and "its error ratio 1.00" in summary
    assert recap.endswith("§3 passed") or "§3 passed;" in recap
    assert not any(words in text for text in (summary, recap) for words in ("The fastest", "1 of 1", "1 timed"))


def test_a_summary_of_one_configuration_says_why_it_has_no_result_and_counts_a_repeat():
    run = long_run()
    chunked = (run.kind == "measure") & (run.variant == "chunked")
    failed = run[~chunked | run.status.ne("ok")]  # the one tried: mask, skipped
    summary = longctx_summary(failed)
    assert "The one chunked configuration has no result: not run: chunked: the mask strategy failed" in summary
    assert "passed" not in summary.split("The one chunked")[1] and "1 of 1" not in summary
    repeat = pd.concat([run[~chunked | run.status.eq("ok")], run[chunked & run.status.eq("ok")].assign(
        attention="split_cudnn", reason=f"{SAME_AS_AUTO} split_cudnn")])
    assert "1 of 1 chunked configurations ran and passed §3; 1 more was auto's choice" in longctx_summary(repeat)


def test_of_two_configurations_one_timed_is_not_called_the_fastest():
    run = long_run()  # auto passed and was timed, mask was skipped
    for text in (longctx_summary(run), longctx_headline(run)):
        assert "1 of 2" in text and "The fastest" not in text
    assert "The one that passed is chunks of 4,096 tokens" in longctx_headline(run)
    assert "Timed: attention auto" in longctx_summary(run)


def test_the_headline_says_why_nothing_is_compared():
    text = longctx_headline(long_run(full_status="oom", compared=False))
    assert "The full-sequence layer does not fit: out of memory (one allocation of 2.00 GiB failed)." in text
    assert text.endswith("With no run of the full-sequence layer to time it against, nothing is compared.")
    nothing = long_run().assign(status="skipped")
    assert "no chunked configuration ran and passed §3" in longctx_headline(nothing)


def test_the_long_context_panels_are_numbered():
    titles = [ax.get_title() for ax in plot_longctx(long_run()).axes]
    assert titles[0].startswith("Panel 1 — ") and titles[1].startswith("Panel 2 — ")
    memory = pd.DataFrame({"seq_len": [64, 64, 256, 256], "layer": ["reference", "chunked"] * 2,
                           "status": ["ok", "ok", "skipped", "ok"], "estimated_gib": [1e-4, 2e-4, 2.0, 3e-4],
                           "peak_gib": [np.nan] * 4, "capacity_gib": 1.0, "fits": [True, True, False, True],
                           "median_ms": [1.0, 2.0, np.nan, 3.0], "device": "x86_64", "dtype": "fp32"})
    fig = plot_memory_against_n(memory)
    assert [ax.get_title().split(" — ")[0] for ax in fig.axes] == ["Panel 1", "Panel 2"]
    labels = fig.legends[0].get_texts()
    assert not any("(measured)" in t.get_text() for t in labels)  # nothing measured on the CPU: no entry for it


def test_the_long_context_panels_start_at_0_and_leave_room_above_the_highest_point_or_line():
    time, memory = plot_longctx(long_run(cap=15.0)).axes
    assert time.get_ylim() == pytest.approx((0, 1.05 * 34.0))  # the chunked layer's p80 whisker, above the full's 30
    assert memory.get_ylim() == pytest.approx((0, 1.05 * 15.0))  # the cap's line, above every peak


def test_the_million_token_run_is_opt_in_on_a_t4_and_off_on_the_cpu(monkeypatch):
    text = OWNED[0].read_text()
    flag = re.search(r"^RUN_MILLION = (.+)$", text, flags=re.M)
    assert flag and "not small_gpu(ctx.device)" in flag.group(1)  # the one T4 rule (core.device.small_gpu)
    assert text.index("RUN_MILLION = ") < text.index("## The result")  # at the top, with how to switch it on
    assert "set RUN_MILLION = True" in text
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.chdir(NOTEBOOKS)
    assert runpy.run_path(str(OWNED[0]), run_name="imported")["RUN_MILLION"] is False


def exercises(source: Path) -> list[tuple[str, str, str]]:
    """(title, starter code, solution code) of every exercise of a percent-format notebook."""
    cells = re.split(r"(?m)^# %%.*\n", source.read_text())
    found = []
    for i, cell in enumerate(cells):
        title = re.search(r"^# ### Exercise (\d+) — (.+)$", cell, flags=re.M)
        if title:
            solution = re.search(r"<summary>Solution</summary>\n#\n# ```python\n(.*?)# ```", cells[i + 2], re.S)
            assert "<summary>Hint</summary>" in cells[i + 2] and solution, f"exercise {title.group(1)}: no solution"
            code = "\n".join(line[2:] if line.startswith("# ") else line[1:] for line in solution.group(1).splitlines())
            found.append((title.group(0), cells[i + 1], code))
    return found


@pytest.mark.parametrize("source", OWNED, ids=[p.stem for p in OWNED])
def test_two_exercises_each_ending_in_check_layer(source):
    found = exercises(source)
    assert [t.split(" — ")[0] for t, _, _ in found] == ["# ### Exercise 1", "# ### Exercise 2"]
    for _, starter, solution in found:
        assert starter.rstrip().splitlines()[-1].startswith("check_layer(ctx, ")
        assert solution.rstrip().splitlines()[-1].startswith("check_layer(ctx, ")


def run_exercises(source: Path, monkeypatch) -> list:
    """Every `check_layer` result of a notebook imported as a test imports it (its exercises' starters run then),
    followed by each exercise's solution, on smoke rows."""
    from roofline_lib.present import exercises as checks

    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    monkeypatch.setenv(nbl.BUDGET_ENV, "0")
    monkeypatch.setenv("ROOFLINE_PROGRESS", "0")
    monkeypatch.chdir(NOTEBOOKS)
    checked = []
    real = checks.check_layer
    monkeypatch.setattr(checks, "check_layer", lambda *a, **k: checked.append(real(*a, **k)) or checked[-1])
    namespace = runpy.run_path(str(source), run_name="imported")
    for _, _, solution in exercises(source):
        exec(solution, namespace)
    return checked


def test_06s_exercises_run_and_pass_on_a_smoke_row(monkeypatch):
    checked = run_exercises(OWNED[0], monkeypatch)
    assert len(checked) == 4 and all(c.passed for c in checked)


@pytest.mark.slow
def test_07s_exercises_run_and_pass_on_smoke_rows(monkeypatch):
    checked = run_exercises(OWNED[1], monkeypatch)
    assert len(checked) == 4 and all(c.passed for c in checked)


@pytest.mark.notebook
@pytest.mark.parametrize("source", OWNED, ids=[p.stem for p in OWNED])
def test_the_long_context_and_the_summary_show_no_nan_cell(source, tmp_path, monkeypatch):
    """Executed in smoke mode, every table cell is a value, blank, or the reason it is empty: never NaN or None."""
    import nbclient
    import nbformat

    from roofline_lib.present.session import SESSION_ENV

    for name, value in {nbl.SMOKE_ENV: "1", nbl.BUDGET_ENV: "0", nbl.FIGURES_ENV: str(tmp_path),
                        SESSION_ENV: str(tmp_path / "session"), "PYTHONPATH": str(ROOT)}.items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs if o.output_type != "stream")
    assert html and not re.findall(r"<td>\s*(?:NaN|nan|None)\s*</td>", html)
    shown = "".join(str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert not re.search(r"\b(?:nan|NaN)\b", shown)  # nor in a computed sentence


def test_a_strategy_keeps_its_colour_and_style_whichever_others_a_run_drew():
    run = long_run()
    run.loc[run.attention.eq("mask"), ["status", "median_ms", "p20_ms", "p80_ms", "peak_gib", "reason"]] = \
        ["ok", 40.0, 39.0, 41.0, 1.2, ""]

    def mask_line(results):
        bars = next(c for c in plot_longctx(results).axes[0].containers if c.get_label().startswith("mask"))
        line = bars.lines[0]  # the error bars' data line
        return line.get_color(), line.get_marker(), line.get_linestyle()

    assert mask_line(run) == mask_line(run[~run.attention.eq("auto")])  # auto's line gone: mask's unchanged


def test_no_two_chunked_strategies_share_a_colour_or_a_marker():
    looks = [strategy_look(name) for name in ATTENTION_CHOICES]
    assert len({look["color"] for look in looks}) == len({look["marker"] for look in looks}) == len(ATTENTION_CHOICES)
    assert [look["markerfacecolor"] for look in looks].count(None) == 1  # auto's alone is filled: it covers no other
    assert strategy_look("not a strategy")["color"] == "grey"
