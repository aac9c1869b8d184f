"""Print the versus table (`roofline_lib.present.report.versus_table`) of one or more sweep CSVs run with --against.

    python benchmarks/versus_table.py results/peers/run_*.csv

Several files (say, rows measured in separate runs) are stacked in the order given.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from roofline_lib.present.report import versus_table  # noqa: E402


def main(paths: list[str]) -> int:
    if not paths:
        raise SystemExit(__doc__)
    results = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    first = results.iloc[0]
    print(f"{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['dtype']}, "
          f"{', '.join(sorted(set(results['date'])))}; from {', '.join(paths)}\n")
    print(versus_table(results).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
