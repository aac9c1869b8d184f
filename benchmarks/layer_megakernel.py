"""An experiment for the launch-bound rows: the whole layer in one persistent Triton kernel.

On rows 1–5 the best rung launches 9–11 kernels per layer. Inside a CUDA graph each kernel still costs
a launch gap and a ramp-up of a few microseconds, so kernel count sets the time there, not FLOPs or bytes
(results/launch_bound/). `fused_gemm` cut the count to six and lost: each of its Triton GEMMs is a kernel
of its own, slower than cuBLAS's. Here the count is one. One program per SM stays resident for the whole
layer and walks six phases, each a loop over that phase's tiles, with a grid-wide barrier between phases:

1. qkv = LayerNorm₁(x) @ W_qkvᵀ + b (LayerNorm in the GEMM's prologue);
2. causal attention per (batch, head, block of queries), online softmax, padded keys never seen;
3. s = x + y @ W_oᵀ + b_o;
4. h = GELU(LayerNorm₂(s) @ W₁ᵀ + b₁);
5. fc2 over `SPLIT` slices of its long K (4·d_model), fp32 partial sums, so that a short row still
   gives every program a tile;
6. out = s + b₂ + the partial sums, added in a fixed order (deterministic); with no split, fc2 adds b₂
   and s itself, and there are five phases.

The barrier is the cooperative-groups one: a count whose top bit flips once per barrier, so it never
needs a reset, between barriers or between calls. Every program must be resident at once, so there are
never more programs than SMs, and the launch is cooperative: where they cannot all be resident (another
kernel holding SMs), the driver refuses it instead of letting it wait forever. One count per layer: a
layer must not run on two streams at once. No phase reads a line another program wrote before the
barrier it waits at, and a new launch starts with clean L1 caches, so plain loads see the writes.

With `phases=True` (always under TRITON_INTERPRET=1, whose programs run one after another and would
wait forever at a barrier) the same kernel runs as six launches, one phase each. The CPU tests check the
phases' arithmetic that way, and on a GPU the pair measures what the five launches between them cost.

An experiment, not a rung: it joins `fastest` only if it wins on a GPU under the one protocol.

    python -m benchmarks.layer_megakernel --out OUT         # on a GPU: rows 1-5, fp16
    python -m benchmarks.layer_megakernel --out OUT --configs 32x64x128/4/w8s3,64x128x64/4/w8s1u   # more tiles
    python -m benchmarks.layer_megakernel --device cpu --rows s1 --out "$(mktemp -d)"   # the CPU path

For each row the CSVs and the tables give §3 (no padding, left padding and holes; fp16 and bf16 on a GPU,
fp16 under the interpreter: CHECK_DTYPES), then, beside `no_empty_mask` and `residual_addmm`: kernels per
layer, GPU µs per layer in an 8-layer graph and one call's latency (`roofline_lib.stack`'s measures); on a
GPU, last, the kernel µs of each phase (`phase_times`), which say where the persistent kernel's time goes.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import triton
import triton.language as tl
from torch import nn

from roofline_lib import Case, build_variant
from roofline_lib.bench import time_layer_calls
from roofline_lib.checks import check_layer_input
from roofline_lib.correctness import random_reference
from roofline_lib.device import environment, free_memory, resolve_device
from roofline_lib.kernels.launch import INTERPRETED
from roofline_lib.outcome import first_line
from roofline_lib.profiling import kernel_timeline
from roofline_lib.progress import progress_bar
from roofline_lib.reference import ReferenceLayer
from roofline_lib.report import markdown_table
from roofline_lib.shapes import SMOKE_SUITE, SUITE, select_rows
from roofline_lib.stack import LAYERS, Stack, capture, graph_gpu_us, kernels_per_call
from roofline_lib.variants.parts import fuse_qkv

PHASE_NAMES = ("ln1+qkv", "attention", "out_proj+residual", "ln2+fc1+gelu", "fc2", "reduce")
PHASES = len(PHASE_NAMES)
SPLIT = 4  # slices of fc2's K (4·d_model) on a GPU
GPU_TILES = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, BLOCK_Q=64, BLOCK_KV=64)
WARPS, STAGES = 4, 2  # per program on a GPU: warps, and Triton's pipelining depth for the loops it pipelines
MAX_UNROLLED = 32  # most BLOCK_K steps an unrolled K loop may take: past it, compiling takes many minutes
INTERPRETED_TILES = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, BLOCK_Q=16, BLOCK_KV=16)
INTERPRETED_PROGRAMS = 3  # the interpreter's programs: more than one, so each phase's tile loop strides
BASELINES = ("no_empty_mask", "residual_addmm")
# bf16 only on a GPU: the Triton interpreter converts fp32 to bf16 without rounding to nearest (half of all
# values), a bias that no rounding-sensitive check survives
CHECK_DTYPES = (torch.float16,) if INTERPRETED else (torch.float16, torch.bfloat16)
PADDINGS = ("none", "left", "holes")


@triton.jit
def _grid_barrier(SYNC, pid, NPROG: tl.constexpr):
    """Return once all NPROG programs have called it. Program 0 adds 2³¹ − (NPROG − 1) to the count, every
    other program 1: the top bit flips and the low bits come back, so the count needs no reset."""
    tl.debug_barrier()  # this program's stores are issued before it says it has arrived
    arrived = tl.atomic_add(SYNC, tl.where(pid == 0, 2147483649 - NPROG, 1), sem="release")
    now = tl.atomic_add(SYNC, 0, sem="acquire")
    while ((arrived ^ now) & -2147483648) == 0:
        now = tl.atomic_add(SYNC, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _shifted_sums(A, rows, row_ok, shift, k0, total, total_sq, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """`total` and `total_sq` plus the sums of (a − shift) and its square over columns k0… of `rows`."""
    ks = tl.arange(0, BLOCK_K)
    ok = row_ok & (k0 + ks[None, :] < K)
    a = tl.where(ok, tl.load(A + rows[:, None] * K + k0 + ks[None, :], mask=ok, other=0.0).to(tl.float32)
                 - shift[:, None], 0.0)
    return total + tl.sum(a, axis=1), total_sq + tl.sum(a * a, axis=1)


@triton.jit
def _row_stats(A, rows, M, K: tl.constexpr, eps, UNROLL: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """(mean, 1/std) of each of `rows` of A (M, K) in fp32, shifted by each row's first element so that a
    large mean cancels no precision: var = E[(a−c)²] − E[a−c]². UNROLL: the loop unrolled, so that its
    loads are all in flight at once instead of one after another."""
    row_ok = rows[:, None] < M
    shift = tl.load(A + rows * K, mask=rows < M, other=0.0).to(tl.float32)  # (BLOCK_M,)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    total_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if UNROLL:
        for k0 in tl.static_range(0, K, BLOCK_K):
            total, total_sq = _shifted_sums(A, rows, row_ok, shift, k0, total, total_sq, K, BLOCK_K)
    else:
        for k0 in range(0, K, BLOCK_K):
            total, total_sq = _shifted_sums(A, rows, row_ok, shift, k0, total, total_sq, K, BLOCK_K)
    shifted_mean = total / K
    return shift + shifted_mean, 1 / tl.sqrt(tl.maximum(total_sq / K - shifted_mean * shifted_mean, 0.0) + eps)


@triton.jit
def _k_step(A, W, LN_W, LN_B, rows, cols, row_ok, mean, rstd, k0, acc, N, K: tl.constexpr, LN: tl.constexpr,
            UPCAST: tl.constexpr, BLOCK_K: tl.constexpr):
    """`acc` + LayerNorm(A)[rows, k0…] @ Wᵀ[k0…, cols] (A itself without LN) for one BLOCK_K step."""
    ks = tl.arange(0, BLOCK_K)
    k_ok = k0 + ks < K
    a = tl.load(A + rows[:, None] * K + k0 + ks[None, :], mask=row_ok & k_ok[None, :], other=0.0)
    if LN:  # normalized and rounded as LayerNorm(A) would have been stored
        g = tl.load(LN_W + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
        b = tl.load(LN_B + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
        a = ((a.to(tl.float32) - mean[:, None]) * rstd[:, None] * g[None, :] + b[None, :]).to(A.dtype.element_ty)
    w = tl.load(W + cols[None, :] * K + k0 + ks[:, None], mask=(cols[None, :] < N) & k_ok[:, None],
                other=0.0)  # (BLOCK_K, BLOCK_N) = Wᵀ tile
    if UPCAST:
        a, w = a.to(tl.float32), w.to(tl.float32)
    return tl.dot(a, w, acc)


@triton.jit
def _linear_phase(A, W, BIAS, RES, Y, LN_W, LN_B, PART, M, N, K: tl.constexpr, eps, pid, NPROG: tl.constexpr,
                  LN: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr, SPLIT: tl.constexpr,
                  UPCAST: tl.constexpr, UNROLL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    """Y (M, N) = residual + act(LayerNorm(A) @ Wᵀ + bias) over tiles `pid`, `pid` + NPROG, …; A (M, K) and
    W (N, K) contiguous. With SPLIT > 1, each task is one tile's slice of K, stored as an fp32 partial sum
    into PART (SPLIT, M, N) for `_reduce_phase`; the epilogue is left to it. UNROLL: the K loops unrolled,
    so that their loads can be issued together."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    k_slice = ((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K * BLOCK_K  # whole steps
    for task in range(pid, tiles * SPLIT, NPROG):
        tile, split = task % tiles, task // tiles
        rows = (tile // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows[:, None] < M
        out_ok = row_ok & (cols[None, :] < N)
        mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
        rstd = tl.zeros((BLOCK_M,), dtype=tl.float32)
        if LN:
            mean, rstd = _row_stats(A, rows, M, K, eps, UNROLL, BLOCK_M, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if UNROLL:  # steps past K (the last slice's) load nothing: _k_step masks them
            # k_slice // BLOCK_K, spelt out: a local computed from constexprs is not one itself
            for step in tl.static_range(((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K):
                acc = _k_step(A, W, LN_W, LN_B, rows, cols, row_ok, mean, rstd, split * k_slice + step * BLOCK_K,
                              acc, N, K, LN, UPCAST, BLOCK_K)
        else:
            for k0 in range(split * k_slice, tl.minimum((split + 1) * k_slice, K), BLOCK_K):
                acc = _k_step(A, W, LN_W, LN_B, rows, cols, row_ok, mean, rstd, k0, acc, N, K, LN, UPCAST,
                              BLOCK_K)
        if SPLIT > 1:
            tl.store(PART + split.to(tl.int64) * M * N + rows[:, None] * N + cols[None, :], acc, mask=out_ok)
        else:
            acc += tl.load(BIAS + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
            if GELU:  # exact (erf) GELU, as F.gelu
                acc = 0.5 * acc * (1 + tl.math.erf(acc * 0.7071067811865476))
            if RESIDUAL:
                acc += tl.load(RES + rows[:, None] * N + cols[None, :], mask=out_ok, other=0.0).to(tl.float32)
            tl.store(Y + rows[:, None] * N + cols[None, :], acc.to(Y.dtype.element_ty), mask=out_ok)


@triton.jit
def _reduce_phase(PART, BIAS, RES, Y, M, N, pid, NPROG: tl.constexpr, SPLIT: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Y = RES + BIAS + the SPLIT partial sums in PART (SPLIT, M, N), added in order, rounded once."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in range(pid, tl.cdiv(M, BLOCK_M) * tiles_n, NPROG):
        rows = (tile // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = (rows[:, None] < M) & (cols[None, :] < N)
        offsets = rows[:, None] * N + cols[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for split in range(SPLIT):
            acc += tl.load(PART + split * M * N + offsets, mask=ok, other=0.0)
        acc += tl.load(BIAS + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        acc += tl.load(RES + offsets, mask=ok, other=0.0).to(tl.float32)
        tl.store(Y + offsets, acc.to(Y.dtype.element_ty), mask=ok)


@triton.jit
def _attention_phase(QKV, KPM, Y, B, N, C, HEADS, HD, sm_scale, pid, NPROG: tl.constexpr,
                     HAS_MASK: tl.constexpr, UPCAST: tl.constexpr,
                     BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_HD: tl.constexpr):
    """Y (B·N, C) = causal attention of each head's queries over its keys in QKV (B·N, 3C), one task per
    (batch, head, block of queries); keys where KPM (B, N) is 0 are never attended. An online softmax in
    fp32, its probabilities rounded to the input dtype for the second product, as the reference's are.
    A query that sees no real key (a padded one) gets 0, never NaN."""
    q_blocks = tl.cdiv(N, BLOCK_Q)
    d = tl.arange(0, BLOCK_HD)
    d_ok = d < HD
    for task in range(pid, B * HEADS * q_blocks, NPROG):
        q_block, head, b = task % q_blocks, (task // q_blocks) % HEADS, task // (q_blocks * HEADS)
        first = b.to(tl.int64) * N  # this sequence's first row
        qi = q_block * BLOCK_Q + tl.arange(0, BLOCK_Q)  # query positions
        q_ok = qi < N
        q = tl.load(QKV + (first + qi)[:, None] * (3 * C) + head * HD + d[None, :],
                    mask=q_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_Q, BLOCK_HD)
        m_i = tl.full((BLOCK_Q,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_Q,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_Q, BLOCK_HD), dtype=tl.float32)
        for k0 in range(0, tl.minimum((q_block + 1) * BLOCK_Q, N), BLOCK_KV):
            kj = k0 + tl.arange(0, BLOCK_KV)  # key positions
            k_ok = kj < N
            k = tl.load(QKV + (first + kj)[None, :] * (3 * C) + C + head * HD + d[:, None],
                        mask=d_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_HD, BLOCK_KV) = kᵀ
            v = tl.load(QKV + (first + kj)[:, None] * (3 * C) + 2 * C + head * HD + d[None, :],
                        mask=k_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_KV, BLOCK_HD)
            if UPCAST:
                s = tl.dot(q.to(tl.float32), k.to(tl.float32)) * sm_scale
            else:
                s = tl.dot(q, k) * sm_scale  # (BLOCK_Q, BLOCK_KV)
            seen = (kj[None, :] <= qi[:, None]) & k_ok[None, :]
            if HAS_MASK:
                real = tl.load(KPM + b * N + kj, mask=k_ok, other=0) != 0
                seen = seen & real[None, :]
            s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: no NaN
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            p = p.to(v.dtype)
            if UPCAST:
                p, v = p.to(tl.float32), v.to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(Y + (first + qi)[:, None] * C + head * HD + d[None, :], out.to(Y.dtype.element_ty),
                 mask=q_ok[:, None] & d_ok[None, :])


@triton.jit
def _layer_kernel(
    X, LN1_W, LN1_B, W_QKV, B_QKV, W_O, B_O, LN2_W, LN2_B, W_1, B_1, W_2, B_2,  # input and weights
    KPM,  # (B, N) uint8 key padding mask, 1 = real (unused without HAS_MASK)
    QKV, Y, S, H, PART, OUT,  # scratch (B·N, 3C), (B·N, C), (B·N, C), (B·N, F), fp32 (SPLIT, B·N, C); output
    SYNC,  # int32 barrier count, one per layer, never reset
    B, N, C: tl.constexpr, F: tl.constexpr, HEADS, HD, eps1, eps2, sm_scale,
    RUN: tl.constexpr,  # bit i set: run phase i (0-based)
    BARRIERS: tl.constexpr,  # a grid barrier before each phase but the first (all phases in one launch)
    NPROG: tl.constexpr, HAS_MASK: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr,
    UNROLL: tl.constexpr,  # d_model and d_ff are compile-time constants either way
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_HD: tl.constexpr,
):
    pid = tl.program_id(0)
    M = B * N
    if RUN & 1:
        _linear_phase(X, W_QKV, B_QKV, X, QKV, LN1_W, LN1_B, PART, M, 3 * C, C, eps1, pid, NPROG, True, False,
                      False, 1, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 2:
        if BARRIERS:
            _grid_barrier(SYNC, pid, NPROG)
        _attention_phase(QKV, KPM, Y, B, N, C, HEADS, HD, sm_scale, pid, NPROG, HAS_MASK, UPCAST,
                         BLOCK_Q, BLOCK_KV, BLOCK_HD)
    if RUN & 4:
        if BARRIERS:
            _grid_barrier(SYNC, pid, NPROG)
        _linear_phase(Y, W_O, B_O, X, S, LN1_W, LN1_B, PART, M, C, C, eps1, pid, NPROG, False, False, True, 1,
                      UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 8:
        if BARRIERS:
            _grid_barrier(SYNC, pid, NPROG)
        _linear_phase(S, W_1, B_1, S, H, LN2_W, LN2_B, PART, M, F, C, eps2, pid, NPROG, True, True, False, 1,
                      UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 16:
        if BARRIERS:
            _grid_barrier(SYNC, pid, NPROG)
        _linear_phase(H, W_2, B_2, S, OUT, LN2_W, LN2_B, PART, M, C, F, eps2, pid, NPROG, False, False, True,
                      SPLIT, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 32:
        if BARRIERS:
            _grid_barrier(SYNC, pid, NPROG)
        _reduce_phase(PART, B_2, S, OUT, M, C, pid, NPROG, SPLIT, BLOCK_M, BLOCK_N)


def check_unrollable(d_model: int, d_ff: int, block_k: int, split: int) -> None:
    """ValueError, in one line, where an unrolled K loop (over d_model, or over a slice of fc2's d_ff) would take
    more than MAX_UNROLLED steps of `block_k`."""
    steps = max(math.ceil(d_model / block_k), math.ceil(math.ceil(d_ff / split) / block_k))
    if steps > MAX_UNROLLED:
        raise ValueError(f"unrolled, a K loop of d_model {d_model} takes {steps} steps of {block_k}, more than "
                         f"{MAX_UNROLLED}: take a larger BLOCK_K or split, or leave the loops rolled")


class MegakernelLayer(nn.Module):
    """The reference's layer as one persistent Triton kernel, or (`phases=True`, and always under the
    Triton interpreter) as its phases launched one after another. `split`: slices of fc2's K (default
    SPLIT on a GPU, 1 in the interpreter; a test forces more). `cooperative`: the persistent launch is a
    cooperative one (refused, not hung, where its programs cannot all be resident). `tiles`: GEMM tile sizes
    (BLOCK_M, BLOCK_N, BLOCK_K) in place of the defaults; `warps`, `stages`: each program's warps and its
    loops' pipelining depth on a GPU; `unroll`: the K loops unrolled, up to MAX_UNROLLED steps; `per_sm`:
    programs per SM, which must all be resident (`maxnreg`: each thread's register cap, so that they fit)
    (`parse_config`)."""

    def __init__(self, ref: ReferenceLayer, phases: bool = False, split: int | None = None,
                 cooperative: bool = True, tiles: dict[str, int] | None = None, warps: int = WARPS,
                 stages: int = STAGES, unroll: bool = False, per_sm: int = 1, maxnreg: int | None = None):
        super().__init__()
        self.d_model, self.n_heads = ref.d_model, ref.n_heads
        self.ln1, self.ln2 = ref.ln1, ref.ln2
        self.qkv_proj = fuse_qkv(ref)
        self.out_proj, self.fc1, self.fc2 = ref.out_proj, ref.fc1, ref.fc2
        self.phases = phases or INTERPRETED
        self.split = (1 if INTERPRETED else SPLIT) if split is None else split
        self.cooperative = cooperative
        self.tiles = (INTERPRETED_TILES if INTERPRETED else GPU_TILES) | (tiles or {})
        self.warps, self.stages, self.unroll, self.maxnreg = warps, stages, unroll, maxnreg
        if type(self.split) is not int or not 1 <= self.split <= 16:
            raise ValueError(f"split must be an integer from 1 to 16, got {split!r}")
        if unroll:
            check_unrollable(ref.d_model, ref.d_ff, self.tiles["BLOCK_K"], self.split)
        device = ref.ln1.weight.device
        self.programs = (INTERPRETED_PROGRAMS if INTERPRETED or device.type != "cuda"
                         else per_sm * torch.cuda.get_device_properties(device).multi_processor_count)
        self.register_buffer("sync", torch.zeros(1, dtype=torch.int32, device=device), persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        if x.device.type != "cuda" and not INTERPRETED:
            raise ValueError(f"x is on {x.device}: the kernel needs a CUDA GPU, or TRITON_INTERPRET=1 set before "
                             "Triton is imported")
        if x.dtype == torch.float32 and not INTERPRETED:
            raise TypeError("the kernel takes fp16 or bf16 on a GPU (its fp32 products would be TF32's)")
        B, N, C = x.shape
        F = self.fc1.out_features
        M, hd = B * N, C // self.n_heads
        split = self.split
        dtype = x.dtype
        rows = x.reshape(M, C).contiguous()
        qkv, y, s = (x.new_empty(M, width) for width in (3 * C, C, C))
        h, out = x.new_empty(M, F), x.new_empty(M, C)
        part = torch.empty(split, M, C, dtype=torch.float32, device=x.device) if split > 1 else out
        mask = rows if key_padding_mask is None else key_padding_mask.contiguous().view(torch.uint8)
        args = (rows, self.ln1.weight, self.ln1.bias, self.qkv_proj.weight, self.qkv_proj.bias,
                self.out_proj.weight, self.out_proj.bias, self.ln2.weight, self.ln2.bias,
                self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias, mask,
                qkv, y, s, h, part, out, self.sync,
                B, N, C, F, self.n_heads, hd, self.ln1.eps, self.ln2.eps, 1 / math.sqrt(hd))
        meta = dict(NPROG=self.programs, HAS_MASK=key_padding_mask is not None, SPLIT=split,
                    UPCAST=INTERPRETED and dtype == torch.bfloat16, UNROLL=self.unroll,
                    BLOCK_HD=max(16, triton.next_power_of_2(hd)), **self.tiles)
        options = {} if INTERPRETED else {"num_warps": self.warps, "num_stages": self.stages} | (
            {"maxnreg": self.maxnreg} if self.maxnreg else {})
        last = PHASES if split > 1 else PHASES - 1
        if self.phases:
            for phase in range(last):
                _layer_kernel[(self.programs,)](*args, RUN=1 << phase, BARRIERS=False, **meta, **options)
        else:
            _layer_kernel[(self.programs,)](*args, RUN=(1 << last) - 1, BARRIERS=True, **meta, **options,
                                            launch_cooperative_grid=self.cooperative)
        return out.view(B, N, C)


FACTORIES = {"megakernel": MegakernelLayer, "megakernel_phases": lambda ref: MegakernelLayer(ref, phases=True)}
DEFAULT_CONFIG = (f"{GPU_TILES['BLOCK_M']}x{GPU_TILES['BLOCK_N']}x{GPU_TILES['BLOCK_K']}/{SPLIT}"
                  f"/w{WARPS}s{STAGES}")
CONFIG_PATTERN = re.compile(r"(?P<BLOCK_M>\d+)x(?P<BLOCK_N>\d+)x(?P<BLOCK_K>\d+)/(?P<split>\d+)"
                            r"(?:/w(?P<warps>\d+)s(?P<stages>\d+)(?P<unroll>u?))?"
                            r"(?:/p(?P<per_sm>\d+))?(?:/r(?P<maxnreg>\d+))?")


def parse_config(text: str) -> dict[str, int | bool | None]:
    """"MxNxK/S[/wWsT[u]][/pP][/rR]" → the GEMM tile (BLOCK_M, BLOCK_N, BLOCK_K: powers of two from 16 to 256),
    fc2's split S (1 to 16), and optionally the warps W (1, 2, 4 or 8) and pipelining stages T (1 to 6) of
    each program, with u: the K loops unrolled (the stages then apply to the loops left: attention's); P
    programs per SM (1 to 4) and a cap of R registers per thread (32 to 255); ValueError in one line
    otherwise."""
    match = CONFIG_PATTERN.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"a configuration reads like {DEFAULT_CONFIG} (BLOCK_M x BLOCK_N x BLOCK_K / split, "
                         f"optionally / w warps s stages, u to unroll, / p programs per SM, / r registers), "
                         f"got {text!r}")
    given = {key: int(v) for key, v in match.groupdict().items() if v and key != "unroll"}
    sizes = dict(warps=WARPS, stages=STAGES, per_sm=1, maxnreg=None) | given | {"unroll": match["unroll"] == "u"}
    if not all(16 <= sizes[b] <= 256 and sizes[b] & (sizes[b] - 1) == 0 for b in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) \
            or not 1 <= sizes["split"] <= 16:
        raise ValueError(f"tile sizes must be powers of two from 16 to 256 and the split 1 to 16, got {text!r}")
    if sizes["warps"] not in (1, 2, 4, 8) or not 1 <= sizes["stages"] <= 6:
        raise ValueError(f"warps must be 1, 2, 4 or 8 and stages 1 to 6, got {text!r}")
    if not 1 <= sizes["per_sm"] <= 4 or not 32 <= (sizes["maxnreg"] or 32) <= 255:
        raise ValueError(f"programs per SM must be 1 to 4 and registers 32 to 255, got {text!r}")
    return sizes


def configured(config: str, phases: bool = False) -> Callable[[ReferenceLayer], nn.Module]:
    """A factory of the persistent layer (or its phases) with the tiles, split, warps, stages, unrolling,
    programs per SM and register cap of `config` (`parse_config`)."""
    sizes = parse_config(config)
    options = {key: sizes.pop(key) for key in ("split", "warps", "stages", "unroll", "per_sm", "maxnreg")}
    return lambda ref: MegakernelLayer(ref, phases=phases, tiles=sizes, **options)


def build(name: str, ref: ReferenceLayer) -> nn.Module:
    """An experiment layer (FACTORIES, or "megakernel CONFIG" for other tiles: `parse_config`) or a rung of the
    ladder."""
    if name in FACTORIES:
        return FACTORIES[name](ref)
    if name.startswith("megakernel "):
        return configured(name.removeprefix("megakernel "))(ref)
    return build_variant(name, ref)


def checks(shape, device: torch.device) -> list[dict]:
    """§3 of both experiment layers on `shape`, per dtype (CHECK_DTYPES) and padding (PADDINGS)."""
    records = []
    for dtype, padding in ((dtype, padding) for dtype in CHECK_DTYPES for padding in PADDINGS):
        case = Case(shape, dtype, device, padding)
        for name in FACTORIES:
            result = case.check_module(name, build(name, case.layer))
            records.append({"row": shape.row, "variant": name, "dtype": str(dtype).removeprefix("torch."),
                            "padding": padding, "err_ratio": result.err_ratio, "passed": result.passed,
                            "reason": result.reason})
    return records


def timing(name: str, case: Case, budget_s: float) -> dict:
    """Kernels, GPU µs in a graphed stack of LAYERS distinct layers and one call's latency of layer `name` on
    `case`; for an experiment layer, its §3 error ratio first."""
    shape, dtype, device = case.shape, case.dtype, case.device
    single = build(name, case.layer)
    checked = None if name in BASELINES else case.check_module(name, single)
    single(case.x)  # first call: compile, tune
    latency = time_layer_calls({name: lambda: single(case.x)}, device, budget_s=budget_s)[name]
    record = {"err_ratio": checked.err_ratio if checked else float("nan"),
              "passed": checked.passed if checked else None,
              "kernels_per_layer": kernels_per_call(single, case.x),
              "latency_us": float(np.median(latency)) * 1e3}
    if device.type == "cuda":
        stack = Stack([build(name, random_reference(shape, i, dtype, device)) for i in range(LAYERS)])
        try:
            record["gpu_us_per_layer"] = graph_gpu_us(capture(stack, case.x), device) / LAYERS
        except RuntimeError as exc:  # e.g. a driver that will not capture a cooperative launch
            record["reason"] = first_line(exc, 200)
    return record


def timings(shape, dtype: torch.dtype, device: torch.device, budget_s: float,
            configs: Sequence[str] = ()) -> list[dict]:
    """`timing` of the baselines, the experiment layers and the persistent one with the tiles of each of
    `configs`, on `shape`. A configuration this GPU cannot compile or launch (too many registers or programs
    for its SMs) is recorded with the reason, and the run goes on."""
    case = Case(shape, dtype, device)
    records = []
    for name in (*BASELINES, *FACTORIES, *(f"megakernel {config}" for config in configs)):
        record = {"row": shape.row, "shape": shape.label, "variant": name}
        try:
            record |= timing(name, case, budget_s)
        except Exception as exc:  # noqa: BLE001 - a configuration's own failure, recorded in its row
            if not name.startswith("megakernel "):
                raise
            record |= {"passed": False, "reason": first_line(exc, 200)}
        records.append(record)
        free_memory(device)
    return records


def phase_times(shape, dtype: torch.dtype, device: torch.device, configs: Sequence[str] = ()) -> list[dict]:
    """Where the persistent layer's time goes on `shape`, per configuration: each phase's kernel µs, profiled
    with the phases launched one by one, beside the persistent kernel's µs. The persistent kernel's excess
    over the phases' sum is what its grid barriers cost beyond the ramp-ups they replace."""
    case = Case(shape, dtype, device)
    records = []
    for config in (DEFAULT_CONFIG, *configs):
        record = {"row": shape.row, "shape": shape.label, "config": config}
        try:
            phases = kernel_timeline(configured(config, phases=True)(case.layer), case.x).duration_us
            whole = kernel_timeline(configured(config)(case.layer), case.x).duration_us
            record |= {**dict(zip(PHASE_NAMES, phases.tolist())), "sum_of_phases": float(phases.sum()),
                       "persistent": float(whole.sum())}
        except Exception as exc:  # noqa: BLE001 - as in `timings`
            record["reason"] = first_line(exc, 200)
        records.append(record)
        free_memory(device)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV files")
    parser.add_argument("--rows", help="suite rows (default: 1-5 on CUDA, the smoke suite on the CPU)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--budget", type=float, default=0.3, help="timing seconds per layer (default 0.3)")
    parser.add_argument("--configs", default="", help="more tiles to time, comma-separated, e.g. "
                        f"64x64x64/4,16x64x128/8/w8s3 (the default, {DEFAULT_CONFIG}, is always timed)")
    parser.add_argument("--checks", action=argparse.BooleanOptionalAction, default=True,
                        help="§3 of both experiment layers in every dtype and padding first (default: on; "
                        "each configuration timed is checked in fp16 either way)")
    args = parser.parse_args(argv)
    try:
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        device = resolve_device(args.device)
        gpu = device.type == "cuda"
        rows = select_rows(args.rows or ("1-5" if gpu else None), SUITE if gpu else SMOKE_SUITE)
        for sizes in map(parse_config, configs):
            for shape in rows if sizes["unroll"] else ():
                check_unrollable(shape.d_model, shape.d_ff, sizes["BLOCK_K"], sizes["split"])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if device.type != "cuda" and not INTERPRETED:
        print("error: without a GPU the kernel runs only through the Triton interpreter: set TRITON_INTERPRET=1",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(device, torch.float16)
    stem = f"layer_megakernel_{env['device'].lower().replace(' ', '-')}_fp16_{env['date']}"
    failed = pd.DataFrame()
    if args.checks:
        verdicts = pd.DataFrame([r for shape in progress_bar(rows, desc="§3", unit="row")
                                 for r in checks(shape, device)]).assign(
            **{k: v for k, v in env.items() if k != "dtype"})  # each check names its own dtype
        verdicts.to_csv(out / f"{stem}_checks.csv", index=False)
        failed = verdicts[~verdicts.passed.astype(bool)]
        print(f"§3: {len(verdicts) - len(failed)} of {len(verdicts)} checks pass"
              + "".join(f"\n  FAIL row {r.row} {r.variant} {r.dtype} {r.padding}: {r.reason}"
                        for r in failed.itertuples()))
    times = pd.DataFrame([r for shape in progress_bar(rows, desc="timings", unit="row")
                          for r in timings(shape, torch.float16, device, args.budget, configs)]).assign(**env)
    times.to_csv(out / f"{stem}.csv", index=False)
    if device.type != "cuda":
        print("On the CPU the Triton interpreter runs the kernel: kernels_per_layer counts the aten ops it calls, "
              "and the times say nothing about a GPU.")
    print(markdown_table(times.drop(columns=list(env))))
    if device.type == "cuda":  # the interpreter's kernels are not on a GPU's time axis
        phases = pd.DataFrame([r for shape in progress_bar(rows, desc="phases", unit="row")
                               for r in phase_times(shape, torch.float16, device, configs)]).assign(**env)
        phases.to_csv(out / f"{stem}_phases.csv", index=False)
        print("Kernel µs per phase (profiled, launched one by one) and of the persistent kernel:")
        print(markdown_table(phases.drop(columns=list(env))))
    return 0 if failed.empty and not times.passed.eq(False).any() else 1  # a configuration failing §3 or to run: 1


if __name__ == "__main__":
    sys.exit(main())
