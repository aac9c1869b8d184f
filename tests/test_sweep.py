"""The sweep and the CLI end to end on the smoke suite; OOM on one row is recorded and the sweep goes on."""
import math
import re
import shutil

import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, VARIANTS, build_variant
from roofline_lib.cli import main
from roofline_lib.present.report import host_gpu_table, speedup_table, versus_table
from roofline_lib.runs.sweep import finished_records, run_sweep, settings_file


def test_sweep_records_every_variant_and_row(cpu):
    rows = list(SMOKE_SUITE[:2])
    df = run_sweep(rows, ["reference", "no_empty_mask"], torch.float32, cpu, padding="left",
                   budget_s=0.0, show_progress=False)
    assert len(df) == 4 and set(df.status) == {"ok"} and df.passed.all()
    ref = df[df.variant == "reference"]
    assert ref.speedup.isna().all()
    fast = df[df.variant == "no_empty_mask"]
    assert (fast.speedup > 0).all() and fast.verdict.isin(["faster", "slower", "within noise"]).all()
    for col in ("device", "torch", "triton", "dtype", "date", "median_ms", "p20_ms", "p80_ms", "err_ratio",
                "peak_mib", "held_after_mib"):
        assert col in df.columns
    assert (df.dtype == "fp32").all() and (df.held_after_mib == 0).all()


def test_oom_on_one_row_is_recorded_and_sweep_goes_on(cpu, monkeypatch):
    class Explodes(torch.nn.Module):
        def forward(self, x, key_padding_mask=None):
            if x.shape[1] == SMOKE_SUITE[0].seq_len:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 300.00 GiB")
            return x

    monkeypatch.setitem(VARIANTS, "explodes", lambda ref: Explodes())
    df = run_sweep(list(SMOKE_SUITE[:2]), ["reference", "explodes"], torch.float32, cpu,
                   budget_s=0.0, show_progress=False)
    first, second = df[df.row == "s1"].set_index("variant"), df[df.row == "s2"].set_index("variant")
    assert first.loc["explodes", "status"] == "oom" and "300.00 GiB" in first.loc["explodes", "reason"]
    assert first.loc["reference", "status"] == "ok" and pd.notna(first.loc["reference", "median_ms"])
    assert second.loc["explodes", "status"] == "fail"  # identity: runs, but wrong
    assert second.loc["reference", "status"] == "ok"


def test_infeasible_reference_is_reported_with_bytes(cpu, monkeypatch):
    import roofline_lib.core.correctness as correctness
    import roofline_lib.core.reference as reference
    shape = SMOKE_SUITE[2]
    for module in (correctness, reference):  # the case samples rows; the reference refuses the shape
        monkeypatch.setattr(module, "reference_fits",
                            lambda s, d, dev: (s.batch, s.seq_len) != (shape.batch, shape.seq_len))
    proxy = type(shape)("p", 1, 40, shape.d_model, shape.n_heads)  # the row giving §3's bound
    monkeypatch.setattr(correctness, "SUITE", (proxy,))
    correctness.proxy_reference_error.cache_clear()
    df = run_sweep([shape], ["reference", "no_empty_mask"], torch.float32, cpu, budget_s=0.0,
                   show_progress=False).set_index("variant")
    assert df.loc["reference", "status"] == "infeasible" and df.loc["reference", "needs_gib"] > 0
    assert "GiB" in df.loc["reference", "reason"]
    assert df.loc["no_empty_mask", "status"] == "ok" and df.loc["no_empty_mask", "rows_checked"] == 64


@pytest.mark.slow
def test_cli_run_smoke(tmp_path, capsys):
    rc = main(["run", "--device", "cpu", "--rows", "smoke", "--budget", "0", "--out", str(tmp_path / "r"),
               "--figures", str(tmp_path / "f")])
    assert rc == 0
    csv = list((tmp_path / "r").glob("run_*_fp32_*.csv"))
    assert len(csv) == 1
    df = pd.read_csv(csv[0])
    assert len(df) == len(SMOKE_SUITE) * len(VARIANTS)
    summary = (tmp_path / "r" / csv[0].with_suffix(".md").name).read_text()
    assert len(re.findall(r"^\| s\d", summary, flags=re.M)) == len(SMOKE_SUITE)
    png = list((tmp_path / "f").glob("*_speedup.png"))
    assert len(png) == 1 and png[0].stat().st_size > 1000
    assert "no_empty_mask" in capsys.readouterr().out


def test_cli_run_against_writes_the_versus_table(tmp_path, capsys):
    rc = main(["run", "--device", "cpu", "--rows", "s1", "--variants", "reference,no_empty_mask", "--budget", "0",
               "--against", "no_empty_mask", "--out", str(tmp_path), "--figures", str(tmp_path)])
    versus = list(tmp_path.glob("run_*_vs_no_empty_mask.md"))
    assert rc == 0 and len(versus) == 1 and "× no_empty_mask" in versus[0].read_text()
    assert "× no_empty_mask" in capsys.readouterr().out


def test_cli_bad_input_exits_2(capsys):
    assert main(["run", "--device", "cpu", "--rows", "42"]) == 2
    assert "unknown row '42'" in capsys.readouterr().err


def test_checkpoint_keeps_finished_rows(cpu, tmp_path, monkeypatch):
    """A sweep stopped part-way leaves the rows it finished on disk."""
    import roofline_lib.runs.sweep as sweep
    original = sweep.sweep_row

    def stop_at_second_row(shape, *args, **kwargs):
        if shape.row == SMOKE_SUITE[1].row:
            raise KeyboardInterrupt
        return original(shape, *args, **kwargs)

    monkeypatch.setattr(sweep, "sweep_row", stop_at_second_row)
    path = tmp_path / "partial.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(list(SMOKE_SUITE[:2]), ["reference"], torch.float32, cpu, budget_s=0.0, show_progress=False,
                  checkpoint=path)
    saved = pd.read_csv(path)
    assert saved.row.tolist() == [SMOKE_SUITE[0].row] and saved.status.tolist() == ["ok"]

    monkeypatch.setattr(sweep, "sweep_row", original)
    swept = []
    monkeypatch.setattr(sweep, "sweep_row",
                        lambda shape, *a, **kw: swept.append(shape.row) or original(shape, *a, **kw))
    resumed = run_sweep(list(SMOKE_SUITE[:2]), ["reference"], torch.float32, cpu, budget_s=0.0,
                        show_progress=False, checkpoint=path, resume=True)
    assert swept == [SMOKE_SUITE[1].row]  # the finished row is kept, not run again
    assert resumed.row.tolist() == [s.row for s in SMOKE_SUITE[:2]] and resumed.median_ms.notna().all()
    assert resumed.median_ms.iloc[0] == saved.median_ms.iloc[0]
    with pytest.raises(ValueError, match="cannot resume .* its dtype differ"):
        run_sweep(list(SMOKE_SUITE[:2]), ["reference"], torch.float64, cpu, budget_s=0.0, checkpoint=path, resume=True,
                  show_progress=False)
    with pytest.raises(ValueError, match=r"its variants \(\['reference'\], now \['no_empty_mask'\]\) differ"):
        run_sweep(list(SMOKE_SUITE[:2]), ["no_empty_mask"], torch.float32, cpu, budget_s=0.0, checkpoint=path,
                  resume=True,
                  show_progress=False)


BASE_SWEEP = {"rows": SMOKE_SUITE[:1], "names": ["reference", "no_empty_mask"], "seed": 0, "padding": "none",
              "budget_s": 0.0, "options": None, "against": None}


@pytest.fixture(scope="module")
def finished_checkpoint(tmp_path_factory):
    """The checkpoint (and its settings file) of a sweep of BASE_SWEEP, swept once for every test below."""
    path = tmp_path_factory.mktemp("checkpoint") / "partial.csv"
    run_sweep(**BASE_SWEEP, dtype=torch.float32, device=torch.device("cpu"), show_progress=False, checkpoint=path)
    return path


@pytest.mark.parametrize("change,differs", [
    ({"seed": 1}, "seed (0, now 1)"), ({"padding": "left"}, "padding ('none', now 'left')"),
    ({"budget_s": 0.5}, "budget_s (0.0, now 0.5)"), ({"rows": SMOKE_SUITE[:2]}, "rows (['s1'], now ['s1', 's2'])"),
    ({"options": {"chunked": {"chunk_size": 8}}}, "options ({}, now {'chunked': {'chunk_size': 8}})"),
    ({"against": "reference"}, "against (None, now 'reference')"),
    ({"names": ["no_empty_mask", "reference"]}, "variants (['reference', 'no_empty_mask'], now ['no_empty_mask', "
                                                "'reference'])"),
])
def test_resume_refuses_a_different_sweep_and_says_what_differs(finished_checkpoint, tmp_path, change, differs):
    path = tmp_path / "partial.csv"
    for source in (finished_checkpoint, settings_file(finished_checkpoint)):
        shutil.copy(source, tmp_path / source.name)
    saved = pd.read_csv(path)
    assert set(saved.padding) == {"none"} and set(saved.seed) == {0}  # each record says how it was made
    with pytest.raises(ValueError, match="cannot resume") as refused:
        run_sweep(**{**BASE_SWEEP, **change}, dtype=torch.float32, device=torch.device("cpu"), show_progress=False,
                  checkpoint=path, resume=True)
    assert f"its {differs} differ from this run's" in str(refused.value)


def test_resume_of_the_same_sweep_sweeps_nothing_again(finished_checkpoint, tmp_path, monkeypatch):
    import roofline_lib.runs.sweep as sweep
    for source in (finished_checkpoint, settings_file(finished_checkpoint)):
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.setattr(sweep, "sweep_row", lambda *a, **k: pytest.fail("a finished row was swept again"))
    resumed = run_sweep(**BASE_SWEEP, dtype=torch.float32, device=torch.device("cpu"), show_progress=False,
                        checkpoint=tmp_path / "partial.csv", resume=True)
    assert resumed.variant.tolist() == BASE_SWEEP["names"]


def test_against_compares_every_variant_with_the_one_named(cpu):
    df = run_sweep(SMOKE_SUITE[:1], ["reference", "sdpa_fused_qkv", "no_empty_mask"], torch.float32, cpu,
                   budget_s=0.0, show_progress=False, against="no_empty_mask").set_index("variant")
    for name in ("reference", "sdpa_fused_qkv"):
        row = df.loc[name]
        assert row["against"] == "no_empty_mask" and 0 < row["vs_p20"] <= row["vs_p80"] and row["vs_speedup"] > 0
        assert row["vs_verdict"] in {"faster", "slower", "within noise"}
    assert pd.isna(df.loc["no_empty_mask", "vs_speedup"])
    table = versus_table(df.reset_index()).set_index("variant")
    assert list(table.index) == ["reference", "sdpa_fused_qkv", "no_empty_mask"]
    assert table.loc["reference", "× no_empty_mask"].endswith("]")
    assert table.loc["no_empty_mask", "verdict"] == ""
    shown = versus_table(df.reset_index().assign(median_ms=1234.5, fraction_of_floor=0.01234, first_call_s=0.5,
                                                 err_ratio=0.01234))
    assert set(shown["ms"]) == {"1,230"} and set(shown["fraction of floor"]) == {"0.0123"}  # three digits
    assert set(shown["err ratio"]) == {"0.0123"}  # not "0.012"
    assert set(shown["first call s"]) == {"0.500"}
    with pytest.raises(ValueError, match="compare with no variant"):
        versus_table(df.reset_index().drop(columns="against"))
    with pytest.raises(ValueError, match="against='fastest' must be one of the variants swept"):
        run_sweep(SMOKE_SUITE[:1], ["reference"], torch.float32, cpu, show_progress=False, against="fastest")


def test_compiled_peers_start_afresh_on_every_row(cpu, monkeypatch):
    resets = []
    monkeypatch.setattr(torch, "compile", lambda module, **kw: module)  # compiling itself is not under test
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    run_sweep(SMOKE_SUITE[:2], ["reference", "compile_kept"], torch.float32, cpu, budget_s=0.0, show_progress=False)
    assert len(resets) == 2
    run_sweep(SMOKE_SUITE[:2], ["reference"], torch.float32, cpu, budget_s=0.0, show_progress=False)
    assert len(resets) == 2  # no peers, no reset: the user's own compiled functions are left alone


def test_a_variant_that_fails_is_recorded_and_the_sweep_goes_on(cpu, monkeypatch):
    class Refuses(torch.nn.Module):
        def forward(self, x, key_padding_mask=None):
            raise RuntimeError("no kernel image is available for this device")

    monkeypatch.setitem(VARIANTS, "refuses", lambda ref: Refuses())
    df = run_sweep(SMOKE_SUITE[:2], ["refuses", "no_empty_mask"], torch.float32, cpu, budget_s=0.0,
                   show_progress=False)
    failed = df[df.variant == "refuses"]
    assert failed.status.tolist() == ["error", "error"]
    assert failed.reason.str.startswith("RuntimeError: no kernel image").all()
    assert df[df.variant == "no_empty_mask"].status.tolist() == ["ok", "ok"]
    assert (speedup_table(df)["refuses (× reference)"] == "error").all()


def test_every_timed_variant_also_gets_its_cold_single_call_latency(cpu):
    df = run_sweep(SMOKE_SUITE[:1], ["reference", "no_empty_mask"], torch.float32, cpu, budget_s=0.0,
                   show_progress=False)
    assert (df.cold_ms > 0).all() and list(df.columns).index("cold_ms") == list(df.columns).index("reps") + 1


def test_host_and_gpu_shares_are_recorded_and_tabled(cpu):
    df = run_sweep(SMOKE_SUITE[:1], ["reference", "no_empty_mask"], torch.float32, cpu, budget_s=0.0,
                   show_progress=False)
    assert df.gpu_ms.isna().all() and df.gpu_share.isna().all()  # no GPU: no GPU share to measure
    table = host_gpu_table(df.assign(gpu_ms=df.median_ms / 4, gpu_share=0.25))
    assert list(table["host share"]) == ["75.0%", "75.0%"]
    busy = host_gpu_table(df.assign(gpu_ms=df.median_ms * 0.95, gpu_share=[0.95, 0.5]))  # a GPU-bound call
    assert list(busy["host share"]) == ["under 10%", "50.0%"]
    assert table["call µs"].tolist() == pytest.approx((df.median_ms * 1e3).tolist())


def test_a_gpu_time_that_runs_out_of_memory_is_nan_so_tables_still_divide(monkeypatch):
    from roofline_lib.runs import pipeline
    case = pipeline.new_case(SMOKE_SUITE[0], torch.float32, torch.device("cpu"))[0]
    layer = build_variant("no_empty_mask", case.layer)
    assert math.isnan(pipeline.gpu_ms(case, layer))  # a CPU: no GPU time

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(pipeline, "gpu_call_ms", out_of_memory)
    assert math.isnan(pipeline.gpu_ms(case, layer))


def test_finished_records_are_a_checkpoint_of_the_same_run_only(tmp_path):
    path = tmp_path / "partial.csv"
    assert finished_records(path, {"dtype": "fp16"}, {"device": "GPU X"}) == []  # no checkpoint: nothing finished
    pd.DataFrame({"row": ["01"], "device": ["GPU X"], "date": ["then"]}).to_csv(path, index=False)
    settings_file(path).write_text('{"dtype": "fp16"}')
    assert finished_records(path, {"dtype": "fp16"}, {"device": "GPU X", "date": "now"}) == [
        {"row": "01", "device": "GPU X", "date": "then"}]  # the row keeps its leading zero; the date may differ
    with pytest.raises(ValueError, match=r"its dtype \('fp16', now 'bf16'\), device differ"):
        finished_records(path, {"dtype": "bf16"}, {"device": "GPU Y"})
