"""The notebook runner: its freshness check (outputs count as current only if they come from a GPU run of
the commit they record, and neither the package nor the notebook's source changed since), where a run writes
(runs/ unless it updates the committed notebooks), and how it logs a run that stops. Deadlines and
concurrency are checked on a fake clock and with explicit waits, never by racing real time."""
import os
import subprocess
import sys
import threading

import nbclient
import nbformat
import pytest
import torch
from conftest import FakeClock

from benchmarks import run_notebooks
from benchmarks.run_notebooks import ROOT, why_stale
from roofline_lib.core.progress import PROGRESS_ENV
from roofline_lib.present.notebook import (
    BUDGET_ENV,
    EMULATE_ENV,
    FIGURES_ENV,
    SHARED_ENV,
    SMOKE_ENV,
)
from roofline_lib.present.session import SESSION_ENV

SOURCE = ROOT / "notebooks" / "00_overview.py"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def history():
    try:
        head, first = git("rev-parse", "HEAD"), git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    except (subprocess.CalledProcessError, FileNotFoundError, IndexError):
        pytest.skip("no git history here")
    if head == first or not git("diff", "--name-only", first, "HEAD", "--", "roofline_lib"):
        pytest.skip("a shallow clone: no older commit to compare with")
    return head, first


def test_outputs_from_an_older_package_are_stale(history):
    _, first = history
    assert "changed since" in why_stale({"commit": first}, SOURCE)


def test_outputs_of_the_current_code_are_fresh_unless_they_are_not_a_gpu_run(history):
    head, _ = history
    if git("status", "--porcelain", "--", "roofline_lib", str(SOURCE.relative_to(ROOT))):
        pytest.skip("uncommitted changes to the package or the notebook")
    assert why_stale({"commit": head}, SOURCE) == ""
    assert "not from a GPU run" in why_stale({"commit": head, "smoke": True}, SOURCE)
    assert "not from a GPU run" in why_stale({"commit": head, "emulated": "t4"}, SOURCE)
    assert "not from a GPU run" in why_stale({}, SOURCE)
    assert "its run stopped: error: the kernel died" in why_stale({"commit": head, "status": "error: the kernel died"},
                                                                  SOURCE)


def test_a_commit_outside_the_history_is_named(history):
    assert "not in this clone's history" in why_stale({"commit": "0" * 40}, SOURCE)


def test_only_a_code_cell_change_makes_outputs_stale():
    """Outputs come from the code cells: an edit of the prose alone keeps them, one of any code cell does not."""
    code_cells = run_notebooks.code_cells
    text = SOURCE.read_text()
    prose = text.replace("# # 00", "# # 00 (edited)", 1)
    code = text.replace("show_source(ReferenceLayer.forward)", "show_source(ReferenceLayer.__init__)", 1)
    assert prose != text and code != text
    assert code_cells(prose) == code_cells(text)
    assert code_cells(code) != code_cells(text)


def test_a_failed_cell_is_logged_by_its_exception_and_first_message_line():
    nbe = nbclient.exceptions
    failure = run_notebooks.failure
    cell = nbe.CellExecutionError("Traceback …\nCompile with `TORCH_USE_CUDA_DSA`", "AcceleratorError",
                                  "CUDA error: an illegal memory access was encountered\nSearch for it")
    assert failure(cell) == "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert failure(nbe.CellTimeoutError("A cell timed out while it was being executed, after 5 seconds.\nHere")) \
        == "A cell timed out while it was being executed, after 5 seconds."


def test_a_kernel_killed_mid_run_is_logged_and_its_notebook_kept(tmp_path, monkeypatch):
    """A signal that kills the kernel can make nbclient's own clean-up fail (an AssertionError raised
    while handling DeadKernelError): the run is still logged and the partial notebook written."""
    class DyingClient:
        def __init__(self, nb, **kwargs):
            pass

        def execute(self):
            try:
                raise nbclient.exceptions.DeadKernelError("Kernel died")
            except nbclient.exceptions.DeadKernelError:
                raise AssertionError  # what nbclient's _async_cleanup_kernel raises then

    monkeypatch.setattr(run_notebooks.nbclient, "NotebookClient", DyingClient)
    target = tmp_path / "00.ipynb"
    run = run_notebooks.execute(SOURCE.with_suffix(".ipynb"), target, 5, {"commit": "x"})
    assert run["status"] == "error: the kernel died"
    assert nbformat.read(target, as_version=4).metadata["roofline"]["status"] == "error: the kernel died"


def test_notebooks_side_by_side_are_logged_in_their_order_after_each_one_ends():
    paths = [SOURCE.with_name(f"{i:02d}.ipynb") for i in range(4)]
    snapshots = []
    both_started = threading.Barrier(2, timeout=60)  # broken (and the test failed) unless 00 and 01 run at once
    ended = {path.stem: threading.Event() for path in paths}

    def run_one(path):
        if path.stem in ("00", "01"):
            both_started.wait()
        if path.stem == "00":
            assert ended["01"].wait(60)  # the first one ends after the second
        ended[path.stem].set()
        return {"notebook": path.stem}

    runs = run_notebooks.run_all(paths, run_one, 2, lambda so_far: snapshots.append([r["notebook"] for r in so_far]))
    assert [r["notebook"] for r in runs] == ["00", "01", "02", "03"]
    assert len(snapshots) == 4 and snapshots[-1] == ["00", "01", "02", "03"]
    assert all(s == sorted(s) for s in snapshots)  # always in the order given


@pytest.mark.parametrize("argv, message", [(["--jobs", "2"], "only with --emulate or --smoke"),
                                           (["--jobs", "0", "--smoke"], "at least 1"),
                                           (["--deadline", "0", "--smoke"], "positive number of seconds"),
                                           (["--update-committed", "--smoke"], "never the committed ones"),
                                           (["--update-committed", "--out", "x"], "exclude each other")])
def test_bad_run_arguments_are_refused_in_one_line(monkeypatch, argv, message):
    monkeypatch.setattr(sys, "argv", ["run_notebooks.py", *argv])
    with pytest.raises(SystemExit, match=message):
        run_notebooks.main()


@pytest.fixture
def runner(monkeypatch, tmp_path):
    """`run_notebooks.main` on the given arguments, with runs/ in tmp_path, the commit check passed, and each
    notebook's execution replaced by a record of where its executed copy would be written; what `main` puts in
    the environment is undone afterwards. Returns (exit status, {notebook: target}, the figure folder)."""
    for key in (SMOKE_ENV, EMULATE_ENV, SHARED_ENV, BUDGET_ENV, FIGURES_ENV, PROGRESS_ENV, SESSION_ENV,
                "PYTHONWARNINGS", "PYTHONPATH"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    monkeypatch.setattr(run_notebooks, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(run_notebooks, "source_commit", lambda: "0" * 40)
    targets = {}

    def execute(path, target, timeout_s, stamp, deadline=None, kernel_log=None):
        targets[path.stem] = target
        return {"notebook": path.stem, "status": "ok", "seconds": 0.0, "dirty_outputs": ""}

    monkeypatch.setattr(run_notebooks, "execute", execute)

    def run(*argv):
        monkeypatch.setattr(sys, "argv", ["run_notebooks.py", *argv])
        return run_notebooks.main(), dict(targets), os.environ[FIGURES_ENV]
    return run


def test_a_run_writes_under_runs_and_leaves_the_committed_notebooks_alone(runner, tmp_path):
    rc, targets, figures = runner("--smoke", "00")
    out = tmp_path / "runs"
    assert rc == 0 and targets == {"00_overview": out / "notebooks" / "00_overview.ipynb"}
    assert figures == str(out / "figures")
    assert (out / "notebook_runs.csv").is_file()
    rc, targets, figures = runner("--smoke", "--out", str(tmp_path / "mine"), "00")
    assert targets == {"00_overview": tmp_path / "mine" / "notebooks" / "00_overview.ipynb"}
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/notebooks/00_overview.ipynb"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, "runs/ must be git-ignored"


def test_relative_out_and_session_folders_are_the_callers_not_the_notebooks(runner, tmp_path, monkeypatch):
    """The notebooks run with notebooks/ as their working directory: a relative --out or --session must still
    name the folder under the directory the runner was started from (else a session kept over several calls
    is silently lost and each call measures afresh)."""
    monkeypatch.chdir(tmp_path)
    rc, targets, figures = runner("--smoke", "--out", "mine", "--session", "kept", "00")
    assert rc == 0 and targets == {"00_overview": tmp_path / "mine" / "notebooks" / "00_overview.ipynb"}
    assert figures == str(tmp_path / "mine" / "figures") and os.environ[SESSION_ENV] == str(tmp_path / "kept")


def test_only_update_committed_writes_into_the_committed_notebooks_and_figures(runner, monkeypatch, tmp_path):
    monkeypatch.setattr(run_notebooks, "resolve_device", lambda name: torch.device("cuda"))  # a GPU, as it needs
    monkeypatch.setattr(run_notebooks, "resolve_dtype", lambda name, device: torch.float16)
    monkeypatch.setattr(run_notebooks, "environment", lambda device, dtype: {
        "device": "a GPU", "dtype": "fp16", "torch": torch.__version__, "triton": "", "date": "today"})
    rc, targets, figures = runner("--update-committed", "00")
    assert rc == 0 and targets == {"00_overview": SOURCE.with_suffix(".ipynb")} and figures == str(ROOT / "figures")
    assert not (tmp_path / "runs" / "notebook_runs.csv").exists()  # in place, as before: no log written
    rc, targets, _ = runner("00")
    assert targets == {"00_overview": tmp_path / "runs" / "notebooks" / "00_overview.ipynb"}


class TimingOutClient:
    """nbclient's NotebookClient as `execute` uses it, on a fake clock: each cell gets the timeout that
    `timeout_func` gives it, the first takes a second, the second runs until its timeout."""

    def __init__(self, nb, timeout_func, on_cell_executed, clock, timeouts, **kwargs):
        self.nb, self.timeout_func, self.on_cell_executed = nb, timeout_func, on_cell_executed
        self.clock, self.timeouts = clock, timeouts

    def execute(self, **kwargs):
        first, second = self.nb.cells
        self.timeouts.append(self.timeout_func(first))
        self.clock.sleep(1)
        self.on_cell_executed(cell=first, cell_index=0, execute_reply={})
        self.timeouts.append(self.timeout_func(second))
        self.clock.sleep(self.timeouts[-1])
        raise nbclient.exceptions.CellTimeoutError("A cell timed out while it was being executed, after "
                                                   f"{self.timeouts[-1]} seconds.\nmore")


@pytest.mark.parametrize("deadline_s, timeouts, status", [
    (8, [8, 7], "stopped at the deadline in cell 2/2"),
    (None, [600, 600], "error in cell 2/2: A cell timed out while it was being executed, after 600 seconds.")])
def test_a_run_stops_itself_at_its_deadline_and_says_in_which_cell(tmp_path, monkeypatch, deadline_s, timeouts,
                                                                   status):
    clock, given = FakeClock(), []
    monkeypatch.setattr(run_notebooks.nbclient, "NotebookClient",
                        lambda nb, **kwargs: TimingOutClient(nb, clock=clock, timeouts=given, **kwargs))
    target = tmp_path / "out.ipynb"
    deadline = None if deadline_s is None else clock() + deadline_s
    run = run_notebooks.execute(_sleeper(tmp_path), target, 600, {"commit": "x"}, deadline=deadline, clock=clock)
    assert given == timeouts  # each cell's timeout cut to the time left before the deadline
    assert run["status"] == status and run["seconds"] == 1 + timeouts[-1]
    assert run["cell_seconds"] == "1.0"  # the finished cells' own seconds, not the one stopped
    assert nbformat.read(target, as_version=4).metadata["roofline"]["status"] == run["status"]


def _sleeper(tmp_path):
    """A two-cell notebook whose second cell sleeps far longer than any test waits."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("import time\ntime.sleep(60)")])
    path = tmp_path / "sleeper.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.notebook
def test_a_cell_past_its_own_timeout_is_logged_with_its_number(tmp_path):
    """A real kernel: nbclient stops the cell at the timeout `execute` gives it (the fake-clock test above
    checks how that timeout is chosen and logged)."""
    run = run_notebooks.execute(_sleeper(tmp_path), tmp_path / "out.ipynb", 3, {"commit": "x"})
    assert run["status"].startswith("error in cell 2/2: A cell timed out")


@pytest.mark.notebook
def test_what_the_kernel_process_writes_to_stderr_goes_to_its_log(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nos.write(2, b'from the kernel\\n')")])
    nbformat.write(nb, tmp_path / "writer.ipynb")
    log = tmp_path / "logs" / "writer.log"
    run = run_notebooks.execute(tmp_path / "writer.ipynb", tmp_path / "out.ipynb", 60, {"commit": "x"}, kernel_log=log)
    assert run["status"] == "ok" and "from the kernel" in log.read_text()


def test_a_profilers_log_line_in_a_cells_output_counts_as_dirt():
    def notebook(text: str, name: str = "stderr"):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("profile(ctx, ['reference'])", outputs=[
            nbformat.v4.new_output("stream", name=name, text=text)])]
        return nb

    line = "USDT:2026-12-03 06:41:09 13016:13016 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
    assert run_notebooks.dirt(notebook(line)) == "a profiler log line"
    assert run_notebooks.dirt(notebook("STAGE:2024-01-01 10:00:00 1:1 ActivityProfilerController.cpp:314] "
                                       "Completed Stage: Warm Up\n", "stdout")) == "a profiler log line"
    assert run_notebooks.dirt(notebook("the reference at USDT: none\n")) == ""  # only a log line's own form
