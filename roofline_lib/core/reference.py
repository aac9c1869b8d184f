"""The fixed, naively written layer of docs/design.md §1: the function every variant must reproduce."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_head_split, check_layer_input, check_positive_int
from .device import memory_capacity
from .outcome import Infeasible
from .shapes import Shape


def naive_peak_bytes(shape: Shape, dtype: torch.dtype) -> int:
    """Peak bytes the reference needs: two live (B, H, N, N) score tensors, the (N, N) masks, activations."""
    e = torch.finfo(dtype).bits // 8
    scores = shape.batch * shape.n_heads * shape.seq_len ** 2 * e
    activations = 10 * shape.tokens * shape.d_model * e
    weights = 12 * shape.d_model ** 2 * e
    return 2 * scores + 2 * shape.seq_len ** 2 + activations + weights


def reference_fits(shape: Shape, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the naive reference fits in the memory this process may use on `device`."""
    return naive_peak_bytes(shape, dtype) <= memory_capacity(device)


def check_fits(shape: Shape, dtype: torch.dtype, device: torch.device) -> None:
    """Raise Infeasible if the naive reference cannot hold `shape` on `device` (it would run out of memory)."""
    if not reference_fits(shape, dtype, device):
        need = naive_peak_bytes(shape, dtype)
        raise Infeasible(f"the naive layer needs ≈{need / 2**30:,.0f} GiB for {shape.label}, "
                         f"{memory_capacity(device) / 2**30:,.0f} GiB available", need)


class ReferenceLayer(nn.Module):
    """Pre-LayerNorm GPT-style causal decoder layer, inference only, written the naive way on purpose.

    It materializes the full (B, H, N, N) score tensor, builds the causal mask on every call, and,
    when no `key_padding_mask` is given, builds an all-True padding mask and applies it anyway.
    A shape whose scores cannot fit in memory is refused up front (`Infeasible`), not run out of memory.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, eps: float = 1e-5):
        super().__init__()
        check_head_split(d_model, n_heads)
        if d_ff is not None:
            check_positive_int("d_ff", d_ff)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"eps must be a positive number, got {eps!r}")
        self.d_model, self.n_heads = d_model, n_heads
        self.d_ff = 4 * d_model if d_ff is None else d_ff
        self.ln1 = nn.LayerNorm(d_model, eps=eps)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model, eps=eps)
        self.fc1 = nn.Linear(d_model, self.d_ff)
        self.fc2 = nn.Linear(self.d_ff, d_model)
        self.eval()

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        B, N, C = x.size()
        if not torch.compiler.is_compiling():  # a compiled peer is sized by its own first call
            check_fits(Shape("", B, N, C, self.n_heads), x.dtype, x.device)
        H, hd = self.n_heads, C // self.n_heads
        h = self.ln1(x)
        q = self.q_proj(h).view(B, N, H, hd).transpose(1, 2)  # (B, H, N, hd)
        k = self.k_proj(h).view(B, N, H, hd).transpose(1, 2)  # (B, H, N, hd)
        v = self.v_proj(h).view(B, N, H, hd).transpose(1, 2)  # (B, H, N, hd)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # (B, H, N, N)
        causal = torch.tril(torch.ones(N, N, dtype=torch.bool, device=x.device))  # (N, N), every call
        s = s.masked_fill(~causal, float("-inf"))
        if key_padding_mask is None:  # no padding given: build a (B, N) padding mask
            key_padding_mask = torch.ones(B, N, dtype=torch.bool, device=x.device)  # (B, N)
        s = s.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))  # (B, H, N, N)
        p = torch.softmax(s, dim=-1)  # (B, H, N, N), in the input dtype
        y = (p @ v).transpose(1, 2).reshape(B, N, C)  # (B, N, C)
        x = x + self.out_proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
