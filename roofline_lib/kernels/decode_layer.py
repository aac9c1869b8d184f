"""A decode step of the whole layer in one persistent Triton kernel: one token per sequence, one launch per layer.

At short contexts a decode step is launch-bound: `fused_split_kv` runs six kernels per layer, and inside a CUDA
graph each still costs a launch gap and its ramp-up. Here the count is one, as in `kernels.whole_layer`, whose
phase functions and grid barrier this kernel calls: `NPROG` programs (one per SM by default) walk the phases of
one step, each a loop over that phase's tasks, with a grid-wide barrier between phases (M = B rows):

1. qkv (B, 3C) = LayerNorm₁(x) @ W_qkvᵀ + b;
2. split-KV attention of each (sequence, head) pair over the static cache, one task per (pair, range of keys)
   (`kernels.decode_attention.attend_range`): the range that holds the device-side `position` appends the new
   key and value there and marks it real; keys whose `real` flag is 0, or past `position`, are never seen;
3. the ranges' partials merged by their log-sum-exp (`merge_ranges`); with one range the attention phase
   stores its normalized output itself and this phase is left out;
4. s = x + y @ W_oᵀ + b_o;
5. h = GELU(LayerNorm₂(s) @ W₁ᵀ + b₁);
6. fc2 over `split` slices of its K (4·d_model) into fp32 partial sums, and
7. out = s + b₂ + the partial sums in a fixed order; with no split, fc2 adds b₂ and s itself, and there is
   no seventh phase.

With `prefetch`, each program first asks L2 to keep its share of out_proj's, fc1's and fc2's weights and of
the next layer's qkv weight (`decode_attention.prefetch_l2`; the cache's loads ask to be evicted first, as
there): the weights then stream from HBM while qkv and attention run, and the phases after attention (and the
next layer's first), latency-bound at M = B rows, read them from L2.

Launch sizes are fixed and nothing is read on the host, so a CUDA graph holds the step and replays it as the
position moves on (`variants.decode.LayerKernelDecoder`). The attention partials and fc2's partial sums have
buffers of their own: no phase reads a line that another program wrote after this program might have cached
it. With `phases=True` (always under TRITON_INTERPRET=1, where a grid barrier would wait forever) the same
kernel runs as one launch per phase.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import ROWWISE, STAGES, attend_range, merge_ranges, prefetch_l2
from .launch import INTERPRETED, fitting
from .whole_layer import WholeLayerConfig, grid_barrier, linear_phase, reduce_phase

PHASE_NAMES = ("ln1+qkv", "attention", "merge", "out_proj+residual", "ln2+fc1+gelu", "fc2", "reduce")
BLOCK_KEYS = 16 if INTERPRETED else 64  # keys a task loads per step: small in the interpreter, so ranges split
# for M = B rows: the smallest BLOCK_M tl.dot takes, narrow tiles so that more programs stream the weights, fc2's
# long K split four ways; one program per SM where the weights are most of a step's bytes, two where the cache is
GPU_CONFIG = WholeLayerConfig(block_m=16, block_n=32, block_k=128, split=4, warps=4, stages=3)
LONG_CACHE_CONFIG = WholeLayerConfig(block_m=16, block_n=32, block_k=128, split=4, warps=4, stages=3, per_sm=2)
INTERPRETED_CONFIG = WholeLayerConfig(16, 32, 32, split=2)  # small tiles; fc2 split, so the reduce phase runs


def default_config(cache_bytes: int = 0, weight_bytes: int = 1) -> WholeLayerConfig:
    """The decode step's tiles for a cache of `cache_bytes` (keys and values) and a layer of `weight_bytes`:
    the interpreter's small ones, else on a GPU twice the programs once the cache outweighs the weights, as
    attention over it needs more loads in flight (H200, results/README.md: at context 128 one per SM took 26.4 µs
    a layer, two 28.3; at 32k 103 against 80.6, at 100k 229 against 155)."""
    if INTERPRETED:
        return INTERPRETED_CONFIG
    return LONG_CACHE_CONFIG if cache_bytes > weight_bytes else GPU_CONFIG


@triton.jit
def _attention_phase(QKV, K, V, REAL, POSITION, ACC, M, DEN, Y, B, C: tl.constexpr, HEADS, HD, S, scale,
                     n_splits, split_size, pid, NPROG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     STAGES: tl.constexpr, ROWWISE: tl.constexpr, DIRECT: tl.constexpr,
                     CACHE_POLICY: tl.constexpr):
    """Every (pair, range) task of split-KV attention: q, k and v of row b, head h read from QKV (B, 3C)."""
    for task in range(pid, B * HEADS * n_splits, NPROG):
        pair, split = task // n_splits, task % n_splits
        attend_range(pair, split, QKV, QKV + C, QKV + 2 * C, K, V, REAL, POSITION, ACC, M, DEN, Y,
                     3 * C, HD, 3 * C, HD, 3 * C, HD, HEADS, S, HD, scale, n_splits, split_size,
                     BLOCK_N, BLOCK_D, STAGES, ROWWISE, DIRECT, CACHE_POLICY)


@triton.jit
def _merge_phase(ACC, M, DEN, Y, PAIRS, HD, n_splits, pid, NPROG: tl.constexpr, BLOCK_S: tl.constexpr,
                 BLOCK_D: tl.constexpr):
    """Every pair's partials merged into Y (B, C): pair b·H + h lands at row b, columns h·HD …, as C = H·HD."""
    for pair in range(pid, PAIRS, NPROG):
        merge_ranges(pair, ACC, M, DEN, Y, n_splits, HD, BLOCK_S, BLOCK_D)


@triton.jit
def _decode_layer_kernel(
    X, LN1_W, LN1_B, W_QKV, B_QKV, W_O, B_O, LN2_W, LN2_B, W_1, B_1, W_2, B_2,  # the token (B, C) and weights
    W_NEXT,  # the qkv weight (3C, C) the next layer's step reads first: prefetched too (unused without PREFETCH)
    K, V, REAL, POSITION,  # the cache (B, H, S, hd) ×2, its (B, S) int8 real flags, the new token's (1,) index
    QKV, ACC, M, DEN, Y, S_RES, H, PART, OUT,  # scratch: (B, 3C); attention partials; (B, C), (B, C), (B, F);
    # fc2's fp32 (SPLIT, B, C); the output (B, C)
    SYNC,  # int32 barrier count, one per layer, never reset
    B, C: tl.constexpr, F: tl.constexpr, HEADS, HD, S, eps1, eps2, scale, n_splits, split_size,
    RUN: tl.constexpr,  # bit i set: run phase i (0-based, PHASE_NAMES)
    BARRIERS: tl.constexpr,  # a grid barrier before each phase run but the first (all phases in one launch)
    NPROG: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr, UNROLL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_KEYS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, STAGES: tl.constexpr,
    ROWWISE: tl.constexpr, DIRECT: tl.constexpr,
    PREFETCH: tl.constexpr,  # the later phases' weights asked into L2 first, the cache read evict-first
    PREFETCH_LINES: tl.constexpr,  # lines asked for at once: 32 × the warps
):
    pid = tl.program_id(0)
    if PREFETCH and (RUN & 1):
        prefetch_l2(W_O, C * C, pid, NPROG, PREFETCH_LINES)
        prefetch_l2(W_1, F * C, pid, NPROG, PREFETCH_LINES)
        prefetch_l2(W_2, C * F, pid, NPROG, PREFETCH_LINES)
        prefetch_l2(W_NEXT, 3 * C * C, pid, NPROG, PREFETCH_LINES)
    if RUN & 1:
        linear_phase(X, W_QKV, B_QKV, X, QKV, LN1_W, LN1_B, PART, B, 3 * C, C, eps1, pid, NPROG, True, False,
                     False, 1, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 2:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        _attention_phase(QKV, K, V, REAL, POSITION, ACC, M, DEN, Y, B, C, HEADS, HD, S, scale, n_splits,
                         split_size, pid, NPROG, BLOCK_KEYS, BLOCK_D, STAGES, ROWWISE, DIRECT,
                         "evict_first" if PREFETCH else "")
    if RUN & 4:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        _merge_phase(ACC, M, DEN, Y, B * HEADS, HD, n_splits, pid, NPROG, BLOCK_S, BLOCK_D)
    if RUN & 8:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        linear_phase(Y, W_O, B_O, X, S_RES, LN1_W, LN1_B, PART, B, C, C, eps1, pid, NPROG, False, False, True, 1,
                     UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 16:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        linear_phase(S_RES, W_1, B_1, S_RES, H, LN2_W, LN2_B, PART, B, F, C, eps2, pid, NPROG, True, True, False,
                     1, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 32:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        linear_phase(H, W_2, B_2, S_RES, OUT, LN2_W, LN2_B, PART, B, C, F, eps2, pid, NPROG, False, False, True,
                     SPLIT, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 64:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        reduce_phase(PART, B_2, S_RES, OUT, B, C, pid, NPROG, SPLIT, BLOCK_M, BLOCK_N)


def range_count(pairs: int, capacity: int, programs: int, block_keys: int = BLOCK_KEYS) -> int:
    """Key ranges per (sequence, head) pair: as many as keep every (pair, range) task on a program of its own
    (the persistent grid has `programs`, where `decode_attention.split_count` sizes a launch of its own by
    programs per SM), none shorter than a block; one, and no merge, where the pairs alone fill the grid."""
    return max(1, min(programs // pairs, -(-capacity // block_keys)))


def phases_run(n_splits: int, split: int) -> tuple[int, ...]:
    """The indices of PHASE_NAMES a step runs: no merge with one key range, no reduce without fc2's split."""
    return tuple(i for i, name in enumerate(PHASE_NAMES)
                 if not (name == "merge" and n_splits == 1) and not (name == "reduce" and split == 1))


def decode_layer_step(x_t: torch.Tensor, layer, k: torch.Tensor, v: torch.Tensor, real: torch.Tensor,
                      position: torch.Tensor, n_splits: int, config: WholeLayerConfig, programs: int,
                      sync: torch.Tensor, phases: bool = False, block_keys: int = BLOCK_KEYS,
                      prefetch: bool = False, next_qkv: torch.Tensor | None = None) -> torch.Tensor:
    """One decode step of `layer` (a module with ln1, ln2, out_proj, fc1, fc2, n_heads and a fused `qkv`):
    x_t (B, 1, C) → (B, 1, C), attending over the cache k, v (B, H, S, hd) (contiguous) holding keys
    0 … position − 1 with `real` (B, S) int8 flags, and appending the new key and value at `position` ((1,)
    int64 on the device). One persistent launch of `programs` programs synchronised through `sync` (int32,
    one per layer), or with `phases` (and always in the interpreter) one launch per phase; `prefetch`: the
    later phases' weights into L2 first, and `next_qkv` (the next layer's qkv weight, by default this one's: the
    next step's) with them (a GPU's; the interpreter runs without)."""
    B, _, C = x_t.shape
    H, S, hd = k.shape[1], k.shape[2], k.shape[3]
    F = layer.fc1.out_features
    split = config.split
    rows = x_t.reshape(B, C).contiguous()
    qkv, y, s, h, out = (x_t.new_empty(B, width) for width in (3 * C, C, C, F, C))
    direct = n_splits == 1
    if direct:
        acc = m = den = out  # placeholders: no partials with one range
    else:
        acc = torch.empty(B * H, n_splits, hd, dtype=torch.float32, device=x_t.device)
        m, den = (torch.empty(B * H, n_splits, dtype=torch.float32, device=x_t.device) for _ in range(2))
    part = torch.empty(split, B, C, dtype=torch.float32, device=x_t.device) if split > 1 else out
    per_range = -(-S // n_splits)
    split_size = -(-per_range // block_keys) * block_keys  # whole blocks, as `split_kv_attention`'s
    args = (rows, layer.ln1.weight, layer.ln1.bias, layer.qkv.weight, layer.qkv.bias,
            layer.out_proj.weight, layer.out_proj.bias, layer.ln2.weight, layer.ln2.bias,
            layer.fc1.weight, layer.fc1.bias, layer.fc2.weight, layer.fc2.bias,
            layer.qkv.weight if next_qkv is None else next_qkv,
            k, v, real, position, qkv, acc, m, den, y, s, h, part, out, sync,
            B, C, F, H, hd, S, layer.ln1.eps, layer.ln2.eps, hd ** -0.5, n_splits, split_size)
    meta = dict(NPROG=programs, SPLIT=split, UPCAST=INTERPRETED and x_t.dtype == torch.bfloat16,
                UNROLL=config.unroll, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                BLOCK_KEYS=block_keys, BLOCK_D=triton.next_power_of_2(hd),
                BLOCK_S=triton.next_power_of_2(n_splits), STAGES=STAGES, ROWWISE=ROWWISE, DIRECT=direct,
                PREFETCH=prefetch and not INTERPRETED, PREFETCH_LINES=32 * config.warps)
    options = {} if INTERPRETED else {"num_warps": config.warps, "num_stages": config.stages} | (
        {"maxnreg": config.maxnreg} if config.maxnreg else {})
    run = phases_run(n_splits, split)
    with fitting(config.label):
        if phases or INTERPRETED:
            for phase in run:
                _decode_layer_kernel[(programs,)](*args, RUN=1 << phase, BARRIERS=False, **meta, **options)
        else:
            _decode_layer_kernel[(programs,)](*args, RUN=sum(1 << phase for phase in run), BARRIERS=True, **meta,
                                              **options, launch_cooperative_grid=True)
    return out.view(B, 1, C)
