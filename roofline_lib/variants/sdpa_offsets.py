"""SDPA calls kept inside the 32-bit offsets of its memory-efficient kernel.

PyTorch's memory-efficient attention kernel (`mem_eff_attention/kernel_forward.h`, torch 2.11 to 2.13 at
least) computes two offsets in 32-bit arithmetic: a block of keys and values at `key_index × row_stride`,
wrong from 2^31 elements on, and a row of an attention bias at `query_index × bias_row_stride`, wrong from
2^32 on. Past them it reads other memory: a silently wrong result where that memory is mapped, an illegal
memory access where it is not. The layers' keys and values are views into a fused projection (row stride
3·d_model, or 2·d_model in the chunked layer's cache), so the full-sequence layer reaches the first limit
at N = 2^31 / (3·d_model): 699,051 tokens at d_model 1024. On a T4, where flash and cuDNN attention do not
exist, that kernel is the one SDPA runs.

`sdpa` is `F.scaled_dot_product_attention` with both offsets kept in range, whatever backend SDPA picks:
keys and values are copied to a compact (B, H, S, hd) layout where their rows would pass the first limit,
and the queries go in blocks where the rows of a mask would pass the second. Inside the limits (every
shape of the suite) it is the plain call.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias

KEY_OFFSET_LIMIT = 2**31  # elements: key_index × row_stride, in int32
BIAS_OFFSET_LIMIT = 2**32  # elements: query_index × bias_row_stride, in uint32
BIAS_ROW_ALIGNMENT = 16  # SDPA pads a bias row to a multiple of 16 elements


def _rows_addressable(t: torch.Tensor) -> bool:
    return t.size(-2) * t.stride(-2) < KEY_OFFSET_LIMIT


def addressable(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v (B, H, S, hd) as they are, or compact copies (row stride hd) where a row offset would pass
    the kernel's 32-bit limit; a clear error where even those would."""
    if _rows_addressable(k) and _rows_addressable(v):
        return k, v
    k, v = k.contiguous(), v.contiguous()
    if not (_rows_addressable(k) and _rows_addressable(v)):
        raise ValueError(f"{k.size(-2):,} keys of {k.size(-1)} elements per head pass the 2^31 elements per head "
                         "that SDPA's memory-efficient kernel can address: attend to fewer keys per call")
    return k, v


def compact_copy_bytes(n_keys: int, row_stride: int, d_model: int, batch: int, element_bytes: int) -> int:
    """Bytes `addressable` allocates for keys and values of `n_keys` rows of `row_stride` elements (0 when
    they are addressable as they are): what a memory estimate adds past the limit."""
    return 0 if n_keys * row_stride < KEY_OFFSET_LIMIT else 2 * batch * n_keys * d_model * element_bytes


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
         is_causal: bool = False) -> torch.Tensor:
    """F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal), q (B, H, L, hd), k and v (B, H, S, hd),
    with the memory-efficient kernel's offsets in range (see the module's docstring)."""
    k, v = addressable(k, v)
    if attn_mask is None or isinstance(attn_mask, CausalBias) or attn_mask.size(-2) == 1:  # no rows of bias
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    row = -(-attn_mask.size(-1) // BIAS_ROW_ALIGNMENT) * BIAS_ROW_ALIGNMENT
    block = max(1, (BIAS_OFFSET_LIMIT - 1) // row)  # queries whose bias rows stay addressable
    if q.size(-2) <= block:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    return torch.cat([F.scaled_dot_product_attention(q[..., i:i + block, :], k, v,
                                                     attn_mask=attn_mask[..., i:i + block, :], is_causal=is_causal)
                      for i in range(0, q.size(-2), block)], dim=-2)  # (B, H, L, hd)
