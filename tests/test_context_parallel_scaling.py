"""The scaling benchmark's dry run on the CPU (P = 1, gloo, a tiny shape) and the table it joins runs into."""
import subprocess
import sys

import pandas as pd
import pytest

from benchmarks.context_parallel_scaling import ROOT, main, summarize


@pytest.mark.slow
def test_a_dry_run_at_p1_checks_every_layer_and_the_summary_scores_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.context_parallel_scaling", "--out", str(tmp_path),
                           "--device", "cpu", "--seq-lens", "96", "--per-rank", "64", "--d-model", "32",
                           "--n-heads", "2", "--reps", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run = pd.read_csv(next(tmp_path.glob("context_parallel_scaling_P1_*.csv")))
    ok = run[run.layer.isin(["ring", "chunked"])]
    assert len(ok) == 4 and ok.status.eq("ok").all() and (ok.err_ratio <= 2).all()
    assert run[run.layer == "torch_cp"].status.eq("skipped").all()  # PyTorch's ring replaces CUDA kernels only
    table = summarize(tmp_path)
    ring = table[(table.layer == "ring") & (table.scaling == "strong")].iloc[0]
    chunked = run[(run.layer == "chunked") & (run.seq_len == 96)].iloc[0]
    assert ring.efficiency == pytest.approx(chunked.median_ms / ring.median_ms)  # same FLOPs, one GPU
    run.to_csv(tmp_path / "context_parallel_scaling_P1_N96_again.csv", index=False)  # a second run, same N
    assert len(summarize(tmp_path)) == 2 * len(table)  # both kept, one baseline per N


def test_bad_input_is_one_line(capsys, tmp_path):
    assert main(["--out", str(tmp_path), "--seq-lens", "none"]) == 2
    assert "nothing to run" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "--seq-lens", "96,1e6"]) == 2
    assert capsys.readouterr().err == "error: --seq-lens takes comma-separated integers, got '1e6'\n"
    assert main(["--out", str(tmp_path), "--seq-lens", "none", "--per-rank", "1"]) == 2
    assert "--per-rank must be at least 2" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no context_parallel_scaling"):
        summarize(tmp_path)
