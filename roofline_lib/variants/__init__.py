"""The optimization ladder: `VARIANTS` maps a name to `factory(reference_layer, **options) → nn.Module`.

The names and their order are `catalog.LADDER` (a test keeps the two equal); the peers a user would
pick instead, and looking a name up among both, are `roofline_lib.variants.registry`'s.
"""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..core.reference import ReferenceLayer
from .chunked import chunked
from .fastest import fastest
from .fused_gemm import fused_gemm
from .residual_addmm import residual_addmm
from .sdpa import SdpaLayer, no_empty_mask, sdpa_fused_qkv
from .triton_ln import triton_ln


def reference(ref: ReferenceLayer) -> ReferenceLayer:
    """The fixed layer itself."""
    return ref


VARIANTS: dict[str, Callable[..., nn.Module]] = {
    "reference": reference,
    "sdpa_fused_qkv": sdpa_fused_qkv,
    "no_empty_mask": no_empty_mask,
    "triton_ln": triton_ln,
    "chunked": chunked,
    "fused_gemm": fused_gemm,
    "residual_addmm": residual_addmm,
    "fastest": fastest,
}

__all__ = ["VARIANTS", "SdpaLayer"]
