"""The command line: every bad argument is refused up front (status 2, one line, nothing written), help
lists the defaults and names, --help and --version stay torch-free, and results go to runs/… by default."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import roofline_lib
from roofline_lib import cli
from roofline_lib.cli import longctx, run, selection
from roofline_lib.cli import parser as cli_parser
from roofline_lib.core.catalog import ATTENTION_STRATEGIES, DEFAULT_CHUNK_SIZE, LADDER, PEERS

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "matplotlib", "triton")


class WorkStarted(Exception):
    """Raised by the stand-ins for the functions that do a command's work."""


@pytest.fixture
def no_work(monkeypatch, tmp_path):
    """Run in an empty folder, with every function that does work replaced by one that raises WorkStarted."""
    import roofline_lib.cli.longctx
    import roofline_lib.cli.profile
    import roofline_lib.cli.run

    def refuse(*args, **kwargs):
        raise WorkStarted

    for module, name in [(roofline_lib.cli.run, "run_sweep"), (roofline_lib.cli.run, "run_shards"),
                         (roofline_lib.cli.profile, "profile_suite"), (roofline_lib.cli.longctx, "run_longctx"),
                         (roofline_lib.cli.run, "measure_ceilings")]:
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


CPU = ["--device", "cpu"]
BAD = {  # argv → a piece of the one error line
    "rows empty": (["run", "--rows", ""], "names no rows"),
    "rows blank": (["run", "--rows", " , "], "names no rows"),
    "rows repeated": (["run", "--rows", "1,1"], "names 1 more than once"),
    "rows repeated by a set": (["run", "--rows", "smoke,s1"], "names s1 more than once"),
    "rows unknown": (["run", "--rows", "42"], "unknown row '42'"),
    "rows misspelled": (["run", "--rows", "smok"], "unknown row 'smok' (did you mean smoke?)"),
    "against outside": (["run", "--variants", "reference,no_empty_mask", "--against", "fastest"],
                        "--against fastest is not one of --variants"),
    "against alone": (["run", "--variants", "reference", "--against", "reference"], "is the only variant"),
    "gpus 0": (["run", "--gpus", "0"], "--gpus must be at least 1, got 0"),
    "gpus on the cpu": (["run", "--gpus", "2"], "--gpus 2 needs --device cuda"),
    "budget negative": (["run", "--budget", "-1"], "--budget must be 0 or more"),
    "budget nan": (["run", "--budget", "nan"], "--budget must be 0 or more"),
    "chunk size 0": (["run", "--chunk-size", "0"], "--chunk-size must be at least 1"),
    "chunk size unused": (["run", "--variants", "reference", "--chunk-size", "64"], "'chunked' is not among"),
    "cap 0": (["run", "--memory-cap-gib", "0"], "--memory-cap-gib must be a positive number"),
    "cap on the cpu": (["run", "--memory-cap-gib", "16"], "memory cap needs a CUDA device"),
    "resume without out": (["run", "--resume"], "--resume continues the run in an existing folder"),
    "profile rows": (["profile", "--rows", ""], "names no rows"),
    "profile active": (["profile", "--active", "0"], "--active must be at least 1"),
    "profile wait": (["profile", "--wait", "-1"], "--wait must be 0 or more"),
    "seq len": (["longctx", "--seq-len", "0"], "--seq-len must be at least 1"),
    "batch": (["longctx", "--batch", "0"], "--batch must be at least 1"),
    "d model": (["longctx", "--d-model", "-8"], "--d-model must be at least 1"),
    "n heads": (["longctx", "--n-heads", "0"], "--n-heads must be at least 1"),
    "heads do not divide": (["longctx", "--d-model", "100", "--n-heads", "16"], "not divisible by --n-heads"),
    "reps": (["longctx", "--reps", "0"], "--reps must be at least 1"),
    "longctx budget": (["longctx", "--budget", "-0.5"], "--budget must be 0 or more"),
    "longctx cap 0": (["longctx", "--memory-cap-gib", "-1"], "--memory-cap-gib must be a positive number"),
    "longctx cap on the cpu": (["longctx", "--memory-cap-gib", "16"], "memory cap needs a CUDA device"),
}


@pytest.mark.parametrize("argv,message", BAD.values(), ids=BAD.keys())
def test_bad_arguments_exit_2_with_one_line_and_write_nothing(no_work, capsys, argv, message):
    assert cli.main(argv + CPU) == 2
    assert message in one_error_line(capsys)
    assert list(no_work.iterdir()) == []  # no runs/ folder, nothing else


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu_is_refused(no_work, capsys):
    assert cli.main(["run", "--device", "cuda"]) == 2
    assert "no CUDA GPU is visible" in one_error_line(capsys)
    assert list(no_work.iterdir()) == []


@pytest.mark.parametrize("flag", ["--out", "--figures"])
@pytest.mark.parametrize("where", ["file", "file/sub"])
def test_an_output_folder_that_cannot_be_made_is_refused(no_work, capsys, flag, where):
    (no_work / "file").write_text("not a folder")
    assert cli.main(["run", *CPU, flag, where]) == 2
    assert one_error_line(capsys).startswith(f"error: {flag} {where}: ")
    assert [p.name for p in no_work.iterdir()] == ["file"]


@pytest.mark.parametrize("argv,message", [
    (["run", "--device", "mps"], "argument --device: invalid device 'mps': use cpu, cuda or cuda:N"),
    (["run", "--device", "cuda:x"], "argument --device: invalid device 'cuda:x'"),
    (["longctx", "--device", "gpu"], "argument --device: invalid device 'gpu'"),
    (["run", "--dtype", "fp8"], "argument --dtype: invalid choice: 'fp8'"),
    (["profile", "--padding", "x"], "unrecognized arguments: --padding x"),
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["longctx", "--padding", "middle"], "argument --padding: invalid choice: 'middle'"),
    (["longctx", "--seq-len", "many"], "argument --seq-len: invalid int value: 'many'"),
    ([], "the following arguments are required: COMMAND"),
    (["run", "--variants", ""], 'names no variant'),
    (["run", "--variants", "reference,reference"], 'names reference more than once'),
    (["run", "--variants", "reference,bogus"], "unknown variant 'bogus'"),
    (["profile", "--variants", "x"], "unknown variant 'x'"),
    (["longctx", "--chunk-sizes", ""], 'comma-separated positive integers'),
    (["longctx", "--chunk-sizes", "64,x"], "('x' is not one)"),
    (["longctx", "--chunk-sizes", "0"], 'comma-separated positive integers'),
    (["longctx", "--chunk-sizes", "64,64"], 'names 64 more than once'),
    (["longctx", "--attention", "mask,bogus"], "unknown attention strategy 'bogus'"),
    (["longctx", "--attention", ""], 'names no attention strategy'),
    (["longctx", "--attention", "all,mask"], "'all' stands alone"),
    (["longctx", "--attention", "mask,mask"], 'names mask more than once'),
    (["run", "--variants", "refrence"], "unknown variant 'refrence' (did you mean reference?)"),
    (["longctx", "--attention", "lower_rigth"], "'lower_rigth' (did you mean lower_right?)"),
])
def test_malformed_options_get_argparse_usage_and_one_error(no_work, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    usage = f"usage: roofline {argv[0]} " if argv else "usage: roofline "
    assert lines[0].startswith(usage) and "error: " in lines[-1] and message in lines[-1], lines
    assert list(no_work.iterdir()) == []


def test_device_checks_that_need_a_gpu_to_pass():
    args = argparse.Namespace(device="cuda:3", memory_cap_gib=None, gpus=1)
    with pytest.raises(ValueError, match=r"--device cuda:3 asked for, but 1 CUDA GPU\(s\) are visible"):
        selection.check_device(args, torch.device("cuda:3"), 1)
    selection.check_device(args, torch.device("cuda:0"), 1)
    with pytest.raises(ValueError, match="give --device cuda, not cuda:1"):
        selection.check_device(argparse.Namespace(device="cuda:1", gpus=2), torch.device("cuda:1"), 2)
    with pytest.raises(ValueError, match=r"--gpus 4 asked for, but 2 CUDA GPU\(s\)"):
        selection.check_device(argparse.Namespace(device=None, gpus=4), torch.device("cuda"), 2)
    selection.check_device(argparse.Namespace(device=None, gpus=2, memory_cap_gib=16.0), torch.device("cuda"), 2)


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"roofline_lib {roofline_lib.__version__}\n"
    assert cli_parser.version() == roofline_lib.__version__


def help_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # as one line, whatever the terminal's width


def test_help_lists_defaults_variants_and_strategies(capsys):
    top = help_text(capsys)
    assert "usage: roofline " in top and all(c in top for c in ("run", "profile", "longctx", "--version"))
    for command in ("run", "profile"):
        text = help_text(capsys, command)
        assert all(name in text for name in LADDER + PEERS)
        assert "(default: fp16 on CUDA, fp32 on the CPU)" in text
        assert "(default: cuda when a GPU is visible, else cpu)" in text
        assert "runs/DEVICE_DTYPE_YYYYmmdd-HHMMSS/" in text and "(default: the --out folder)" in text
    run = help_text(capsys, "run")
    assert "(default: the full suite on CUDA, the smoke suite on the CPU)" in run
    assert "(default: 1.0)" in run and "(default: none)" in run and "{none,right,left,holes}" in run
    assert f"(default: {DEFAULT_CHUNK_SIZE})" in run and "--overwrite" in run and "needs an explicit --out" in run
    assert "(default: 3)" in help_text(capsys, "profile")
    longctx = help_text(capsys, "longctx")
    assert all(name in longctx for name in ATTENTION_STRATEGIES) and "'auto'" in longctx and "'all'" in longctx
    assert f"(default: 100000 on CUDA, {cli_parser.CPU_SEQ_LEN} on the CPU)" in longctx
    assert f"(default: {DEFAULT_CHUNK_SIZE} on CUDA; on the CPU N/4 and N/2" in longctx
    assert "(default: all)" in longctx and "(default: 1024)" in longctx


def test_every_option_has_help_and_shows_its_default():
    parser = cli_parser.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    formatter = cli_parser._HelpFormatter("roofline")
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.option_strings} has no help"
            if not isinstance(action, argparse._StoreTrueAction):
                assert "(default: " in formatter._get_help_string(action), f"{name} {action.option_strings}"


def _imports(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_help_imports_no_heavy_module():
    """What --help runs (the package, cli, the parser) loads no torch, pandas, matplotlib or triton."""
    out = _imports("import sys; from roofline_lib import cli; cli.parser.parse_args(['run']); "
                   "print(sorted(m for m in %r if m in sys.modules))" % (HEAVY,))
    assert out == "[]"


def test_cli_module_itself_is_light():
    """cli.py and catalog.py alone (the package's __init__ bypassed) import nothing heavy."""
    out = _imports("import sys, types; pkg = types.ModuleType('roofline_lib'); pkg.__path__ = ['roofline_lib']; "
                   "sys.modules['roofline_lib'] = pkg; import roofline_lib.cli as cli; cli.parser.parse_args(['run']); "
                   "print(sorted(m for m in %r if m in sys.modules))" % (HEAVY,))
    assert out == "[]"


def test_python_dash_m_runs_the_same_command_line():
    done = subprocess.run([sys.executable, "-m", "roofline_lib", "--version"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"roofline_lib {roofline_lib.__version__}\n"


def test_longctx_defaults_fit_the_device():
    assert longctx.longctx_chunk_sizes(None, 100_000, cuda=True) == [DEFAULT_CHUNK_SIZE]
    assert longctx.longctx_chunk_sizes(None, 4096, cuda=False) == [1024, 2048]
    for n in range(2, 40):
        sizes = longctx.longctx_chunk_sizes(None, n, cuda=False)
        assert sizes and all(1 <= c < n for c in sizes)
    assert longctx.longctx_chunk_sizes(None, 1, cuda=False) == [1]
    assert longctx.longctx_chunk_sizes([64, 100], 4096, cuda=False) == [64, 100]


def test_longctx_on_the_cpu_runs_its_default_length_in_chunks(no_work, monkeypatch):
    seen = {}

    def capture(shape, dtype, device, chunk_sizes, strategies, **kwargs):
        seen.update(seq_len=shape.seq_len, chunk_sizes=chunk_sizes, strategies=strategies)
        raise WorkStarted

    monkeypatch.setattr(longctx, "run_longctx", capture)
    with pytest.raises(WorkStarted):
        cli.main(["longctx", *CPU])
    n = cli_parser.CPU_SEQ_LEN
    assert seen["seq_len"] == n and seen["chunk_sizes"] == [n // 4, n // 2]
    assert "split_math" in seen["strategies"] and "split_cudnn" not in seen["strategies"]


def test_run_writes_into_runs_and_never_overwrites(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["run", *CPU, "--rows", "s1", "--variants", "reference,no_empty_mask", "--budget", "0.01"]
    assert cli.main(argv) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert re.fullmatch(r"[a-z0-9-]+_fp32_\d{8}-\d{6}", folder.name)
    files = sorted(p.name for p in folder.iterdir())
    suffixes = [".csv", ".md", "_roofline.md", "_roofline.png", "_speedup.png"]
    assert len(files) == 5 and all(any(f.endswith(s) for f in files) for s in suffixes), files
    (csv,) = folder.glob("run_*.csv")
    assert f"wrote {csv.relative_to(tmp_path)}" in capsys.readouterr().out  # relative to the current folder
    before = {p: p.stat().st_mtime_ns for p in folder.iterdir()}

    def refuse(*args, **kwargs):
        raise WorkStarted

    monkeypatch.setattr(run, "run_sweep", refuse)
    assert cli.main(argv + ["--out", str(folder)]) == 2
    line = one_error_line(capsys)
    assert f"{csv} exists" in line and "pass --overwrite" in line
    assert cli.main(argv + ["--out", "elsewhere", "--figures", str(folder)]) == 2  # the figures count too
    assert "_speedup.png exists" in one_error_line(capsys)
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    with pytest.raises(WorkStarted):  # with --overwrite the checks pass and the work starts
        cli.main(argv + ["--out", str(folder), "--overwrite"])


def test_a_stopped_run_is_resumed_or_overwritten_not_replaced(no_work, capsys):
    folder = no_work / "stopped"
    folder.mkdir()
    (folder / "run_partial.csv").write_text("row\n")
    argv = ["run", *CPU, "--rows", "s1", "--out", str(folder)]
    assert cli.main(argv) == 2
    assert "run_partial.csv exists (a run stopped part-way): pass --resume" in one_error_line(capsys)
    for flag in ("--resume", "--overwrite"):
        with pytest.raises(WorkStarted):
            cli.main(argv + [flag])
