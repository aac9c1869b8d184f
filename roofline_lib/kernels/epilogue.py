"""A Linear layer's epilogue inside a Triton kernel: bias, exact (erf) GELU and the residual added to the fp32
accumulator, rounded once as it is stored. Every kernel that computes `residual + act(x @ Wᵀ + bias)` ends in it:
`fused_linear`'s tensor-core tiles, the CUDA-core `gemv` of a decode step's one row, and `whole_layer`'s GEMM
phases; so they round alike.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def epilogue(acc, BIAS, RES, Y, rows, cols, row_ok, N, GELU: tl.constexpr, RESIDUAL: tl.constexpr):
    """Bias, then exact GELU and/or the residual on the fp32 tile `acc` (rows, cols), rounded once as it is stored
    into Y (M, N); RES (M, N) and BIAS (N,) likewise contiguous; `row_ok` (rows, 1): the rows that exist."""
    acc += tl.load(BIAS + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = 0.5 * acc * (1 + tl.math.erf(acc * 0.7071067811865476))
    out_ok = row_ok & (cols[None, :] < N)
    if RESIDUAL:
        acc += tl.load(RES + rows[:, None] * N + cols[None, :], mask=out_ok, other=0.0).to(tl.float32)
    tl.store(Y + rows[:, None] * N + cols[None, :], acc.to(Y.dtype.element_ty), mask=out_ok)
