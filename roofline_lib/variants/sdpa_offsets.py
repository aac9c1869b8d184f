"""SDPA calls kept inside the 32-bit offsets of its memory-efficient kernel.

PyTorch's memory-efficient attention kernel (`mem_eff_attention/kernel_forward.h`; torch 2.13's header
still has the first two) computes offsets in 32-bit arithmetic: a block of keys and values at
`key_index × row_stride` (signed: wrong from 2^31 elements on), a head at `head_index × head_stride`
(unsigned: from 2^32 on), and, in releases before pytorch/pytorch#187225, a row of an attention bias at
`query_index × bias_row_stride` (unsigned). Past them it reads other memory: a silently wrong result where
that memory is mapped, an illegal memory access where it is not. The layers' keys and values are views
into a fused projection (row stride 3·d_model, or 2·d_model in the chunked layer's cache), so the
full-sequence layer reaches the first limit at N = 2^31 / (3·d_model): 699,051 tokens at d_model 1024. On a
T4, where flash and cuDNN attention do not exist, that kernel is the one SDPA runs.

`sdpa` is `F.scaled_dot_product_attention` with every such offset in range, whatever backend SDPA then
picks (flash and cuDNN would not need it, but which one runs is SDPA's choice): keys and values are copied
to a compact (B, H, S, hd) layout where their rows would pass the first limit (memory estimates count the
copies: `compact_copy_bytes`), the heads go in groups where a head's offset would pass the second, and the
queries go in blocks where the rows of a mask would pass the third. Inside the limits (every shape of the
suite) it is the plain call.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias

KEY_OFFSET_LIMIT = 2**31  # elements: key_index × row_stride, signed 32-bit
HEAD_OFFSET_LIMIT = 2**32  # elements: head_index × head_stride, unsigned 32-bit
BIAS_OFFSET_LIMIT = 2**32  # elements: query_index × bias_row_stride, unsigned 32-bit
BIAS_ROW_ALIGNMENT = 16  # SDPA pads a bias row to a multiple of 8 or 16 elements: the larger is assumed


def _offset_fits(index_bound: int, stride: int, limit: int) -> bool:
    """Whether every offset index × stride, for index < index_bound, stays under `limit`."""
    return (index_bound - 1) * stride < limit


def _rows_fit(t: torch.Tensor) -> bool:
    """Whether every row of t (…, S, hd) sits at an offset the kernel computes right."""
    return _offset_fits(t.size(-2) + 1, t.stride(-2), KEY_OFFSET_LIMIT)  # + 1: the offset of the row past the last


def addressable(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v (B, H, S, hd) as they are, or compact copies (row stride hd) where a row offset would pass
    the kernel's 32-bit limit; a clear error where even those would."""
    if _rows_fit(k) and _rows_fit(v):
        return k, v
    k, v = k.contiguous(), v.contiguous()
    if not (_rows_fit(k) and _rows_fit(v)):
        raise ValueError(f"{k.size(-2):,} keys of {k.size(-1)} elements per head pass the 2^31 elements per head "
                         "that SDPA's memory-efficient kernel can address: attend to fewer keys per call")
    return k, v


def head_groups(*tensors: torch.Tensor) -> list[slice]:
    """The heads (dim 1 of each tensor) in as few groups as keep every head's offset under the limit: one
    group, all heads, inside it. Slicing a group moves the base pointer on the host, in 64 bits."""
    heads = tensors[0].size(1)
    stride = max(t.stride(1) for t in tensors)
    size = heads if _offset_fits(heads, stride, HEAD_OFFSET_LIMIT) else max(1, (HEAD_OFFSET_LIMIT - 1) // stride + 1)
    return [slice(h, min(h + size, heads)) for h in range(0, heads, size)]


def by_head_groups(attend: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None) -> list:
    """`attend(q, k, v, mask)` per head group (`head_groups`), a mask with a head dim sliced with them."""
    def heads_of(g: slice) -> torch.Tensor | None:
        per_head = mask is not None and mask.dim() == 4 and mask.size(1) > 1
        return mask[:, g] if per_head else mask
    return [attend(q[:, g], k[:, g], v[:, g], heads_of(g)) for g in head_groups(q, k, v)]


def compact_copy_bytes(n_keys: int, row_stride: int, d_model: int, batch: int, element_bytes: int) -> int:
    """Bytes `addressable` allocates for keys and values of `n_keys` rows of `row_stride` elements (0 when
    they are addressable as they are): what a memory estimate adds past the limit."""
    fits = _offset_fits(n_keys + 1, row_stride, KEY_OFFSET_LIMIT)
    return 0 if fits else 2 * batch * n_keys * d_model * element_bytes


def _bias_row(mask: torch.Tensor) -> int:
    """Elements between two query rows of the bias the kernel reads for `mask` (0: one row for all queries)."""
    if isinstance(mask, CausalBias) or mask.dim() < 2 or mask.size(-2) == 1:  # no bias rows to step through
        return 0
    padded = -(-mask.size(-1) // BIAS_ROW_ALIGNMENT) * BIAS_ROW_ALIGNMENT
    return max(padded, mask.stride(-2))


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
         is_causal: bool = False) -> torch.Tensor:
    """F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal), q (B, H, L, hd), k and v (B, H, S, hd),
    with the memory-efficient kernel's offsets in range (see the module's docstring)."""
    if attn_mask is not None and is_causal:
        raise ValueError("give attn_mask or is_causal, not both (SDPA's own rule on a GPU)")
    k, v = addressable(k, v)
    if len(head_groups(q, k, v)) > 1:
        return torch.cat(by_head_groups(lambda *a: sdpa(*a, is_causal=is_causal), q, k, v, attn_mask), dim=1)
    row = 0 if attn_mask is None else _bias_row(attn_mask)
    block = q.size(-2) if row == 0 else max(1, (BIAS_OFFSET_LIMIT - 1) // row + 1)  # queries per call
    if q.size(-2) <= block:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    return torch.cat([F.scaled_dot_product_attention(q[..., i:i + block, :], k, v,
                                                     attn_mask=attn_mask[..., i:i + block, :])
                      for i in range(0, q.size(-2), block)], dim=-2)  # (B, H, L, hd)
