"""Correctness as DESIGN.md §3 defines it: a variant may be at most twice as far from the float64 truth
as the reference computed in the same dtype, and never NaN or Inf in a valid row."""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import torch
from torch import nn

from .device import DTYPE_NAMES, memory_capacity
from .reference import ReferenceLayer
from .shapes import SUITE, Shape
from .truth import float64_truth, sample_rows
from .variants import build_variant

PADDINGS = ("none", "right", "left", "holes")


def random_reference(shape: Shape, seed: int, dtype: torch.dtype, device: torch.device) -> ReferenceLayer:
    """A ReferenceLayer with seeded random weights, LayerNorm scales and biases included (never zeros)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = ReferenceLayer(shape.d_model, shape.n_heads)
    with torch.no_grad():
        for ln in (layer.ln1, layer.ln2):
            ln.weight.copy_(1 + 0.2 * torch.randn(shape.d_model, generator=gen))
            ln.bias.copy_(0.2 * torch.randn(shape.d_model, generator=gen))
    return layer.to(device=device, dtype=dtype)


def padding_mask(batch: int, seq_len: int, kind: str, gen: torch.Generator) -> torch.Tensor | None:
    """(B, N) bool, True = real token, or None for `kind="none"`.

    "right": real tokens first; "left": padding first; "holes": random padded positions anywhere.
    Each batch element gets its own amount of padding, and keeps at least one real token.
    """
    if kind == "none":
        return None
    if kind not in PADDINGS:
        raise ValueError(f"unknown padding {kind!r}: use one of {', '.join(PADDINGS)}")
    pos = torch.arange(seq_len)
    pad = torch.randint(1, max(2, seq_len // 2 + 1), (batch, 1), generator=gen).clamp(max=seq_len - 1)  # (B, 1)
    if kind == "right":
        mask = pos[None, :] < seq_len - pad
    elif kind == "left":
        mask = pos[None, :] >= pad
    else:
        mask = torch.rand(batch, seq_len, generator=gen) > 0.3
        mask[:, -1] = True
    return mask  # (B, N)


def naive_peak_bytes(shape: Shape, dtype: torch.dtype) -> int:
    """Peak bytes the reference needs: two live (B, H, N, N) score tensors, the (N, N) masks, activations."""
    e = torch.finfo(dtype).bits // 8
    scores = shape.batch * shape.n_heads * shape.seq_len ** 2 * e
    activations = 10 * shape.tokens * shape.d_model * e
    weights = 12 * shape.d_model ** 2 * e
    return 2 * scores + 2 * shape.seq_len ** 2 + activations + weights


def reference_feasible(shape: Shape, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the naive reference fits in the memory this process may use on `device`."""
    return naive_peak_bytes(shape, dtype) <= memory_capacity(device)


@dataclass(frozen=True)
class VerifyResult:
    """The §3 verdict for one variant on one shape."""

    variant: str
    row: str
    dtype: str
    device: str
    padding: str
    err: float  # ‖out − truth‖_F / ‖truth‖_F over valid rows
    ref_err: float  # the same for the reference in the same dtype
    err_ratio: float  # err / ref_err
    bound: float  # 2·ref_err + 1e-6
    passed: bool
    reason: str
    rows_checked: int  # query rows compared per batch element

    def as_dict(self) -> dict:
        return asdict(self)


class Case:
    """One shape's seeded weights, inputs and float64 truth, shared by every variant checked on it.

    Where the reference fits in memory, truth covers every query row and `ref_err` is measured here;
    where it does not, truth covers `sample_rows` and `ref_err` comes from the largest suite row with
    the same d_model that the reference runs (§3).
    """

    def __init__(self, shape: Shape, dtype: torch.dtype, device: torch.device,
                 padding: str = "none", seed: int = 0, n_sampled: int = 64):
        self.shape, self.dtype, self.device, self.padding, self.seed = shape, dtype, device, padding, seed
        gen = torch.Generator().manual_seed(seed + 1)
        B, N, C = shape.batch, shape.seq_len, shape.d_model
        self.layer = random_reference(shape, seed, dtype, device)
        self.x = torch.randn(B, N, C, generator=gen).to(device=device, dtype=dtype)  # (B, N, C)
        mask = padding_mask(B, N, padding, gen)
        self.key_padding_mask = None if mask is None else mask.to(device)
        self.reference_feasible = reference_feasible(shape, dtype, device)
        self.rows = None if self.reference_feasible else sample_rows(N, n_sampled).to(device)
        self.truth = float64_truth(self.layer, self.x, self.key_padding_mask, self.rows)  # (B, R, C)
        self.ref_err = (self.error(self.layer(self.x, self.key_padding_mask)) if self.reference_feasible
                        else proxy_reference_error(shape, dtype, device, padding, seed))

    def valid(self) -> torch.Tensor:
        """(B, R) bool: the compared query rows that are real tokens."""
        B, R = self.truth.shape[:2]
        if self.key_padding_mask is None:
            return torch.ones(B, R, dtype=torch.bool, device=self.device)
        return self.key_padding_mask if self.rows is None else self.key_padding_mask[:, self.rows]

    def error(self, out: torch.Tensor) -> float:
        """Relative Frobenius error of `out` (B, N, C) against the truth over valid rows; NaN if not finite."""
        got = out if self.rows is None else out[:, self.rows]
        valid = self.valid()
        got, want = got[valid].double(), self.truth[valid]  # (n_valid, C)
        if not torch.isfinite(got).all():
            return float("nan")
        return float(torch.linalg.norm(got - want) / torch.linalg.norm(want))

    def check_module(self, name: str, module: nn.Module) -> VerifyResult:
        """Run `module` on this case's input and judge its output by §3."""
        err = self.error(module(self.x, self.key_padding_mask))
        bound = 2 * self.ref_err + 1e-6
        if err != err:
            passed, reason = False, "NaN or Inf in valid rows"
        elif err > bound:
            passed, reason = False, f"error {err:.3g} exceeds 2·{self.ref_err:.3g} + 1e-6 = {bound:.3g}"
        else:
            passed, reason = True, f"error {err:.3g} ≤ bound {bound:.3g}"
        return VerifyResult(
            variant=name, row=self.shape.row, dtype=DTYPE_NAMES[self.dtype], device=self.device.type,
            padding=self.padding, err=err, ref_err=self.ref_err,
            err_ratio=err / self.ref_err if self.ref_err > 0 else float("inf"), bound=bound,
            passed=passed, reason=reason, rows_checked=self.truth.shape[1])

    def check(self, name: str, **options) -> VerifyResult:
        """Build variant `name` on this case's reference and check it."""
        return self.check_module(name, build_variant(name, self.layer, **options))


def verify(variant: str, shape: Shape, dtype: torch.dtype, device: torch.device,
           padding: str = "none", seed: int = 0, **options) -> VerifyResult:
    """§3 for one variant on one shape: error vs float64 truth, the reference's own error, ratio, verdict."""
    return Case(shape, dtype, device, padding, seed).check(variant, **options)


@functools.lru_cache(maxsize=None)
def proxy_reference_error(shape: Shape, dtype: torch.dtype, device: torch.device, padding: str, seed: int) -> float:
    """The reference's own error at the largest suite row with `shape`'s d_model that it can run."""
    candidates = [s for s in SUITE if s.d_model == shape.d_model and reference_feasible(s, dtype, device)]
    if not candidates:
        raise ValueError(f"no suite row with d_model={shape.d_model} fits the reference on {device}: "
                         "no error bound can be set")
    proxy = max(candidates, key=lambda s: (s.seq_len, s.batch))
    return Case(proxy, dtype, device, padding, seed).ref_err
