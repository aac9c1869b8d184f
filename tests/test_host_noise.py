"""The host-noise benchmark's phases, on the CPU (its compile phases left out: they take a minute there)."""
import pandas as pd

from benchmarks import host_noise


def test_host_noise_times_every_layer_in_every_phase_and_writes_one_csv(tmp_path):
    rc = host_noise.main(["--out", str(tmp_path), "--device", "cpu", "--variants", "reference,no_empty_mask",
                          "--repeats", "1", "--idle", "0", "--budget", "0", "--no-compile"])
    assert rc == 0
    (path,) = tmp_path.glob("host_noise_*.csv")
    table = pd.read_csv(path)
    assert table.phase.nunique() == 4 and set(table.variant) == {"reference", "no_empty_mask", "launch_probe"}
    assert (table.gc_runs >= 0).all() and (table.gc_ms >= 0).all()  # the collector's runs, counted
    assert (table.median_ms > 0).all() and table.gpu_ms.isna().all()  # no GPU: no GPU share
    assert (table.groupby("phase").since_s.min() >= 0).all()  # seconds since each phase's setup


def test_host_noise_refuses_a_bad_argument_in_one_line(tmp_path, capsys):
    assert host_noise.main(["--out", str(tmp_path), "--device", "cpu", "--repeats", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --repeats")
