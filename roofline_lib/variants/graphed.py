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
class _Capture:
    graph: torch.cuda.CUDAGraph
    x: torch.Tensor  # static input, (B, N, C)
    mask: torch.Tensor | None  # static key_padding_mask, (B, N)
    out: torch.Tensor  # static output, (B, N, C)


class CudaGraphLayer(nn.Module):
    """Wraps a layer `(x, key_padding_mask=None) → y` and replays a CUDA graph of it per input shape."""

    def __init__(self, layer: nn.Module, warmup: int = 2):
        super().__init__()
        self.layer, self.warmup = layer, warmup
        self.d_model, self.ln1 = layer.d_model, layer.ln1  # for check_layer_input
        self._captures: dict[tuple, _Capture] = {}

    def _capture(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> _Capture:
        static_x = x.clone()
        static_mask = None if key_padding_mask is None else key_padding_mask.clone()
        side = _capture_stream(x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):  # warm-up off the capture: lazy inits, autotuning, workspaces
            for _ in range(self.warmup):
                self.layer(static_x, static_mask)
        torch.cuda.current_stream(x.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out = self.layer(static_x, static_mask)
        return _Capture(graph, static_x, static_mask, out)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        if x.device.type != "cuda":
            return self.layer(x, key_padding_mask)
        key = (tuple(x.shape), x.dtype, x.device, key_padding_mask is None)
        if key not in self._captures:
            self._captures[key] = self._capture(x, key_padding_mask)
        cap = self._captures[key]
        cap.x.copy_(x)
        if key_padding_mask is not None:
            cap.mask.copy_(key_padding_mask)
        cap.graph.replay()
        return cap.out.clone()  # the static buffer is overwritten by the next replay
