"""A decode step's whole MLP for one row, `s + fc2(GELU(fc1(LayerNorm(s))))`, in one CUDA-core kernel: what
`FusedSplitKVDecoder` runs at B = 1 in place of fused_linear's two GEMVs (fc1 with LayerNorm and GELU, fc2 with the
residual), one launch fewer per layer.

At B = 1 those two GEMVs are latency-bound: on an H100 each took about 3 µs for weights that stream in 0.2–0.7 µs
(results/README.md, "A CUDA-core GEMV for a decode step's projections"). Here program j takes BLOCK_H hidden units:
it normalizes the row (two passes in fp32, rounded as LayerNorm's output is stored), computes its BLOCK_H values of
GELU(fc1) from BLOCK_H whole rows of W1 (rounded as fc1's output is stored), and multiplies them by the matching
BLOCK_H columns of W2: a partial fc2 of all D outputs. The partials are added one of two ways (`REDUCES`):

- "atomic": into one fp32 row with atomics; the last program reads D values, but the order of the additions, so
  the last bit, can change from call to call;
- "ordered": each stored apart and summed in program order by the last program to arrive: the same bits every
  call, but that program reads P × D fp32 partials alone.

The last program ends in fused_linear's epilogue (fc2's bias and the residual, one rounding, `kernels.epilogue`)
and resets the count and the row for the next call, so a CUDA graph replays the same buffers (`MlpScratch`).
Launched with programmatic dependent launch (`pdl`), it waits for the kernel before it first thing, as the GEMV
does. No tensor cores: it runs on a T4 (compute capability 7.5) as on newer GPUs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import nn

from .epilogue import epilogue
from .launch import INTERPRETED, fitting, pdl_launch, pdl_prologue

REDUCES = ("atomic", "ordered")
MAX_D = 1024  # the widest row compiled and checked: a block holds BLOCK_H whole rows of W1 and columns of W2
INTERPRETED_BLOCK = (64, 4)  # the interpreter runs programs one after another: few and wide keep tests quick


def mlp_block(D: int) -> tuple[int, int]:
    """(BLOCK_H, warps) for a row of D: on a GPU 8 hidden units in 4 warps (2·8·D elements of W a program, in
    registers), under the Triton interpreter INTERPRETED_BLOCK."""
    return INTERPRETED_BLOCK if INTERPRETED else (8, 4)


@triton.jit
def _mlp_kernel(
    S,  # pointer to the MLP's input row s, (D,): LayerNorm's input and the residual
    W1, B1,  # fc1: (H, D) contiguous, (H,)
    W2, B2,  # fc2: (D, H) contiguous, (D,)
    LN_W, LN_B,  # LayerNorm's weight and bias, (D,)
    PARTIAL,  # fp32: (P, D) partials ("ordered") or one (D,) row, zero between calls ("atomic")
    COUNT,  # int32 arrival count, 0 between calls
    Y,  # pointer to the output, (D,)
    D, H, eps,
    P: tl.constexpr,  # programs: cdiv(H, BLOCK_H)
    ATOMIC: tl.constexpr,  # the partials added with atomics, else stored apart and summed in order
    BLOCK_H: tl.constexpr,  # hidden units per program
    BLOCK_D: tl.constexpr,  # D rounded up to a power of two: the whole row at once
    PDL: tl.constexpr,  # launched with programmatic dependent launch: wait for the kernel before first
):
    pdl_prologue(PDL)
    j = tl.program_id(0)
    hs = j * BLOCK_H + tl.arange(0, BLOCK_H)  # (BLOCK_H,) this program's hidden units
    ds = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    h_ok, d_ok = hs < H, ds < D
    w1 = tl.load(W1 + hs[:, None] * D + ds[None, :], mask=h_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_H, D)
    w2 = tl.load(W2 + ds[:, None] * H + hs[None, :], mask=d_ok[:, None] & h_ok[None, :], other=0.0)  # (D, BLOCK_H)
    s = tl.load(S + ds, mask=d_ok, other=0.0)
    x = s.to(tl.float32)
    mean = tl.sum(x, axis=0) / D
    diff = tl.where(d_ok, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(diff * diff, axis=0) / D + eps)
    g = tl.load(LN_W + ds, mask=d_ok, other=0.0).to(tl.float32)
    b = tl.load(LN_B + ds, mask=d_ok, other=0.0).to(tl.float32)
    xn = (diff * rstd * g + b).to(s.dtype).to(tl.float32)  # rounded as LayerNorm's output is stored
    h = tl.sum(w1.to(tl.float32) * xn[None, :], axis=1) + tl.load(B1 + hs, mask=h_ok, other=0.0).to(tl.float32)
    h = 0.5 * h * (1 + tl.math.erf(h * 0.7071067811865476))
    h = tl.where(h_ok, h.to(s.dtype).to(tl.float32), 0.0)  # rounded as fc1's output is stored
    part = tl.sum(w2.to(tl.float32) * h[None, :], axis=1)  # (BLOCK_D,) this program's share of fc2
    if ATOMIC:
        tl.atomic_add(PARTIAL + ds, part, mask=d_ok, sem="relaxed")
    else:
        tl.store(PARTIAL + j * D + ds, part, mask=d_ok)
    tl.debug_barrier()  # every thread's partial in memory before the count says so
    if tl.atomic_add(COUNT, 1, sem="acq_rel") == P - 1:  # the last program to arrive: sum, epilogue, reset
        if ATOMIC:
            acc = tl.load(PARTIAL + ds, mask=d_ok, other=0.0, cache_modifier=".cg")
            tl.store(PARTIAL + ds, tl.zeros((BLOCK_D,), dtype=tl.float32), mask=d_ok)
        else:
            acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
            for p in range(P):  # in program order: the same sum every call
                acc += tl.load(PARTIAL + p * D + ds, mask=d_ok, other=0.0, cache_modifier=".cg")
        tl.store(COUNT, 0)
        rows = tl.zeros((1,), dtype=tl.int32)
        epilogue(acc[None, :], B2, S, Y, rows, ds, rows[:, None] >= 0, D, False, True)


class MlpScratch:
    """The kernel's fp32 partials and arrival count for one (D, H, block, reduce), zero between calls: made once,
    so that a CUDA graph replays the same buffers."""

    def __init__(self, D: int, H: int, block_h: int, reduce: str, device: torch.device):
        if reduce not in REDUCES:
            raise ValueError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
        self.D, self.block_h, self.reduce = D, block_h, reduce
        self.programs = triton.cdiv(H, block_h)
        self.partial = torch.zeros((1 if reduce == "atomic" else self.programs) * D, dtype=torch.float32,
                                   device=device)
        self.count = torch.zeros(1, dtype=torch.int32, device=device)


def mlp_gemv(s: torch.Tensor, ln: nn.LayerNorm, fc1: nn.Linear, fc2: nn.Linear, scratch: MlpScratch,
             warps: int = 4, pdl: bool = False) -> torch.Tensor:
    """`s + fc2(GELU(fc1(ln(s))))` for one row s (D,) → (D,), in one launch of `scratch.programs` programs of
    `warps` warps, adding the partials as `scratch.reduce` says; `pdl`: launched with programmatic dependent launch
    (the caller asks `kernels.launch.pdl_reason`)."""
    if s.dim() != 1 or s.shape[0] != scratch.D:
        raise ValueError(f"mlp_gemv takes one row, shape ({scratch.D},), got {tuple(s.shape)}")
    (D,), H = s.shape, fc1.out_features
    y = torch.empty_like(s)
    with fitting(f"mlp {scratch.block_h}/w{warps} {scratch.reduce}"):
        _mlp_kernel[(scratch.programs,)](
            s.contiguous(), fc1.weight.contiguous(), fc1.bias, fc2.weight.contiguous(), fc2.bias, ln.weight, ln.bias,
            scratch.partial, scratch.count, y, D, H, ln.eps, P=scratch.programs, ATOMIC=scratch.reduce == "atomic",
            BLOCK_H=scratch.block_h, BLOCK_D=triton.next_power_of_2(D), PDL=pdl,
            **({} if INTERPRETED else {"num_warps": warps}), **pdl_launch(pdl))
    return y
