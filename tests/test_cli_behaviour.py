"""The command line when things go wrong or take long: Ctrl-C keeps the finished rows and says how to resume,
a resume of a different run is refused, a CPU run of hours is refused with its estimate, an unwritable output
is one line, errors under torchrun are said once, and a plain CPU run prints no stray warnings."""
from __future__ import annotations

import errno
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from roofline_lib import cli
from roofline_lib.cli import output, run, selection
from roofline_lib.cli.parser import INTERRUPTED
from roofline_lib.core.reference import naive_peak_bytes
from roofline_lib.core.shapes import ALL_ROWS, SUITE
from roofline_lib.measure.roofline import layer_flops
from roofline_lib.runs import sweep

REPO = Path(__file__).resolve().parents[1]
QUICK = ["run", "--device", "cpu", "--variants", "reference", "--budget", "0"]


def only_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def in_tmp(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROOFLINE_PROGRESS", "0")
    return tmp_path


def interrupt_at(monkeypatch, row: str) -> None:
    original = sweep.sweep_row

    def stop(shape, *args, **kwargs):
        if shape.row == row:
            raise KeyboardInterrupt
        return original(shape, *args, **kwargs)

    monkeypatch.setattr(sweep, "sweep_row", stop)


def test_ctrl_c_keeps_the_finished_rows_and_says_how_to_resume(in_tmp, monkeypatch, capsys):
    argv = [*QUICK, "--rows", "s1,s2", "--out", "out"]
    interrupt_at(monkeypatch, "s2")
    assert cli.main(argv) == INTERRUPTED
    line = only_line(capsys)
    command = shlex.join(["roofline", *QUICK, "--rows", "s1,s2", "--resume", "--out", "out"])
    assert line == f"interrupted: kept row(s) s1 in out/; resume with: {command}"
    assert cli.main([*QUICK, "--rows", "s1,s2", "--seed", "1", "--resume", "--out", "out"]) == 2
    assert "its seed (0, now 1) differ from this run's" in only_line(capsys)
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)
    assert cli.main(shlex.split(command)[1:]) == 0  # the command it printed finishes the run
    (csv,) = (in_tmp / "out").glob("run_*.csv")
    results = pd.read_csv(csv)
    assert results.row.tolist() == ["s1", "s2"] and set(results.seed) == {0} and set(results.padding) == {"none"}
    assert sorted(p.name for p in (in_tmp / "out").iterdir() if p.name.startswith("run_partial")) == []


def test_ctrl_c_before_any_row_finished_leaves_no_folder(in_tmp, monkeypatch, capsys):
    interrupt_at(monkeypatch, "s1")
    assert cli.main([*QUICK, "--rows", "s1"]) == INTERRUPTED
    assert only_line(capsys).startswith("interrupted before a row finished; nothing kept. Run again with: roofline run")
    assert list(in_tmp.iterdir()) == []  # neither runs/ nor its new folder


def test_resume_command_replaces_out_and_drops_overwrite():
    got = output.resume_command(["run", "--out=a", "--overwrite", "--rows", "s1", "--out", "b"], Path("c d"))
    assert got == "roofline run --rows s1 --resume --out 'c d'"


@pytest.mark.parametrize("rows", ["14", "suite"])
def test_a_cpu_run_of_hours_is_refused_with_its_estimate(in_tmp, monkeypatch, capsys, rows):
    assert cli.main(["run", "--device", "cpu", "--rows", rows]) == 2
    line = only_line(capsys)
    assert "on the CPU would take about" in line and " h " in line and "pass --force" in line
    peak = naive_peak_bytes(ALL_ROWS["14"], torch.float32)
    assert f"the reference needs {peak / 2**30:,.1f} GiB at row 14" in line
    assert list(in_tmp.iterdir()) == []

    def started(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "run_sweep", started)
    assert cli.main(["run", "--device", "cpu", "--rows", rows, "--force"]) == INTERRUPTED  # --force lets it start


def test_the_cpu_estimate_grows_with_the_shape():
    seconds, largest, peak = selection.cpu_estimate(list(SUITE[:3]), variants=2, calls=10, budget_s=0.0,
                                                    dtype=torch.float32)
    flops = sum(layer_flops(s) * (2 * 10 + selection.TRUTH_CALLS) for s in SUITE[:3])
    assert seconds == pytest.approx(flops / selection.CPU_FLOPS)
    assert peak == max(naive_peak_bytes(s, torch.float32) for s in SUITE[:3])
    assert peak == naive_peak_bytes(largest, torch.float32)


def test_a_full_disk_is_one_error_line(in_tmp, monkeypatch, capsys):
    def full(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    assert cli.main([*QUICK, "--rows", "s1", "--out", "out"]) == 1
    assert only_line(capsys) == f"error: out/run_partial.csv: {os.strerror(errno.ENOSPC)}"


def _roofline(*argv: str, cwd: Path, launcher: tuple[str, ...] = (sys.executable, "-W", "always", "-m"),
              ) -> subprocess.CompletedProcess:
    """`python -m roofline_lib ARGV` (or under `launcher`) as a user runs it: no TRITON_INTERPRET (the tests set it)."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(REPO), ROOFLINE_PROGRESS="0", OMP_NUM_THREADS="1")
    return subprocess.run([*launcher, "roofline_lib", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.slow
def test_a_plain_cpu_run_records_the_triton_rungs_as_skipped(tmp_path):
    triton = ["triton_ln", "fused_gemm", "residual_addmm"]
    done = _roofline(*QUICK[:3], "--variants", ",".join(["reference", *triton]), "--budget", "0", "--rows", "s1",
                     "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (csv,) = (tmp_path / "out").glob("run_*.csv")
    status = pd.read_csv(csv).set_index("variant").status
    assert status["reference"] == "ok" and (status[triton] == "skipped").all(), status


@pytest.mark.parametrize("argv", [
    ("run", "--rows", "s1", "--variants", "reference,no_empty_mask", "--budget", "0"),
    ("profile", "--rows", "s1", "--variants", "reference"),
    ("longctx", "--seq-len", "64", "--d-model", "32", "--n-heads", "2", "--attention", "mask", "--budget", "0"),
], ids=["run", "profile", "longctx"])
@pytest.mark.slow
def test_a_plain_cpu_run_prints_nothing_on_stderr(tmp_path, argv):
    done = _roofline(*argv, "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="no torchrun")
def test_a_bad_argument_under_torchrun_is_one_line_from_rank_0(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = _roofline("longctx", "--context-parallel", "--device", "cpu", "--seq-len", "3", "--d-model", "32",
                     "--n-heads", "2", cwd=tmp_path, launcher=(torchrun, "--nproc-per-node", "2", "-m"))
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0
    assert errors == [("error: --seq-len 3: a sequence of 3 tokens is too short for 2 ranks: the zigzag layout "
                       "needs at least 2 × 2 = 4 tokens")]
    assert list(tmp_path.iterdir()) == []
