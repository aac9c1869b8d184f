"""The fused add + LayerNorm kernel on its own: correctness against torch, and time and GB/s against
torch's `x + r` then `F.layer_norm` and against the device's copy bandwidth.

Both are credited with the same bytes, the fewest the operation must move (read x and r, write s and
y, read weight and bias once), so their GB/s compare directly with a device-to-device copy's
(`roofline_lib.measure.ceilings.measure_ceilings(...).copy_gbps`).
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from ..core.correctness import section3_judgement
from ..core.progress import progress_bar
from ..kernels.add_layer_norm import add_layer_norm
from ..measure.timing import Comparison, Timing, time_interleaved

EPS = 1e-5
AWKWARD = [(7, 131), (129, 1023)]  # (rows, width) the suite lacks: a prime row count, a width just below 2¹⁰


def random_inputs(n_rows: int, d_model: int, dtype: torch.dtype, device: torch.device,
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded x, r (n_rows, d_model) and LayerNorm weight, bias (d_model,), none of them trivial."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, d_model, generator=gen)  # (M, N)
    r = torch.randn(n_rows, d_model, generator=gen) + 0.5  # (M, N), a non-zero mean to remove
    weight = 1 + 0.2 * torch.randn(d_model, generator=gen)  # (N,)
    bias = 0.2 * torch.randn(d_model, generator=gen)  # (N,)
    return tuple(t.to(device=device, dtype=dtype) for t in (x, r, weight, bias))


def torch_add_layer_norm(x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernel replaces: two torch kernels, the add then the LayerNorm."""
    s = x + r
    return s, F.layer_norm(s, (s.shape[-1],), weight, bias, eps)


def kernel_shapes(shapes: Sequence) -> list[tuple[int, int]]:
    """The (rows, width) inputs the kernel is checked and timed on: each suite shape's tokens × d_model, once,
    then the awkward ones (`AWKWARD`)."""
    return list(dict.fromkeys([(s.tokens, s.d_model) for s in shapes] + AWKWARD))


def check_add_layer_norm(n_rows: int, d_model: int, dtype: torch.dtype, device: torch.device,
                         seed: int = 0) -> dict:
    """The kernel against torch on one seeded input: s must equal `x + r` exactly, and y's relative
    error against float64 LayerNorm of that s must pass §3 with torch's own error as the yardstick."""
    x, r, weight, bias = random_inputs(n_rows, d_model, dtype, device, seed)
    s, y = add_layer_norm(x, r, weight, bias, EPS)
    want_s, want_y = torch_add_layer_norm(x, r, weight, bias)
    truth = F.layer_norm(want_s.double(), (d_model,), weight.double(), bias.double(), EPS)

    def err(out: torch.Tensor) -> float:
        return float(torch.linalg.norm(out.double() - truth) / torch.linalg.norm(truth))

    s_exact = bool(torch.equal(s, want_s))
    y_err, torch_err = err(y), err(want_y)
    return {"n_rows": n_rows, "d_model": d_model, "s_exact": s_exact, "y_err": y_err, "torch_y_err": torch_err,
            "passed": s_exact and section3_judgement(y_err, torch_err).passed}


def add_layer_norm_bytes(n_rows: int, d_model: int, dtype: torch.dtype) -> int:
    """The fewest bytes fused add + LayerNorm moves: x and r read, s and y written, weight and bias read."""
    return (4 * n_rows + 2) * d_model * torch.finfo(dtype).bits // 8


def time_add_layer_norm(n_rows: int, d_model: int, dtype: torch.dtype, device: torch.device,
                        copy_gbps: float = float("nan"), **timing) -> dict:
    """The kernel and torch's add + layer_norm timed interleaved on one input: ms, GB/s, fraction of copy GB/s.

    GPU time from a cold L2, with the host's launch hidden (`host_hidden`): a Triton launch costs the host
    more than the flush takes the GPU, and would otherwise be timed as the kernel's."""
    x, r, weight, bias = random_inputs(n_rows, d_model, dtype, device)
    samples = time_interleaved({"torch": lambda: torch_add_layer_norm(x, r, weight, bias),
                                "triton": lambda: add_layer_norm(x, r, weight, bias, EPS)}, device,
                               host_hidden=True, **timing)
    nbytes = add_layer_norm_bytes(n_rows, d_model, dtype)
    record = {"n_rows": n_rows, "d_model": d_model, "mib": nbytes / 2**20}
    for name, ms in samples.items():
        t = Timing.from_samples(ms)
        gbps = nbytes / (t.median_ms * 1e-3) / 1e9
        record.update({f"{name}_ms": t.median_ms, f"{name}_p20_ms": t.p20_ms, f"{name}_p80_ms": t.p80_ms,
                       f"{name}_gbps": gbps, f"{name}_of_copy": gbps / copy_gbps})
    cmp = Comparison.from_samples(samples["torch"], samples["triton"])
    record.update(speedup=cmp.speedup, speedup_p20=cmp.p20, speedup_p80=cmp.p80, verdict=cmp.verdict)
    return record


def kernel_table(shapes: Sequence[tuple[int, int]], dtype: torch.dtype, device: torch.device,
                 copy_gbps: float = float("nan"), show_progress: bool = True, **timing) -> pd.DataFrame:
    """`time_add_layer_norm` for each (n_rows, d_model) in `shapes`: one row each."""
    progress = progress_bar(shapes, desc="add + LayerNorm", unit="shape", disable=not show_progress)
    return pd.DataFrame([time_add_layer_norm(m, n, dtype, device, copy_gbps, **timing) for m, n in progress])
