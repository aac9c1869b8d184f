"""The last rung: for each input shape, the fastest of several equivalent layers, chosen by measurement.

Candidates are `no_empty_mask` and, where Triton runs, `triton_ln` and `residual_addmm`, each eagerly
and, on a GPU, as CUDA-graph replays: under a graph the launch overhead of every kernel is gone, so a rung
that lost eagerly (the fused add + LayerNorm on small shapes) may win there. On shapes of few tokens, from
compute capability 9.0 on, the whole layer as one persistent kernel (`whole_layer`) is one more: fewer
kernels is what pays there. Where a candidate is left out, `excluded` says why; where it fails on a shape, `failed`.
`fused_gemm` is not a candidate: it lost to `no_empty_mask` on every suite row where it was measured, so
timing it on every new shape would only lengthen the first call (docs/history.md).

On the first call with a new input shape, on a GPU, SDPA's attention backend is chosen for the shape
by measurement (`attention_backend.choose_backend`) and set on every candidate; then every candidate
is timed, interleaved, on that very input, and the fastest is kept for that shape (like autotuning:
the first call is slower, and the sweep reports it as `first_call_s`).

Candidates are timed by the `timer` the layer is given (`attention_backend.Timer`): the registry gives it
the project's one protocol (`measure.timing.time_layer_calls`: samples of calls back to back in steady
state), the same that the sweep reports, so the choice made here is the one a sweep would make.
(Protocols that chose wrong, and why: docs/history.md.) A graph replay is kept only where it beats its
own eager layer beyond noise (`pick`): it adds an input copy and an output clone, pure cost where the
host is not what the GPU waits for, so a win within noise is no reason to pay them.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import nn

from ..core.checks import check_layer_input
from ..core.device import synchronize
from ..core.outcome import device_failed, first_line
from ..core.reference import ReferenceLayer
from ..core.shapes import shape_label
from ..kernels import unavailable_reason
from ..measure.timing import Comparison
from .attention_backend import SDPA_PICK, BackendChoice, Timer, choose_backend
from .graphed import CudaGraphLayer
from .parts import split_qkv
from .residual_addmm import residual_addmm
from .sdpa import SdpaLayer, no_empty_mask, sdpa_attention
from .triton_ln import triton_ln
from .whole_layer import MAX_TOKENS as WHOLE_LAYER_MAX_TOKENS
from .whole_layer import NO_GPU, whole_layer, whole_layer_unavailable_reason


def shape_key(x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> tuple:
    """What `FastestLayer` chooses per: the input's shape (B, N, C), and whether a padding mask is given."""
    return tuple(x.shape), key_padding_mask is None


class FastestLayer(nn.Module):
    """Dispatches each input shape to the candidate that timed fastest on it (`chosen` records which).

    `timer` times the candidates (and the attention backends) on a shape's first call (`attention_backend.Timer`).
    With `choose_attention`, each shape's SDPA backend is chosen first, by timing the attention alone
    (`attention` records what was measured), and set on every candidate for that shape. `max_tokens` limits
    a candidate to shapes of at most that many tokens (batch × seq_len); `excluded` names what is no candidate
    here, and why; `failed` names, per shape, the candidates whose first call on it failed, and how (they are
    not timed on that shape, nor is the graph of an eager candidate that failed).
    """

    def __init__(self, candidates: dict[str, nn.Module], timer: Timer, budget_s: float = 0.3,
                 choose_attention: bool = False, max_tokens: dict[str, int] | None = None,
                 excluded: dict[str, str] | None = None):
        super().__init__()
        self.timer = timer
        self.candidates = nn.ModuleDict(candidates)
        self.max_tokens = max_tokens or {}  # candidate → the most tokens (batch × seq_len) it is timed on
        self.excluded = dict(excluded or {})  # candidate → why it is not one here
        self.failed: dict[tuple, dict[str, str]] = {}  # shape key → candidate → how its first call failed
        first = next(iter(candidates.values()))
        self.d_model, self.ln1 = first.d_model, first.ln1  # for check_layer_input
        self.budget_s, self.choose_attention = budget_s, choose_attention
        self.chosen: dict[tuple, str] = {}
        self.attention: dict[tuple, BackendChoice] = {}
        self._backend: str | None = None  # the backend every candidate's SDPA runs on now

    @property
    def detail(self) -> str:
        """`choices`, then `not_timed`: for people to read; tables take the choice from `choice_on`."""
        return "; ".join(part for part in (self.choices, self.not_timed) if part)

    @property
    def choices(self) -> str:
        """Which candidate (and attention backend) each shape seen so far runs on, and what failed on it."""
        return "; ".join(f"{shape_label(*key[0])}{'' if key[1] else ' padded'} → {name}"
                         + (f", attention: {self.attention[key].label}" if key in self.attention else "")
                         + "".join(f", left out: {n} ({why})" for n, why in self.failed.get(key, {}).items())
                         for key, name in self.chosen.items())

    @property
    def not_timed(self) -> str:
        """The candidates never timed here and why, the same on every shape: a table says it once, not per row."""
        return "; ".join(f"not timed here: {', '.join(n for n in self.excluded if self.excluded[n] == why)} ({why})"
                         for why in dict.fromkeys(self.excluded.values()))

    def choice_on(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> tuple[str, str]:
        """(candidate, attention backend) it runs on the shape of `x` (B, N, C): the backend as
        `BackendChoice.label`, the one forced or SDPA_PICK, and "" where the candidate runs no SDPA (the whole
        layer kernel); ("", "") for a shape it has not been called on."""
        key = shape_key(x, key_padding_mask)
        name = self.chosen.get(key, "")
        if not name or not any(isinstance(m, SdpaLayer) for m in self.candidates[name].modules()):
            return name, ""
        return name, self.attention[key].label if key in self.attention else SDPA_PICK

    def _sdpa_layers(self) -> list[SdpaLayer]:
        return [m for m in self.modules() if isinstance(m, SdpaLayer)]

    def _use_backend(self, key: tuple) -> None:
        """Set the backend chosen for this shape on every candidate (a no-op when it is already set)."""
        backend = self.attention[key].backend if key in self.attention else None
        if backend != self._backend:
            for layer in self._sdpa_layers():
                layer.attention_backend = backend
            self._backend = backend

    def _choose_attention(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> BackendChoice:
        base = self._sdpa_layers()[0]
        q, k, v = split_qkv(base.qkv_proj(base.ln1(x)), base.n_heads)  # each (B, H, N, hd), from this input
        return choose_backend(lambda backend: sdpa_attention(q, k, v, key_padding_mask, backend=backend),
                              x.device, self.timer, budget_s=self.budget_s / 3)

    def _choose(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None, key: tuple) -> str:
        tokens = x.shape[0] * x.shape[1]
        fit = {name: m for name, m in self.candidates.items()
               if name not in self.excluded and tokens <= self.max_tokens.get(name, tokens)}
        failed = self.failed.setdefault(key, {})
        for name in list(fit)[1:]:  # the first is the plain rung: its failure is the layer's own
            if name.removeprefix(GRAPHED) in failed:
                failed[name] = "its eager layer failed"
            else:
                try:
                    fit[name](x, key_padding_mask)  # the first call: compile, tune, capture
                    synchronize(x.device)  # a kernel's fault surfaces here, not in the next candidate
                except Exception as exc:  # noqa: BLE001 - a candidate that cannot run a shape is left out of it
                    if device_failed(exc):
                        raise  # the device's state, not this candidate's: for the caller (`outcome.guarded`)
                    failed[name] = first_line(exc, 200)
            if name in failed:
                del fit[name]
        if len(fit) == 1:
            return next(iter(fit))
        fns = {name: partial(m, x, key_padding_mask) for name, m in fit.items()}
        return pick(self.timer(fns, x.device, budget_s=self.budget_s, min_reps=5, max_reps=100))

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_layer_input(self, x, key_padding_mask)
        key = shape_key(x, key_padding_mask)
        if key not in self.chosen:
            if self.choose_attention:
                self.attention[key] = self._choose_attention(x, key_padding_mask)
            self._use_backend(key)
            self.chosen[key] = self._choose(x, key_padding_mask, key)
        self._use_backend(key)
        return self.candidates[self.chosen[key]](x, key_padding_mask)


GRAPHED = "graph_"  # the prefix of a candidate that replays a CUDA graph of the eager candidate it names


def pick(samples: dict[str, np.ndarray]) -> str:
    """The candidate with the lowest median among interleaved per-call samples, except a graph replay that is
    not faster beyond noise than its own eager layer: then the next lowest, by the same rule."""
    for name in sorted(samples, key=lambda name: float(np.median(samples[name]))):
        eager = name.removeprefix(GRAPHED)
        if eager == name or eager not in samples:
            return name
        if Comparison.from_samples(samples[eager], samples[name]).verdict == "faster":
            return name
    raise ValueError("no candidate was timed")


MAKERS = {"no_empty_mask": no_empty_mask, "triton_ln": triton_ln, "residual_addmm": residual_addmm,
          "whole_layer": whole_layer}
CANDIDATES = tuple(MAKERS)  # what it chooses among, each eager and graphed (all but the first need Triton)
TOKEN_LIMITS = {"whole_layer": WHOLE_LAYER_MAX_TOKENS}  # candidate → the most tokens of a shape it is timed on


def fastest(ref: ReferenceLayer, timer: Timer, budget_s: float = 0.3) -> FastestLayer:
    """no_empty_mask and (where Triton runs) triton_ln and residual_addmm, and on few tokens (from compute
    capability 9.0 on) the whole layer as one kernel, each also graph-replayed on a GPU; the fastest per shape,
    on the attention backend measured fastest for it, both measured by `timer`."""
    device, dtype = ref.ln1.weight.device, ref.ln1.weight.dtype
    if device.type != "cuda":
        return FastestLayer({"no_empty_mask": no_empty_mask(ref)}, timer, budget_s,
                            excluded=dict.fromkeys(CANDIDATES[1:], NO_GPU))
    triton_reason = unavailable_reason(device, dtype)
    reasons = dict.fromkeys(CANDIDATES[1:], triton_reason) | {
        "whole_layer": whole_layer_unavailable_reason(device, dtype)}
    excluded = {name: why for name, why in reasons.items() if why is not None}
    factories = {name: make for name, make in MAKERS.items() if name not in excluded}
    eager: dict[str, nn.Module] = {name: make(ref) for name, make in factories.items()}
    # a graph replays its own eager candidate: one copy of the fused QKV weights per candidate, not two
    candidates = eager | {f"{GRAPHED}{name}": CudaGraphLayer(layer) for name, layer in eager.items()}
    limits = {name: TOKEN_LIMITS[name.removeprefix(GRAPHED)] for name in candidates
              if name.removeprefix(GRAPHED) in TOKEN_LIMITS}
    return FastestLayer(candidates, timer, budget_s, choose_attention=True, max_tokens=limits, excluded=excluded)
