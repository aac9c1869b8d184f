"""Fused residual add + LayerNorm: `s = x + r` and `y = LayerNorm(s)` in one pass over each row.

In a pre-LN decoder the residual stream is updated and at once normalized for the next sublayer:
`s = x + out_proj(attn)`, then `y = ln2(s)`. In torch that is two kernels: the add reads x and r and
writes s, then layer_norm reads s back and writes y — five row-sized memory passes and two launches.
Here a program loads rows of x and r once, writes s, and normalizes s while it is still in registers,
writing y — four passes and one launch. The residual stream needs s, so both come back.

s is rounded to the input dtype before it is normalized, so s is exactly what `x + r` gives and y is
LayerNorm of that s, as in the reference layer. The statistics are accumulated in fp32 whatever the
input dtype (fp16, bf16 or fp32):

    mean = Σ s / N,    var = Σ (s − mean)² / N,    y = (s − mean) / sqrt(var + eps) · weight + bias

Whole rows live in registers: the block is the next power of two ≥ N with the columns past N masked
off, narrow rows are stacked several to a program, and `kernel_settings` picks the block, the rows per
program and the warps, refusing rows too wide to hold. With TRITON_INTERPRET=1 set before Triton is
imported, the kernel runs on CPU tensors through the Triton interpreter (slowly: that is for tests).

Two options serve the `residual_addmm` rung: without a residual the kernel is a plain LayerNorm of x;
with a `shift` vector the s it stores is `s + shift` (the next GEMM's bias, added in the same pass), so
that GEMM can add its product onto s in place instead of a separate residual add.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import INTERPRETED, pdl_launch, pdl_prologue, pdl_reason

MAX_BLOCK_SIZE = 32768  # widest row (in elements) one program holds in registers
TILE_ELEMENTS = 4096  # narrower rows are stacked into one program up to this many elements
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _add_layer_norm_fwd_kernel(
    X,  # pointer to the input x, (M, N)
    R,  # pointer to the residual r, (M, N) (unused without HAS_RESIDUAL)
    SHIFT,  # pointer to the shift added to the stored s, (N,) (unused without HAS_SHIFT)
    S,  # pointer to the output s = x + r (+ shift), (M, N), contiguous
    Y,  # pointer to the output y = LayerNorm(x + r), (M, N), contiguous
    W,  # pointer to the LayerNorm weight, (N,)
    B,  # pointer to the LayerNorm bias, (N,)
    stride_x,  # elements between two rows of X
    stride_r,  # elements between two rows of R
    M,  # number of rows
    N,  # number of columns (d_model)
    eps,  # added to the variance, for numerical stability
    HAS_RESIDUAL: tl.constexpr,  # False: s = x (a plain LayerNorm that also writes x + shift)
    HAS_SHIFT: tl.constexpr,  # True: the stored s is (x + r) + shift, rounded once more
    BLOCK_SIZE: tl.constexpr,  # power of two ≥ N: a whole row
    ROWS_PER_PROGRAM: tl.constexpr,  # power of two: rows one program normalizes side by side
    PDL: tl.constexpr,  # launched with programmatic dependent launch (`kernels.launch`)
):
    pdl_prologue(PDL)
    first_row = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM  # int64: offsets M·N may pass 2³¹
    rows = first_row + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = (rows[:, None] < M) & (cols[None, :] < N)  # (ROWS_PER_PROGRAM, BLOCK_SIZE)
    s = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(R + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        s = (s.to(tl.float32) + r).to(S.dtype.element_ty)  # rounded as `x + r` is: the residual stream
    s = s.to(tl.float32)
    s_out = s
    if HAS_SHIFT:
        s_out = s + tl.load(SHIFT + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    tl.store(S + rows[:, None] * N + cols[None, :], s_out.to(S.dtype.element_ty), mask=mask)
    mean = tl.sum(s, axis=1) / N  # (ROWS_PER_PROGRAM,)
    centered = tl.where(mask, s - mean[:, None], 0.0)
    var = tl.sum(centered * centered, axis=1) / N
    rstd = 1 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=cols < N).to(tl.float32)
    b = tl.load(B + cols, mask=cols < N).to(tl.float32)
    y = centered * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


def kernel_settings(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_SIZE, ROWS_PER_PROGRAM, num_warps) for rows of `n_cols` elements.

    A program holds whole rows, and narrow rows are stacked until it holds about TILE_ELEMENTS; the
    warps grow with the tile, about 16 elements per thread.
    """
    block_size = triton.next_power_of_2(n_cols)
    if block_size > MAX_BLOCK_SIZE:
        raise ValueError(f"rows of {n_cols} elements are too wide for the fused add + LayerNorm kernel "
                         f"(at most {MAX_BLOCK_SIZE})")
    rows_per_program = max(1, TILE_ELEMENTS // block_size)
    num_warps = min(max(rows_per_program * block_size // (32 * 16), 4), 32)
    return block_size, rows_per_program, num_warps


def _check_inputs(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor,
                  shift: torch.Tensor | None) -> None:
    if residual is not None and x.shape != residual.shape:
        raise ValueError(f"x and residual must have the same shape, got {tuple(x.shape)} and {tuple(residual.shape)}")
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last dimension, got shape {tuple(x.shape)}")
    if x.dtype not in DTYPES or (residual is not None and residual.dtype != x.dtype):
        raise TypeError(f"x and residual must share one of {', '.join(map(str, DTYPES))}, "
                        f"got {x.dtype} and {None if residual is None else residual.dtype}")
    N = x.shape[-1]
    vectors = {"weight": weight, "bias": bias} | ({} if shift is None else {"shift": shift})
    for name, t in vectors.items():
        if t.shape != (N,) or not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating-point ({N},) tensor, got {t.dtype} {tuple(t.shape)}")
    devices = {t.device for t in (x, residual, *vectors.values()) if t is not None}
    if len(devices) > 1:
        raise ValueError(f"x, residual, weight, bias and shift must be on one device, got {sorted(map(str, devices))}")
    if x.device.type != "cuda" and not INTERPRETED:
        raise ValueError(f"tensors on {x.device}: the Triton kernel needs CUDA tensors, or TRITON_INTERPRET=1 "
                         "set before Triton is imported to run it on the CPU through the interpreter")


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` viewed as (M, N) rows with unit column stride (copied only when it has none)."""
    rows = t.reshape(-1, t.shape[-1])  # (M, N)
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def add_layer_norm_fwd(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor,
                       eps: float, shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the inputs, allocate s and y, pick the block size, rows per program and warps, and launch (with
    programmatic dependent launch where `kernels.launch.pdl_reason` allows)."""
    _check_inputs(x, residual, weight, bias, shift)
    x_rows = _as_rows(x)  # (M, N)
    r_rows = x_rows if residual is None else _as_rows(residual)  # (M, N); not read without a residual
    M, N = x_rows.shape
    BLOCK_SIZE, ROWS_PER_PROGRAM, num_warps = kernel_settings(N)
    s = torch.empty((M, N), dtype=x.dtype, device=x.device)
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    pdl = pdl_reason(x.device) is None
    if M > 0:
        _add_layer_norm_fwd_kernel[(triton.cdiv(M, ROWS_PER_PROGRAM),)](
            x_rows, r_rows, bias if shift is None else shift.contiguous(), s, y, weight.contiguous(),
            bias.contiguous(), x_rows.stride(0), r_rows.stride(0), M, N, eps,
            HAS_RESIDUAL=residual is not None, HAS_SHIFT=shift is not None,
            BLOCK_SIZE=BLOCK_SIZE, ROWS_PER_PROGRAM=ROWS_PER_PROGRAM, PDL=pdl, num_warps=num_warps,
            **pdl_launch(pdl),
        )
    return s.view(x.shape), y.view(x.shape)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor,
                   eps: float = 1e-5, shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, y) with `s = x + residual` and `y = F.layer_norm(s, (N,), weight, bias, eps)`, in one kernel.

    `residual=None` normalizes x itself (s = x). With a `shift` of shape (N,), the s returned is
    `(x + residual) + shift` instead (y is unchanged): the residual stream with the bias of the GEMM
    that will add into it already in, so that GEMM can accumulate onto s in place (`addmm_`).
    """
    return add_layer_norm_fwd(x, residual, weight, bias, eps, shift)
