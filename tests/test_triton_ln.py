"""The "triton_ln" variant (§3 on the smoke suite, skipped cleanly where it cannot run) and the
keep-or-revert decision on synthetic measurements, down to what `best_variant` returns."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import CUDA, DEVICE

from roofline_lib import SMOKE_SUITE, VARIANTS, VariantUnavailable, build_variant
from roofline_lib.core.correctness import Case
from roofline_lib.core.decision import BASELINE, CANDIDATE, Decision, band_verdict, decide
from roofline_lib.core.device import device_name
from roofline_lib.kernels import unavailable_reason
from roofline_lib.measure.timing import Comparison
from roofline_lib.runs.experiment import end_to_end
from roofline_lib.runs.pipeline import check_variant
from roofline_lib.runs.sweep import run_sweep
from roofline_lib.variants import best as best_module
from roofline_lib.variants.best import DECISION_PREFIX, best_variant

DTYPE = torch.float16 if CUDA else torch.float32
runs_here = pytest.mark.skipif(unavailable_reason(DEVICE) is not None, reason=str(unavailable_reason(DEVICE)))
SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "triton_ln.py"


@pytest.fixture
def no_interpreter(monkeypatch):
    """As on a machine without a GPU where TRITON_INTERPRET is not set."""
    pytest.importorskip("triton")
    from roofline_lib.kernels import add_layer_norm as aln
    monkeypatch.setattr(aln, "INTERPRETED", False)


@pytest.fixture(autouse=True)
def fresh_decisions(monkeypatch):
    """Decisions remembered in one test never leak into another."""
    monkeypatch.setattr(best_module, "_measured", {})


def test_registered_after_no_empty_mask():
    names = list(VARIANTS)
    assert names.index("triton_ln") == names.index("no_empty_mask") + 1


@runs_here
@pytest.mark.parametrize("padding", ["none", "left", "holes"])
@pytest.mark.parametrize("shape", SMOKE_SUITE, ids=lambda s: s.label)
def test_passes_section_3(shape, padding):
    result = check_variant(Case(shape, DTYPE, DEVICE, padding, seed=3), "triton_ln")
    assert result.passed, result.reason


@runs_here
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_passes_section_3_in_half_precision(dtype):
    assert check_variant(Case(SMOKE_SUITE[1], dtype, DEVICE, "holes", seed=5), "triton_ln").passed


@runs_here
def test_same_function_as_no_empty_mask_and_reference_weights_untouched():
    case = Case(SMOKE_SUITE[2], torch.float32, DEVICE, "left", seed=1)
    before = {n: p.clone() for n, p in case.layer.state_dict().items()}
    layer = build_variant("triton_ln", case.layer)
    assert layer.ln2 is case.layer.ln2
    valid = case.key_padding_mask  # (B, N): compare real rows only
    out = layer(case.x, case.key_padding_mask)[valid]
    torch.testing.assert_close(out, build_variant("no_empty_mask", case.layer)(case.x, case.key_padding_mask)[valid],
                               atol=1e-5, rtol=1e-5)
    for n, p in case.layer.state_dict().items():
        assert torch.equal(p, before[n]), n


def test_unavailable_without_a_gpu_or_the_interpreter(no_interpreter):
    case = Case(SMOKE_SUITE[0], torch.float32, torch.device("cpu"))
    with pytest.raises(VariantUnavailable, match="needs a CUDA GPU.*TRITON_INTERPRET=1"):
        build_variant("triton_ln", case.layer)


def test_on_a_cpu_without_triton_the_reason_says_to_install_it_first(monkeypatch):
    from roofline_lib import kernels
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(kernels.importlib.util, "find_spec", lambda name: None)  # as if not installed
    assert kernels.unavailable_reason("cpu") == (
        "the Triton kernel needs a CUDA GPU, and the layer is on cpu (install Triton (`pip install triton`) and "
        "set TRITON_INTERPRET=1 before Triton is imported to run it through the Triton interpreter)")


def test_unavailable_without_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "roofline_lib.kernels.add_layer_norm", None)  # import now fails
    case = Case(SMOKE_SUITE[0], torch.float32, torch.device("cpu"))
    with pytest.raises(VariantUnavailable, match="Triton cannot be imported"):
        build_variant("triton_ln", case.layer)


def test_sweep_reports_it_skipped_never_crashes(no_interpreter):
    df = run_sweep([SMOKE_SUITE[0]], ["no_empty_mask", "triton_ln"], torch.float32, torch.device("cpu"),
                   budget_s=0.0, show_progress=False).set_index("variant")
    assert df.loc["triton_ln", "status"] == "skipped" and "CUDA" in df.loc["triton_ln", "reason"]
    assert pd.isna(df.loc["triton_ln", "median_ms"]) and df.loc["no_empty_mask", "status"] == "ok"


def measured(speedups, p20s, p80s, passed=None, status=None):
    """A synthetic `end_to_end` frame."""
    n = len(speedups)
    return pd.DataFrame({"row": [str(i + 1) for i in range(n)], "status": status or ["ok"] * n,
                         "passed": passed or [True] * n, "speedup": speedups, "speedup_p20": p20s,
                         "speedup_p80": p80s})


def test_decide_keeps_a_win_beyond_noise():
    d = decide(measured([1.10, 1.20], [1.05, 1.10], [1.15, 1.30]))
    assert d.keep and d.chosen == CANDIDATE and d.rows == 2
    assert d.speedup == pytest.approx((1.10 * 1.20) ** 0.5) and d.p20 == pytest.approx((1.05 * 1.10) ** 0.5)
    assert "measured win" in d.reason and d.as_dict()["decision"] == "keep"


def test_decide_reverts_within_noise():
    d = decide(measured([1.02, 1.01], [0.97, 0.99], [1.06, 1.04]))
    assert not d.keep and d.chosen == BASELINE and "within noise" in d.reason


def test_the_reason_gives_the_geometric_mean_with_its_band():
    inside = decide(measured([1.02, 1.01], [0.97, 0.99], [1.06, 1.04])).reason
    assert "1.01× [0.980–1.05]" in inside  # three significant digits, as tables write


def test_decide_reverts_when_slower_and_names_the_rows():
    d = decide(measured([0.90, 1.00], [0.85, 0.99], [0.95, 1.01]))
    assert not d.keep and "slower beyond noise" in d.reason and "on row 1" in d.reason


def test_geometric_mean_does_not_let_one_row_dominate():
    d = decide(measured([2.0, 0.5], [1.9, 0.45], [2.1, 0.55]))
    assert d.speedup == pytest.approx(1.0) and not d.keep


def test_decide_reverts_an_incorrect_candidate_however_fast():
    fast = ([1.5, 1.5], [1.4, 1.4], [1.6, 1.6])
    assert "§3" in decide(measured(*fast, passed=[True, False])).reason
    assert not decide(measured(*fast), kernel_ok=False).keep


def test_decide_ignores_rows_not_measured_and_reverts_on_nothing():
    d = decide(measured([1.2, float("nan")], [1.1, float("nan")], [1.3, float("nan")], status=["ok", "oom"]))
    assert d.keep and d.rows == 1
    nothing = decide(pd.DataFrame())
    assert "nothing was measured" in nothing.reason and not nothing.decided and nothing.verdict == ""
    assert decide(measured([1.5], [1.4], [1.6]), kernel_ok=False).decided  # a failed kernel is a revert, decided


def test_a_decisions_verdict_is_its_bands_and_the_same_rule_as_a_comparisons():
    assert decide(measured([1.10, 1.20], [1.05, 1.10], [1.15, 1.30])).verdict == "faster"
    assert decide(measured([1.02, 1.01], [0.97, 0.99], [1.06, 1.04])).verdict == "within noise"
    assert decide(measured([0.90, 0.90], [0.85, 0.85], [0.95, 0.95])).verdict == "slower"
    rounds = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    for factor, verdict in ((0.5, "faster"), (2.0, "slower"), (1.0, "within noise")):
        assert Comparison.from_samples(rounds, rounds * factor).verdict == verdict == band_verdict(
            *np.quantile(rounds / (rounds * factor), [0.2, 0.8]))


def write_decision(folder: Path, device: str, dtype: str, date: str, chosen: str) -> None:
    row = {"device": device, "dtype": dtype, "date": date, "chosen": chosen, "decision": "keep"}
    name = f"{DECISION_PREFIX}_{date}_{dtype}_{len(list(folder.iterdir()))}.csv"
    pd.DataFrame([row]).to_csv(folder / name, index=False)


def test_best_variant_defaults_to_the_baseline(tmp_path):
    assert best_variant(DEVICE, DTYPE, results_dir=tmp_path) == BASELINE


@runs_here
def test_best_variant_follows_the_newest_recorded_decision_for_this_gpu_and_dtype(tmp_path):
    here, dtype = device_name(DEVICE), {torch.float16: "fp16", torch.float32: "fp32"}[DTYPE]
    write_decision(tmp_path, here, dtype, "2026-01-01", CANDIDATE)
    write_decision(tmp_path, "Some Other GPU", dtype, "2026-02-01", BASELINE)
    write_decision(tmp_path, here, "bf16", "2026-02-01", BASELINE)
    assert best_variant(DEVICE, DTYPE, results_dir=tmp_path) == CANDIDATE
    write_decision(tmp_path, here, dtype, "2026-03-01", BASELINE)
    assert best_variant(DEVICE, DTYPE, results_dir=tmp_path) == BASELINE


@runs_here
def test_a_decision_measured_here_overrides_the_recorded_one(tmp_path):
    dtype = {torch.float16: "fp16", torch.float32: "fp32"}[DTYPE]
    write_decision(tmp_path, device_name(DEVICE), dtype, "2026-01-01", BASELINE)
    keep = Decision(CANDIDATE, BASELINE, True, 1.2, 1.1, 1.3, 3, "keep: synthetic")
    best_module.remember(DEVICE, DTYPE, keep)
    assert best_variant(DEVICE, DTYPE, results_dir=tmp_path) == CANDIDATE


def test_a_kept_candidate_that_cannot_run_here_gives_way(tmp_path, no_interpreter):
    cpu = torch.device("cpu")
    write_decision(tmp_path, device_name(cpu), "fp32", "2026-01-01", CANDIDATE)
    assert best_variant(cpu, torch.float32, results_dir=tmp_path) == BASELINE


@runs_here
def test_end_to_end_measures_and_decides():
    frame = end_to_end(SMOKE_SUITE[:1], torch.float32, DEVICE, show_progress=False,
                       budget_s=0.0, min_reps=2, warmup=1)
    row = frame.iloc[0]
    assert row["status"] == "ok" and row["passed"] and row["speedup"] > 0 and row["reps"] == 2
    assert {"device", "torch", "triton", "dtype", "date"} <= set(frame.columns)
    assert decide(frame).rows == 1


@runs_here
def test_benchmark_script_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("triton_ln_benchmark", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--device", str(DEVICE), "--rows", "s1", "--dtype", "fp32", "--out", str(tmp_path)]) == 0
    files = sorted(p.name.split("_")[2] for p in tmp_path.glob("triton_ln_*.csv"))
    assert files == ["check", "decision", "e2e", "kernel"]
    recorded = pd.read_csv(next(tmp_path.glob(f"{DECISION_PREFIX}_*.csv"))).iloc[0]
    assert recorded["device"] == device_name(DEVICE) and recorded["dtype"] == "fp32"
    assert best_variant(DEVICE, torch.float32, results_dir=tmp_path) == recorded["chosen"]
    assert "best =" in capsys.readouterr().out
