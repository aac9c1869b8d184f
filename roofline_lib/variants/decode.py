"""Decode: the fixed layer one token per sequence per step, through a key/value cache.

A prefill runs the prompt (B, N, C) through the layer and keeps every position's keys and values; each step then
takes one new token per sequence (B, 1, C), appends its key and value, and attends over everything so far. The
steps' outputs are the full-sequence layer's rows N … N+T−1 on the prompt and the new tokens concatenated, which
is what `runs.decode` checks against the float64 truth (§3). Prompts are left-padded (padding first), so every
sequence's next token sits at the same position and one index writes the whole batch's new keys.

The decoders, from naive to fast (`DECODERS`):
- `naive`: the reference layer over the whole sequence at every step — no cache; each step redoes all the work.
- `growing_cache`: a cache that grows by `torch.cat` — every step copies the whole cache to append one row.
- `static_cache`: a preallocated cache written in place; the step attends over the whole capacity with a mask,
  so its shapes never change and a CUDA graph can replay it (`decode_stack.DecodeStack(graphed=True)`).
- `split_kv`: the static cache with the Triton split-KV kernel (`kernels.decode_attention`): the keys are cut
  into ranges so that a long cache fills the GPU even when B·H is far below its multiprocessor count.
- `fused_split_kv`: split-KV attention with the projections in `kernels.fused_linear` (at B = 1 its CUDA-core
  GEMV): LayerNorm folded into the QKV and fc1 GEMMs, GELU and the residual adds into their epilogues — four GEMM
  kernels and the attention per layer instead of about twelve kernels, the step's launches being most of its time
  at short contexts.
- `layer_kernel`: the whole step of a layer in one persistent kernel (`kernels.decode_layer`), its phases apart
  by grid barriers: one launch per layer instead of six (compute capability 9.0 on, as `whole_layer`).
"""
from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ..core import catalog
from ..core.checks import check_layer_input, check_positive_int
from ..core.device import capability, multiprocessor_count
from ..core.outcome import VariantUnavailable
from ..core.reference import ReferenceLayer
from ..kernels import unavailable_reason
from .parts import causal_padding_mask, fuse_qkv, merge_heads, split_qkv
from .sdpa_offsets import sdpa
from .whole_layer import MIN_CAPABILITY

if TYPE_CHECKING:  # Triton is optional: its modules are imported once it is known to run
    from ..kernels.whole_layer import WholeLayerConfig


class KVCache(nn.Module):
    """Every position's keys and values so far, preallocated: k, v (B, H, capacity, hd); `real` (B, capacity)
    int8, 1 for a real token; `position`, the index of the newest key, kept on the device, so that a CUDA graph of
    a step appends at a new position on every replay (the decoder counts positions on the host, to refuse a step
    past the end before it runs). They are buffers, so `torch.compile` treats them as the module's own state."""

    def __init__(self, batch: int, n_heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                 device: torch.device):
        for name, value in (("batch", batch), ("n_heads", n_heads), ("head_dim", head_dim), ("capacity", capacity)):
            check_positive_int(name, value)
        super().__init__()
        self.capacity = capacity
        self.register_buffer("k", torch.zeros(batch, n_heads, capacity, head_dim, dtype=dtype, device=device))
        self.register_buffer("v", torch.zeros_like(self.k))
        self.register_buffer("real", torch.zeros(batch, capacity, dtype=torch.int8, device=device))
        self.register_buffer("position", torch.full((1,), -1, dtype=torch.int64, device=device))

    def write_prompt(self, k: torch.Tensor, v: torch.Tensor, real: torch.Tensor) -> None:
        """The prompt's keys and values, k and v (B, H, N, hd), and its real-token mask (B, N), from position 0."""
        n = k.shape[2]
        self.k[:, :, :n], self.v[:, :, :n] = k, v
        self.real.zero_()
        self.real[:, :n] = real
        self.position.fill_(n - 1)

    def advance(self) -> None:
        """Make room for the next token: `position` moves to its index (on the device, no host read)."""
        self.position.add_(1)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """The new token's key and value per sequence, k and v (B, H, 1, hd), written at `position`, in place."""
        self.k.index_copy_(2, self.position, k)
        self.v.index_copy_(2, self.position, v)
        self.real.index_fill_(1, self.position, 1)


def prompt_mask(x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """The prompt's (B, N) real-token mask (its type and shape checked with x's by `check_layer_input`): a decode
    batch is left-padded, so every sequence ends in a real token and the next token of each sits at one position."""
    if key_padding_mask is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    if not bool(key_padding_mask[:, -1].all()):
        raise ValueError("a decode batch is left-padded: every prompt's last position must be a real token "
                         "(padding first, as the cache appends every sequence's next token at one position)")
    return key_padding_mask


class Decoder(nn.Module):
    """The reference's function, prefill then one token per step: `prefill(x, mask)` → (B, N, C), then
    `step(x_t)` → (B, 1, C) for each new token x_t (B, 1, C). Holds a copy of the reference's weights, the QKV
    projections fused into one."""

    def __init__(self, ref: ReferenceLayer, capacity: int):
        super().__init__()
        check_positive_int("capacity", capacity)
        self.d_model, self.n_heads, self.capacity = ref.d_model, ref.n_heads, capacity
        self.ln1, self.qkv, self.out_proj = ref.ln1, fuse_qkv(ref), ref.out_proj
        self.ln2, self.fc1, self.fc2 = ref.ln2, ref.fc1, ref.fc2
        self.steps = None  # tokens appended since the prefill; None before it

    def _check_token(self, x_t: torch.Tensor) -> None:
        """One line for a step that cannot follow this decoder's prefill: before any, or a token of the wrong
        shape, dtype or device (checked before anything is written, so a refused step leaves the cache as it was)."""
        if self.steps is None:
            raise ValueError("call prefill(prompt) before the first step")
        check_layer_input(self, x_t, None)
        if tuple(x_t.shape[:2]) != (self.batch, 1):
            raise ValueError(f"a step takes one token per sequence of the prompt's batch, ({self.batch}, 1, "
                             f"{self.d_model}), got {tuple(x_t.shape)}")

    def _finish(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The layer after attention: x (B, L, C), y the heads merged (B, L, C) → the layer's output (B, L, C)."""
        x = x + self.out_proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_qkv(self.qkv(self.ln1(x)), self.n_heads)  # each (B, H, L, hd)

    @torch.no_grad()
    def prefill(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        real = prompt_mask(x, key_padding_mask)
        if x.shape[1] > self.capacity:
            raise ValueError(f"the prompt has {x.shape[1]} tokens, more than the capacity of {self.capacity}")
        self.batch = x.shape[0]
        q, k, v = self._project(x)
        if key_padding_mask is None:  # no (B, 1, N, N) mask: a long prompt's would not fit
            y = sdpa(q, k, v, is_causal=True)  # (B, H, N, hd)
        else:
            y = sdpa(q, k, v, attn_mask=causal_padding_mask(real, x.shape[1]))
        self._keep_prompt(k, v, real, x)
        self.steps = 0
        return self._finish(x, merge_heads(y))

    def _keep_prompt(self, k: torch.Tensor, v: torch.Tensor, real: torch.Tensor, x: torch.Tensor) -> None:
        raise NotImplementedError

    def step_room(self) -> None:
        """Refuse, in one line, a step past the capacity, before anything is written."""
        used = self.prompt_len + self.steps
        if used >= self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions and all {used} are used: no room for "
                             "another step (build the decoder with a larger capacity)")

    @torch.no_grad()
    def step(self, x_t: torch.Tensor) -> torch.Tensor:
        self._check_token(x_t)
        self.step_room()
        self._advance()
        try:
            out = self._step(x_t)
        except BaseException:
            self._retreat()  # a step that fails (out of memory, say) leaves the position where it was
            raise
        self.steps += 1
        return out

    def _advance(self) -> None:
        """Where the new token goes: a static cache moves its position on the device; the others grow on the host."""

    def _retreat(self) -> None:
        """`_advance` undone."""

    def _step(self, x_t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def rewind(self) -> None:
        """Take the last step back (a timing loop steps and rewinds, so every timed step sees the same context);
        the next step overwrites what it wrote."""
        if not self.steps:
            raise ValueError("no step to take back")
        self._rewind()
        self.steps -= 1

    def _rewind(self) -> None:
        raise NotImplementedError


class NaiveDecoder(Decoder):
    """No cache: the reference layer over the whole sequence so far at every step, keeping its last row."""

    def __init__(self, ref: ReferenceLayer, capacity: int):
        super().__init__(ref, capacity)
        self.ref = ref

    def _keep_prompt(self, k, v, real, x):
        self.x, self.real, self.prompt_len = x, real, x.shape[1]

    def _step(self, x_t):
        self.x = torch.cat([self.x, x_t], dim=1)  # (B, L+1, C)
        self.real = torch.cat([self.real, torch.ones_like(self.real[:, :1])], dim=1)  # (B, L+1)
        return self.ref(self.x, self.real)[:, -1:]

    def _rewind(self):
        self.x, self.real = self.x[:, :-1], self.real[:, :-1]


class GrowingCacheDecoder(Decoder):
    """A cache that grows: each step appends its key and value with `torch.cat`, copying the whole cache."""

    def _keep_prompt(self, k, v, real, x):
        self.k, self.v, self.real, self.prompt_len = k, v, real, x.shape[1]

    def _step(self, x_t):
        q, k, v = self._project(x_t)  # each (B, H, 1, hd)
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)  # (B, H, L+1, hd)
        self.real = torch.cat([self.real, torch.ones_like(self.real[:, :1])], dim=1)  # (B, L+1)
        y = sdpa(q, self.k, self.v, attn_mask=self.real[:, None, None, :])  # (B, H, 1, hd)
        return self._finish(x_t, merge_heads(y))

    def _rewind(self):
        self.k, self.v, self.real = self.k[:, :, :-1], self.v[:, :, :-1], self.real[:, :-1]


class StaticCacheDecoder(Decoder):
    """A preallocated cache written in place; attention over the whole capacity, the unwritten positions and
    the padding masked, so every step has the same shapes (a CUDA graph can replay it: `decode_stack.DecodeStack`)."""

    def _keep_prompt(self, k, v, real, x):
        B, H, N, hd = k.shape
        self.cache = KVCache(B, H, hd, self.capacity, k.dtype, k.device)
        self.cache.write_prompt(k, v, real)
        self.prompt_len = N
        self.slots = torch.arange(self.capacity, device=k.device)  # (S,)

    def attend(self, q: torch.Tensor) -> torch.Tensor:
        """q (B, H, 1, hd) over the cache → (B, H, 1, hd)."""
        cache = self.cache
        visible = (cache.real != 0) & (self.slots <= cache.position)  # (B, S)
        return sdpa(q, cache.k, cache.v, attn_mask=visible[:, None, None, :])

    def _step(self, x_t):
        q, k, v = self._project(x_t)  # each (B, H, 1, hd)
        self.cache.append(k, v)
        return self._finish(x_t, merge_heads(self.attend(q)))

    def _advance(self):
        self.cache.advance()

    def _retreat(self):
        self.cache.position.sub_(1)

    def advance_and_step(self, x_t: torch.Tensor) -> torch.Tensor:
        """One step with no host work and no checks: what a CUDA graph of the step holds."""
        self.cache.advance()
        return self._step(x_t)

    def _rewind(self):
        self.cache.position.sub_(1)  # on the device: positions past it are masked, and overwritten next


class SplitKVDecoder(StaticCacheDecoder):
    """The static cache with split-KV attention (flash-decoding, `kernels.decode_attention`): enough key ranges
    per (sequence, head) to fill the GPU, merged exactly by their log-sum-exp; `n_splits`: that many ranges instead
    (1: one launch, no merge), for A/B measurements."""

    def __init__(self, ref: ReferenceLayer, capacity: int, n_splits: int | None = None):
        super().__init__(ref, capacity)
        weight = ref.ln1.weight
        if (why := unavailable_reason(weight.device, weight.dtype)) is not None:
            raise VariantUnavailable(why)
        from ..kernels import decode_attention  # Triton, once known to be there
        if n_splits is not None:
            check_positive_int("n_splits", n_splits)
            if n_splits > (most := -(-capacity // decode_attention.BLOCK_KEYS)):
                raise ValueError(f"n_splits {n_splits} is more than the {most} ranges of "
                                 f"{decode_attention.BLOCK_KEYS} keys that a capacity of {capacity} holds")
        self.kernel, self.n_splits_given = decode_attention, n_splits

    def _keep_prompt(self, k, v, real, x):
        super()._keep_prompt(k, v, real, x)
        self.n_splits = self.n_splits_given or self.kernel.split_count(k.shape[0] * k.shape[1], self.capacity,
                                                                       k.device)

    def _step(self, x_t):
        q, k, v = self._project(x_t)  # each (B, H, 1, hd)
        cache = self.cache  # the kernel appends k and v itself
        y = self.kernel.split_kv_attention(q, k, v, cache.k, cache.v, cache.real, cache.position, self.n_splits)
        return self._finish(x_t, merge_heads(y))


class FusedSplitKVDecoder(SplitKVDecoder):
    """Split-KV attention between four fused GEMMs (`kernels.fused_linear`): ln1 + QKV, out_proj + residual,
    ln2 + fc1 + GELU, fc2 + residual. The prefill is the split-KV decoder's (torch's kernels on the prompt).
    `prefetch`: attention asks L2 for the three later GEMMs' weights while it streams the cache, and for the qkv
    weight the next layer's step reads first (`next_qkv`; by default this layer's own, for its next step).
    `pdl`: its GEMMs launched with programmatic dependent launch, each starting while the kernel before it ends,
    where the GPU has it (`kernels.launch`): on by default, as it took a short context's step from 24.6 to 22.7 µs
    and moved the long ones by under 1 %; `pdl_attention`: its attention and merge too, off, as that made the long
    contexts' steps 1–9 % slower (results/README.md). The two decide for its kernels, whatever ROOFLINE_PDL says.
    `gemv`: at one sequence (B = 1) its GEMMs run `fused_linear`'s CUDA-core GEMV, on by default, as it took a third
    off a B = 1 layer's projections on an H100; off, the tensor-core tiles, for A/B measurements. `n_splits`: as
    the split-KV decoder's."""

    def __init__(self, ref: ReferenceLayer, capacity: int, prefetch: bool = False, pdl: bool = True,
                 pdl_attention: bool = False, gemv: bool = True, n_splits: int | None = None):
        super().__init__(ref, capacity, n_splits)
        from ..kernels.fused_linear import fused_linear  # Triton, once known to be there
        self.fused_linear = functools.partial(fused_linear, pdl=pdl, gemv=gemv)
        self.prefetch, self.next_qkv = prefetch, None  # next_qkv: set by a stack (`DecodeStack`)
        self.pdl_attention = pdl_attention

    def _step(self, x_t):
        linear = self.fused_linear
        q, k, v = split_qkv(linear(x_t, self.qkv, ln=self.ln1), self.n_heads)  # each (B, H, 1, hd)
        cache = self.cache
        later = (self.out_proj.weight, self.fc1.weight, self.fc2.weight,
                 self.qkv.weight if self.next_qkv is None else self.next_qkv) if self.prefetch else ()
        y = self.kernel.split_kv_attention(q, k, v, cache.k, cache.v, cache.real, cache.position, self.n_splits,
                                           prefetch=later, pdl=self.pdl_attention)
        x = linear(merge_heads(y), self.out_proj, residual=x_t)  # (B, 1, C)
        return linear(linear(x, self.fc1, ln=self.ln2, gelu=True), self.fc2, residual=x)


def layer_kernel_unavailable_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the `layer_kernel` decoder cannot run on `device` in `dtype`, or None where it can: through the Triton
    interpreter (its phases one launch each), or on a GPU from `whole_layer`'s compute capability on (every
    program resident at once, tuned there) in fp16 or bf16."""
    if (why := unavailable_reason(device, dtype)) is not None:
        return why
    from ..kernels import launch  # Triton, once known to be there
    if launch.INTERPRETED:
        return None
    if dtype == torch.float32:
        return "it takes fp16 or bf16 on a GPU (its fp32 products would be TF32's)"
    if capability(device) < MIN_CAPABILITY:
        return (f"it runs from compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} on, as the whole-layer "
                f"kernel does, and this GPU's is {'.'.join(map(str, capability(device)))}")
    return None


class LayerKernelDecoder(StaticCacheDecoder):
    """The whole step of the layer in one persistent launch (`kernels.decode_layer`): ln1 + QKV, split-KV
    attention appending to the cache, the ranges' merge, out_proj + residual, ln2 + fc1 + GELU, fc2 split-K and
    its reduce, grid barriers between them; with `phases` (and always under the Triton interpreter) one launch
    per phase. Runs where `whole_layer` does (compute capability 9.0 on, fp16 or bf16) or in the interpreter.
    `config`: tiles, fc2's split, warps, stages and programs per SM, by default `decode_layer.default_config`'s
    for the cache the prompt sets up; `n_splits`: key ranges per (sequence, head), by default
    `decode_layer.range_count`'s; `prefetch`: the later phases' weights and the next layer's qkv weight
    (`next_qkv`, as `FusedSplitKVDecoder`'s) asked into L2 at the step's start."""

    def __init__(self, ref: ReferenceLayer, capacity: int, config: WholeLayerConfig | None = None, phases: bool = False,
                 n_splits: int | None = None, prefetch: bool = False):
        super().__init__(ref, capacity)
        weight = ref.ln1.weight
        if (why := layer_kernel_unavailable_reason(weight.device, weight.dtype)) is not None:
            raise VariantUnavailable(f"layer_kernel: {why}")
        from ..kernels import decode_layer  # Triton, once known to be there
        if n_splits is not None:
            check_positive_int("n_splits", n_splits)
        self.kernel, self.n_splits_given, self.config_given = decode_layer, n_splits, config
        if config is not None:
            config.check_unrollable(ref.d_model, ref.d_ff)
        self.phases, self.prefetch, self.next_qkv = phases, prefetch, None  # next_qkv: set by `DecodeStack`
        self.register_buffer("sync", torch.zeros(1, dtype=torch.int32, device=weight.device), persistent=False)

    def _keep_prompt(self, k, v, real, x):
        super()._keep_prompt(k, v, real, x)
        cache = self.cache
        cache_bytes = 2 * cache.k.numel() * cache.k.element_size()  # keys and values, (B, H, capacity, hd) each
        weights = sum(p.numel() * p.element_size() for p in self.parameters())
        # a given configuration was checked for unrolling at build; the defaults keep their loops rolled
        self.config = self.config_given or self.kernel.default_config(cache_bytes, weights)
        from ..kernels.whole_layer import INTERPRETED_PROGRAMS
        self.programs = (INTERPRETED_PROGRAMS if self.kernel.INTERPRETED
                         else self.config.per_sm * multiprocessor_count(cache.k.device))  # all resident at once
        self.n_splits = self.n_splits_given or self.kernel.range_count(k.shape[0] * k.shape[1], self.capacity,
                                                                       self.programs)

    def _step(self, x_t):
        cache = self.cache  # the kernel appends the new key and value itself
        return self.kernel.decode_layer_step(x_t, self, cache.k, cache.v, cache.real, cache.position, self.n_splits,
                                             self.config, self.programs, self.sync, self.phases,
                                             prefetch=self.prefetch, next_qkv=self.next_qkv)


DECODERS = dict(zip(catalog.DECODERS, (NaiveDecoder, GrowingCacheDecoder, StaticCacheDecoder, SplitKVDecoder,
                                       FusedSplitKVDecoder, LayerKernelDecoder)))
TRITON_DECODERS = ("split_kv", "fused_split_kv", "layer_kernel")  # unavailable where Triton cannot run


def build_decoder(name: str, ref: ReferenceLayer, capacity: int, **options) -> Decoder:
    """The decoder `name` (a key of DECODERS) of `ref`'s weights, with room for `capacity` positions; `options`
    go to its constructor (`layer_kernel`'s config, phases, n_splits, prefetch: what a tuning run varies)."""
    if name not in DECODERS:
        raise ValueError(f"unknown decoder {name!r}: use one of {', '.join(DECODERS)}")
    takes = [p for p in inspect.signature(DECODERS[name]).parameters if p not in ("ref", "capacity")]
    if unknown := [option for option in options if option not in takes]:
        its = f"its options: {', '.join(takes)}" if takes else "it takes none"
        raise ValueError(f"the {name} decoder takes no option {', '.join(unknown)} ({its})")
    return DECODERS[name](ref, capacity, **options)
