"""Rung 4 (an experiment): the residual add after attention and ln2 fused into one Triton kernel.

Built on "no_empty_mask": `s, y = add_layer_norm(out_proj(attn), x, ln2)` replaces `s = x + out_proj(attn)`
followed by `ln2(s)`, then `s + fc2(gelu(fc1(y)))` as before. Whether it stays on the ladder's "best"
path is decided by measurement (see `roofline_lib.core.decision`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core.outcome import VariantUnavailable
from ..core.reference import ReferenceLayer
from ..kernels import unavailable_reason
from .sdpa import SdpaLayer


class TritonLnLayer(SdpaLayer):
    """`no_empty_mask` with the post-attention residual add and ln2 done by one fused Triton kernel."""

    def __init__(self, ref: ReferenceLayer):
        super().__init__(ref, build_empty_mask=False)
        from ..kernels.add_layer_norm import add_layer_norm  # Triton is optional: imported once it is known to run
        self.add_layer_norm = add_layer_norm

    def residual_mlp(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """s = x + out_proj(attn_out) and y = ln2(s) in one kernel, then s + fc2(gelu(fc1(y)))."""
        ln2 = self.ln2
        s, y = self.add_layer_norm(self.out_proj(attn_out), x, ln2.weight, ln2.bias, ln2.eps)  # each (B, N, C)
        return s + self.fc2(F.gelu(self.fc1(y)))


def triton_ln(ref: ReferenceLayer) -> TritonLnLayer:
    """no_empty_mask + the fused residual-add + LayerNorm kernel (VariantUnavailable without Triton or a GPU)."""
    reason = unavailable_reason(ref.ln2.weight.device, ref.ln2.weight.dtype)
    if reason is not None:
        raise VariantUnavailable(f"triton_ln: {reason}")
    return TritonLnLayer(ref)
