"""Rung 4 (an experiment): the residual add after attention and ln2 fused into one Triton kernel.

Built on "no_empty_mask": `s, y = add_layer_norm(out_proj(attn), x, ln2)` replaces `s = x + out_proj(attn)`
followed by `ln2(s)`, then `s + fc2(gelu(fc1(y)))` as before. Whether it stays on the ladder's "best"
path is decided by measurement (see `roofline_lib.decision`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..reference import ReferenceLayer
from .sdpa import SdpaLayer


class TritonLnLayer(SdpaLayer):
    """`no_empty_mask` with the post-attention residual add and ln2 done by one fused Triton kernel."""

    def __init__(self, ref: ReferenceLayer):
        super().__init__(ref, build_empty_mask=False)
        from ..kernels.add_layer_norm import add_layer_norm
        self.add_layer_norm = add_layer_norm

    def residual_mlp(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """s = x + out_proj(attn_out) and y = ln2(s) in one kernel, then s + fc2(gelu(fc1(y)))."""
        ln2 = self.ln2
        s, y = self.add_layer_norm(self.out_proj(attn_out), x, ln2.weight, ln2.bias, ln2.eps)  # each (B, N, C)
        return s + self.fc2(F.gelu(self.fc1(y)))


def unavailable_reason(device: torch.device | str, dtype: torch.dtype | None = None) -> str | None:
    """Why the Triton kernels cannot run on `device` (in `dtype`, if given) here, or None when they can."""
    device = torch.device(device)
    try:
        from ..kernels.add_layer_norm import DTYPES, INTERPRETED
    except ImportError as exc:
        return f"Triton cannot be imported ({exc}); install it with `pip install triton`"
    if dtype is not None and dtype not in DTYPES:
        return f"the Triton kernels take {', '.join(map(str, DTYPES))}, not {dtype}"
    if device.type == "cuda" or INTERPRETED:
        return None
    return (f"the Triton kernel needs a CUDA GPU, and the layer is on {device} "
            "(set TRITON_INTERPRET=1 before Triton is imported to run it through the Triton interpreter)")


def triton_ln(ref: ReferenceLayer) -> TritonLnLayer:
    """no_empty_mask + the fused residual-add + LayerNorm kernel (VariantUnavailable without Triton or a GPU)."""
    from . import VariantUnavailable  # here, not at the top: the package imports this module
    reason = unavailable_reason(ref.ln2.weight.device, ref.ln2.weight.dtype)
    if reason is not None:
        raise VariantUnavailable(f"triton_ln: {reason}")
    return TritonLnLayer(ref)
