"""The whole layer in one persistent Triton kernel, for the launch-bound rows.

On short rows the rungs launch 9–11 kernels per layer, and inside a CUDA graph each still costs a launch
gap and a ramp-up of a few microseconds: kernel count sets the time there, not FLOPs or bytes. Here the
count is one. `NPROG` programs (per SM: `per_sm`) stay resident for the whole layer and walk six phases,
each a loop over that phase's tiles, with a grid-wide barrier between phases:

1. qkv = LayerNorm₁(x) @ W_qkvᵀ + b (LayerNorm in the GEMM's prologue, as in `fused_linear`);
2. causal attention per (batch, head, block of queries), online softmax, padded keys never seen;
3. s = x + y @ W_oᵀ + b_o;
4. h = GELU(LayerNorm₂(s) @ W₁ᵀ + b₁);
5. fc2 over `split` slices of its long K (4·d_model), fp32 partial sums, so that a short row still
   gives every program a tile;
6. out = s + b₂ + the partial sums, added in a fixed order (deterministic); with no split, fc2 adds b₂
   and s itself, and there are five phases.

The barrier is the cooperative-groups one: a count whose top bit flips once per barrier, so it never
needs a reset, between barriers or between calls. Every program must be resident at once, so the launch
is cooperative: where they cannot all be resident (another kernel holding SMs), the driver refuses it
instead of letting it wait forever. One count per layer: a layer must not run on two streams at once.
No phase reads a line another program wrote before the barrier it waits at, and a new launch starts
with clean L1 caches, so plain loads see the writes.

With `phases=True` (always under TRITON_INTERPRET=1, whose programs run one after another and would wait
forever at a barrier) the same kernel runs as one launch per phase: the CPU tests check the phases'
arithmetic that way, and on a GPU the pair measures what the launches between phases cost.

Tiles, warps and pipelining stages are a `WholeLayerConfig` (`WholeLayerConfig.parse` reads the text form
the benchmark takes); the default is the one measured fastest on suite row 1 of an H200
(results/README.md, "The whole layer in one persistent kernel").
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .epilogue import epilogue
from .fused_linear import k_step, row_stats, stats_step
from .launch import INTERPRETED, fitting

PHASE_NAMES = ("ln1+qkv", "attention", "out_proj+residual", "ln2+fc1+gelu", "fc2", "reduce")
PHASES = len(PHASE_NAMES)
MAX_UNROLLED = 32  # most steps an unrolled K loop may take (check_unrollable): past it, compiling takes many minutes
ATTENTION_TILES = dict(BLOCK_Q=16, BLOCK_KV=16) if INTERPRETED else dict(BLOCK_Q=64, BLOCK_KV=64)
INTERPRETED_PROGRAMS = 3  # the interpreter's programs: more than one, so each phase's tile loop strides


@triton.jit
def grid_barrier(SYNC, pid, NPROG: tl.constexpr):
    """Return once all NPROG programs have called it. Program 0 adds 2³¹ − (NPROG − 1) to the count, every
    other program 1: the top bit flips and the low bits come back, so the count needs no reset."""
    tl.debug_barrier()  # this program's stores are issued before it says it has arrived
    arrived = tl.atomic_add(SYNC, tl.where(pid == 0, 2147483649 - NPROG, 1), sem="release")
    now = tl.atomic_add(SYNC, 0, sem="acquire")
    while ((arrived ^ now) & -2147483648) == 0:
        now = tl.atomic_add(SYNC, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def linear_phase(A, W, BIAS, RES, Y, LN_W, LN_B, PART, M, N, K: tl.constexpr, eps, pid, NPROG: tl.constexpr,
                 LN: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr, SPLIT: tl.constexpr,
                  UPCAST: tl.constexpr, UNROLL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    """Y (M, N) = residual + act(LayerNorm(A) @ Wᵀ + bias) over tiles `pid`, `pid` + NPROG, …; A (M, K) and
    W (N, K) contiguous. With SPLIT > 1, each task is one tile's slice of K, stored as an fp32 partial sum
    into PART (SPLIT, M, N) for `reduce_phase`; the epilogue is left to it. UNROLL: the K loops unrolled,
    so that their loads can be issued together."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    k_slice = ((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K * BLOCK_K  # whole steps
    for task in range(pid, tiles * SPLIT, NPROG):
        tile, split = task % tiles, task // tiles
        rows = (tile // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows[:, None] < M
        a_rows = A + rows[:, None] * K  # (BLOCK_M, 1)
        mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
        rstd = tl.zeros((BLOCK_M,), dtype=tl.float32)
        if LN:
            mean, rstd = row_stats(A, rows, M, K, K, eps, UNROLL, BLOCK_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if UNROLL:  # steps past K (the last slice's) load nothing: k_step masks them
            # k_slice // BLOCK_K, spelt out: a local computed from constexprs is not one itself
            for step in tl.static_range(((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K):
                acc = k_step(a_rows, W, LN_W, LN_B, cols, row_ok, mean, rstd, split * k_slice + step * BLOCK_K,
                             acc, N, K, LN, False, UPCAST, BLOCK_K)
        else:
            for k0 in range(split * k_slice, tl.minimum((split + 1) * k_slice, K), BLOCK_K):
                acc = k_step(a_rows, W, LN_W, LN_B, cols, row_ok, mean, rstd, k0, acc, N, K, LN, False, UPCAST,
                             BLOCK_K)
        if SPLIT > 1:
            tl.store(PART + split.to(tl.int64) * M * N + rows[:, None] * N + cols[None, :], acc,
                     mask=row_ok & (cols[None, :] < N))
        else:
            epilogue(acc, BIAS, RES, Y, rows, cols, row_ok, N, GELU, RESIDUAL)


@triton.jit
def reduce_phase(PART, BIAS, RES, Y, M, N, pid, NPROG: tl.constexpr, SPLIT: tl.constexpr,
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
        epilogue(acc, BIAS, RES, Y, rows, cols, rows[:, None] < M, N, False, True)


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
        linear_phase(X, W_QKV, B_QKV, X, QKV, LN1_W, LN1_B, PART, M, 3 * C, C, eps1, pid, NPROG, True, False,
                     False, 1, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 2:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        _attention_phase(QKV, KPM, Y, B, N, C, HEADS, HD, sm_scale, pid, NPROG, HAS_MASK, UPCAST,
                         BLOCK_Q, BLOCK_KV, BLOCK_HD)
    if RUN & 4:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        linear_phase(Y, W_O, B_O, X, S, LN1_W, LN1_B, PART, M, C, C, eps1, pid, NPROG, False, False, True, 1,
                     UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 8:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        linear_phase(S, W_1, B_1, S, H, LN2_W, LN2_B, PART, M, F, C, eps2, pid, NPROG, True, True, False, 1,
                     UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 16:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        linear_phase(H, W_2, B_2, S, OUT, LN2_W, LN2_B, PART, M, C, F, eps2, pid, NPROG, False, False, True,
                     SPLIT, UPCAST, UNROLL, BLOCK_M, BLOCK_N, BLOCK_K)
    if RUN & 32:
        if BARRIERS:
            grid_barrier(SYNC, pid, NPROG)
        reduce_phase(PART, B_2, S, OUT, M, C, pid, NPROG, SPLIT, BLOCK_M, BLOCK_N)


@dataclass(frozen=True)
class WholeLayerConfig:
    """How the kernel runs on a GPU: the GEMM tile, fc2's split of K, each program's warps and its loops'
    pipelining depth, the K loops unrolled (up to MAX_UNROLLED steps; the stages then apply to the loops left:
    attention's), programs per SM (all resident at once) and a cap on each thread's registers (so they fit)."""

    block_m: int = 32
    block_n: int = 64
    block_k: int = 128
    split: int = 4
    warps: int = 8
    stages: int = 3
    unroll: bool = False
    per_sm: int = 1
    maxnreg: int | None = None

    PATTERN = re.compile(r"(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)/(?P<split>\d+)"
                         r"(?:/w(?P<warps>\d+)s(?P<stages>\d+)(?P<unroll>u?))?"
                         r"(?:/p(?P<per_sm>\d+))?(?:/r(?P<maxnreg>\d+))?")

    def __post_init__(self) -> None:
        numbers = (self.block_m, self.block_n, self.block_k, self.split, self.warps, self.stages, self.per_sm)
        if not all(type(n) is int for n in numbers) or type(self.unroll) is not bool \
                or not (self.maxnreg is None or type(self.maxnreg) is int):
            raise ValueError(f"a configuration's fields are integers (unroll a bool, maxnreg also None), got {self!r}")
        tiles = (self.block_m, self.block_n, self.block_k)
        if not all(16 <= b <= 256 and b & (b - 1) == 0 for b in tiles) or not 1 <= self.split <= 16:
            raise ValueError(f"tile sizes must be powers of two from 16 to 256 and the split 1 to 16, got {self.label}")
        if self.warps not in (1, 2, 4, 8) or not 1 <= self.stages <= 6:
            raise ValueError(f"warps must be 1, 2, 4 or 8 and stages 1 to 6, got {self.label}")
        if not 1 <= self.per_sm <= 4 or not (self.maxnreg is None or 32 <= self.maxnreg <= 255):
            raise ValueError(f"programs per SM must be 1 to 4 and registers 32 to 255, got {self.label}")

    @property
    def label(self) -> str:
        """The text form `parse` reads: "MxNxK/S/wWsT[u][/pP][/rR]"."""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}/{self.split}/w{self.warps}s{self.stages}"
                f"{'u' if self.unroll else ''}{f'/p{self.per_sm}' if self.per_sm > 1 else ''}"
                f"{'' if self.maxnreg is None else f'/r{self.maxnreg}'}")

    @classmethod
    def parse(cls, text: str) -> WholeLayerConfig:
        """"MxNxK/S[/wWsT[u]][/pP][/rR]" → a config (the fields not given keep their defaults); ValueError in
        one line for any other text or out-of-range values."""
        match = cls.PATTERN.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"a configuration reads like {cls().label} (BLOCK_M x BLOCK_N x BLOCK_K / split, "
                             f"optionally / w warps s stages, u to unroll, / p programs per SM, / r registers), "
                             f"got {text!r}")
        given = {key: int(v) for key, v in match.groupdict().items() if v and key != "unroll"}
        return cls(**given, unroll=match["unroll"] == "u")

    def check_unrollable(self, d_model: int, d_ff: int) -> None:
        """ValueError, in one line, where an unrolled K loop would take more than MAX_UNROLLED steps: the GEMMs'
        over d_model or a slice of fc2's d_ff in steps of BLOCK_K, the LayerNorm statistics' over d_model in
        steps of `stats_step(BLOCK_M)` columns (`fused_linear.row_stats`)."""
        gemm, stats = "a larger BLOCK_K or split", "a smaller BLOCK_M"  # what shortens each loop
        loops = {f"d_model {d_model}": (d_model, self.block_k, gemm),
                 f"a 1/{self.split} slice of d_ff {d_ff}": (math.ceil(d_ff / self.split), self.block_k, gemm),
                 f"d_model {d_model} for the LayerNorm statistics": (d_model, stats_step(self.block_m),
                                                                      stats)}
        for loop, (length, step, remedy) in loops.items() if self.unroll else ():
            steps = math.ceil(length / step)
            if steps > MAX_UNROLLED:
                raise ValueError(f"unrolled, the K loop over {loop} takes {steps} steps of {step}, more than "
                                 f"{MAX_UNROLLED}: take {remedy}, or leave the loops rolled")


INTERPRETED_CONFIG = WholeLayerConfig(16, 32, 32, split=1)  # small tiles: the interpreter is slow


def default_config() -> WholeLayerConfig:
    """The configuration measured fastest on row 1 of an H200, or the interpreter's small one."""
    return INTERPRETED_CONFIG if INTERPRETED else WholeLayerConfig()


def whole_layer_forward(x: torch.Tensor, key_padding_mask: torch.Tensor | None, layer, config: WholeLayerConfig,
                        programs: int, sync: torch.Tensor, phases: bool = False) -> torch.Tensor:
    """The layer of `layer` (a module with the reference's ln1, ln2, out_proj, fc1, fc2, n_heads and a fused
    `qkv_proj`) on x (B, N, C) → (B, N, C): one persistent launch of `programs` programs synchronised through
    `sync` (int32, one per layer), or with `phases` (and always in the interpreter) one launch per phase."""
    B, N, C = x.shape
    F = layer.fc1.out_features
    M, hd = B * N, C // layer.n_heads
    split = config.split
    rows = x.reshape(M, C).contiguous()
    qkv, y, s = (x.new_empty(M, width) for width in (3 * C, C, C))
    h, out = x.new_empty(M, F), x.new_empty(M, C)
    part = torch.empty(split, M, C, dtype=torch.float32, device=x.device) if split > 1 else out
    mask = rows if key_padding_mask is None else key_padding_mask.contiguous().view(torch.uint8)
    args = (rows, layer.ln1.weight, layer.ln1.bias, layer.qkv_proj.weight, layer.qkv_proj.bias,
            layer.out_proj.weight, layer.out_proj.bias, layer.ln2.weight, layer.ln2.bias,
            layer.fc1.weight, layer.fc1.bias, layer.fc2.weight, layer.fc2.bias, mask,
            qkv, y, s, h, part, out, sync,
            B, N, C, F, layer.n_heads, hd, layer.ln1.eps, layer.ln2.eps, 1 / math.sqrt(hd))
    tiles = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, **ATTENTION_TILES)
    meta = dict(NPROG=programs, HAS_MASK=key_padding_mask is not None, SPLIT=split,
                UPCAST=INTERPRETED and x.dtype == torch.bfloat16, UNROLL=config.unroll,
                BLOCK_HD=max(16, triton.next_power_of_2(hd)), **tiles)
    options = {} if INTERPRETED else {"num_warps": config.warps, "num_stages": config.stages} | (
        {"maxnreg": config.maxnreg} if config.maxnreg else {})
    last = PHASES if split > 1 else PHASES - 1
    with fitting(config.label):
        if phases or INTERPRETED:
            for phase in range(last):
                _layer_kernel[(programs,)](*args, RUN=1 << phase, BARRIERS=False, **meta, **options)
        else:
            _layer_kernel[(programs,)](*args, RUN=(1 << last) - 1, BARRIERS=True, **meta, **options,
                                       launch_cooperative_grid=True)
    return out.view(B, N, C)
