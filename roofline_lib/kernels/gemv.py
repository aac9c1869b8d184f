"""A CUDA-core GEMV for a decode step's projections, `residual + act(LayerNorm(a) @ Wᵀ + bias)`: the same function as
`roofline_lib.kernels.fused_linear.fused_linear`, without tensor cores, timed by `benchmarks.decode_gemv --gemv`.

At M = B = 1 a tensor-core tile of BLOCK_M = 16 rows multiplies 15 rows of zeros, and a GEMM of N columns in tiles
of BLOCK_N = 16 has only N/16 programs, each walking K in steps: fused_linear's GEMV tiles read a B = 1 step's weights
at 0.14–1.35 TB/s where a copy reaches 4.2 on an H200 (results/decode/decode_gemv_9da3684-gemv.log). Here a program
takes one row m of `a` and BLOCK_N whole rows of W (N, K), contiguous along K, with BLOCK_K = K rounded up to a power
of two and no K loop, and reduces them against the row on the CUDA cores: N/BLOCK_N programs per row of `a` (768 for
fc1 at d_model 768 with BLOCK_N = 4), so a weight of a few MB is read by hundreds of programs at once. Each issues
its load of W first, so that it is in flight while the row of `a` is read and normalized. The epilogue (bias, exact
GELU, residual, one rounding) is fused_linear's own. The block of W sits in registers, BLOCK_N × BLOCK_K elements
over num_warps × 32 threads: at K = 4096 (fc2 at d_model 1024) ptxas for sm_90 fits 8/w4 and 16/w8 in registers
and spills 32/w8.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import nn

from .add_layer_norm import DTYPES
from .epilogue import epilogue
from .launch import INTERPRETED, fitting


@triton.jit
def _gemv_kernel(A, W, BIAS, RES, Y, LN_W, LN_B, N, K, stride_am, eps, LN: tl.constexpr, GELU: tl.constexpr,
                 RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (j, m): Y[m, j·BLOCK_N …] for row m of A (M, K) and rows j·BLOCK_N … of W (N, K)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) output columns = rows of W
    rows = tl.program_id(1) + tl.zeros((1,), dtype=tl.int32)  # (1,) the row m of A and Y
    ks = tl.arange(0, BLOCK_K)
    k_ok = ks < K
    w = tl.load(W + cols[:, None] * K + ks[None, :], mask=(cols[:, None] < N) & k_ok[None, :], other=0.0)  # (N_, K_)
    a = tl.load(A + rows * stride_am + ks[None, :], mask=k_ok[None, :], other=0.0)  # (1, BLOCK_K)
    x = a.to(tl.float32)
    if LN:  # two passes in fp32, then rounded as LayerNorm(a) would have been stored
        mean = tl.sum(x, axis=1) / K  # (1,)
        diff = tl.where(k_ok[None, :], x - mean[:, None], 0.0)
        rstd = 1 / tl.sqrt(tl.sum(diff * diff, axis=1) / K + eps)
        g = tl.load(LN_W + ks, mask=k_ok, other=0.0).to(tl.float32)
        b = tl.load(LN_B + ks, mask=k_ok, other=0.0).to(tl.float32)
        x = (diff * rstd[:, None] * g[None, :] + b[None, :]).to(a.dtype).to(tl.float32)
    acc = tl.sum(w.to(tl.float32) * x, axis=1)[None, :]  # (1, BLOCK_N): fp32 products, no tensor cores
    epilogue(acc, BIAS, RES, Y, rows, cols, rows[:, None] >= 0, N, GELU, RESIDUAL)


def gemv_linear(a: torch.Tensor, linear: nn.Linear, ln: nn.LayerNorm | None = None, gelu: bool = False,
                residual: torch.Tensor | None = None, block_n: int = 4, num_warps: int = 4) -> torch.Tensor:
    """`residual + act(linear(ln(a)))` as `fused_linear` computes it. a: (M, K) → (M, N); residual: (M, N)."""
    weight, bias = linear.weight, linear.bias
    if a.dim() != 2 or a.shape[1] != weight.shape[1]:
        raise ValueError(f"input of shape {tuple(a.shape)} is not (M, K) for a weight of shape {tuple(weight.shape)}")
    tensors = [weight, bias] + ([] if ln is None else [ln.weight, ln.bias]) + ([] if residual is None else [residual])
    if a.dtype not in DTYPES or any(t is None or t.dtype != a.dtype or t.device != a.device for t in tensors):
        raise ValueError(f"a, the Linear (with its bias), LayerNorm and residual must share one device and one of "
                         f"{', '.join(map(str, DTYPES))}")
    if not weight.is_contiguous():
        raise ValueError("the Linear's weight must be contiguous (N, K)")
    (M, K), N = a.shape, weight.shape[0]
    if ln is not None and tuple(ln.normalized_shape) != (K,):
        raise ValueError(f"the LayerNorm must be over the last {K} elements, got {tuple(ln.normalized_shape)}")
    if residual is not None and tuple(residual.shape) != (M, N):
        raise ValueError(f"the residual must be of shape {(M, N)}, got {tuple(residual.shape)}")
    if a.device.type != "cuda" and not INTERPRETED:
        raise ValueError(f"tensors on {a.device}: the kernel needs CUDA tensors, or TRITON_INTERPRET=1")
    a = a if a.stride(1) == 1 else a.contiguous()
    y = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0:
        return y
    res = y if residual is None else residual.contiguous()  # a placeholder when unused
    ln_w, ln_b = (bias, bias) if ln is None else (ln.weight, ln.bias)  # placeholders when unused
    with fitting(f"gemv {block_n}/w{num_warps}"):
        _gemv_kernel[(triton.cdiv(N, block_n), M)](
            a, weight, bias, res, y, ln_w, ln_b, N, K, a.stride(0), 0.0 if ln is None else ln.eps,
            LN=ln is not None, GELU=gelu, RESIDUAL=residual is not None, BLOCK_N=block_n,
            BLOCK_K=triton.next_power_of_2(K), **({} if INTERPRETED else {"num_warps": num_warps}))
    return y
