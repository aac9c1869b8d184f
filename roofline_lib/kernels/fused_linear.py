"""A Linear layer with its neighbours fused in: `y = residual + act(LayerNorm(a) @ Wᵀ + bias)`.

Around each GEMM of the layer torch runs extra passes over memory: LayerNorm before the QKV and fc1
GEMMs, GELU after fc1, the residual adds after out_proj and fc2. Each reads and writes a whole
activation and is one more kernel launch. This Triton GEMM folds them into its prologue and epilogue:

- prologue (`ln`): each program first reads its rows of `a` once for their mean and variance (fp32,
  shifted by the row's first element so that large means cancel no precision; a short loop of wide steps,
  unrolled where it has few, so that a decode step's one row waits on memory once), then normalizes every
  tile of `a` as it loads it and rounds it to the input dtype — what `ln(a)` would have stored;
- epilogue: the fp32 accumulator gets the bias, then exact (erf) GELU (`gelu`) and/or the residual
  (`residual`), and is rounded once when stored.

So the layer runs in four GEMM kernels plus attention, where torch needs ten kernels. The results are
rounded less often than torch's (one rounding per GEMM instead of one per op), so they stay at least
as close to the float64 truth. fp32 inputs use exact fp32 products (no TF32).

On the short rows a GEMM has few output tiles (M = 128 tokens gives fc2 16 tiles of 64 × 64 on a GPU of
132 SMs), each walking a long K loop alone: the kernel's time is that loop's latency. Split-K cuts K into
SPLIT_K slices run by separate programs; each stores its fp32 partial sum, and the last of a tile's
programs to finish (an atomic count per tile, reset by that program for the next call) adds the partials
in a fixed order and applies the epilogue. So it stays one kernel, deterministic, with no memset before
it. Split-K configurations are tried only for small outputs (`SPLIT_OUTPUTS`). The counts belong to the
stream a call is launched on (a graph keeps those of the stream it was captured on), and are never freed:
replay a graph on one stream at a time, not beside another graph captured on the same stream.

Where `kernels.launch.pdl_reason` allows (a decode step asks, `pdl`), the GEMM is launched with programmatic
dependent launch: it may start while the kernel before it still runs.

A GEMM of one row (M = 1: a decode step of one sequence), K up to `gemv.MAX_K`, runs `kernels.gemv` instead, a
CUDA-core GEMV, on the GPU (a T4 included: it needs no tensor cores) and in the interpreter alike. A tile of
BLOCK_M = 16 rows would multiply 15 rows of zeros, and the GEMV's programs, a few whole rows of W each, stream the
weight many more at once: on an H100 it took a third off a B = 1 layer's four projections (results/README.md). From
two rows on the tiles stay (at 16 rows the GEMV was 2.4× slower), as they do where a tile or split is forced,
`gemv=False` (A/B measurements) or K is wider than the GEMV was compiled and checked for.

On the GPU the tile sizes and the split are autotuned per shape on the first call, among the tiles that fit
its shared memory (before compute capability 8.0, a T4, one fixed tile instead: tuning cost minutes there); with
TRITON_INTERPRET=1 set before Triton is imported, the kernel runs on CPU tensors through the Triton
interpreter with one small tile (slowly: for tests). At a decode step's few rows (at most GEMV_ROWS) the autotuner
also tries GEMV tiles: narrow columns and long K steps, so that more programs than the GPU has SMs stream the
weight. A test can force a split (`split_k`), with one fixed tile; a benchmark a whole tile (`tile`).
"""
from __future__ import annotations

import re

import torch
import triton
import triton.language as tl
from torch import nn

from ..core.device import capability
from .add_layer_norm import DTYPES
from .epilogue import epilogue
from .gemv import MAX_K, gemv_block, gemv_label, gemv_linear
from .launch import INTERPRETED, fitting, pdl_prologue, pdl_reason, shared_memory_limit

SPLIT_OUTPUTS = 1 << 19  # outputs (M·N) up to which split-K is tried: 128 tiles of 64 × 64 fill a GPU already
MAX_SPLIT_K = 8  # most K slices per output tile (its fp32 partials: MAX_SPLIT_K · M · N · 4 bytes at most)
INTERPRETED_TILE = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 4}  # the interpreter's one tile
T4_TILE = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SPLIT_K": 1}  # before capability 8.0
FORCED_TILE = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}  # a test's forced split, on a GPU
GEMV_ROWS = 16  # a GEMM of at most this many rows (a decode step's M = B) also tries the GEMV tiles
STATS_ELEMENTS = tl.constexpr(4096)  # a LayerNorm prologue's step: BLOCK_M rows × this // BLOCK_M columns (the
# one-row GEMV of a decode step reads its 1,024 columns in four steps, not sixteen of BLOCK_K = 64)


MAX_STATS_STEPS = tl.constexpr(8)  # a prologue's statistics loop of at most this many steps is unrolled: all its
# loads in flight at once, one wait instead of one a step (a decode step's K = d_model at 16 rows: 4 steps)


def stats_step(block_m: int) -> int:
    """Columns `row_stats` reads a step for a tile of `block_m` rows (its loop's step, on the host)."""
    return STATS_ELEMENTS.value // block_m


GEMV_TILES = [(16, 16, 256, 4, 4, 1), (16, 16, 512, 3, 4, 1), (16, 32, 256, 4, 4, 1), (16, 16, 256, 4, 4, 2),
              (16, 16, 256, 4, 4, 4), (16, 32, 256, 3, 4, 4), (16, 16, 128, 4, 4, 4)]
# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, SPLIT_K) for GEMMs of at most GEMV_ROWS rows: narrow columns, so that a
# weight of a few MB is streamed by more programs than the GPU has SMs, each with long K steps in flight


def _configs() -> list[triton.Config]:
    """Tile sizes to try: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, SPLIT_K), from small launch-bound GEMMs
    to big ones, then the GEMV tiles (`_prune` keeps those for a few rows only)."""
    if INTERPRETED:
        return [triton.Config(INTERPRETED_TILE | {"SPLIT_K": 1})]
    tiles = [(128, 256, 64, 3, 8, 1), (128, 128, 64, 4, 8, 1), (64, 128, 64, 4, 4, 1), (128, 64, 64, 4, 4, 1),
             (64, 64, 64, 4, 4, 1), (32, 64, 128, 3, 4, 1),
             (64, 64, 32, 2, 4, 1),  # 16 KiB of shared memory: fits GPUs (a T4) where the others do not
             (16, 64, 128, 3, 4, 1),  # small M: more programs per row of tiles
             (16, 64, 128, 3, 4, 4), (32, 64, 64, 4, 4, 4), (32, 64, 64, 4, 4, 8),  # split-K: few tiles, long K
             (16, 64, 64, 4, 4, 4), (16, 32, 64, 4, 4, 8), (16, 32, 128, 3, 4, 8)]  # a decode step's M = B: GEMVs
    # that need hundreds of programs to stream their weights at the memory's bandwidth
    return [_tile(*tile) for tile in tiles + GEMV_TILES]


def _tile(m: int, n: int, k: int, stages: int, warps: int, split: int) -> triton.Config:
    """One tile as the kernel takes it: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, SPLIT_K), GROUP_M 8."""
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8, "SPLIT_K": split},
                         num_stages=stages, num_warps=warps)


def gemv_tile(config: triton.Config) -> bool:
    """Whether a tile is one of the GEMV tiles, tried only for GEMMs of at most GEMV_ROWS rows."""
    block = config.kwargs
    return (block["BLOCK_M"], block["BLOCK_N"], block["BLOCK_K"], config.num_stages, config.num_warps,
            block["SPLIT_K"]) in GEMV_TILES


def parse_tile(label: str) -> triton.Config:
    """A tile written as `last_tile` writes it, "MxNxK/SPLIT_K/wWARPSsSTAGES" (e.g. "16x16x256/1/w4s4")."""
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)/(\d+)/w(\d+)s(\d+)", label.strip())
    if match is None:
        raise ValueError(f"tile {label!r}: expected MxNxK/SPLIT_K/wWARPSsSTAGES, e.g. 16x16x256/1/w4s4")
    m, n, k, split, warps, stages = map(int, match.groups())
    if not all(x >= 16 and x & (x - 1) == 0 for x in (m, n, k)) or not 1 <= split <= MAX_SPLIT_K:
        raise ValueError(f"tile {label!r}: M, N and K must be powers of two from 16, SPLIT_K from 1 to {MAX_SPLIT_K}")
    return _tile(m, n, k, stages, warps, split)


def tile_label(config: triton.Config) -> str:
    """"MxNxK/SPLIT_K/wWARPSsSTAGES" of a tile: what a benchmark reports beside its time, `parse_tile`'s input."""
    k = config.kwargs
    return f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}/{k['SPLIT_K']}/w{config.num_warps}s{config.num_stages}"


def splits_k(M: int, N: int, K: int, split_k: int, block_k: int) -> bool:
    """Whether a split of K into `split_k` slices is worth trying: a small output, and every slice at least
    two steps of `block_k` (the kernel gives each slice the same whole number of steps, the last fewer)."""
    steps = triton.cdiv(K, block_k)
    per_slice = triton.cdiv(steps, split_k)
    return split_k == 1 or (M * N <= SPLIT_OUTPUTS and per_slice >= 2 and (split_k - 1) * per_slice < steps)


def fits_rows(M: int, block_m: int) -> bool:
    """Whether a tile of `block_m` rows is worth trying for M rows: fewer than twice the rows there are (the
    smallest tile, 16, always). At a decode step's M = B a taller tile multiplies zeros, and among kernels of a few
    microseconds the autotuner's timings are close enough for it to pick one by noise."""
    return block_m == 16 or block_m < 2 * M


def tile_shared_bytes(config: triton.Config, itemsize: int) -> int:
    """Shared memory a tile's pipeline holds: `num_stages` blocks of a and of W in flight."""
    block = config.kwargs
    return (block["BLOCK_M"] + block["BLOCK_N"]) * block["BLOCK_K"] * itemsize * config.num_stages


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """The tiles worth timing for this GEMM: a useful split of K, not too many rows, and a pipeline that fits the
    GPU's shared memory (on a T4 most tiles do not: compiling and rejecting each would cost seconds per GEMM)."""
    M, N, K = named_args["M"], named_args["N"], named_args["K"]
    a = named_args["A"]
    if not INTERPRETED and capability(a.device) < (8, 0):  # a T4: one tile, since on Colab's host compiling and
        return [c for c in configs if c.kwargs == T4_TILE]  # timing every fitting one took minutes per notebook
    room = float("inf") if INTERPRETED else shared_memory_limit(a.device)
    kept = [c for c in configs if splits_k(M, N, K, c.kwargs["SPLIT_K"], c.kwargs["BLOCK_K"])
            and tile_shared_bytes(c, a.element_size()) < room and (M <= GEMV_ROWS or not gemv_tile(c))]
    return [c for c in kept if fits_rows(M, c.kwargs["BLOCK_M"])] or kept  # a taller tile before none


@triton.jit
def _shifted_sums(a_rows, row_ok, shift, k0, total, total_sq, K, BLOCK_K: tl.constexpr):
    """`total` and `total_sq` plus the sums of (a − shift) and its square over columns k0… of the rows at `a_rows`."""
    ks = tl.arange(0, BLOCK_K)
    ok = row_ok & (k0 + ks[None, :] < K)
    a = tl.where(ok, tl.load(a_rows + k0 + ks[None, :], mask=ok, other=0.0).to(tl.float32) - shift[:, None], 0.0)
    return total + tl.sum(a, axis=1), total_sq + tl.sum(a * a, axis=1)


@triton.jit
def row_stats(A, rows, M, K, stride_am, eps, UNROLL: tl.constexpr, BLOCK_M: tl.constexpr):
    """(mean, 1/std) in fp32 of each of `rows` (BLOCK_M,) of A (M, K), shifted by each row's first element so
    that a large mean cancels no precision: var = E[(a−c)²] − E[a−c]². It reads STATS_ELEMENTS // BLOCK_M
    columns a step (`stats_step`): each step's loads wait for the last step's, so a few wide steps beat many
    narrow ones. UNROLL (K a constexpr): the loop unrolled, so that all its loads are in flight at once."""
    a_rows = A + rows[:, None] * stride_am  # (BLOCK_M, 1)
    row_ok = rows[:, None] < M
    shift = tl.load(A + rows * stride_am, mask=rows < M, other=0.0).to(tl.float32)  # (BLOCK_M,)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    total_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if UNROLL:
        for k0 in tl.static_range(0, K, STATS_ELEMENTS // BLOCK_M):
            total, total_sq = _shifted_sums(a_rows, row_ok, shift, k0, total, total_sq, K, STATS_ELEMENTS // BLOCK_M)
    else:
        for k0 in range(0, K, STATS_ELEMENTS // BLOCK_M):
            total, total_sq = _shifted_sums(a_rows, row_ok, shift, k0, total, total_sq, K, STATS_ELEMENTS // BLOCK_M)
    shifted_mean = total / K
    return shift + shifted_mean, 1 / tl.sqrt(tl.maximum(total_sq / K - shifted_mean * shifted_mean, 0.0) + eps)


@triton.jit
def k_step(a_rows, W, LN_W, LN_B, cols, row_ok, mean, rstd, k0, acc, N, K, LN: tl.constexpr, IEEE: tl.constexpr,
           UPCAST: tl.constexpr, BLOCK_K: tl.constexpr):
    """`acc` (BLOCK_M, BLOCK_N) + LayerNorm(a)[:, k0…] @ Wᵀ[k0…, cols] (a itself without LN) for one BLOCK_K
    step; `a_rows`: pointers to the tile's rows of a, (BLOCK_M, 1); W (N, K) contiguous."""
    ks = tl.arange(0, BLOCK_K)
    k_ok = k0 + ks < K
    a = tl.load(a_rows + k0 + ks[None, :], mask=row_ok & k_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_K)
    if LN:  # normalized and rounded as LayerNorm(a) would have been stored
        g = tl.load(LN_W + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
        b = tl.load(LN_B + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
        a = ((a.to(tl.float32) - mean[:, None]) * rstd[:, None] * g[None, :] + b[None, :]).to(a.dtype)
    w = tl.load(W + cols[None, :] * K + k0 + ks[:, None],
                mask=(cols[None, :] < N) & k_ok[:, None], other=0.0)  # (BLOCK_K, BLOCK_N) = Wᵀ tile
    if UPCAST:
        a, w = a.to(tl.float32), w.to(tl.float32)
    if IEEE:
        acc = tl.dot(a, w, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def _fused_linear_kernel(
    A,  # pointer to the input a, (M, K), unit column stride
    W,  # pointer to the Linear weight, (N, K), contiguous
    BIAS,  # pointer to the Linear bias, (N,)
    RES,  # pointer to the residual, (M, N), contiguous (unused without RESIDUAL)
    Y,  # pointer to the output, (M, N), contiguous
    LN_W, LN_B,  # pointers to the LayerNorm weight and bias, each (K,) (unused without LN)
    PARTIAL,  # pointer to fp32 partial sums, (SPLIT_K, M, N) (unused when SPLIT_K == 1)
    COUNTS,  # pointer to int32 arrival counts, one per output tile, all 0 between calls (unused likewise)
    M, N, K,
    stride_am,  # elements between two rows of A
    eps,  # LayerNorm epsilon
    LN: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr,
    K_LN: tl.constexpr,  # K again, known when compiling, with LN (else 0): a short statistics loop is unrolled
    IEEE: tl.constexpr,  # fp32 operands: exact fp32 products rather than TF32
    UPCAST: tl.constexpr,  # multiply bf16 tiles as fp32 (exact): the Triton interpreter gets bf16 dots wrong
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # row tiles visited together, so the weight tiles they share stay in L2
    SPLIT_K: tl.constexpr,  # slices of K, one program each (program_id(1)); 1: no split
    PDL: tl.constexpr,  # launched with programmatic dependent launch: wait for the kernel before first
):
    pdl_prologue(PDL)
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_size
    pid_n = (pid % (GROUP_M * tiles_n)) // group_size

    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: offsets M·K may pass 2³¹
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    a_rows = A + rows[:, None] * stride_am  # (BLOCK_M, 1)
    row_ok = rows[:, None] < M
    mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
    rstd = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if LN:
        mean, rstd = row_stats(A, rows, M, K_LN, stride_am, eps, K_LN <= MAX_STATS_STEPS * (STATS_ELEMENTS // BLOCK_M),
                               BLOCK_M)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_slice = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K  # this program's slice of K, whole BLOCK_K steps
    k_first = tl.program_id(1) * k_slice
    for k0 in range(k_first, tl.minimum(k_first + k_slice, K), BLOCK_K):
        acc = k_step(a_rows, W, LN_W, LN_B, cols, row_ok, mean, rstd, k0, acc, N, K, LN, IEEE, UPCAST, BLOCK_K)

    if SPLIT_K == 1:
        epilogue(acc, BIAS, RES, Y, rows, cols, row_ok, N, GELU, RESIDUAL)
    else:  # store this slice's sum; the tile's last program to arrive adds all slices in order
        out_ok = row_ok & (cols[None, :] < N)
        tile = rows[:, None] * N + cols[None, :]  # (BLOCK_M, BLOCK_N) offsets into one (M, N) slice
        tl.store(PARTIAL + tl.program_id(1) * M * N + tile, acc, mask=out_ok)
        tl.debug_barrier()  # every thread's partial stored before the count says so
        if tl.atomic_add(COUNTS + pid, 1, sem="acq_rel") == SPLIT_K - 1:
            summed = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for split in range(SPLIT_K):  # L2 reads (.cg): the other programs' stores, not a stale L1
                summed += tl.load(PARTIAL + split * M * N + tile, mask=out_ok, other=0.0, cache_modifier=".cg")
            tl.store(COUNTS + pid, 0)  # ready for the next call
            epilogue(summed, BIAS, RES, Y, rows, cols, row_ok, N, GELU, RESIDUAL)


_tuned_kernel = triton.autotune(configs=_configs(), key=["M", "N", "K", "LN", "GELU", "RESIDUAL", "PDL"],
                                prune_configs_by={"early_config_prune": _prune})(_fused_linear_kernel)
_COUNTS: dict[tuple[torch.device, int], torch.Tensor] = {}  # per device and stream: one kernel at a time each
_OUTGROWN: list[torch.Tensor] = []  # counts replaced by larger ones: a captured graph may still point at them


_SPLIT_TILES = ({(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in _configs() if c.kwargs["SPLIT_K"] > 1}
                | {(t["BLOCK_M"], t["BLOCK_N"]) for t in (FORCED_TILE, INTERPRETED_TILE)})  # (BLOCK_M, BLOCK_N)


def _split_tiles(M: int, N: int) -> int:
    """The most output tiles any split configuration (or a test's forced tile) gives an (M, N) output."""
    return max(triton.cdiv(M, m) * triton.cdiv(N, n) for m, n in _SPLIT_TILES)


def _arrival_counts(device: torch.device, tiles: int) -> torch.Tensor:
    """At least `tiles` int32 zeros kept for the current stream, so a graph replays with the counts it
    captured; each call leaves them at zero again."""
    key = (device, torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0)
    counts = _COUNTS.get(key)
    if counts is None or counts.numel() < tiles:
        if counts is not None:
            _OUTGROWN.append(counts)
        counts = _COUNTS[key] = torch.zeros(tiles, dtype=torch.int32, device=device)
    return counts


_last_gemv = ""  # the GEMV's block where `fused_linear`'s last call ran it (`gemv_label`), else ''


def last_tile() -> str:
    """What `fused_linear` ran, as a benchmark reports it beside its time: the GEMV's block ("gemv BLOCK_N/wWARPS",
    `gemv_label`) where its last call ran the GEMV, else the tile the autotuner last chose (`tile_label`; '' before
    one), which a call with a forced tile or split, or under the interpreter, leaves as it was."""
    config = getattr(_tuned_kernel, "best_config", None)
    return _last_gemv or ("" if config is None else tile_label(config))


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
                 residual: torch.Tensor | None = None, split_k: int | None = None,
                 tile: str | None = None, pdl: bool | None = None, gemv: bool = True) -> torch.Tensor:
    """`residual + act(linear(ln(a)))` in one kernel; `ln`, GELU and `residual` each optional.

    a: (..., K) → (..., N) for a Linear K → N; residual, if given: (..., N). One row (M = 1) runs the CUDA-core
    GEMV (`kernels.gemv`) unless `gemv` is False (for A/B measurements) or a split or tile is forced. `split_k`
    forces K into that many slices with one fixed tile (tests); `tile` ("16x16x256/1/w4s4", `parse_tile`) forces a
    tile on a GPU (benchmarks); without either the autotuner chooses (on the GPU). `pdl`: programmatic dependent
    launch asked for, refused, or (None) as ROOFLINE_PDL says (`kernels.launch.pdl_reason`: where the GPU has it).
    """
    global _last_gemv
    if split_k is not None and (type(split_k) is not int or not 1 <= split_k <= MAX_SPLIT_K):
        raise ValueError(f"split_k must be an integer from 1 to {MAX_SPLIT_K}, got {split_k!r}")
    forced = None if tile is None else parse_tile(tile)
    if forced is not None and (split_k is not None or INTERPRETED):
        raise ValueError("a forced tile runs on a GPU alone: not with split_k, nor in the Triton interpreter")
    _check_inputs(a, linear, ln, residual)
    K, N = linear.in_features, linear.out_features
    a_rows = a.reshape(-1, K)  # (M, K)
    if a_rows.stride(-1) != 1:
        a_rows = a_rows.contiguous()
    M = a_rows.shape[0]
    pdl = pdl_reason(a.device, asked=pdl) is None
    if M == 1 and K <= MAX_K and gemv and forced is None and split_k is None:  # one row: the CUDA-core GEMV
        block = gemv_block(K)
        _last_gemv = gemv_label(block)
        residual_row = None if residual is None else residual.reshape(1, N)
        return gemv_linear(a_rows, linear, ln, gelu, residual_row, block, pdl).view(*a.shape[:-1], N)
    _last_gemv = ""
    y = torch.empty((M, N), dtype=a.dtype, device=a.device)
    res = y if residual is None else residual.reshape(M, N).contiguous()  # (M, N); a placeholder when unused
    ln_weight, ln_bias = (ln.weight, ln.bias) if ln is not None else (linear.bias, linear.bias)
    upcast = INTERPRETED and a.dtype == torch.bfloat16
    if M == 0:
        return y.view(*a.shape[:-1], N)
    def grid(meta: dict) -> tuple[int, int]:  # (output tiles, K slices)
        return triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), meta["SPLIT_K"]

    max_split = (forced.kwargs["SPLIT_K"] if forced is not None
                 else split_k or (MAX_SPLIT_K if M * N <= SPLIT_OUTPUTS else 1))  # as `_prune` allows
    if max_split > 1:
        partial = torch.empty((max_split, M, N), dtype=torch.float32, device=a.device)
        counts = _arrival_counts(a.device, _split_tiles(M, N) if forced is None else grid(forced.kwargs)[0])
    else:
        partial = counts = y  # placeholders: an unsplit kernel touches neither

    args = (a_rows, linear.weight.contiguous(), linear.bias, res, y, ln_weight, ln_bias, partial, counts,
            M, N, K, a_rows.stride(0), ln.eps if ln is not None else 0.0)
    flags = dict(LN=ln is not None, GELU=gelu, RESIDUAL=residual is not None, K_LN=K if ln is not None else 0,
                 IEEE=a.dtype == torch.float32 or upcast, UPCAST=upcast, PDL=pdl)
    if forced is not None:
        with fitting(tile):
            _fused_linear_kernel[grid(forced.kwargs)](*args, **flags, **forced.kwargs, num_warps=forced.num_warps,
                                                      num_stages=forced.num_stages, launch_pdl=pdl)
    elif INTERPRETED or split_k is not None:
        meta = (INTERPRETED_TILE if INTERPRETED else FORCED_TILE) | {"SPLIT_K": split_k or 1}
        options = {} if INTERPRETED else {"num_warps": 4, "num_stages": 3, "launch_pdl": pdl}
        _fused_linear_kernel[grid(meta)](*args, **flags, **meta, **options)
    else:
        _tuned_kernel[grid](*args, **flags, launch_pdl=pdl)
    return y.view(*a.shape[:-1], N)
