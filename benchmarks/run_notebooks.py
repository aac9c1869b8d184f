"""Execute the walkthrough notebooks headless, with their outputs written into executed copies of the .ipynb files.

    python benchmarks/run_notebooks.py 02 03            # two of them; executed copies and figures under runs/
    python benchmarks/run_notebooks.py --out OUT        # every notebook; executed copies and figures under OUT
    python benchmarks/run_notebooks.py --update-committed  # on a GPU: the committed notebooks, in place

By default the repository's tracked files are left untouched: executed notebooks go to OUT/notebooks/,
figures to OUT/figures/, and a log (OUT/notebook_runs.csv) names the GPU, torch and triton versions, dtype
and date, and each finished code cell's seconds (`cell_seconds`: where a notebook's time goes), where OUT
is `--out` or runs/ (git-ignored). Only `--update-committed` writes the outputs into notebooks/*.ipynb and the
figures into figures/, which is how the committed notebooks get theirs on a GPU machine.
What each kernel process writes to stderr itself (library warnings, ipykernel's notice about its local TCP
connection, the traceback of a cell stopped at its timeout) goes to OUT/kernel_logs/ (runs/kernel_logs/
with `--update-committed`), not between the progress lines.
`--smoke` runs the tiny CPU-sized suite (what CI does), for checking this script anywhere;
`--emulate t4` runs them as on a Colab T4 (roofline_lib.core.device.emulate_t4), `--jobs 2` two at a time there;
`--stale` lists the committed notebooks whose outputs are older than the code (roofline_lib/ or a code
cell of their own source changed since; a prose edit leaves them current); `--deadline SECONDS` makes a
run that must end by then stop itself and log where.

Each executed notebook records the commit it was executed from in its metadata, so the runner refuses
a tree whose package or notebooks differ from that commit. Progress bars are switched off and warnings
silenced in the kernel (a saved bar is frozen, a warning names machine paths); the log says, per notebook,
whether its saved outputs are clean: no warning, no profiler log line, no frozen progress bar, no absolute path.
The notebooks of one run share one session (roofline_lib.present.session): the ceilings and the ladder's sweep
are measured by the first notebook that needs them and reused by the rest, in a fresh OUT/session/ unless
`--session DIR` names one to keep using (a run split over several calls).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

try:
    import jupytext
    import nbclient
    import nbformat
except ImportError as exc:  # the notebook tools come with the test install, not the package's own
    raise SystemExit(f"{exc.name} is missing: install the notebook tools with "
                     "`python -m pip install -r requirements-dev.txt`") from None
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from roofline_lib.core.device import environment, resolve_device, resolve_dtype  # noqa: E402
from roofline_lib.core.progress import PROGRESS_ENV  # noqa: E402
from roofline_lib.present.notebook import BUDGET_ENV, EMULATE_ENV, FIGURES_ENV, SHARED_ENV, SMOKE_ENV  # noqa: E402
from roofline_lib.present.session import SESSION_ENV  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
RUNS = ROOT / "runs"  # git-ignored: what a run writes unless it updates the committed notebooks


def select(names: list[str]) -> list[Path]:
    """Notebooks by prefix ("02") or stem; all of them when `names` is empty."""
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not names:
        return paths
    chosen = [p for name in names for p in paths if p.stem == name or p.stem.startswith(f"{name}_")]
    missing = [n for n in names if not any(p.stem == n or p.stem.startswith(f"{n}_") for p in chosen)]
    if missing:
        raise SystemExit(f"unknown notebook {', '.join(missing)}: have {', '.join(p.stem for p in paths)}")
    return chosen


def destination(out: Path | None, update_committed: bool) -> Path | None:
    """The folder a run writes its executed notebooks, figures and log into: `out`, else runs/;
    None with `update_committed`, whose outputs go into the committed notebooks and figures/ themselves."""
    if update_committed:
        if out is not None:
            raise SystemExit("--out and --update-committed exclude each other: the outputs go to one place")
        return None
    return RUNS if out is None else out.resolve()  # absolute: the notebooks run in notebooks/, not here


def target(path: Path, out: Path | None) -> Path:
    """Where the executed copy of notebook `path` is written: into `out`'s notebooks/, or over `path` itself."""
    return path if out is None else out / "notebooks" / path.name


def copied_commit(listing: Path) -> str:
    """The commit a copied tree came from, given `git ls-tree -r HEAD roofline_lib notebooks` saved with the
    commit on its first line: every file must have the listed blob hash, and no other file may be there."""
    commit, *entries = listing.read_text().splitlines()
    listed = {path: blob for _, _, blob, path in (e.replace("\t", " ").split(" ", 3) for e in entries)}
    here = {str(p.relative_to(ROOT)) for folder in ("roofline_lib", "notebooks") for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts}
    def blob(path: str) -> str:
        data = (ROOT / path).read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    changed = sorted(p for p in here ^ set(listed) | {p for p in here & set(listed) if blob(p) != listed[p]})
    if changed or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise SystemExit(f"this tree is not commit {commit[:12]}: {', '.join(changed[:10])}")
    return commit


def source_commit() -> str:
    """The commit the notebooks run from: HEAD, refusing a tree whose package or notebooks have uncommitted
    changes (or, for a copy without history, the commit that ROOFLINE_TREE lists and the files match)."""
    if os.environ.get("ROOFLINE_TREE"):  # a copy of the tree without its history: check it against a listing
        return copied_commit(Path(os.environ["ROOFLINE_TREE"]))
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "roofline_lib", "notebooks"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        raise SystemExit("uncommitted changes to roofline_lib/ or notebooks/: commit them first, so the outputs "
                         "record the code that made them:\n" + dirty)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def fresh_session(out: Path) -> Path:
    """An empty OUT/session/ for this run's one-time measurements: a run never reuses an earlier run's."""
    folder = out / "session"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def code_cells(percent_source: str) -> list[str]:
    """The code cells of a jupytext percent file: what a notebook's outputs depend on (its prose does not)."""
    return [cell.source for cell in jupytext.reads(percent_source, fmt="py:percent").cells
            if cell.cell_type == "code"]


def why_stale(stamp: dict, source: Path) -> str:
    """Why outputs stamped `stamp` are not those of the current code ("" when they are): not from a GPU run,
    a run that stopped on an error, or roofline_lib/ or a code cell of the notebook's own source (`source`)
    changed since the commit they record. A change to its markdown alone leaves the outputs current."""
    commit = stamp.get("commit", "")
    if not commit or stamp.get("smoke") or stamp.get("emulated"):
        return f"its outputs are not from a GPU run ({stamp or 'no record'})"
    if stamp.get("status", "ok") != "ok":
        return f"its run stopped: {stamp['status']}"
    package = subprocess.run(["git", "diff", "--quiet", commit, "--", "roofline_lib"], cwd=ROOT,
                             capture_output=True, text=True)
    if package.returncode > 1:
        return f"its commit {commit[:12]} is not in this clone's history"
    if package.returncode == 1:
        return f"roofline_lib/ changed since {commit[:12]}"
    relative = source.relative_to(ROOT).as_posix()
    then = subprocess.run(["git", "show", f"{commit}:{relative}"], cwd=ROOT, capture_output=True, text=True)
    if then.returncode or code_cells(then.stdout) != code_cells(source.read_text()):
        return f"a code cell of {source.name} changed since {commit[:12]}"
    return ""


def stale() -> list[str]:
    """The committed notebooks whose outputs are not those of the current code, each with the reason."""
    stamps = {path: nbformat.read(path, as_version=4).metadata.get("roofline", {})
              for path in sorted(NOTEBOOKS.glob("*.ipynb"))}
    return [f"{path.stem}: {reason}" for path, stamp in stamps.items()
            if (reason := why_stale(stamp, path.with_suffix(".py")))]


DIRT = {"a warning": re.compile(r"Warning|Traceback"), "a frozen progress bar": re.compile(r"\b\d+%\|"),
        "a profiler log line": re.compile(r"^(?:USDT|STAGE|INFO|WARNING|ERROR):\d{4}-\d\d-\d\d", re.M),  # kineto's
        "an absolute path": re.compile(r"(?<![\w:/.])/(?:home|root|tmp|usr|opt|work|mnt|var)/[\w.-]+")}


def dirt(nb) -> str:
    """What the saved outputs hold that they should not ("" when clean)."""
    found = set()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") or "".join(str(v) for k, v in out.get("data", {}).items()
                                                  if k.startswith("text"))
            found |= {what for what, pattern in DIRT.items()
                      if pattern.search(text) and (what != "a warning" or out.get("name") == "stderr")}
    return ", ".join(sorted(found))


def failure(exc: Exception) -> str:
    """One line for a failed cell: the exception's type and the first line of its message."""
    if isinstance(exc, nbclient.exceptions.CellExecutionError):
        message = (exc.evalue or "").strip().splitlines()
        return f"{exc.ename}: {message[0] if message else ''}"[:200]
    return str(exc).strip().splitlines()[0][:200]


def execute(path: Path, target: Path, timeout_s: int, stamp: dict, deadline: float | None = None,
            kernel_log: Path | None = None, clock: Callable[[], float] = time.perf_counter) -> dict:
    """Run one notebook in notebooks/ as its working directory; write it (outputs included) to `target`.

    `deadline` (an instant of `clock`, the host's by default) cuts every cell's timeout to the time left, so a run that
    must end by then stops itself, logs the cell it was in and keeps the notebook, instead of being killed
    from outside with nothing said. `kernel_log` takes what the kernel process itself writes to stderr
    (library warnings, the traceback of a cell stopped by its timeout), which would otherwise interleave
    with this script's progress lines; the cells' own output is in the notebook either way."""
    nb = nbformat.read(path, as_version=4)
    start = clock()
    code_cells = sum(cell.cell_type == "code" for cell in nb.cells)
    done, cell_seconds = 0, []  # each finished code cell's seconds, in order (the first's with the kernel's start)

    def progress(cell, cell_index, execute_reply) -> None:  # one line per code cell
        nonlocal done
        if cell.cell_type == "code":
            done = sum(c.cell_type == "code" for c in nb.cells[:cell_index + 1])
            cell_seconds.append(clock() - start - sum(cell_seconds))
            print(f"  {path.stem}: cell {done}/{code_cells} done at {clock() - start:,.0f} s", flush=True)

    def cell_timeout(cell) -> int:
        return timeout_s if deadline is None else max(1, min(timeout_s, int(deadline - clock())))

    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout_func=cell_timeout, record_timing=False,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}}, on_cell_executed=progress)
    if kernel_log is not None:
        kernel_log.parent.mkdir(parents=True, exist_ok=True)
    stderr = None if kernel_log is None else open(kernel_log, "w")  # closed in `finally`, whatever happens
    try:
        client.execute(**({} if stderr is None else {"stderr": stderr}))
        status = "ok"
    except nbclient.exceptions.CellTimeoutError as exc:
        late = deadline is not None and clock() >= deadline - 1
        status = (f"stopped at the deadline in cell {done + 1}/{code_cells}" if late
                  else f"error in cell {done + 1}/{code_cells}: " + failure(exc))
    except nbclient.exceptions.CellExecutionError as exc:
        status = "error: " + failure(exc)
    except nbclient.exceptions.DeadKernelError:  # killed from outside (out of memory, a signal): say so, keep the rest
        status = "error: the kernel died"
    except AssertionError as exc:  # nbclient's own clean-up can fail once the kernel has died
        if not isinstance(exc.__context__, nbclient.exceptions.DeadKernelError):
            raise
        status = "error: the kernel died"
    finally:
        if stderr is not None:
            stderr.close()
    nb.metadata["roofline"] = stamp | {"status": status}
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)  # written even after an error, so the failing cell's traceback can be read
    return {"notebook": path.stem, "status": status, "seconds": round(clock() - start, 1),
            "dirty_outputs": dirt(nb), "cell_seconds": " ".join(f"{s:.1f}" for s in cell_seconds)}


def run_all(paths: list[Path], run_one: Callable[[Path], dict], jobs: int,
            finished: Callable[[list[dict]], None]) -> list[dict]:
    """`run_one` on each notebook, `jobs` at a time (threads: each notebook runs in its own kernel process);
    after each one ends, `finished` gets the records so far, in the order of `paths`."""
    records: dict[int, dict] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, path): i for i, path in enumerate(paths)}
        for future in as_completed(futures):
            records[futures[future]] = future.result()
            finished([records[i] for i in sorted(records)])
    return [records[i] for i in sorted(records)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="prefixes or stems, e.g. 02 03 (default: all)")
    parser.add_argument("--out", type=Path, help="write executed notebooks, figures and the log here "
                                                 "(default: runs/)")
    parser.add_argument("--update-committed", action="store_true",
                        help="write the outputs into the committed notebooks/*.ipynb and the figures into figures/")
    parser.add_argument("--smoke", action="store_true", help="the tiny smoke suite (CPU check of this script)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    parser.add_argument("--deadline", type=float, help="seconds the whole run may take: a notebook still running "
                                                       "then stops and is logged with the cell it was in, and "
                                                       "one not yet started is logged as not run")
    parser.add_argument("--budget", type=float, help="seconds of timed calls per row in every notebook "
                                                     "(default: the notebooks' own, 0.5 on a GPU)")
    parser.add_argument("--emulate", choices=["t4"], help="run as on a Colab T4 (capability 7.5, no flash or cuDNN "
                                                         "attention, 14.7 GiB)")
    parser.add_argument("--stale", action="store_true", help="only list the committed notebooks whose outputs are not "
                                                             "from the current code; exit 1 if there are any")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run side by side (with --emulate or --smoke "
                                                            "only: each slows the others, and those outputs are not "
                                                            "the committed ones)")
    parser.add_argument("--session", type=Path, help="the session folder the notebooks share their one-time "
                                                     "measurements through (present.session), kept as it is: "
                                                     "how a run split over several calls stays one session "
                                                     "(default: a fresh OUT/session/)")
    args = parser.parse_args()
    if args.stale:
        found = stale()
        print("\n".join(found) or "every committed notebook was executed on a GPU from the current code")
        return 1 if found else 0
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {args.jobs}")
    if args.deadline is not None and args.deadline <= 0:
        raise SystemExit(f"--deadline must be a positive number of seconds, got {args.deadline:g}")
    deadline = None if args.deadline is None else time.perf_counter() + args.deadline
    if args.jobs > 1 and not (args.emulate or args.smoke):
        raise SystemExit("--jobs runs notebooks side by side, which slows each one: only with --emulate or --smoke, "
                         "whose timings are not the committed ones")
    paths = select(args.notebooks)
    out = destination(args.out, args.update_committed)
    if args.smoke and out is None:
        raise SystemExit("--smoke outputs say nothing about a GPU: they are never the committed ones "
                         "(leave out --update-committed)")
    device = resolve_device(None)
    if not args.smoke and device.type != "cuda":
        raise SystemExit("no CUDA GPU visible: the notebooks' outputs come from a GPU "
                         "(use --smoke to check this script)")
    commit = source_commit()
    os.environ[SMOKE_ENV] = "1" if args.smoke else "0"
    os.environ[EMULATE_ENV] = args.emulate or ""
    os.environ[SHARED_ENV] = str(min(args.jobs, len(paths)))
    if args.budget is not None:
        os.environ[BUDGET_ENV] = str(args.budget)
    os.environ[PROGRESS_ENV] = "0"  # a saved progress bar is frozen text
    os.environ["PYTHONWARNINGS"] = "ignore"  # warnings name machine paths, and the log says what ran
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ[FIGURES_ENV] = str((ROOT if out is None else out) / "figures")
    # absolute, like `out`: a relative folder would be read from notebooks/, the notebooks' working directory
    os.environ[SESSION_ENV] = str(args.session.resolve() if args.session else fresh_session(RUNS if out is None
                                                                                            else out))
    env = environment(device, resolve_dtype(None, device))
    stamp = {"commit": commit, "device": env["device"], "torch": env["torch"], "triton": env["triton"],
             "date": env["date"], "emulated": args.emulate or "", "smoke": args.smoke}
    def run_one(path: Path) -> dict:
        extra = env | {"smoke": args.smoke, "emulated": args.emulate or "", "jobs": args.jobs, "commit": commit}
        if deadline is not None and time.perf_counter() >= deadline - 1:
            return {"notebook": path.stem, "status": "not run: the deadline had passed", "seconds": 0.0,
                    "dirty_outputs": ""} | extra
        print(f"running {path.name} …", flush=True)
        kernel_log = (out or RUNS) / "kernel_logs" / f"{path.stem}.log"
        return execute(path, target(path, out), args.timeout, stamp, deadline, kernel_log) | extra

    def save(runs: list[dict]) -> None:  # after every notebook, so a run stopped part-way still says what it did
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(runs).to_csv(out / "notebook_runs.csv", index=False)

    log = pd.DataFrame(run_all(paths, run_one, args.jobs, save))
    print(log[["notebook", "status", "seconds", "dirty_outputs", "emulated", "jobs", "device", "dtype", "torch",
               "date"]].to_markdown(index=False))
    return 0 if (log.status == "ok").all() else 1


if __name__ == "__main__":
    sys.exit(main())
