"""Split-KV attention for decode (flash-decoding): one query per sequence and head against a long key/value cache.

In a decode step each of the B·H (sequence, head) pairs has one query row. Attention over the cache is then pure
memory traffic: each key and value is read once, for two multiply-adds per element. One program per pair would
use only B·H of the GPU's multiprocessors — 16 of an H200's 132 at B 1, H 16 — and leave most of its bandwidth
idle. So the keys are cut into `n_splits` ranges and each (pair, range) gets a program of its own, which returns
a partial result: its softmax numerator summed over its keys (`acc`), its running maximum `m` and denominator
`den`. `_merge_kernel` combines the partials exactly — the log-sum-exp merge:

    M = max_i m_i,   out = Σ_i exp(m_i − M) · acc_i  /  Σ_i exp(m_i − M) · den_i

The new token's index lives in device memory (`position`), so the kernel reads only the keys written so far,
and a CUDA graph that captured it stays valid as the cache fills. The range that holds that index also appends
the new key and value to the cache and takes them into its sum straight from registers (one launch fewer than
writing them first, and no read of what the same program has just written). Keys whose `real` flag is False
(padding) are masked. A range with no real key leaves m at −1e30 (finite, so nothing computes ∞ − ∞) and its
weight in the merge is zero. Statistics and sums are kept in fp32 whatever the cache's dtype.

Inside a program the softmax state is kept per lane by default (ROWWISE): each of a block's BLOCK_N key rows
has its own maximum, denominator and sum, so the loop over blocks needs no reduction across the program's
threads, and the lanes are merged once, by the same log-sum-exp, after it. With one range (short caches)
the program stores the normalized output itself and no merge is launched.

Attention streams the cache from HBM while the GEMMs after it wait; `prefetch` hands it their weights, and
its programs ask L2 to keep them, last to be evicted (`prefetch_l2`, compute capability 8.0 on), so that those
GEMMs, latency-bound at M = B rows, read their weights from L2. The cache's loads then ask to be evicted first;
Triton 3.6 drops that hint where it pipelines the loads through shared memory (cp.async), and there the
weights' evict-last priority alone keeps them.

`pdl` launches both kernels with programmatic dependent launch (`kernels.launch`), as a decode step's GEMMs
around them: each may start while the kernel before it still runs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.device import capability, multiprocessor_count
from .launch import INTERPRETED, pdl_launch, pdl_prologue, pdl_reason

# the defaults, from the H200 sweep of results/decode/decode_attention_*_2026-12-03_*.csv: 64 keys a block, four
# warps, two blocks in flight, softmax state per lane; 4 programs per SM where the (sequence, head) pairs are
# fewer than the SMs (longer ranges, fewer partials to merge: 39 µs against 44 at B 1 over 32k keys), 16 where
# they are more (104 µs against 132 at B 16 over 8k)
BLOCK_KEYS = 64  # keys a program loads per step
FEW_PAIRS_PROGRAMS_PER_SM, PROGRAMS_PER_SM = 4, 16  # (pair, range) programs in flight, per SM
WARPS = 4
STAGES = 2
ROWWISE = True  # softmax state per lane (`_split_kv_kernel`'s ROWWISE)
MAX_PREFETCHED = 4  # tensors `split_kv_attention` prefetches at most (out_proj's, fc1's, fc2's, the next qkv)
EMPTY = tl.constexpr(-1.0e30)  # a range's running maximum before it has seen a real key


@triton.jit
def prefetch_l2(BASE, numel, pid, nprog, LINES: tl.constexpr):
    """Ask L2 to keep program `pid`'s share (of `nprog`) of BASE[0 : numel], last to be evicted: LINES 128-byte
    lines at a time, one per thread where LINES is 32 × the program's warps."""
    per_line = 1024 // BASE.dtype.element_ty.primitive_bitwidth  # elements in 128 bytes
    lines = tl.cdiv(numel, per_line)
    for first in range(pid * LINES, lines, nprog * LINES):
        line = tl.minimum(first + tl.arange(0, LINES), lines - 1).to(tl.int64)  # past the end: the last line again
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];\n\tmov.u32 $0, 0;", "=r,l",
                                  [BASE + line * per_line], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def attend_range(
    pair, split,  # the (sequence, head) pair b·H + h, and the range of its keys
    Q, K_NEW, V_NEW,  # (B, H, hd) each: the new token's query, key and value (any strides over B, H)
    K, V,  # (B, H, S, hd) the cache, contiguous
    REAL,  # (B, S) int8: 1 where a key is a real token
    POSITION,  # (1,) int64: the new token's index; keys 0 … POSITION − 1 are in the cache already
    ACC, M, DEN,  # partials: (B·H, n_splits, hd), (B·H, n_splits), (B·H, n_splits), fp32 (unused if DIRECT)
    OUT,  # (B, H, 1, hd) contiguous, q's dtype: written here when DIRECT, else by the merge
    stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh,
    H, S, head_dim, scale, n_splits, split_size,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, STAGES: tl.constexpr,
    ROWWISE: tl.constexpr,  # softmax state per lane, merged after the loop, instead of per program in the loop
    DIRECT: tl.constexpr,  # n_splits == 1: the normalized output stored here, and no merge launched
    CACHE_POLICY: tl.constexpr = "",  # the cache's loads' L2 eviction policy ("evict_first": read once, let go)
):
    """One (pair, range) of split-KV attention: its partials, or with DIRECT its normalized output; the range
    that holds `position` appends the new key and value. The body of `_split_kv_kernel`, and of the decode
    layer kernel's attention phase (`kernels.decode_layer`), which loops over the tasks itself."""
    b, h = pair // H, pair % H
    d = tl.arange(0, BLOCK_D)
    in_head = d < head_dim
    q = tl.load(Q + b * stride_qb + h * stride_qh + d, mask=in_head, other=0.0).to(tl.float32) * scale
    position = tl.load(POSITION)
    start = split * split_size
    end = tl.minimum(start + split_size, position)  # the cached keys of this range
    if ROWWISE:  # each of the BLOCK_N lanes keeps its own maximum, denominator and sum: no reduction in the loop
        m_row = tl.full((BLOCK_N,), EMPTY, tl.float32)
        den_row = tl.zeros((BLOCK_N,), tl.float32)
        acc_row = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    else:  # one running maximum, denominator and sum: each block reduced across the program's threads
        m = tl.full((), EMPTY, tl.float32)
        den = tl.zeros((), tl.float32)
        acc = tl.zeros((BLOCK_D,), tl.float32)
    for first in tl.range(start, end, BLOCK_N, num_stages=STAGES):  # STAGES blocks' loads in flight
        n = first + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
        inside = n < end
        real = tl.load(REAL + b * S + n, mask=inside, other=0) != 0
        offsets = (pair * S + n[:, None]) * head_dim + d[None, :]  # (BLOCK_N, BLOCK_D)
        loaded = inside[:, None] & in_head[None, :]
        k = tl.load(K + offsets, mask=loaded, other=0.0, eviction_policy=CACHE_POLICY).to(tl.float32)
        v = tl.load(V + offsets, mask=loaded, other=0.0, eviction_policy=CACHE_POLICY).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1)  # (BLOCK_N,) scores
        s = tl.where(real & inside, s, float("-inf"))
        if ROWWISE:
            m_new_row = tl.maximum(m_row, s)
            alpha_row = tl.exp(m_row - m_new_row)
            p_row = tl.exp(s - m_new_row)  # 0 where masked
            acc_row = acc_row * alpha_row[:, None] + p_row[:, None] * v
            den_row = den_row * alpha_row + p_row
            m_row = m_new_row
        else:
            m_new = tl.maximum(m, tl.max(s, axis=0))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new)  # 0 where masked
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            den = den * alpha + tl.sum(p, axis=0)
            m = m_new
    if ROWWISE:  # the lanes merged once, by their log-sum-exp (a lane with no real key weighs exp(EMPTY − m) = 0)
        m = tl.max(m_row, axis=0)
        weight = tl.exp(m_row - m)
        acc = tl.sum(weight[:, None] * acc_row, axis=0)
        den = tl.sum(weight * den_row, axis=0)
    if (start <= position) & (position < start + split_size):  # this range holds the new token: append it
        k_new = tl.load(K_NEW + b * stride_kb + h * stride_kh + d, mask=in_head, other=0.0)
        v_new = tl.load(V_NEW + b * stride_vb + h * stride_vh + d, mask=in_head, other=0.0)
        tl.store(K + (pair * S + position) * head_dim + d, k_new, mask=in_head)
        tl.store(V + (pair * S + position) * head_dim + d, v_new, mask=in_head)
        tl.store(REAL + b * S + position, 1)
        s_new = tl.sum(k_new.to(tl.float32) * q, axis=0)
        m_new = tl.maximum(m, s_new)
        alpha = tl.exp(m - m_new)
        p_new = tl.exp(s_new - m_new)
        acc = acc * alpha + p_new * v_new.to(tl.float32)
        den = den * alpha + p_new
        m = m_new
    if DIRECT:  # one range: it is the whole answer, no merge needed
        tl.store(OUT + pair * head_dim + d, (acc / den).to(OUT.dtype.element_ty), mask=in_head)
    else:
        slot = pair * n_splits + split
        tl.store(ACC + slot * head_dim + d, acc, mask=in_head)
        tl.store(M + slot, m)
        tl.store(DEN + slot, den)


@triton.jit
def _split_kv_kernel(
    Q, K_NEW, V_NEW, K, V, REAL, POSITION, ACC, M, DEN, OUT,  # as `attend_range` takes them
    stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh,
    H, S, head_dim, scale, n_splits, split_size,
    PF0, PF1, PF2, PF3, pf_numel0, pf_numel1, pf_numel2, pf_numel3,  # tensors to prefetch into L2, their sizes
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, STAGES: tl.constexpr, ROWWISE: tl.constexpr, DIRECT: tl.constexpr,
    PREFETCH: tl.constexpr,  # PF0 … PF3 asked into L2 first, the cache read evict-first
    PREFETCH_LINES: tl.constexpr,  # lines asked for at once: 32 × the warps
    PDL: tl.constexpr,  # launched with programmatic dependent launch: wait for the kernel before first
):
    """One program per (pair, range): program_id 0 the pair b·H + h, 1 the range."""
    pdl_prologue(PDL)
    if PREFETCH:
        pid, nprog = tl.program_id(0) * n_splits + tl.program_id(1), tl.num_programs(0) * n_splits
        prefetch_l2(PF0, pf_numel0, pid, nprog, PREFETCH_LINES)
        prefetch_l2(PF1, pf_numel1, pid, nprog, PREFETCH_LINES)
        prefetch_l2(PF2, pf_numel2, pid, nprog, PREFETCH_LINES)
        prefetch_l2(PF3, pf_numel3, pid, nprog, PREFETCH_LINES)
    attend_range(tl.program_id(0), tl.program_id(1), Q, K_NEW, V_NEW, K, V, REAL, POSITION, ACC, M, DEN, OUT,
                 stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh, H, S, head_dim, scale, n_splits,
                 split_size, BLOCK_N, BLOCK_D, STAGES, ROWWISE, DIRECT, "evict_first" if PREFETCH else "")


@triton.jit
def merge_ranges(pair, ACC, M, DEN, OUT, n_splits, head_dim, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """One (sequence, head) pair's partials → its attention output, in OUT's dtype."""
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    in_split, in_head = s < n_splits, d < head_dim
    m = tl.load(M + pair * n_splits + s, mask=in_split, other=EMPTY)  # (BLOCK_S,)
    den = tl.load(DEN + pair * n_splits + s, mask=in_split, other=0.0)
    acc = tl.load(ACC + (pair * n_splits + s[:, None]) * head_dim + d[None, :],
                  mask=in_split[:, None] & in_head[None, :], other=0.0)  # (BLOCK_S, BLOCK_D)
    weight = tl.exp(m - tl.max(m, axis=0))  # 0 for an empty range
    out = tl.sum(weight[:, None] * acc, axis=0) / tl.sum(weight * den, axis=0)
    tl.store(OUT + pair * head_dim + d, out.to(OUT.dtype.element_ty), mask=in_head)


@triton.jit
def _merge_kernel(ACC, M, DEN, OUT, n_splits, head_dim, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                  PDL: tl.constexpr):
    """One program per (sequence, head) pair."""
    pdl_prologue(PDL)
    merge_ranges(tl.program_id(0), ACC, M, DEN, OUT, n_splits, head_dim, BLOCK_S, BLOCK_D)


def split_count(pairs: int, capacity: int, device: torch.device, programs_per_sm: int | None = None,
                block_keys: int = BLOCK_KEYS) -> int:
    """How many key ranges: enough programs for `programs_per_sm` per multiprocessor (by default
    FEW_PAIRS_PROGRAMS_PER_SM when `pairs` are fewer than the multiprocessors, else PROGRAMS_PER_SM), none
    shorter than a block."""
    sms = multiprocessor_count(device)
    if programs_per_sm is None:
        programs_per_sm = FEW_PAIRS_PROGRAMS_PER_SM if pairs < sms else PROGRAMS_PER_SM
    wanted = -(-programs_per_sm * sms // pairs)
    return max(1, min(wanted, -(-capacity // block_keys)))


def split_kv_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       real: torch.Tensor, position: torch.Tensor, n_splits: int, block_keys: int = BLOCK_KEYS,
                       warps: int = WARPS, stages: int = STAGES, rowwise: bool = ROWWISE,
                       prefetch: tuple[torch.Tensor, ...] = (), pdl: bool | None = None) -> torch.Tensor:
    """The new token's attention over the cache and itself, appending its key and value to the cache.

    q, k_new, v_new (B, H, 1, hd), last dimension contiguous; k, v (B, H, S, hd), contiguous, holding keys
    0 … position − 1; real (B, S) int8; position (1,) int64 on the device, the new token's index. Writes k_new
    and v_new at `position` and marks it real; returns (B, H, 1, hd) in q's dtype. Fixed launch sizes and no
    host reads, so a CUDA graph can hold it. With one range (`n_splits` 1) it is one launch: no merge.
    `prefetch`: up to MAX_PREFETCHED contiguous tensors (the GEMMs' weights after it) asked into L2 on the way,
    where the GPU has the instruction (compute capability 8.0 on; elsewhere, and in the interpreter, a no-op).
    `pdl`: programmatic dependent launch asked for, refused, or (None) as ROOFLINE_PDL says
    (`kernels.launch.pdl_reason`: where the GPU has it).
    """
    if len(prefetch) > MAX_PREFETCHED:
        raise ValueError(f"prefetch takes at most {MAX_PREFETCHED} tensors, got {len(prefetch)}")
    if not all(t.is_contiguous() for t in prefetch):
        raise ValueError("prefetch takes contiguous tensors (it asks for their lines from the first element on)")
    B, H, _, hd = q.shape
    S = k.shape[2]
    pairs = B * H
    split_size = -(-S // n_splits)
    split_size = -(-split_size // block_keys) * block_keys
    out = torch.empty(B, H, 1, hd, device=q.device, dtype=q.dtype)
    direct = n_splits == 1
    if direct:
        acc = m = den = out  # placeholders: a direct kernel stores no partials
    else:
        acc = torch.empty(pairs, n_splits, hd, device=q.device, dtype=torch.float32)
        m = torch.empty(pairs, n_splits, device=q.device, dtype=torch.float32)
        den = torch.empty_like(m)
    block_d = triton.next_power_of_2(hd)
    prefetching = bool(prefetch) and not INTERPRETED and capability(q.device) >= (8, 0)
    targets = (list(prefetch) + [out] * MAX_PREFETCHED)[:MAX_PREFETCHED]  # `out`: a placeholder, 0 elements
    sizes = ([t.numel() for t in prefetch] + [0] * MAX_PREFETCHED)[:MAX_PREFETCHED]
    pdl = pdl_reason(q.device, asked=pdl) is None
    launch = pdl_launch(pdl)
    _split_kv_kernel[(pairs, n_splits)](
        q, k_new, v_new, k, v, real, position, acc, m, den, out,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        H, S, hd, hd ** -0.5, n_splits, split_size, *targets, *sizes, BLOCK_N=block_keys, BLOCK_D=block_d,
        STAGES=stages, ROWWISE=rowwise, DIRECT=direct, PREFETCH=prefetching, PREFETCH_LINES=32 * warps, PDL=pdl,
        num_warps=warps, **launch)
    if not direct:
        _merge_kernel[(pairs,)](acc, m, den, out, n_splits, hd, BLOCK_S=triton.next_power_of_2(n_splits),
                                BLOCK_D=block_d, PDL=pdl, **launch)
    return out
