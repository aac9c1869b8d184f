"""A CUDA-core GEMV for a GEMM of one row, `residual + act(LayerNorm(a) @ Wᵀ + bias)`: what `fused_linear` runs at
M = 1 (a decode step of one sequence), the same function without tensor cores.

At M = 1 a tensor-core tile of BLOCK_M = 16 rows multiplies 15 rows of zeros, and a GEMM of N columns in tiles of
BLOCK_N = 16 has only N/16 programs, each walking K in steps: fused_linear's GEMV tiles read a B = 1 step's weights
at 0.14–1.35 TB/s where a copy reaches 4.2 on an H200 (results/decode/decode_gemv_9da3684-gemv.log). Here a program
takes one row m of `a` and BLOCK_N whole rows of W (N, K), contiguous along K, with BLOCK_K = K rounded up to a power
of two and no K loop, and reduces them against the row on the CUDA cores: N/BLOCK_N programs per row of `a` (1,536
for fc1 at d_model 768 with BLOCK_N = 2), so a weight of a few MB is read by hundreds of programs at once. Each
issues its load of W first, so that it is in flight while the row of `a` is read and normalized. The LayerNorm takes
two passes over the row held in registers, in fp32; products and sums are fp32 too (fp32 inputs get exact products,
as in fused_linear: no TF32), and the epilogue is fused_linear's (`kernels.epilogue`).

The block, BLOCK_N and warps (`gemv_block`), is the one measured fastest or close behind on an H100
(results/README.md, "A CUDA-core GEMV for a decode step's projections"): with each projection's fastest block a B = 1
layer's four projections took 11.8 µs at d_model 512 and 18.2 µs at 1,024, against 18.0 and 26.7 in fused_linear's
tensor-core tiles; BLOCK_N = 2 with 4 warps was the fastest or close behind everywhere but fc2 (K = 4·d_model), where
one row of W per program was. The block of W sits in registers, BLOCK_N × BLOCK_K elements over num_warps × 32
threads: at K = 4096 (fc2 at d_model 1024) ptxas for sm_90 fits 8/w4 and 16/w8 in registers and spills 32/w8, and
`gemv_block`'s blocks spill nothing up to the suite's widest layer (d_model 2,048: 73 registers with LayerNorm at K =
2,048, 146 at fc2's K = 8,192). At B = 16 rows the GEMV was 2.4× slower than the tiles (it reads W once per row of
`a`), so fused_linear runs it at one row only.

Launched with programmatic dependent launch (`pdl`), it waits for the kernel before it first thing, as the
tensor-core kernel does (`kernels.launch`). It uses no tensor cores, so it runs on a T4 (compute capability 7.5) as
on newer GPUs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import nn

from .epilogue import epilogue
from .launch import INTERPRETED, fitting, pdl_launch, pdl_prologue

LONG_K = 2048  # from this K on a program takes one row of W, below it two (`gemv_block`)
MAX_K = 8192  # the widest row compiled and checked for spills (fc2 at d_model 2,048): wider K takes the tiles
INTERPRETED_BLOCK = (128, 4)  # the interpreter's block: it runs the programs one after another, milliseconds each


def gemv_block(K: int) -> tuple[int, int]:
    """(BLOCK_N, warps) of `fused_linear`'s GEMV for K columns, the one place it is chosen: on a GPU the block
    measured fastest (module docstring), one row of W per program from LONG_K on, else two, in 4 warps; under the
    Triton interpreter INTERPRETED_BLOCK, whose few programs keep the CPU tests' decode steps quick. Measured at
    d_model 512 and 1,024, where only fc2 reaches LONG_K; at d_model 2,048 every projection does, unmeasured."""
    if INTERPRETED:
        return INTERPRETED_BLOCK
    return (1 if K >= LONG_K else 2), 4


def gemv_label(block: tuple[int, int]) -> str:
    """"gemv BLOCK_N/wWARPS": how a block reads in a benchmark's table and in `fused_linear.last_tile`."""
    return f"gemv {block[0]}/w{block[1]}"


@triton.jit
def _gemv_kernel(
    A,  # pointer to the input a, (M, K), unit column stride
    W,  # pointer to the Linear weight, (N, K), contiguous
    BIAS,  # pointer to the Linear bias, (N,)
    RES,  # pointer to the residual, (M, N), contiguous (unused without RESIDUAL)
    Y,  # pointer to the output, (M, N), contiguous
    LN_W, LN_B,  # pointers to the LayerNorm weight and bias, each (K,) (unused without LN)
    N, K,
    stride_am,  # elements between two rows of A
    eps,  # LayerNorm epsilon
    LN: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr,
    BLOCK_N: tl.constexpr,  # rows of W, output columns, per program
    BLOCK_K: tl.constexpr,  # K rounded up to a power of two: the whole row at once, no K loop
    PDL: tl.constexpr,  # launched with programmatic dependent launch: wait for the kernel before first
):
    """Program (j, m): Y[m, j·BLOCK_N …] for row m of A and rows j·BLOCK_N … of W."""
    pdl_prologue(PDL)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) output columns = rows of W
    rows = tl.program_id(1) + tl.zeros((1,), dtype=tl.int32)  # (1,) the row m of A and Y
    ks = tl.arange(0, BLOCK_K)
    k_ok = ks < K
    w = tl.load(W + cols[:, None] * K + ks[None, :], mask=(cols[:, None] < N) & k_ok[None, :],
                other=0.0)  # (BLOCK_N, BLOCK_K), issued first: in flight while the row of a is read
    a = tl.load(A + rows[:, None] * stride_am + ks[None, :], mask=k_ok[None, :], other=0.0)  # (1, BLOCK_K)
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


def gemv_linear(a: torch.Tensor, linear: nn.Linear, ln: nn.LayerNorm | None, gelu: bool,
                residual: torch.Tensor | None, block: tuple[int, int], pdl: bool = False) -> torch.Tensor:
    """`residual + act(linear(ln(a)))` on the CUDA cores in `block` (BLOCK_N, warps; `gemv_block`'s for fused_linear,
    any power of two from 1 and warps for a benchmark): a (M, K) with unit column stride → (M, N); residual (M, N) or
    None; `ln` None: no LayerNorm. The inputs as `fused_linear` has checked them; `pdl`: launched with programmatic
    dependent launch (the caller asks `kernels.launch.pdl_reason`)."""
    (M, K), N = a.shape, linear.out_features
    y = torch.empty((M, N), dtype=a.dtype, device=a.device)
    res = y if residual is None else residual.contiguous()  # a placeholder when unused
    ln_weight, ln_bias = (linear.bias, linear.bias) if ln is None else (ln.weight, ln.bias)  # placeholders likewise
    block_n, warps = block
    with fitting(gemv_label(block)):
        _gemv_kernel[(triton.cdiv(N, block_n), M)](
            a, linear.weight.contiguous(), linear.bias, res, y, ln_weight, ln_bias, N, K, a.stride(0),
            0.0 if ln is None else ln.eps, LN=ln is not None, GELU=gelu, RESIDUAL=residual is not None,
            BLOCK_N=block_n, BLOCK_K=triton.next_power_of_2(K), PDL=pdl,
            **({} if INTERPRETED else {"num_warps": warps}), **pdl_launch(pdl))
    return y
