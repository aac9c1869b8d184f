"""A candidate of `fastest` for the launch-bound rows: the whole layer as one persistent Triton kernel.

One kernel per layer instead of 9–11 (`kernels.whole_layer`): the launch gaps and ramp-ups between kernels
are gone, at the price of Triton GEMM tiles slower than cuBLAS's and a grid barrier per phase. On an H200
it won where the layer has few tokens (suite row 1, 128 tokens) and lost by 1.6× and more from 512 tokens
on (results/README.md), so `fastest` times it only on shapes of up to `MAX_TOKENS` tokens, and only from
compute capability 9.0 on (it was tuned and measured on 9.0, an H200): a T4 (7.5) or a CPU keep the other
candidates, and `whole_layer_unavailable_reason` says why.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from ..core.checks import check_layer_input
from ..core.device import capability, multiprocessor_count
from ..core.outcome import VariantUnavailable
from ..core.reference import ReferenceLayer
from ..kernels import unavailable_reason as triton_unavailable_reason
from .parts import fuse_qkv

if TYPE_CHECKING:  # Triton is optional: the kernel module is imported once it is known to run
    from ..kernels.whole_layer import WholeLayerConfig

MAX_TOKENS = 256  # batch × seq_len up to which `fastest` times it: between where it won (128) and lost (512)
MIN_CAPABILITY = (9, 0)  # it was tuned and measured on 9.0 (an H200); newer GPUs are let in untried
NO_GPU = "on a CPU the Triton kernels are no contender (at most they are checked, through the Triton interpreter)"


class WholeLayer(nn.Module):
    """The reference's layer as one persistent kernel launch, or (`phases`, and always under the Triton
    interpreter) as one launch per phase; `config`: tiles, warps, stages (`kernels.whole_layer`)."""

    def __init__(self, ref: ReferenceLayer, config: WholeLayerConfig | None = None, phases: bool = False):
        super().__init__()
        from ..kernels.whole_layer import INTERPRETED, INTERPRETED_PROGRAMS, default_config
        self.config = config or default_config()
        self.config.check_unrollable(ref.d_model, ref.d_ff)
        self.d_model, self.n_heads = ref.d_model, ref.n_heads
        self.ln1, self.ln2 = ref.ln1, ref.ln2
        self.qkv_proj = fuse_qkv(ref)
        self.out_proj, self.fc1, self.fc2 = ref.out_proj, ref.fc1, ref.fc2
        self.phases = phases
        device = ref.ln1.weight.device
        self.programs = (INTERPRETED_PROGRAMS if INTERPRETED or device.type != "cuda"
                         else self.config.per_sm * multiprocessor_count(device))
        self.register_buffer("sync", torch.zeros(1, dtype=torch.int32, device=device), persistent=False)

    @property
    def detail(self) -> str:
        """How it runs: one persistent launch or one per phase, and with which configuration."""
        from ..kernels.whole_layer import INTERPRETED
        how = "one launch per phase" if self.phases or INTERPRETED else "one persistent kernel"
        return f"{how}, configuration {self.config.label}"

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        from ..kernels.whole_layer import INTERPRETED, whole_layer_forward
        if x.device.type != "cuda" and not INTERPRETED:
            raise ValueError(f"x is on {x.device}: the kernel needs a CUDA GPU, or TRITON_INTERPRET=1 set before "
                             "Triton is imported")
        if x.dtype == torch.float32 and not INTERPRETED:
            raise TypeError("the kernel takes fp16 or bf16 on a GPU (its fp32 products would be TF32's)")
        return whole_layer_forward(x, key_padding_mask, self, self.config, self.programs, self.sync, self.phases)


def whole_layer_unavailable_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why `fastest` does not time the whole-layer kernel on `device` in `dtype`, or None where it does."""
    if device.type != "cuda":
        return NO_GPU
    reason = triton_unavailable_reason(device, dtype)
    if reason is not None:
        return reason
    if dtype == torch.float32:
        return "it takes fp16 or bf16 (its fp32 products would be TF32's)"
    if capability(device) < MIN_CAPABILITY:
        major, minor = capability(device)
        return (f"`fastest` times it from compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} on, where it "
                f"was tuned (an H200), and this GPU's is {major}.{minor}")
    return None


def whole_layer(ref: ReferenceLayer) -> WholeLayer:
    """The whole layer as one persistent Triton kernel, where `fastest` would time it (VariantUnavailable
    elsewhere, with `whole_layer_unavailable_reason`'s words); `WholeLayer` itself runs wherever Triton does."""
    reason = whole_layer_unavailable_reason(ref.ln1.weight.device, ref.ln1.weight.dtype)
    if reason is not None:
        raise VariantUnavailable(f"whole_layer: {reason}")
    return WholeLayer(ref)
