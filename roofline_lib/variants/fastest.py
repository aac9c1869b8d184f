"""The last rung: for each input shape, the fastest of several equivalent layers, chosen by measurement.

Candidates are `no_empty_mask` and, where Triton runs, `triton_ln` and `residual_addmm`, each eagerly
and, on a GPU, as CUDA-graph replays: under a graph the launch overhead of every kernel is gone, so a rung that lost
eagerly (the fused add + LayerNorm on small shapes) may win there. `fused_gemm` is not a candidate:
measured on the H200 it was slower than `no_empty_mask` on every suite row (its Triton GEMMs are far
from cuBLAS), so timing it on every new shape would only lengthen the first call.

On the first call with a new input shape every candidate is timed, interleaved, on that very input,
and the fastest is kept for that shape (like autotuning: the first call is slower, and the sweep
reports it as `first_call_s`). A timing sample is CALLS_PER_SAMPLE calls of one candidate back to
back, as the layers of a model run, started on an idle GPU: a candidate is charged for its Python and
launch overhead where that outlasts its kernels, and not where the kernels hide it. Timed one call at
a time, both went wrong on an H200: interleaved with the other candidates' queued work, eager
`residual_addmm` looked as fast as its kernels at row 8, where in the sweep it took twice as long as
`no_empty_mask`; each from an idle GPU, the time to its first kernel made the CUDA-graph replay (with
its input copy) win at rows 9 and 13, where eager calls were faster.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import nn

from ..bench import time_interleaved
from ..checks import check_layer_input
from ..reference import ReferenceLayer
from .graphed import CudaGraphLayer
from .residual_addmm import residual_addmm
from .sdpa import no_empty_mask
from .triton_ln import triton_ln, unavailable_reason


CALLS_PER_SAMPLE = 8  # calls of one candidate in one timing sample


def _calls(module: nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None, n: int) -> None:
    """`n` calls back to back, as layers of a model run: one timing sample."""
    for _ in range(n):
        module(x, key_padding_mask)


class FastestLayer(nn.Module):
    """Dispatches each input shape to the candidate that timed fastest on it (`chosen` records which)."""

    def __init__(self, candidates: dict[str, nn.Module], budget_s: float = 0.3):
        super().__init__()
        self.candidates = nn.ModuleDict(candidates)
        first = next(iter(candidates.values()))
        self.d_model, self.ln1 = first.d_model, first.ln1  # for check_layer_input
        self.budget_s = budget_s
        self.chosen: dict[tuple, str] = {}

    @property
    def detail(self) -> str:
        """Which candidate each shape seen so far runs on."""
        return "; ".join(f"{'x'.join(map(str, key[0]))}{'' if key[1] else ' padded'} → {name}"
                         for key, name in self.chosen.items())

    def _choose(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> str:
        if len(self.candidates) == 1:
            return next(iter(self.candidates))
        fns = {name: partial(_calls, m, x, key_padding_mask, CALLS_PER_SAMPLE) for name, m in self.candidates.items()}
        samples = time_interleaved(fns, x.device, budget_s=self.budget_s, min_reps=5, max_reps=100,
                                   idle_start=True)
        return min(samples, key=lambda name: float(np.median(samples[name])))


    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        key = (tuple(x.shape), key_padding_mask is None)
        if key not in self.chosen:
            self.chosen[key] = self._choose(x, key_padding_mask)
        return self.candidates[self.chosen[key]](x, key_padding_mask)


def fastest(ref: ReferenceLayer, budget_s: float = 0.3) -> FastestLayer:
    """no_empty_mask and (where Triton runs) triton_ln and residual_addmm, each also graph-replayed on a GPU;
    the fastest per shape."""
    device = ref.ln1.weight.device
    if device.type != "cuda":  # nothing to choose: the Triton interpreter checks kernels, it is no contender
        return FastestLayer({"no_empty_mask": no_empty_mask(ref)}, budget_s)
    factories = {"no_empty_mask": no_empty_mask}
    if unavailable_reason(device, ref.ln1.weight.dtype) is None:
        factories |= {"triton_ln": triton_ln, "residual_addmm": residual_addmm}
    candidates: dict[str, nn.Module] = {name: make(ref) for name, make in factories.items()}
    candidates |= {f"graph_{name}": CudaGraphLayer(make(ref)) for name, make in factories.items()}
    return FastestLayer(candidates, budget_s)
