"""A rung past the seed: every GEMM with its LayerNorm, GELU and residual add fused in (Triton).

Built on "no_empty_mask" (same fused QKV weights, same SDPA attention, padding honoured), with the four
Linear layers run by `kernels.fused_linear`: ln1 → QKV, out_proj + residual, ln2 → fc1 → GELU,
fc2 + residual. Measured against the other rungs and not kept: `fastest` does not use it.
"""
from __future__ import annotations

import torch

from ..core.checks import check_layer_input
from ..core.outcome import VariantUnavailable
from ..core.reference import ReferenceLayer
from ..kernels import unavailable_reason
from .parts import merge_heads, split_qkv
from .sdpa import SdpaLayer


class FusedGemmLayer(SdpaLayer):
    """`no_empty_mask` in four fused-GEMM kernels plus attention."""

    def __init__(self, ref: ReferenceLayer):
        super().__init__(ref, build_empty_mask=False)
        from ..kernels.fused_linear import fused_linear  # Triton is optional: imported once it is known to run
        self.fused_linear = fused_linear

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        linear = self.fused_linear
        q, k, v = split_qkv(linear(x, self.qkv_proj, ln=self.ln1), self.n_heads)  # each (B, H, N, hd)
        y = merge_heads(self.attention(q, k, v, key_padding_mask))  # (B, N, C)
        s = linear(y, self.out_proj, residual=x)  # (B, N, C): the residual stream
        h = linear(s, self.fc1, ln=self.ln2, gelu=True)  # (B, N, d_ff)
        return linear(h, self.fc2, residual=s)  # (B, N, C)


def fused_gemm(ref: ReferenceLayer) -> FusedGemmLayer:
    """no_empty_mask with LayerNorm, bias, GELU and residual adds fused into Triton GEMMs (needs Triton)."""
    reason = unavailable_reason(ref.ln1.weight.device, ref.ln1.weight.dtype)
    if reason is not None:
        raise VariantUnavailable(f"fused_gemm: {reason}")
    return FusedGemmLayer(ref)
