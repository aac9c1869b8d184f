"""The float64 truth of docs/design.md §3, written out by hand from §1, for all query rows or a sample of them.

Attention streams over blocks of keys with a running softmax, so the truth of any rows of a sequence of
any length fits in bounded memory: at 100,000 or 1,000,000 tokens only the sampled rows are computed,
and no (B, N, C) float64 tensor is ever held.
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


def _keys_per_block(batch: int, heads: int, n_rows: int, d_model: int, block_bytes: int) -> int:
    """Keys per block so that one block's float64 temporaries stay under `block_bytes`: its scores and
    probabilities (B, H, R, K), and its activations ln1(x), k, v and x itself (B, K, C) each."""
    per_key = 8 * batch * (3 * heads * n_rows + 6 * d_model)
    return max(1, block_bytes // per_key)


@torch.no_grad()
def float64_truth(layer: ReferenceLayer, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                  rows: torch.Tensor | None = None, block_bytes: int = 2**30) -> torch.Tensor:
    """§1 computed exactly in float64 for query `rows` (all by default), on x's device.

    x: (B, N, C) in any dtype; returns (B, len(rows), C) float64. Attention streams over blocks of keys:
    each block's keys and values are recomputed in float64 from x (ln1, then the projections) and folded
    into a running softmax (max, sum and weighted values per query row), so the memory beyond the inputs
    is one block's temporaries, under `block_bytes`, plus (B, R, C) per query row — never (B, N, C)
    float64 — and 1,000,000 tokens can be checked on a T4's 14.7 GiB.
    """
    B, N, C = x.shape
    H = layer.n_heads
    hd = C // H
    ln1, ln2 = layer.ln1, layer.ln2
    ln1_w, ln1_b = ln1.weight.double(), ln1.bias.double()
    rows = torch.arange(N, device=x.device) if rows is None else rows.to(x.device)
    R = len(rows)
    n_keys = int(rows.max()) + 1  # causal: no query in `rows` sees past its own position
    x_rows = x[:, rows].double()  # (B, R, C)
    h_rows = _layer_norm(x_rows, ln1_w, ln1_b, ln1.eps)
    q = _linear(h_rows, layer.q_proj).view(B, R, H, hd).transpose(1, 2) / math.sqrt(hd)  # (B, H, R, hd)
    running_max = torch.full((B, H, R, 1), float("-inf"), dtype=torch.float64, device=x.device)
    running_sum = torch.zeros(B, H, R, 1, dtype=torch.float64, device=x.device)
    acc = torch.zeros(B, H, R, hd, dtype=torch.float64, device=x.device)  # Σ exp(s − max) · v
    per_block = _keys_per_block(B, H, R, C, block_bytes)
    for start in range(0, n_keys, per_block):
        end = min(start + per_block, n_keys)
        h = _layer_norm(x[:, start:end].double(), ln1_w, ln1_b, ln1.eps)  # (B, K, C)
        k = _linear(h, layer.k_proj).view(B, end - start, H, hd).transpose(1, 2)  # (B, H, K, hd)
        v = _linear(h, layer.v_proj).view(B, end - start, H, hd).transpose(1, 2)  # (B, H, K, hd)
        del h
        allowed = torch.arange(start, end, device=x.device)[None, :] <= rows[:, None]  # (R, K)
        allowed = allowed[None, None]  # (1, 1, R, K)
        if key_padding_mask is not None:
            allowed = allowed & key_padding_mask[:, start:end].to(x.device)[:, None, None, :]  # (B, 1, R, K)
        s = (q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))  # (B, H, R, K)
        new_max = torch.maximum(running_max, s.amax(-1, keepdim=True))
        safe = new_max.masked_fill(new_max == float("-inf"), 0)  # rows that have seen no key yet
        p = torch.exp(s - safe)  # (B, H, R, K)
        scale = torch.exp(running_max - safe)
        running_sum = running_sum * scale + p.sum(-1, keepdim=True)
        acc = acc * scale + p @ v
        running_max = new_max
        del s, p, k, v
    y = (acc / running_sum).transpose(1, 2).reshape(B, R, C)  # (B, R, C)
    xr = x_rows + _linear(y, layer.out_proj)  # (B, R, C)
    m = _gelu(_linear(_layer_norm(xr, ln2.weight.double(), ln2.bias.double(), ln2.eps), layer.fc1))
    return xr + _linear(m, layer.fc2)
