"""Small tables computed from results: the measured ceilings beside the datasheet's, which shapes the naive
layer fits, the fastest variant per row of a sweep."""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from ..core.device import memory_capacity
from ..core.reference import naive_peak_bytes, reference_fits
from ..core.shapes import Shape
from ..measure.ceilings import Ceilings


def ceilings_table(measured: Ceilings, sheet: Ceilings | None = None) -> pd.DataFrame:
    """The measured ceilings next to the datasheet's (when the device is listed), with measured / datasheet."""
    def column(c: Ceilings) -> list[float]:
        return [c.matmul_tflops, c.copy_gbps, c.ridge]

    table = pd.DataFrame({"measured": column(measured)},
                         index=pd.Index(["matmul TFLOP/s", "copy GB/s", "ridge FLOP/B"], name=measured.dtype))
    if sheet is not None:
        table["datasheet"] = column(sheet)
        table["measured / datasheet"] = table.measured / table.datasheet
    return table


def feasibility_table(shapes: Sequence[Shape], dtype: torch.dtype, device: torch.device) -> pd.DataFrame:
    """Per shape: the naive layer's (B, H, N, N) score tensor and peak memory next to the memory this process
    may use on `device` (GiB), and whether the naive layer fits."""
    capacity = memory_capacity(device) / 2**30
    e = torch.finfo(dtype).bits // 8
    return pd.DataFrame([{"row": s.row, "shape": s.label, "tokens": s.tokens,
                          "scores GiB": s.batch * s.n_heads * s.seq_len ** 2 * e / 2**30,
                          "naive peak GiB": naive_peak_bytes(s, dtype) / 2**30, "capacity GiB": capacity,
                          "fits": reference_fits(s, dtype, device)} for s in shapes])


def ladder_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per row of a sweep: the fastest variant that passed §3, its median, its speedup over the reference with
    the p20–p80 spread, and its fraction of the roofline floor when the sweep has roofline columns."""
    passed = results[results.passed.eq(True) & results.median_ms.notna()]
    if passed.empty:
        raise ValueError("no variant passed §3 and was timed in these results")
    best = passed.loc[passed.groupby("row", sort=False).median_ms.idxmin()]
    columns = ["row", "shape", "variant", "median_ms", "speedup", "speedup_p20", "speedup_p80", "verdict"]
    columns += [c for c in ("floor_ms", "bound", "fraction_of_floor") if c in best]
    return best[columns].rename(columns={"variant": "fastest_passing"}).reset_index(drop=True)
