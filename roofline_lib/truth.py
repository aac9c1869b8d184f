"""The float64 truth of docs/design.md §3, written out by hand from §1, for all query rows or a sample of them.

Attention runs one block of query rows at a time, so the truth of any row of any length fits in
bounded memory: at 100,000 or 1,000,000 tokens only the sampled rows are computed.
"""
from __future__ import annotations

import math

import torch

from .reference import ReferenceLayer


def sample_rows(seq_len: int, count: int = 64) -> torch.Tensor:
    """`count` query positions spread evenly over the sequence, first and last included, sorted."""
    count = min(count, seq_len)
    return torch.linspace(0, seq_len - 1, count, dtype=torch.float64).round().long().unique()


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def _linear(x: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
    return x @ linear.weight.double().T + linear.bias.double()


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


@torch.no_grad()
def float64_truth(layer: ReferenceLayer, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                  rows: torch.Tensor | None = None, block_bytes: int = 2**30) -> torch.Tensor:
    """§1 computed exactly in float64 for query `rows` (all by default), on x's device.

    x: (B, N, C) in any dtype; returns (B, len(rows), C) float64. Scores for one block of query rows,
    (B, H, rows_per_block, N) float64, stay under `block_bytes`.
    """
    x = x.double()
    B, N, C = x.shape
    H = layer.n_heads
    hd = C // H
    ln1, ln2 = layer.ln1, layer.ln2
    rows = torch.arange(N, device=x.device) if rows is None else rows.to(x.device)
    n_keys = int(rows.max()) + 1  # causal: no query in `rows` sees past its own position
    h = _layer_norm(x[:, :n_keys], ln1.weight.double(), ln1.bias.double(), ln1.eps)  # (B, n_keys, C)
    k = _linear(h, layer.k_proj).view(B, n_keys, H, hd).transpose(1, 2)  # (B, H, n_keys, hd)
    v = _linear(h, layer.v_proj).view(B, n_keys, H, hd).transpose(1, 2)  # (B, H, n_keys, hd)
    real = (torch.ones(B, n_keys, dtype=torch.bool, device=x.device) if key_padding_mask is None
            else key_padding_mask[:, :n_keys].to(x.device))  # (B, n_keys)
    key_pos = torch.arange(n_keys, device=x.device)
    per_block = max(1, block_bytes // (B * H * n_keys * 8 * 3))
    out = torch.empty(B, len(rows), C, dtype=torch.float64, device=x.device)
    for start in range(0, len(rows), per_block):
        r = rows[start:start + per_block]  # (R,)
        q = _linear(h[:, r], layer.q_proj).view(B, len(r), H, hd).transpose(1, 2)  # (B, H, R, hd)
        s = q @ k.transpose(-2, -1) / math.sqrt(hd)  # (B, H, R, n_keys)
        allowed = (key_pos[None, :] <= r[:, None])[None, None] & real[:, None, None, :]  # (B, 1, R, n_keys)
        s = s.masked_fill(~allowed, float("-inf"))
        p = torch.exp(s - s.amax(-1, keepdim=True))
        p = p / p.sum(-1, keepdim=True)  # (B, H, R, n_keys)
        y = (p @ v).transpose(1, 2).reshape(B, len(r), C)  # (B, R, C)
        xr = x[:, r] + _linear(y, layer.out_proj)  # (B, R, C)
        m = _gelu(_linear(_layer_norm(xr, ln2.weight.double(), ln2.bias.double(), ln2.eps), layer.fc1))
        out[:, start:start + len(r)] = xr + _linear(m, layer.fc2)
    return out
