"""SDPA's attention backends on one shape, measured and tabulated: what `fastest` chooses from, shown.

`backend_records` runs `variants.attention_backend.choose_backend` (the very function `fastest` uses, with
the timer the registry gives `fastest`) on causal attention of a shape's size and turns what it measured
into one record per option;
`backend_summary` makes the per-row table of the benchmark and the summary notebook.
"""
from __future__ import annotations

import pandas as pd
import torch

from ..core.shapes import Shape
from ..measure.roofline import op_costs
from ..measure.timing import time_layer_calls
from ..variants.attention_backend import SDPA_PICK, choose_backend
from ..variants.sdpa import SDPA_BACKENDS, sdpa_attention


def random_qkv(batch: int, seq_len: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
               seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (B, H, N, hd): views of one seeded (B, N, 3, H, hd) buffer, the layout of the fused projection."""
    gen = torch.Generator(device=device).manual_seed(seed)
    qkv = torch.randn(batch, seq_len, 3, heads, head_dim, generator=gen, device=device, dtype=dtype)
    return qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, hd)


def backend_records(shape: Shape, dtype: torch.dtype, device: torch.device, budget_s: float,
                    ceiling_tflops: float) -> list[dict]:
    """`choose_backend` on causal attention of `shape`'s size: one record per option (SDPA's pick, each
    backend) with its timing, TFLOP/s over the causal FLOPs (2·B·N²·d) and fraction of `ceiling_tflops`."""
    q, k, v = random_qkv(shape.batch, shape.seq_len, shape.n_heads, shape.d_model // shape.n_heads, dtype, device)
    choice = choose_backend(lambda backend: sdpa_attention(q, k, v, None, backend=backend), device,
                            time_layer_calls, budget_s)
    flops = float(op_costs(shape, dtype).loc["attention", "flops"])
    vs = choice.versus_pick
    base = {"row": shape.row, "shape": shape.label, "kept": choice.label, "fastest_forced": choice.fastest_forced or "",
            "kept_speedup": vs.speedup if vs else float("nan"), "kept_verdict": vs.verdict if vs else ""}
    records = []
    for option in [SDPA_PICK, *SDPA_BACKENDS]:
        if option in choice.unavailable:
            records.append({**base, "option": option, "status": "skipped", "reason": choice.unavailable[option]})
            continue
        t = choice.timings[option]
        tflops = flops / (t.median_ms * 1e-3) / 1e12
        records.append({**base, "option": option, "status": "ok", "median_ms": t.median_ms, "p20_ms": t.p20_ms,
                        "p80_ms": t.p80_ms, "reps": t.reps, "tflops": tflops,
                        "of_matmul_ceiling": tflops / ceiling_tflops})
    return records


def backend_summary(results: pd.DataFrame) -> pd.DataFrame:
    """Per row of `backend_records`: each option's median ms (TFLOP/s) or "refused", the backend kept, and the
    fastest forced backend's speedup over SDPA's pick (> 1: forcing it is faster) with the verdict."""
    cells = results.assign(cell=[f"{r.median_ms:.4f} ({r.tflops:.3g})" if r.status == "ok" else "refused"
                                 for r in results.itertuples()])
    table = cells.pivot(index=["row", "shape"], columns="option", values="cell")[[SDPA_PICK, *SDPA_BACKENDS]]
    table = table.reindex(pd.MultiIndex.from_frame(results[["row", "shape"]].drop_duplicates()))  # suite order
    kept = results.groupby(["row", "shape"]).first().reindex(table.index)
    table.columns = [f"{option} ms (TFLOP/s)" for option in table.columns]
    table["kept"] = kept["kept"]
    names = kept["fastest_forced"] if "fastest_forced" in kept else [""] * len(kept)  # older records lack it
    table["fastest forced (speedup over pick)"] = [f"{name} {s:.3f}× {v}".strip() if isinstance(v, str) and v else ""
                                      for name, s, v in zip(names, kept["kept_speedup"], kept["kept_verdict"])]
    return table.reset_index()
