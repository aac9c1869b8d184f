"""`roofline decode` on the CPU: it checks and times the decoders it can run, skips with the reason those it
cannot, writes its files, and refuses bad input in one line."""
from contextlib import nullcontext

import pandas as pd
import pytest

from roofline_lib.cli import main


def test_a_cpu_decode_checks_times_and_writes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROOFLINE_PROGRESS", "0")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    from roofline_lib.kernels import add_layer_norm, launch
    monkeypatch.setattr(launch, "INTERPRETED", False)  # as on a plain CPU machine: no Triton interpreter
    monkeypatch.setattr(add_layer_norm, "INTERPRETED", False)
    status = main(["decode", "--device", "cpu", "--context", "16", "--d-model", "32", "--n-heads", "2",
                   "--layers", "2", "--budget", "0", "--variants", "naive,static_cache,graph_split_kv",
                   "--out", str(tmp_path)])
    assert status == 0
    checks = pd.read_csv(next(tmp_path.glob("*_checks.csv")))
    timed = pd.read_csv(next(p for p in tmp_path.glob("*.csv") if not p.name.endswith("_checks.csv")))
    assert dict(zip(checks.decoder, checks.status)) == {"naive": "ok", "static_cache": "ok",
                                                        "split_kv (graphed)": "skipped"}  # as it is timed
    assert dict(zip(timed.decoder, timed.status)) == {"naive": "ok", "static_cache": "ok", "graph_split_kv": "skipped"}
    assert (timed.dropna(subset=["us_per_layer"]).us_per_layer > 0).all() and "GPU" in checks.reason.iloc[-1]
    assert "fraction_of_floor" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["--variants", "graph_static_cach"], "did you mean graph_static_cache"),
    (["--context", "1"], "--context 1"),
    (["--d-model", "30", "--n-heads", "4"], "not divisible"),
])
def test_bad_decode_arguments_are_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) if argv[0] == "--variants" else nullcontext():  # argparse's own exit
        status = main(["decode", "--device", "cpu", *argv])
        assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1] and "Traceback" not in "".join(err)

