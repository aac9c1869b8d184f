"""Execute the walkthrough notebooks headless, with their outputs written into the .ipynb files.

On a GPU machine this is how the committed notebooks get their outputs:

    python benchmarks/run_notebooks.py                  # every notebook, in place; figures into figures/
    python benchmarks/run_notebooks.py --out OUT 02 03  # two of them; executed copies and figures under OUT

`--out OUT` leaves the repository untouched: executed notebooks go to OUT/notebooks/, figures to
OUT/figures/, and a log (OUT/notebook_runs.csv) names the GPU, torch and triton versions, dtype and date.
`--smoke` runs the tiny CPU-sized suite (what CI does), for checking this script anywhere.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbclient
import nbformat
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from roofline_lib.device import environment, resolve_device, resolve_dtype  # noqa: E402
from roofline_lib.notebook import FIGURES_ENV, SMOKE_ENV  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"


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


def execute(path: Path, target: Path, timeout_s: int) -> dict:
    """Run one notebook in notebooks/ as its working directory; write it (outputs included) to `target`."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    code_cells = sum(cell.cell_type == "code" for cell in nb.cells)

    def progress(cell, cell_index, execute_reply) -> None:  # one line per code cell: where the time goes
        if cell.cell_type == "code":
            done = sum(c.cell_type == "code" for c in nb.cells[:cell_index + 1])
            print(f"  {path.stem}: cell {done}/{code_cells} done at {time.perf_counter() - start:,.0f} s", flush=True)

    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout_s, record_timing=False,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}}, on_cell_executed=progress)
    try:
        client.execute()
        status = "ok"
    except (nbclient.exceptions.CellExecutionError, nbclient.exceptions.CellTimeoutError) as exc:
        status = "error: " + str(exc).strip().splitlines()[-1][:200]
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)  # written even after an error, so the failing cell's traceback can be read
    return {"notebook": path.stem, "status": status, "seconds": round(time.perf_counter() - start, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="prefixes or stems, e.g. 02 03 (default: all)")
    parser.add_argument("--out", type=Path, help="write executed notebooks and figures here instead of in place")
    parser.add_argument("--smoke", action="store_true", help="the tiny smoke suite (CPU check of this script)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    args = parser.parse_args()
    paths = select(args.notebooks)
    device = resolve_device(None)
    if args.smoke and args.out is None:
        raise SystemExit("--smoke outputs say nothing about a GPU: give --out DIR so they do not land in notebooks/")
    if not args.smoke and device.type != "cuda":
        raise SystemExit("no CUDA GPU visible: the committed outputs come from a GPU (use --smoke --out DIR to check)")
    os.environ[SMOKE_ENV] = "1" if args.smoke else "0"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if args.out is not None:
        os.environ[FIGURES_ENV] = str(args.out / "figures")
    env = environment(device, resolve_dtype(None, device))
    runs = []
    for path in paths:
        target = path if args.out is None else args.out / "notebooks" / path.name
        print(f"running {path.name} …", flush=True)
        runs.append(execute(path, target, args.timeout) | env | {"smoke": args.smoke})
    log = pd.DataFrame(runs)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        log.to_csv(args.out / "notebook_runs.csv", index=False)
    print(log[["notebook", "status", "seconds", "device", "dtype", "torch", "triton", "date"]].to_markdown(index=False))
    return 0 if (log.status == "ok").all() else 1


if __name__ == "__main__":
    sys.exit(main())
