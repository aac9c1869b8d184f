"""What a user would reach for instead of hand work: `torch.compile`, on the reference or on the kept rung.

Peers are not rungs of the ladder (`VARIANTS`), but the sweep checks and times them the same way:
same weights, same §3 check. Their compilation (and autotuning) happens on the first call, which the
sweep reports separately as `first_call_s`. The "reduce-overhead" peer replays CUDA graphs whose one output
buffer the next replay overwrites, so each call returns a copy of it, as `graphed.CudaGraphLayer` does.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..core.checks import check_layer_input
from ..core.outcome import VariantUnavailable
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


def _kept(ref: ReferenceLayer) -> nn.Module:
    """The rung the keep-or-revert call kept on this device and dtype (`best.best_variant`), built on `ref`."""
    weight = ref.ln1.weight
    return VARIANTS[best_variant(weight.device, weight.dtype)](ref)


def compile_kept(ref: ReferenceLayer) -> nn.Module:
    """torch.compile of the rung the keep-or-revert call kept on this device and dtype (`best.best_variant`)."""
    return _compile(_kept(ref), None)


class GraphReplayed(nn.Module):
    """A layer compiled with mode="reduce-overhead": each call starts a new CUDA-graph step and returns a copy of
    the replay's output, which the next replay overwrites (a caller may read an output after the next call).
    The copy is one (B, N, C) tensor, as `graphed.CudaGraphLayer` pays for the same reason."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.d_model, self.ln1 = layer.d_model, layer.ln1
        self.compiled = _compile(layer, "reduce-overhead")

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)  # a bad input: one clear error, not a recompilation
        torch.compiler.cudagraph_mark_step_begin()  # the outputs of the calls before are no longer needed
        return self.compiled(x, key_padding_mask).clone()  # (B, N, C)


def compile_kept_reduce_overhead(ref: ReferenceLayer) -> nn.Module:
    """torch.compile of the kept rung with mode="reduce-overhead": its kernels replayed from CUDA graphs, so the
    host launches a call once, not kernel by kernel (CUDA only)."""
    if ref.ln1.weight.device.type != "cuda":
        raise VariantUnavailable("compile_kept_reduce_overhead: mode='reduce-overhead' replays CUDA graphs, "
                                 "which need a CUDA GPU")
    return GraphReplayed(_kept(ref))


PEERS: dict[str, Callable[[ReferenceLayer], nn.Module]] = {
    "compile_reference": compile_reference,
    "compile_reference_max_autotune": compile_reference_max_autotune,
    "compile_kept": compile_kept,
    "compile_kept_reduce_overhead": compile_kept_reduce_overhead,
}
