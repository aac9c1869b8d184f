"""Split-KV attention for decode (flash-decoding): one query per sequence and head against a long key/value cache.

In a decode step each of the B·H (sequence, head) pairs has one query row. Attention over the cache is then pure
memory traffic: each key and value is read once, for two multiply-adds per element. One program per pair would
use only B·H of the GPU's multiprocessors — 16 of an H200's 132 at B 1, H 16 — and leave most of its bandwidth
idle. So the keys are cut into `n_splits` ranges and each (pair, range) gets a program of its own, which returns
a partial result: its softmax numerator summed over its keys (`acc`), its running maximum `m` and denominator
`l`. `merge_splits` combines the partials exactly — the log-sum-exp merge:

    M = max_i m_i,   out = Σ_i exp(m_i − M) · acc_i  /  Σ_i exp(m_i − M) · l_i

The position of the newest token lives in device memory (`position`), so the kernel reads only the keys written
so far, and a CUDA graph that captured it stays valid as the cache fills. Keys whose `real` flag is False
(padding) are masked. A range with no real key leaves m at −1e30 (finite, so nothing computes ∞ − ∞) and its
weight in the merge is zero. Statistics and sums are kept in fp32 whatever the cache's dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.device import multiprocessor_count

BLOCK_KEYS = 64  # keys a program loads per step
PROGRAMS_PER_SM = 4  # enough (pair, range) programs in flight to keep the memory system busy
EMPTY = tl.constexpr(-1.0e30)  # a range's running maximum before it has seen a real key


@triton.jit
def _split_kv_kernel(
    Q,  # (B, H, hd) queries, contiguous
    K, V,  # (B, H, S, hd) the cache, contiguous
    REAL,  # (B, S) int8: 1 where a key is a real token
    POSITION,  # (1,) int64: index of the newest key; keys 0 … POSITION are written
    ACC, M, L,  # partials: (B·H, n_splits, hd), (B·H, n_splits), (B·H, n_splits), fp32
    H, S, head_dim, scale, n_splits, split_size,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pair = tl.program_id(0)  # b·H + h
    split = tl.program_id(1)
    b = pair // H
    d = tl.arange(0, BLOCK_D)
    in_head = d < head_dim
    q = tl.load(Q + pair * head_dim + d, mask=in_head, other=0.0).to(tl.float32) * scale  # (BLOCK_D,)
    end_all = tl.load(POSITION) + 1
    start = split * split_size
    end = tl.minimum(start + split_size, end_all)
    m = tl.full((), EMPTY, tl.float32)
    l = tl.zeros((), tl.float32)
    acc = tl.zeros((BLOCK_D,), tl.float32)
    for first in range(start, end, BLOCK_N):
        n = first + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
        inside = n < end
        real = tl.load(REAL + b * S + n, mask=inside, other=0) != 0
        offsets = (pair * S + n[:, None]) * head_dim + d[None, :]  # (BLOCK_N, BLOCK_D)
        loaded = inside[:, None] & in_head[None, :]
        k = tl.load(K + offsets, mask=loaded, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1)  # (BLOCK_N,) scores
        s = tl.where(real & inside, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)  # 0 where masked
        v = tl.load(V + offsets, mask=loaded, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l = l * alpha + tl.sum(p, axis=0)
        m = m_new
    slot = pair * n_splits + split
    tl.store(ACC + slot * head_dim + d, acc, mask=in_head)
    tl.store(M + slot, m)
    tl.store(L + slot, l)


def split_count(pairs: int, capacity: int, device: torch.device) -> int:
    """How many key ranges: enough programs for PROGRAMS_PER_SM per multiprocessor, none shorter than a block."""
    wanted = -(-PROGRAMS_PER_SM * multiprocessor_count(device) // pairs)
    return max(1, min(wanted, -(-capacity // BLOCK_KEYS)))


def merge_splits(acc: torch.Tensor, m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """The log-sum-exp merge of the partials: acc (P, n_splits, hd), m and l (P, n_splits) → (P, hd), fp32."""
    weight = torch.exp(m - m.amax(dim=1, keepdim=True))  # (P, n_splits), 0 for an empty range
    return (acc * weight[..., None]).sum(dim=1) / (l * weight).sum(dim=1, keepdim=True)


def split_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, real: torch.Tensor,
                       position: torch.Tensor, n_splits: int) -> torch.Tensor:
    """Attention of one query per (sequence, head) over the cache's keys 0 … position.

    q (B, H, 1, hd); k, v (B, H, S, hd), contiguous; real (B, S) int8; position (1,) int64 on the device.
    Returns (B, H, 1, hd) in q's dtype. Fixed launch sizes and no host reads, so a CUDA graph can hold it.
    """
    B, H, _, hd = q.shape
    S = k.shape[2]
    pairs = B * H
    split_size = -(-S // n_splits)
    split_size = -(-split_size // BLOCK_KEYS) * BLOCK_KEYS
    acc = torch.empty(pairs, n_splits, hd, device=q.device, dtype=torch.float32)
    m = torch.empty(pairs, n_splits, device=q.device, dtype=torch.float32)
    l = torch.empty_like(m)
    _split_kv_kernel[(pairs, n_splits)](
        q, k, v, real, position, acc, m, l, H, S, hd, hd ** -0.5, n_splits, split_size,
        BLOCK_N=BLOCK_KEYS, BLOCK_D=triton.next_power_of_2(hd))
    return merge_splits(acc, m, l).to(q.dtype).view(B, H, 1, hd)
