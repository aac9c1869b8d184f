"""SDPA's attention backend, chosen per input shape by measurement (a step of the `fastest` rung).

`F.scaled_dot_product_attention` picks a backend by fixed rules (on an H100/H200: cuDNN first for
fp16 without a mask, then FlashAttention-2, then memory-efficient attention). Rules are not
measurements. `choose_backend` times every backend that accepts the inputs, on the inputs themselves,
against SDPA's own pick, and forces the fastest only where it beats that pick beyond noise: forcing
goes through `torch.nn.attention.sdpa_kernel`, which costs some microseconds of Python per call.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

import pandas as pd
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..bench import Comparison, Timing, time_interleaved
from ..roofline import op_costs
from ..shapes import Shape

BACKENDS = {  # the fused backends; the math one materializes the scores and never wins
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
SDPA_PICK = "sdpa_pick"  # the name SDPA's own choice is timed under


def forced(backend: str) -> AbstractContextManager:
    """Context in which SDPA runs on `backend` only (a key of BACKENDS)."""
    return sdpa_kernel([BACKENDS[backend]])


@dataclass(frozen=True)
class BackendChoice:
    """What `choose_backend` measured and kept."""

    backend: str | None  # forced backend, or None: SDPA's own pick is kept
    timings: dict[str, Timing]  # per timed option: SDPA_PICK and each backend that ran
    unavailable: dict[str, str]  # backend → why it cannot run these inputs
    versus_pick: Comparison | None  # fastest forced backend against SDPA's pick (None: none ran)

    @property
    def label(self) -> str:
        return self.backend or SDPA_PICK


def _refusal(attend: Callable[[str | None], object], backend: str) -> str | None:
    """None when `attend` runs on `backend`; else the first line of why not."""
    try:
        attend(backend)
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def choose_backend(attend: Callable[[str | None], object], device: torch.device,
                   budget_s: float = 0.1) -> BackendChoice:
    """Time `attend(backend)` for SDPA's pick (None) and every backend in BACKENDS that runs, interleaved;
    keep a forced backend only if it is faster than SDPA's pick beyond noise."""
    unavailable = {name: why for name in BACKENDS if (why := _refusal(attend, name)) is not None}
    runnable = [name for name in BACKENDS if name not in unavailable]
    fns = {SDPA_PICK: partial(attend, None)} | {name: partial(attend, name) for name in runnable}
    samples = time_interleaved(fns, device, budget_s=budget_s, min_reps=5, max_reps=100)
    timings = {name: Timing.from_samples(s) for name, s in samples.items()}
    if not runnable:
        return BackendChoice(None, timings, unavailable, None)
    best = min(runnable, key=lambda name: timings[name].median_ms)
    versus_pick = Comparison.from_samples(samples[SDPA_PICK], samples[best])
    return BackendChoice(best if versus_pick.verdict == "faster" else None, timings, unavailable, versus_pick)


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
    from .sdpa import sdpa_attention  # here: sdpa imports this module
    q, k, v = random_qkv(shape.batch, shape.seq_len, shape.n_heads, shape.d_model // shape.n_heads, dtype, device)
    choice = choose_backend(lambda backend: sdpa_attention(q, k, v, None, backend=backend), device, budget_s)
    flops = float(op_costs(shape, dtype).loc["attention", "flops"])
    vs = choice.versus_pick
    base = {"row": shape.row, "shape": shape.label, "kept": choice.label,
            "kept_speedup": vs.speedup if vs else float("nan"), "kept_verdict": vs.verdict if vs else ""}
    records = []
    for option in [SDPA_PICK, *BACKENDS]:
        if option in choice.unavailable:
            records.append({**base, "option": option, "status": "unavailable", "reason": choice.unavailable[option]})
            continue
        t = choice.timings[option]
        tflops = flops / (t.median_ms * 1e-3) / 1e12
        records.append({**base, "option": option, "status": "ok", "median_ms": t.median_ms, "p20_ms": t.p20_ms,
                        "p80_ms": t.p80_ms, "reps": t.reps, "tflops": tflops,
                        "of_matmul_ceiling": tflops / ceiling_tflops})
    return records


def backend_summary(results: pd.DataFrame) -> pd.DataFrame:
    """Per row of `backend_records`: each option's median ms (TFLOP/s) or "refused", then the backend kept
    and its speedup over SDPA's pick with the verdict."""
    cells = results.assign(cell=[f"{r.median_ms:.4f} ({r.tflops:.3g})" if r.status == "ok" else "refused"
                                 for r in results.itertuples()])
    table = cells.pivot(index=["row", "shape"], columns="option", values="cell")[[SDPA_PICK, *BACKENDS]]
    table = table.reindex(pd.MultiIndex.from_frame(results[["row", "shape"]].drop_duplicates()))  # suite order
    kept = results.groupby(["row", "shape"]).first().reindex(table.index)
    table["kept"] = kept["kept"]
    table["vs pick"] = [f"{s:.3f}× {v}" if v else "" for s, v in zip(kept["kept_speedup"], kept["kept_verdict"])]
    return table.reset_index()
