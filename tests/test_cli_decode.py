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



def test_a_stopped_decode_resumes_with_its_finished_checks(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the timing keeps the checks in OUT/decode_partial.csv; a rerun without --resume is refused,
    and --resume does only the timing."""
    monkeypatch.setenv("ROOFLINE_PROGRESS", "0")
    from roofline_lib.runs import decode as runs_decode

    argv = ["decode", "--device", "cpu", "--context", "12", "--d-model", "32", "--n-heads", "2", "--layers", "1",
            "--budget", "0", "--variants", "static_cache,graph_static_cache", "--out", str(tmp_path)]
    real_time_decode = runs_decode.time_decode

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(runs_decode, "time_decode", stopped)
    assert main(argv) == 130
    kept = pd.read_csv(tmp_path / "decode_partial.csv")
    assert list(kept.decoder) == ["static_cache", "static_cache (graphed)"] and set(kept.part) == {"check"}
    assert "--resume" in capsys.readouterr().err
    assert main(argv) == 2  # a stale checkpoint, neither resumed nor overwritten
    assert "decode_partial.csv exists" in capsys.readouterr().err
    monkeypatch.setattr(runs_decode, "time_decode", real_time_decode)
    checked = []
    monkeypatch.setattr(runs_decode, "check_decoder", lambda *a, **k: checked.append(a) or {})
    assert main([*argv, "--resume"]) == 0
    assert checked == [] and not (tmp_path / "decode_partial.csv").exists()
    timed = pd.read_csv(next(p for p in tmp_path.glob("*.csv") if not p.name.endswith("_checks.csv")))
    assert set(timed.decoder) == {"static_cache", "graph_static_cache"} and "fastest here" in capsys.readouterr().out
