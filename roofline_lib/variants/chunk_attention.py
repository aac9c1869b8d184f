"""Attention of one chunk of queries against the key/value cache up to the chunk's end.

The chunk's L queries sit at absolute positions [q_offset, q_offset + L) and see the keys
[0, q_offset + L): the causal mask is aligned bottom-right. SDPA's `is_causal` aligns it top-left when
query and key lengths differ, so `is_causal` is only right on the square diagonal block. Strategies:

- "split_<kernel>": the keys before the chunk (no causal mask needed) and the square diagonal block
  (`is_causal` right there) go through <kernel> separately; each part also returns its log-sum-exp,
  and the two are merged exactly, as softmax over the union of two disjoint key sets.
- "lower_right": one SDPA call with `torch.nn.attention.bias.causal_lower_right` (flash on CUDA).
- "cudnn_causal": one cuDNN call with `is_causal`; used only where the self-check shows that cuDNN
  aligns it bottom-right.
- "mask": one SDPA call with the explicit boolean mask; portable, but O(B·L·S) bytes of mask.

The split kernels other than "math" are private aten ops. Each strategy is used only after
`self_check` has run it on a small odd-sized problem, laid out as in the layer, and found it equal to
exact float64 attention; `resolve` names why a strategy was passed over.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn.attention.bias import causal_lower_right

from ..core.outcome import first_line
from .parts import causal_padding_mask
from .sdpa import backend_switched_off
from .sdpa_offsets import BIAS_ROW_ALIGNMENT, addressable, by_head_groups, head_groups, sdpa

Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]  # (q, k, v, mask, is_causal) → (out, lse)


def _row_lse(lse: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A kernel's log-sum-exp, (B, H, L), (B, H, L, 1) or padded (B, H, L_padded), as (B, H, L)."""
    B, H, L, _ = q.size()
    return lse.reshape(B, H, -1)[..., :L]


def _additive_bias(mask: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Boolean mask (B, 1, 1 or L, S), True = attend, as a 0/-inf bias in q's dtype broadcast to (B, H, L, S).

    The bias rows are padded to a multiple of BIAS_ROW_ALIGNMENT elements, as the fused kernels want them aligned.
    """
    B, H, L, _ = q.size()
    S = mask.shape[-1]
    row = -(-S // BIAS_ROW_ALIGNMENT) * BIAS_ROW_ALIGNMENT
    storage = torch.zeros(*mask.shape[:-1], row, dtype=q.dtype, device=q.device)
    bias = storage[..., :S].masked_fill_(~mask, float("-inf"))  # (B, 1, 1 or L, S)
    return bias.expand(B, H, L, S)


def attend_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention in at least float32, written out: q (B, H, L, hd), k and v (B, H, S, hd).

    `is_causal` aligns top-left (use it on square blocks); `mask` (B, 1, 1 or L, S) bool, True = attend.
    Returns the output (B, H, L, hd) in q's dtype and the log-sum-exp (B, H, L), -inf for rows that see no key
    (their output is 0).
    """
    acc = torch.promote_types(q.dtype, torch.float32)
    L, S = q.size(2), k.size(2)
    s = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * q.size(-1) ** -0.5  # (B, H, L, S)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H, L)
    p = torch.exp(s - lse.masked_fill(lse == float("-inf"), 0).unsqueeze(-1))  # (B, H, L, S), rows sum to 1 or 0
    return (p @ v.to(acc)).to(q.dtype), lse


def attend_cudnn(q, k, v, mask=None, is_causal=False):
    """cuDNN's fused attention, with its log-sum-exp (private aten op)."""
    bias = None if mask is None else _additive_bias(mask, q)
    out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, True, 0.0, is_causal, False)[:2]
    return out, _row_lse(lse, q)


def attend_flash(q, k, v, mask=None, is_causal=False):
    """FlashAttention-2, with its log-sum-exp (private aten op); takes no mask."""
    if mask is not None:
        raise ValueError("the flash kernel takes no mask")
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False)[:2]
    return out, _row_lse(lse, q)


def attend_efficient(q, k, v, mask=None, is_causal=False):
    """The memory-efficient (xFormers) kernel, with its log-sum-exp (private aten op), its 32-bit offsets
    kept in range (variants.sdpa_offsets; the bias here is chunk-sized or one row for all queries)."""
    k, v = addressable(k, v)
    if len(head_groups(q, k, v)) > 1:
        outs, lses = zip(*by_head_groups(lambda *a: attend_efficient(*a, is_causal=is_causal), q, k, v, mask))
        return torch.cat(outs, dim=1), torch.cat(lses, dim=1)
    bias = None if mask is None else _additive_bias(mask, q)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, is_causal)[:2]
    return out, _row_lse(lse, q)


def merge(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """Attention over two disjoint key sets from each part's output (B, H, L, hd) and log-sum-exp (B, H, L).

    The first part's share of the softmax mass is exp(lse1) / (exp(lse1) + exp(lse2)) = sigmoid(lse1 − lse2).
    """
    share = torch.sigmoid(lse1 - lse2).to(o1.dtype).unsqueeze(-1)  # (B, H, L, 1)
    return torch.lerp(o2, o1, share)


def _empty_rows_zeroed(out: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that saw no key set to output 0 and lse -inf, whatever the kernel left there (0, NaN, ±inf)."""
    empty = ~torch.isfinite(lse)  # (B, H, L)
    return out.masked_fill(empty.unsqueeze(-1), 0), lse.masked_fill(empty, float("-inf"))


class SplitMerge:
    """The keys before the chunk and the diagonal block through one kernel each, merged by log-sum-exp."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int,
                 key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        L = q.size(2)
        k_diag, v_diag = k[:, :, q_offset:], v[:, :, q_offset:]  # (B, H, L, hd): the square block
        if key_padding_mask is None:
            out, lse = self.kernel(q, k_diag, v_diag, None, True)
        else:
            diag_mask = causal_padding_mask(key_padding_mask[:, q_offset:], L)  # (B, 1, L, L)
            out, lse = self.kernel(q, k_diag, v_diag, diag_mask, False)
        if q_offset == 0:
            return out
        prefix_mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :q_offset]  # (B, 1, 1, P)
        out_p, lse_p = self.kernel(q, k[:, :, :q_offset], v[:, :, :q_offset], prefix_mask, False)
        if key_padding_mask is not None:  # a prefix that is all padding for some batch element
            out_p, lse_p = _empty_rows_zeroed(out_p, lse_p)
        return merge(out_p, lse_p, out, lse)


def lower_right(q, k, v, q_offset, key_padding_mask=None):
    """One SDPA call with the bottom-right causal bias; no padding."""
    return sdpa(q, k, v, attn_mask=causal_lower_right(q.size(2), k.size(2)))


def cudnn_causal(q, k, v, q_offset, key_padding_mask=None):
    """One cuDNN call with `is_causal`: right only if cuDNN aligns it bottom-right (see `self_check`)."""
    return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, True, False)[0]


def explicit_mask(q, k, v, q_offset, key_padding_mask=None):
    """One SDPA call with the boolean causal (and padding) mask of the chunk's rows, (B, 1, L, S)."""
    B, S = q.size(0), k.size(2)
    if key_padding_mask is None:
        key_padding_mask = torch.ones(B, S, dtype=torch.bool, device=q.device)  # (B, S)
    return sdpa(q, k, v, attn_mask=causal_padding_mask(key_padding_mask, q.size(2), q_offset))


@dataclass(frozen=True)
class Strategy:
    """One way to attend a chunk: attend(q, k, v, q_offset, key_padding_mask) → (B, H, L, hd)."""

    attend: Callable[..., torch.Tensor]
    takes_padding: bool
    needs_cuda: bool
    kernel: str | None = None  # the SDPA backend its private op is ("cudnn", "flash", "efficient"), if any


STRATEGIES: dict[str, Strategy] = {
    "split_cudnn": Strategy(SplitMerge(attend_cudnn), takes_padding=True, needs_cuda=True, kernel="cudnn"),
    "split_flash": Strategy(SplitMerge(attend_flash), takes_padding=False, needs_cuda=True, kernel="flash"),
    "split_efficient": Strategy(SplitMerge(attend_efficient), takes_padding=True, needs_cuda=True,
                                kernel="efficient"),
    "split_math": Strategy(SplitMerge(attend_math), takes_padding=True, needs_cuda=False),
    "lower_right": Strategy(lower_right, takes_padding=False, needs_cuda=False),
    "cudnn_causal": Strategy(cudnn_causal, takes_padding=False, needs_cuda=True, kernel="cudnn"),
    "mask": Strategy(explicit_mask, takes_padding=True, needs_cuda=False),
}

# "auto" takes the first of these that passes its self-check, in the speed order expected on an H100/H200
# (the long-context benchmark measures it). "cudnn_causal" is left out: it is right only if cuDNN aligns
# `is_causal` bottom-right, which the benchmark's self-check reports. split_math materializes scores.
AUTO = {"cuda": ("split_cudnn", "lower_right", "split_flash", "split_efficient", "mask"),
        "cpu": ("split_math", "lower_right", "mask")}
AUTO_PADDED = {"cuda": ("split_cudnn", "split_efficient", "mask"), "cpu": ("split_math", "mask")}


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int,
                    key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The chunk's attention in float64 with the explicit bottom-right mask: what every strategy must match."""
    B, S = q.size(0), k.size(2)
    real = torch.ones(B, S, dtype=torch.bool, device=q.device) if key_padding_mask is None else key_padding_mask
    mask = causal_padding_mask(real, q.size(2), q_offset)  # (B, 1, L, S)
    return attend_math(q.double(), k.double(), v.double(), mask)[0]


def self_check_problem(head_dim: int, dtype: torch.dtype, device: torch.device, q_offset: int, padded: bool,
                       batch: int = 2, heads: int = 3, length: int = 37):
    """A small seeded chunk problem laid out as in the layer: q a view of the chunk's fused (B, L, 3, H, hd)
    projection, k and v views of a (B, N, 2, H, hd) cache longer than the chunk's end S = q_offset + L.

    With `padded`, random holes in the keys, and batch element 1 has every key before the chunk padded.
    Returns q (B, H, L, hd), k, v (B, H, S, hd), key_padding_mask (B, S) or None.
    """
    gen = torch.Generator().manual_seed(q_offset + length)
    S = q_offset + length
    qkv = torch.randn(batch, length, 3, heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    kv = torch.randn(batch, S + 5, 2, heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    q = qkv[:, :, 0].transpose(1, 2)  # (B, H, L, hd)
    k, v = kv[:, :S].permute(2, 0, 3, 1, 4)  # each (B, H, S, hd)
    mask = None
    if padded:
        mask = torch.rand(batch, S, generator=gen) > 0.3
        mask[1, :q_offset] = False
        mask[:, -1] = True
        mask = mask.to(device)
    return q, k, v, mask


def tolerance(dtype: torch.dtype) -> float:
    """Largest relative error a strategy may show in the self-check (a misaligned mask gives O(1))."""
    return max(4 * torch.finfo(dtype).eps, 1e-5)


@functools.lru_cache(maxsize=None)
def self_check(name: str, device: torch.device, dtype: torch.dtype, head_dim: int, padded: bool = False) -> str | None:
    """None if strategy `name` computes the chunk's attention right on `device`, else the reason it does not."""
    strategy = STRATEGIES[name]
    if strategy.needs_cuda and device.type != "cuda":
        return f"{name} needs a CUDA GPU"
    if padded and not strategy.takes_padding:
        return f"{name} takes no key_padding_mask"
    for q_offset in (91, 0):
        q, k, v, key_padding_mask = self_check_problem(head_dim, dtype, device, q_offset, padded)
        try:
            got = strategy.attend(q, k, v, q_offset, key_padding_mask)
        except Exception as exc:  # a private kernel that cannot take these inputs: report, never use
            return f"{name} failed on {device.type} {dtype}: {type(exc).__name__}: {first_line(exc, 200)}"
        want = exact_attention(q, k, v, q_offset, key_padding_mask)  # (B, H, L, hd)
        rows = (torch.ones(q.shape[0], q.shape[2], dtype=torch.bool, device=device) if key_padding_mask is None
                else key_padding_mask[:, q_offset:])  # (B, L): the real query rows
        diff = (got.double() - want).transpose(1, 2)[rows]  # (n_rows, H, hd)
        err = float(torch.linalg.norm(diff) / torch.linalg.norm(want.transpose(1, 2)[rows]))
        if not err <= tolerance(dtype):
            return (f"{name} disagrees with exact bottom-right causal attention on {device.type} {dtype} "
                    f"(relative error {err:.3g} > {tolerance(dtype):.1g}, q_offset {q_offset})")
    return None


def strategy_switched_off(name: str) -> str | None:
    """Why strategy `name` may not run now: its kernel's SDPA backend is switched off, which its private
    op would ignore."""
    kernel = STRATEGIES[name].kernel
    why = None if kernel is None else backend_switched_off(kernel)
    return None if why is None else f"{name}: {why}"


class StrategyUnavailable(RuntimeError):
    """No attention strategy asked for can run here; the message says why."""


def resolve(name: str, device: torch.device, dtype: torch.dtype, head_dim: int,
            padded: bool = False) -> tuple[str, list[str]]:
    """The strategy to use for `name` ("auto" or a key of STRATEGIES), and why others were passed over.

    "auto" gives the first of AUTO (AUTO_PADDED with `padded`) that passes its self-check. A named
    strategy must pass (StrategyUnavailable otherwise); with `padded`, a named strategy that takes no
    padding or fails is followed by AUTO_PADDED, since the name picks the kernel for unpadded calls.
    """
    if name != "auto" and name not in STRATEGIES:
        raise ValueError(f"unknown attention {name!r}: use 'auto' or one of {', '.join(STRATEGIES)}")
    auto = (AUTO_PADDED if padded else AUTO)["cuda" if device.type == "cuda" else "cpu"]
    candidates = auto if name == "auto" else (name, *auto) if padded else (name,)
    notes = []
    for candidate in candidates:
        reason = strategy_switched_off(candidate) or self_check(candidate, device, dtype, head_dim, padded)
        if reason is None:
            if name == "auto" and notes and not padded and device.type == "cuda":
                warnings.warn(f"attention 'auto' fell back to {candidate}: " + "; ".join(notes), stacklevel=2)
            return candidate, notes
        notes.append(reason)
    raise StrategyUnavailable(f"no attention strategy for {name!r} passes here: " + "; ".join(notes))
