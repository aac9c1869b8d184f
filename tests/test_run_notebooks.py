"""The notebook runner's freshness check: outputs count as current only if they come from a GPU run of
the commit they record, and neither the package nor the notebook's source changed since."""
import subprocess

import pytest

from benchmarks.run_notebooks import ROOT, why_stale

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
    from benchmarks.run_notebooks import code_cells
    text = SOURCE.read_text()
    prose = text.replace("# # 00", "# # 00 (edited)", 1)
    code = text.replace("show_source(ReferenceLayer.forward)", "show_source(ReferenceLayer.__init__)", 1)
    assert prose != text and code != text
    assert code_cells(prose) == code_cells(text)
    assert code_cells(code) != code_cells(text)


def test_a_failed_cell_is_logged_by_its_exception_and_first_message_line():
    import nbclient.exceptions as nbe

    from benchmarks.run_notebooks import failure
    cell = nbe.CellExecutionError("Traceback …\nCompile with `TORCH_USE_CUDA_DSA`", "AcceleratorError",
                                  "CUDA error: an illegal memory access was encountered\nSearch for it")
    assert failure(cell) == "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert failure(nbe.CellTimeoutError("A cell timed out while it was being executed, after 5 seconds.\nHere")) \
        == "A cell timed out while it was being executed, after 5 seconds."


def test_a_kernel_killed_mid_run_is_logged_and_its_notebook_kept(tmp_path, monkeypatch):
    """A signal that kills the kernel can make nbclient's own clean-up fail (an AssertionError raised
    while handling DeadKernelError): the run is still logged and the partial notebook written."""
    import nbclient
    import nbformat

    from benchmarks import run_notebooks

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
    import threading
    import time

    from benchmarks.run_notebooks import run_all
    paths = [SOURCE.with_name(f"{i:02d}.ipynb") for i in range(4)]
    running, most, snapshots, lock = [0], [0], [], threading.Lock()

    def run_one(path):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05 * (4 - int(path.stem)))  # the first takes longest
        with lock:
            running[0] -= 1
        return {"notebook": path.stem}

    runs = run_all(paths, run_one, 2, lambda so_far: snapshots.append([r["notebook"] for r in so_far]))
    assert [r["notebook"] for r in runs] == ["00", "01", "02", "03"] and most[0] == 2
    assert len(snapshots) == 4 and snapshots[-1] == ["00", "01", "02", "03"]
    assert all(s == sorted(s) for s in snapshots)  # always in the order given


@pytest.mark.parametrize("argv, message", [(["--jobs", "2"], "only with --emulate or --smoke"),
                                           (["--jobs", "0", "--smoke"], "at least 1"),
                                           (["--deadline", "0", "--smoke"], "positive number of seconds")])
def test_bad_run_arguments_are_refused_in_one_line(monkeypatch, argv, message):
    import sys

    from benchmarks import run_notebooks
    monkeypatch.setattr(sys, "argv", ["run_notebooks.py", *argv])
    with pytest.raises(SystemExit, match=message):
        run_notebooks.main()


def _sleeper(tmp_path):
    """A two-cell notebook whose second cell sleeps far longer than any test waits."""
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("import time\ntime.sleep(60)")])
    path = tmp_path / "sleeper.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.notebook
def test_a_run_stops_itself_at_its_deadline_and_says_in_which_cell(tmp_path):
    import time

    import nbformat

    from benchmarks import run_notebooks
    target = tmp_path / "out.ipynb"
    run = run_notebooks.execute(_sleeper(tmp_path), target, 600, {"commit": "x"}, deadline=time.perf_counter() + 8)
    assert run["status"] == "stopped at the deadline in cell 2/2" and run["seconds"] < 30
    assert nbformat.read(target, as_version=4).metadata["roofline"]["status"] == run["status"]


@pytest.mark.notebook
def test_a_cell_past_its_own_timeout_is_logged_with_its_number(tmp_path):
    from benchmarks import run_notebooks
    run = run_notebooks.execute(_sleeper(tmp_path), tmp_path / "out.ipynb", 3, {"commit": "x"})
    assert run["status"].startswith("error in cell 2/2: A cell timed out")


@pytest.mark.notebook
def test_what_the_kernel_process_writes_to_stderr_goes_to_its_log(tmp_path):
    import nbformat

    from benchmarks import run_notebooks
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nos.write(2, b'from the kernel\\n')")])
    nbformat.write(nb, tmp_path / "writer.ipynb")
    log = tmp_path / "logs" / "writer.log"
    run = run_notebooks.execute(tmp_path / "writer.ipynb", tmp_path / "out.ipynb", 60, {"commit": "x"}, kernel_log=log)
    assert run["status"] == "ok" and "from the kernel" in log.read_text()
