"""A Linear layer with its neighbours fused in: `y = residual + act(LayerNorm(a) @ Wᵀ + bias)`.

Around each GEMM of the layer torch runs extra passes over memory: LayerNorm before the QKV and fc1
GEMMs, GELU after fc1, the residual adds after out_proj and fc2. Each reads and writes a whole
activation and is one more kernel launch. This Triton GEMM folds them into its prologue and epilogue:

- prologue (`ln`): each program first reads its rows of `a` once for their mean and variance (fp32,
  shifted by the row's first element so that large means cancel no precision), then normalizes every
  tile of `a` as it loads it and rounds it to the input dtype — what `ln(a)` would have stored;
- epilogue: the fp32 accumulator gets the bias, then exact (erf) GELU (`gelu`) and/or the residual
  (`residual`), and is rounded once when stored.

So the layer runs in four GEMM kernels plus attention, where torch needs ten kernels. The results are
rounded less often than torch's (one rounding per GEMM instead of one per op), so they stay at least
as close to the float64 truth. fp32 inputs use exact fp32 products (no TF32). On the GPU the tile sizes
are autotuned per shape on the first call; with TRITON_INTERPRET=1 set before Triton is imported, the
kernel runs on CPU tensors through the Triton interpreter with one small tile (slowly: for tests).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import nn

from .add_layer_norm import DTYPES, INTERPRETED


def _configs() -> list[triton.Config]:
    """Tile sizes to try: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps), from small launch-bound GEMMs to big ones."""
    if INTERPRETED:
        return [triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 4})]
    tiles = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
             (64, 64, 64, 4, 4), (32, 64, 128, 3, 4),
             (64, 64, 32, 2, 4)]  # 16 KiB of shared memory: fits GPUs (a T4) where the others do not
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=s, num_warps=w)
            for m, n, k, s, w in tiles]


@triton.autotune(configs=_configs(), key=["M", "N", "K", "LN", "GELU", "RESIDUAL"])
@triton.jit
def _fused_linear_kernel(
    A,  # pointer to the input a, (M, K), unit column stride
    W,  # pointer to the Linear weight, (N, K), contiguous
    BIAS,  # pointer to the Linear bias, (N,)
    RES,  # pointer to the residual, (M, N), contiguous (unused without RESIDUAL)
    Y,  # pointer to the output, (M, N), contiguous
    LN_W, LN_B,  # pointers to the LayerNorm weight and bias, each (K,) (unused without LN)
    M, N, K,
    stride_am,  # elements between two rows of A
    eps,  # LayerNorm epsilon
    LN: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr,
    IEEE: tl.constexpr,  # fp32 operands: exact fp32 products rather than TF32
    UPCAST: tl.constexpr,  # multiply bf16 tiles as fp32 (exact): the Triton interpreter gets bf16 dots wrong
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # row tiles visited together, so the weight tiles they share stay in L2
):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_size
    pid_n = (pid % (GROUP_M * tiles_n)) // group_size

    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: offsets M·K may pass 2³¹
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_rows = A + rows[:, None] * stride_am  # (BLOCK_M, 1)
    row_ok = rows[:, None] < M

    if LN:  # row statistics, shifted by each row's first element: var = E[(a−c)²] − E[a−c]²
        shift = tl.load(A + rows * stride_am, mask=rows < M, other=0.0).to(tl.float32)  # (BLOCK_M,)
        total = tl.zeros((BLOCK_M,), dtype=tl.float32)
        total_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ok = row_ok & (k0 + ks[None, :] < K)
            a = tl.load(a_rows + k0 + ks[None, :], mask=ok, other=0.0).to(tl.float32)
            a = tl.where(ok, a - shift[:, None], 0.0)
            total += tl.sum(a, axis=1)
            total_sq += tl.sum(a * a, axis=1)
        shifted_mean = total / K
        mean = shift + shifted_mean
        rstd = 1 / tl.sqrt(tl.maximum(total_sq / K - shifted_mean * shifted_mean, 0.0) + eps)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = k0 + ks < K
        a = tl.load(a_rows + k0 + ks[None, :], mask=row_ok & k_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_K)
        if LN:
            g = tl.load(LN_W + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
            b = tl.load(LN_B + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
            a = ((a.to(tl.float32) - mean[:, None]) * rstd[:, None] * g[None, :] + b[None, :]).to(A.dtype.element_ty)
        w = tl.load(W + cols[None, :] * K + k0 + ks[:, None],
                    mask=(cols[None, :] < N) & k_ok[:, None], other=0.0)  # (BLOCK_K, BLOCK_N) = Wᵀ tile
        if UPCAST:
            a, w = a.to(tl.float32), w.to(tl.float32)
        if IEEE:
            acc = tl.dot(a, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)

    acc += tl.load(BIAS + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = 0.5 * acc * (1 + tl.math.erf(acc * 0.7071067811865476))
    out_ok = row_ok & (cols[None, :] < N)
    if RESIDUAL:
        acc += tl.load(RES + rows[:, None] * N + cols[None, :], mask=out_ok, other=0.0).to(tl.float32)
    tl.store(Y + rows[:, None] * N + cols[None, :], acc.to(Y.dtype.element_ty), mask=out_ok)


def _check_inputs(a: torch.Tensor, linear: nn.Linear, ln: nn.LayerNorm | None,
                  residual: torch.Tensor | None) -> None:
    weight = linear.weight
    if a.dtype not in DTYPES or weight.dtype != a.dtype:
        raise TypeError(f"the input and the Linear weight must share one of {', '.join(map(str, DTYPES))}, "
                        f"got {a.dtype} and {weight.dtype}")
    if a.dim() < 2 or a.shape[-1] != linear.in_features:
        raise ValueError(f"input of shape {tuple(a.shape)} does not fit a Linear of in_features={linear.in_features}")
    if linear.bias is None:
        raise ValueError("the Linear must have a bias (the reference layer's all do)")
    if ln is not None and (ln.weight is None or ln.bias is None
                           or tuple(ln.normalized_shape) != (linear.in_features,)):
        raise ValueError(f"the LayerNorm must be affine over the last {linear.in_features} elements")
    out_shape = (*a.shape[:-1], linear.out_features)
    if residual is not None and (tuple(residual.shape) != out_shape or residual.dtype != a.dtype):
        raise ValueError(f"the residual must be {a.dtype} of shape {out_shape}, "
                         f"got {residual.dtype} {tuple(residual.shape)}")
    if a.device.type != "cuda" and not INTERPRETED:
        raise ValueError(f"tensors on {a.device}: the Triton kernel needs CUDA tensors, or TRITON_INTERPRET=1 "
                         "set before Triton is imported to run it on the CPU through the interpreter")


def fused_linear(a: torch.Tensor, linear: nn.Linear, ln: nn.LayerNorm | None = None, gelu: bool = False,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
    """`residual + act(linear(ln(a)))` in one kernel; `ln`, GELU and `residual` each optional.

    a: (..., K) → (..., N) for a Linear K → N; residual, if given: (..., N).
    """
    _check_inputs(a, linear, ln, residual)
    K, N = linear.in_features, linear.out_features
    a_rows = a.reshape(-1, K)  # (M, K)
    if a_rows.stride(-1) != 1:
        a_rows = a_rows.contiguous()
    M = a_rows.shape[0]
    y = torch.empty((M, N), dtype=a.dtype, device=a.device)
    res = y if residual is None else residual.reshape(M, N).contiguous()  # (M, N); a placeholder when unused
    ln_weight, ln_bias = (ln.weight, ln.bias) if ln is not None else (linear.bias, linear.bias)
    upcast = INTERPRETED and a.dtype == torch.bfloat16
    if M > 0:
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        _fused_linear_kernel[grid](
            a_rows, linear.weight.contiguous(), linear.bias, res, y, ln_weight, ln_bias,
            M, N, K, a_rows.stride(0), ln.eps if ln is not None else 0.0,
            LN=ln is not None, GELU=gelu, RESIDUAL=residual is not None,
            IEEE=a.dtype == torch.float32 or upcast, UPCAST=upcast,
        )
    return y.view(*a.shape[:-1], N)
