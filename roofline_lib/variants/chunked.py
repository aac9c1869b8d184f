"""Long context: the whole layer one chunk of queries at a time, in memory that grows with N, never N².

Per chunk of `chunk_size` tokens: ln1 and the fused QKV projection of the chunk; its keys and values
written into a key/value cache preallocated for the whole sequence; attention of the chunk's queries
against the cache up to the chunk's end (causal mask aligned bottom-right, see `chunk_attention`);
out_proj, the residual, ln2 and the MLP; the chunk's output written into a preallocated tensor. Peak
extra memory: the cache (B, N, 2·d) and the output (B, N, d), plus one chunk's activations.
"""
from __future__ import annotations

import torch

from ..core.catalog import DEFAULT_CHUNK_SIZE
from ..core.checks import check_layer_input
from ..core.outcome import VariantUnavailable
from ..core.reference import ReferenceLayer
from .chunk_attention import STRATEGIES, StrategyUnavailable, resolve
from .parts import merge_heads, split_qkv
from .sdpa import SdpaLayer


def split_kv(kv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N, 2C) key/value cache → k, v views, each (B, H, N, hd)."""
    B, N, C2 = kv.size()
    hd = C2 // (2 * n_heads)
    kv = kv.view(B, N, 2, n_heads, hd).permute(2, 0, 3, 1, 4)  # (2, B, H, N, hd)
    return kv.unbind(0)


class ChunkedLayer(SdpaLayer):
    """The reference's function computed chunk by chunk against a preallocated key/value cache.

    `attention` picks how a chunk attends to the cache ("auto" or a name in `chunk_attention.STRATEGIES`);
    calls with a `key_padding_mask` use it too if it takes padding and passes its padded self-check, else
    the first padded strategy that does (`chunk_attention.resolve`). `attention_notes` says why
    strategies were passed over.
    """

    def __init__(self, ref: ReferenceLayer, chunk_size: int = DEFAULT_CHUNK_SIZE, attention: str = "auto"):
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        super().__init__(ref, build_empty_mask=False)
        self.chunk_size = chunk_size
        weight = ref.ln1.weight
        head_dim = self.d_model // self.n_heads
        self.attention_name, notes = resolve(attention, weight.device, weight.dtype, head_dim)
        self.padded_attention_name, padded_notes = resolve(attention, weight.device, weight.dtype, head_dim,
                                                           padded=True)
        self.attention_notes = notes + [f"with padding: {n}" for n in padded_notes]

    def extra_repr(self) -> str:
        return (f"chunk_size={self.chunk_size}, attention={self.attention_name}, "
                f"padded_attention={self.padded_attention_name}")

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        B, N, C = x.size()
        name = self.attention_name if key_padding_mask is None else self.padded_attention_name
        attend = STRATEGIES[name].attend
        kv = x.new_empty(B, N, 2 * C)  # (B, N, 2C): keys and values of the whole sequence
        k_cache, v_cache = split_kv(kv, self.n_heads)  # each (B, H, N, hd)
        out = torch.empty_like(x)  # (B, N, C)
        for start in range(0, N, self.chunk_size):
            end = min(start + self.chunk_size, N)
            x_chunk = x[:, start:end]  # (B, L, C)
            qkv = self.qkv_proj(self.ln1(x_chunk))  # (B, L, 3C)
            kv[:, start:end] = qkv[..., C:]
            q = split_qkv(qkv, self.n_heads)[0]  # (B, H, L, hd)
            kpm = None if key_padding_mask is None else key_padding_mask[:, :end]  # (B, end)
            y = attend(q, k_cache[:, :, :end], v_cache[:, :, :end], start, kpm)  # (B, H, L, hd)
            out[:, start:end] = self.residual_mlp(x_chunk, merge_heads(y))
        return out


def chunked(ref: ReferenceLayer, chunk_size: int = DEFAULT_CHUNK_SIZE, attention: str = "auto") -> ChunkedLayer:
    """The layer chunk by chunk over a key/value cache (VariantUnavailable if `attention` cannot run here)."""
    try:
        return ChunkedLayer(ref, chunk_size, attention)
    except StrategyUnavailable as exc:
        raise VariantUnavailable(f"chunked: {exc}") from exc
