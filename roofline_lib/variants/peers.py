"""What a user would reach for instead of hand work: `torch.compile`, on the reference or on the kept rung.

Peers are not rungs of the ladder (`VARIANTS`), but the sweep checks and times them the same way:
same weights, same §3 check. Their compilation (and autotuning) happens on the first call, which the
sweep reports separately as `first_call_s`.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..core.reference import ReferenceLayer
from . import VARIANTS
from .best import best_variant


def _compile(module: nn.Module, mode: str | None) -> nn.Module:
    return torch.compile(module, mode=mode, dynamic=False)


def compile_reference(ref: ReferenceLayer) -> nn.Module:
    """torch.compile of the naive layer, default mode."""
    return _compile(ref, None)


def compile_reference_max_autotune(ref: ReferenceLayer) -> nn.Module:
    """torch.compile of the naive layer with GEMM autotuning and CUDA graphs (mode="max-autotune")."""
    return _compile(ref, "max-autotune")


def compile_kept(ref: ReferenceLayer) -> nn.Module:
    """torch.compile of the rung the keep-or-revert call kept on this device and dtype (`best.best_variant`)."""
    weight = ref.ln1.weight
    return _compile(VARIANTS[best_variant(weight.device, weight.dtype)](ref), None)


PEERS: dict[str, Callable[[ReferenceLayer], nn.Module]] = {
    "compile_reference": compile_reference,
    "compile_reference_max_autotune": compile_reference_max_autotune,
    "compile_kept": compile_kept,
}
