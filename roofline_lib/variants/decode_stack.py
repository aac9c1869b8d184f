"""Decoders stacked as a model stacks its layers, and the whole stack's step replayed from one CUDA graph."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..core.reference import ReferenceLayer
from .decode import Decoder, StaticCacheDecoder, build_decoder
from .graphed import capture


class DecodeStack:
    """Decoders of one kind over `refs` (one reference layer each), stepped as a model steps: the token goes
    through every layer in turn. Static-cache layers share one position on the device, so a stack step advances
    it once, and `graphed` replays the whole stack's step from one CUDA graph (off a GPU it runs eagerly): the
    launches of every layer cost one, and the same graph serves every step as the position moves on. With
    `decoder` (a class of one's own, `decoder(ref, capacity)`: a learner's, `present.exercises`) its layers are
    built by it instead of the catalog's decoder `name`, which then only names them."""

    def __init__(self, name: str, refs: list[ReferenceLayer], capacity: int, graphed: bool = False,
                 decoder: Callable[..., Decoder] | None = None, **options):
        if not refs:
            raise ValueError("a decode stack needs at least one layer")
        build = decoder or partial(build_decoder, name)
        self.layers = [build(ref, capacity, **options) for ref in refs]  # options: the decoder's constructor's
        if options.get("prefetch"):  # each layer's step also asks L2 for the weight the next one reads first
            if not all(hasattr(layer, "next_qkv") for layer in self.layers):
                raise ValueError(f"prefetch needs decoders that prefetch (fused_split_kv, layer_kernel), not {name}")
            for layer, after in zip(self.layers, self.layers[1:] + self.layers[:1]):
                layer.next_qkv = after.qkv.weight
        self.static = isinstance(self.layers[0], StaticCacheDecoder)
        if graphed and not self.static:
            raise ValueError(f"the {name} decoder changes shape every step: only a static cache can be graphed")
        self.graphed = graphed and refs[0].ln1.weight.device.type == "cuda"
        self.captured = None

    @torch.no_grad()
    def prefill(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The prompt (B, N, C) through every layer → the last layer's output (B, N, C)."""
        for layer in self.layers:
            x = layer.prefill(x, key_padding_mask)
        if self.static:
            shared = self.layers[0].cache.position
            for layer in self.layers[1:]:
                layer.cache.position = shared
        self.captured = None  # new caches: a graph of the old ones would write into them
        return x

    def _eager_step(self, x_t: torch.Tensor) -> torch.Tensor:
        if not self.static:
            for layer in self.layers:
                x_t = layer.step(x_t)
            return x_t
        self.layers[0].cache.advance()  # once for every layer: they share the position
        for layer in self.layers:
            x_t = layer._step(x_t)
        return x_t

    @torch.no_grad()
    def step(self, x_t: torch.Tensor) -> torch.Tensor:
        """One token per sequence (B, 1, C) through every layer → (B, 1, C)."""
        self.layers[0]._check_token(x_t)  # every layer has the same width, dtype, device and count of steps
        self.layers[0].step_room()
        if not self.graphed:
            try:
                out = self._eager_step(x_t)
            except BaseException:
                if self.static:
                    self.layers[0].cache.position.sub_(1)  # the failed step's advance taken back
                raise
        else:
            if self.captured is None:
                position = self.layers[0].cache.position
                saved = position.clone()
                self.captured = capture(lambda x, _mask: self._eager_step(x), x_t, None, warmup=1)
                position.copy_(saved)  # the warm-up step is taken back
            self.captured.x.copy_(x_t)
            self.captured.graph.replay()
            out = self.captured.out.clone()  # the static output is overwritten by the next replay
        if self.static:
            for layer in self.layers:
                layer.steps += 1
        return out

    def compile(self, mode: str = "reduce-overhead") -> None:
        """Step through `torch.compile(mode=mode)` of the eager stack step instead (static caches only): the
        approach of gpt-fast, whose "reduce-overhead" records CUDA graphs of the compiled step."""
        if not self.static:
            raise ValueError("only a static cache's step has the fixed shapes torch.compile's graphs need")
        self._eager_step = torch.compile(self._eager_step, mode=mode, fullgraph=True)

    @torch.no_grad()
    def rewind(self) -> None:
        """Take the last stack step back, so that a timing loop sees the same context at every step."""
        if not self.static:
            for layer in self.layers:
                layer.rewind()
            return
        if not self.layers[0].steps:
            raise ValueError("no step to take back")
        self.layers[0].cache.position.sub_(1)
        for layer in self.layers:
            layer.steps -= 1
