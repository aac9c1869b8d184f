"""The optimization ladder: `VARIANTS` maps a name to `factory(reference_layer, **options) → nn.Module`."""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..reference import ReferenceLayer
from .chunked import chunked
from .sdpa import SdpaLayer, no_empty_mask, sdpa_fused_qkv
from .triton_ln import triton_ln
from .fused_gemm import fused_gemm
from .residual_addmm import residual_addmm
from .fastest import fastest


class VariantUnavailable(RuntimeError):
    """A variant that cannot run here (e.g. no Triton or no GPU); the message says why."""


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


def _factories() -> dict[str, Callable[..., nn.Module]]:
    """The ladder, then the peers a user would pick instead (torch.compile)."""
    from ..peers import PEERS
    return {**VARIANTS, **PEERS}


def select_variants(spec: str | None) -> list[str]:
    """Variant or peer names from a comma-separated spec (None: every rung of the ladder, in order)."""
    if spec is None:
        return list(VARIANTS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    known = _factories()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown variant {', '.join(map(repr, unknown))}: "
                         f"known variants are {', '.join(known)}")
    return names


def build_variant(name: str, ref: ReferenceLayer, **options) -> nn.Module:
    """The variant (or peer) `name` built on `ref` (ValueError naming the known ones if `name` is unknown)."""
    (name,) = select_variants(name)
    return _factories()[name](ref, **options)


__all__ = ["VARIANTS", "VariantUnavailable", "SdpaLayer", "build_variant", "select_variants"]
