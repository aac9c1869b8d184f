"""What notebooks 04 and 05 compute from the session's ladder and the kernel's own timing: GPU time compared only as
lower, the same or higher (it has no band), the host's share named where the GPU mostly waits, and the kernel's table
with every speedup in its band and no NaN (present.prose, present.tables)."""
import re
from pathlib import Path

import jupytext
import pandas as pd

from roofline_lib.core.decision import decide
from roofline_lib.present import notebook as nbl
from roofline_lib.present import prose, report, session
from roofline_lib.present.tables import kernel_bandwidth_table

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAN = float("nan")


def ladder(gpu_ms=((0.010, 0.008), (0.050, 0.060)), verdicts=("slower", "faster"), call_ms=(0.040, 0.070)):
    """Two rows of a ladder sweep of no_empty_mask and triton_ln (against it), with GPU ms per call (theirs, mine)."""
    records = []
    for i, row in enumerate(["1", "2"]):
        shape = dict(row=row, shape=f"B1 N{128 * (i + 1)} d256 H4", device="GPU X", dtype="fp16", reason="",
                     status="ok", passed=True, err_ratio=1.0)
        theirs, mine = gpu_ms[i]
        records.append(shape | dict(variant="no_empty_mask", median_ms=call_ms[i], gpu_ms=theirs,
                                    gpu_share=min(theirs / call_ms[i], 1.0), against="sdpa_fused_qkv"))
        speedup = {"slower": 0.9, "faster": 1.1}[verdicts[i]]
        records.append(shape | dict(variant="triton_ln", median_ms=call_ms[i] / speedup, gpu_ms=mine,
                                    gpu_share=min(mine * speedup / call_ms[i], 1.0), against="no_empty_mask",
                                    speedup=2.0, speedup_p20=1.9, speedup_p80=2.1, vs_speedup=speedup,
                                    vs_p20=speedup - 0.02, vs_p80=speedup + 0.02, vs_verdict=verdicts[i]))
    return pd.DataFrame.from_records(records)


def test_gpu_time_is_compared_as_measured_and_host_time_named_where_only_the_call_is_slower():
    text = prose.gpu_time_sentence(ladder(), "triton_ln")
    assert "lower than `no_empty_mask`'s on row 1; higher than `no_empty_mask`'s on row 2." in text
    assert "On row 1 `triton_ln` is slower per call beyond noise although its GPU time is not higher" in text
    same = prose.gpu_time_sentence(ladder(gpu_ms=((0.0100, 0.01001), (0.05, 0.04)), verdicts=("faster", "faster")),
                                   "triton_ln")
    assert "the same as `no_empty_mask`'s to three digits on row 1" in same and "slower per call" not in same
    assert prose.gpu_time_sentence(ladder(gpu_ms=((NAN, NAN), (NAN, NAN))), "triton_ln") == ""  # a CPU


def test_the_host_share_headline_names_the_rows_where_the_gpu_mostly_waits():
    text = prose.host_share_headline(ladder(), "no_empty_mask", ["1", "2"])
    assert text.startswith("On this GPU X, on rows 1, 2, a `no_empty_mask` call keeps the GPU busy for 10.0 µs to "
                           "50.0 µs (its GPU time per call) and takes 40.0 µs to 70.0 µs")
    assert "On row 1 the GPU waits for the host during most of the call" in text  # 10 of 40 µs; row 2: 50 of 70
    cpu = prose.host_share_headline(ladder(gpu_ms=((NAN, NAN), (NAN, NAN))), "no_empty_mask", ["1"])
    assert cpu.startswith("No GPU here")


def kernels(of_copy=0.5):
    return pd.DataFrame({"n_rows": [7, 4096], "d_model": [131, 1024], "mib": [0.0072, 32.0],
                         "torch_ms": [0.004, 0.02], "triton_ms": [0.003, 0.018], "torch_gbps": [2.0, 1700.0],
                         "triton_gbps": [2.5, 1900.0], "torch_of_copy": [0.001, of_copy],
                         "triton_of_copy": [0.0012, 0.6 * of_copy / 0.5], "speedup": [1.3, 1.11],
                         "speedup_p20": [1.2, 1.0], "speedup_p80": [1.4, 1.2], "verdict": ["faster", "within noise"]})


def test_the_kernel_table_has_bands_shares_of_copy_and_no_nan():
    table = kernel_bandwidth_table(kernels())
    assert table["× torch [p20–p80]"].tolist() == ["1.30× [1.20–1.40]", "1.11× [1.00–1.20]"]
    assert table["Triton GB/s (of copy)"].tolist() == ["2.50 (0.120%)", "1,900 (60.0%)"]
    assert table["input (rows × d_model)"].tolist() == ["7 × 131", "4,096 × 1,024"]
    assert not table.isna().any().any() and not table.astype(str).eq("nan").any().any()
    no_copy = kernel_bandwidth_table(kernels(of_copy=NAN).assign(triton_of_copy=NAN))
    assert no_copy["torch GB/s (of copy)"].tolist()[1] == "1,700"


def test_the_kernel_sentence_counts_verdicts_and_names_the_best_share_of_copy():
    text = prose.kernel_bandwidth_sentence(kernels())
    assert "on 2 inputs: faster on 1, within noise on 1, slower on 0." in text
    assert "the kernel 60.0% (4,096 × 1,024), torch's pair 50.0% (4,096 × 1,024)" in text



def test_the_call_04_makes_and_07_recaps_is_one_call_on_the_ladder_and_the_kernels_checks():
    checks = pd.DataFrame({"dtype": ["fp16", "fp16"], "passed": [True, True]})
    call = report.ladder_call(ladder(verdicts=("faster", "faster")), checks)
    assert call == decide(report.ladder_step(ladder(verdicts=("faster", "faster")), "triton_ln"))
    assert call.keep and call.baseline == "no_empty_mask"
    failed = report.ladder_call(ladder(verdicts=("faster", "faster")), checks.assign(passed=[True, False]))
    assert not failed.keep and failed.reason == "the fused kernel failed its correctness check"
    unchecked = report.ladder_call(ladder(verdicts=("faster", "faster")), checks.iloc[:0])
    assert unchecked == call  # where the kernel cannot run nothing was checked, so nothing failed


def test_the_kernels_checks_are_none_where_it_cannot_run_and_made_once_per_session(monkeypatch, tmp_path):
    monkeypatch.setenv(session.SESSION_ENV, str(tmp_path))
    monkeypatch.setenv(nbl.SMOKE_ENV, "1")
    ctx = nbl.setup_context()
    monkeypatch.setattr(session, "unavailable_reason", lambda device: "no Triton here")
    assert session.add_layer_norm_checks(ctx).empty
    calls = []
    monkeypatch.setattr(session, "unavailable_reason", lambda device: None)
    monkeypatch.setattr(session, "check_add_layer_norm", lambda m, n, dtype, device: calls.append((m, n)) or {
        "n_rows": m, "d_model": n, "s_exact": True, "y_err": 1e-4, "torch_y_err": 1e-4, "passed": True})
    first, again = session.add_layer_norm_checks(ctx), session.add_layer_norm_checks(ctx)
    assert len(calls) == len(first) == len(again) and (7, 131) in calls  # measured once, read back the second time
    assert again.passed.dtype == bool and again.equals(first)



def test_05s_launch_bound_table_says_what_fastest_picked_and_every_timeline_names_its_shape():
    source = NOTEBOOKS / "05_launch_overhead.py"
    cell = next(c.source for c in jupytext.read(source).cells if "launch_bound_table(SHORT, RUNGS" in c.source)
    assert '["detail"]' in cell  # `fastest` chooses again in that run: the table says what it chose
    titles = re.findall(r"Figure \S+ — Row \{row\.row\}[^,]*,", source.read_text())
    assert len(titles) == 3 and all("({row.label})" in t for t in titles), titles  # Figures 1, 2 and 3–4


def test_04s_bandwidth_figure_names_its_device_and_dtype_as_the_other_figures_do():
    cell = next(c.source for c in jupytext.read(NOTEBOOKS / "04_triton_layernorm.py").cells
                if "plot_bandwidth(alone" in c.source)
    title = re.search(r"title=(.+?)\),\s*\"04_kernel_bandwidth\"", cell, flags=re.S).group(1)
    assert "Figure 1 — " in title and "{ctx.env['device']}" in title and "{ctx.dtype_name}" in title
