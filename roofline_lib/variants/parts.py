"""Building blocks every optimized variant shares: the fused QKV weights, head reshapes, masks."""
from __future__ import annotations

import torch
from torch import nn

from ..core.reference import ReferenceLayer


@torch.no_grad()
def fuse_qkv(ref: ReferenceLayer) -> nn.Linear:
    """One (d_model → 3·d_model) Linear whose weights are the reference's q, k, v weights stacked (a copy)."""
    d = ref.d_model
    weight = ref.q_proj.weight
    qkv = nn.Linear(d, 3 * d, device=weight.device, dtype=weight.dtype)
    qkv.weight.copy_(torch.cat([ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight]))  # (3d, d)
    qkv.bias.copy_(torch.cat([ref.q_proj.bias, ref.k_proj.bias, ref.v_proj.bias]))  # (3d,)
    return qkv


def split_qkv(qkv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, N, 3C) fused projection → q, k, v, each (B, H, N, hd)."""
    B, N, C3 = qkv.size()
    hd = C3 // (3 * n_heads)
    qkv = qkv.view(B, N, 3, n_heads, hd).permute(2, 0, 3, 1, 4)  # (3, B, H, N, hd)
    return qkv.unbind(0)


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, H, N, hd) → (B, N, H·hd)."""
    B, H, N, hd = y.size()
    return y.transpose(1, 2).reshape(B, N, H * hd)  # (B, N, C)


def causal_padding_mask(key_padding_mask: torch.Tensor, n_queries: int, q_offset: int = 0) -> torch.Tensor:
    """Boolean mask, True = may attend: query i (at absolute position q_offset + i) sees key j ≤ it, if real.

    key_padding_mask: (B, N_keys) → returns (B, 1, n_queries, N_keys).
    """
    n_keys = key_padding_mask.shape[1]
    device = key_padding_mask.device
    q_pos = torch.arange(q_offset, q_offset + n_queries, device=device)  # (n_queries,)
    causal = q_pos[:, None] >= torch.arange(n_keys, device=device)[None, :]  # (n_queries, N_keys)
    return causal[None, None] & key_padding_mask[:, None, None, :]  # (B, 1, n_queries, N_keys)
