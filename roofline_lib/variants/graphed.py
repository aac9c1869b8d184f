"""CUDA-graph replay: one capture per input shape, then each call is a copy-in, a replay and a copy-out.

For launch-bound shapes the layer's time is mostly the CPU launching kernels one by one; a graph
launches them all at once. On the CPU, or for modules a graph cannot capture, it calls straight through.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..core.checks import check_layer_input

_streams: dict[torch.device, torch.cuda.Stream] = {}


def _capture_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream per device for every warm-up and capture: libraries such as cuBLAS keep a
    workspace per stream for the life of the process, so a new stream per capture would pile them up."""
    if device not in _streams:
        _streams[device] = torch.cuda.Stream(device)
    return _streams[device]


@dataclass
class Captured:
    """A CUDA graph of one layer call and the static tensors it reads and writes."""

    graph: torch.cuda.CUDAGraph
    x: torch.Tensor  # static input, (B, N, C)
    mask: torch.Tensor | None  # static key_padding_mask, (B, N)
    out: torch.Tensor  # static output, (B, N, C)


@torch.no_grad()
def capture(layer: nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
            warmup: int = 2) -> Captured:
    """A CUDA graph of `layer(x, key_padding_mask)` on copies of the inputs, on the device's one side stream,
    after `warmup` calls there off the capture (lazy inits, autotuning, workspaces). Replaying it reads the
    static `x` and `mask` and overwrites the static `out`; the copies live as long as the `Captured` does."""
    static_x = x.clone()
    static_mask = None if key_padding_mask is None else key_padding_mask.clone()
    side = _capture_stream(x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            layer(static_x, static_mask)
    torch.cuda.current_stream(x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = layer(static_x, static_mask)
    return Captured(graph, static_x, static_mask, out)


class CudaGraphLayer(nn.Module):
    """Wraps a layer `(x, key_padding_mask=None) → y` and replays a CUDA graph of it per input shape
    (`captures` holds them, by shape, dtype, device and whether a mask is given)."""

    def __init__(self, layer: nn.Module, warmup: int = 2):
        super().__init__()
        self.layer, self.warmup = layer, warmup
        self.d_model, self.ln1 = layer.d_model, layer.ln1  # for check_layer_input
        self.captures: dict[tuple, Captured] = {}

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        if x.device.type != "cuda":
            return self.layer(x, key_padding_mask)
        key = (tuple(x.shape), x.dtype, x.device, key_padding_mask is None)
        if key not in self.captures:
            self.captures[key] = capture(self.layer, x, key_padding_mask, self.warmup)
        cap = self.captures[key]
        cap.x.copy_(x)
        if key_padding_mask is not None:
            cap.mask.copy_(key_padding_mask)
        cap.graph.replay()
        return cap.out.clone()  # the static buffer is overwritten by the next replay
