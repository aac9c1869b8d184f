"""Rungs 2 and 3 of the ladder: fused QKV + `F.scaled_dot_product_attention`, with and without the empty mask."""
from __future__ import annotations

from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..core.checks import check_layer_input
from ..core.reference import ReferenceLayer
from .parts import causal_padding_mask, fuse_qkv, merge_heads, split_qkv
from .sdpa_offsets import sdpa

SDPA_BACKENDS = {  # SDPA's fused backends; the math one materializes the scores and never wins
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
SWITCHES = {"cudnn": torch.backends.cuda.cudnn_sdp_enabled, "flash": torch.backends.cuda.flash_sdp_enabled,
            "efficient": torch.backends.cuda.mem_efficient_sdp_enabled}  # each backend's global switch


def backend_switched_off(backend: str) -> str | None:
    """Why `backend` (a key of SDPA_BACKENDS) may not run now: its global switch is off
    (`torch.backends.cuda.enable_cudnn_sdp(False)` and the like); None where it is on."""
    return None if SWITCHES[backend]() else f"SDPA's {backend} backend is switched off (torch.backends.cuda)"


def forced(backend: str) -> AbstractContextManager:
    """Context in which SDPA runs on `backend` only (a key of SDPA_BACKENDS).

    `sdpa_kernel` would run a backend whose global switch is off, so a switched-off one is refused here,
    with the RuntimeError SDPA raises for a backend that cannot run: switches off mean off, as on a GPU
    without the backend.
    """
    if (why := backend_switched_off(backend)) is not None:
        raise RuntimeError(why)
    return sdpa_kernel([SDPA_BACKENDS[backend]])


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor | None,
                   build_empty_mask: bool = False, backend: str | None = None) -> torch.Tensor:
    """Causal attention of q over k, v, each (B, H, N, hd), honouring real padding, on SDPA's `backend`
    (None: SDPA picks). With `build_empty_mask`, an all-True padding mask is built when none is given."""
    if key_padding_mask is None and build_empty_mask:
        B, N = q.shape[0], q.shape[2]
        key_padding_mask = torch.ones(B, N, dtype=torch.bool, device=q.device)  # (B, N), masks nothing
    mask = None if key_padding_mask is None else causal_padding_mask(key_padding_mask, q.shape[2])  # (B, 1, N, N)
    if backend is None:  # no context manager: torch.compile traces this path
        return sdpa(q, k, v, attn_mask=mask, is_causal=mask is None)
    with forced(backend):
        return sdpa(q, k, v, attn_mask=mask, is_causal=mask is None)


class SdpaLayer(nn.Module):
    """The reference's function with one QKV GEMM and SDPA attention.

    With `build_empty_mask=True` it still builds the combined causal + padding boolean mask on every
    call (an all-True padding mask when none is given), as the reference does. With False, a call
    without padding uses `is_causal=True` and no mask, so SDPA may pick its fastest backend; a real
    `key_padding_mask` is still honoured. `attention_backend` (None: SDPA's own pick) forces one of
    SDPA's backends; the `fastest` rung sets it per input shape by measurement.
    """

    attention_backend: str | None = None

    def __init__(self, ref: ReferenceLayer, build_empty_mask: bool):
        super().__init__()
        self.d_model, self.n_heads = ref.d_model, ref.n_heads
        self.ln1, self.out_proj, self.ln2, self.fc1, self.fc2 = ref.ln1, ref.out_proj, ref.ln2, ref.fc1, ref.fc2
        self.qkv_proj = fuse_qkv(ref)
        self.build_empty_mask = build_empty_mask
        self.eval()

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """Causal attention of q over k, v, each (B, H, N, hd), honouring real padding."""
        return sdpa_attention(q, k, v, key_padding_mask, self.build_empty_mask, self.attention_backend)

    def residual_mlp(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """x + out_proj(attn_out), then the pre-LN MLP block with its residual."""
        x = x + self.out_proj(attn_out)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        q, k, v = split_qkv(self.qkv_proj(self.ln1(x)), self.n_heads)  # each (B, H, N, hd)
        y = merge_heads(self.attention(q, k, v, key_padding_mask))  # (B, N, C)
        return self.residual_mlp(x, y)


def sdpa_fused_qkv(ref: ReferenceLayer) -> SdpaLayer:
    """Fused QKV + SDPA, still building and passing the causal & padding mask every call."""
    return SdpaLayer(ref, build_empty_mask=True)


def no_empty_mask(ref: ReferenceLayer) -> SdpaLayer:
    """Fused QKV + SDPA with `is_causal=True` and no mask unless real padding is given."""
    return SdpaLayer(ref, build_empty_mask=False)
