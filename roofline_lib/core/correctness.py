"""Correctness as docs/design.md §3 defines it: a variant may be at most twice as far from the float64 truth
as the reference computed in the same dtype, and never NaN or Inf in a valid row.

`Case` holds one shape's seeded weights, inputs and truth, and judges any module on them; which
module that is (a rung, a peer, a deliberately broken layer) is the caller's business.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import torch
from torch import nn

from .catalog import PADDINGS
from .device import DTYPE_NAMES
from .numbers import measured
from .reference import ReferenceLayer, reference_fits
from .shapes import SUITE, Shape
from .truth import float64_truth, sample_rows


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


SLACK = 1e-6  # §3's absolute slack: an exact reference (error 0) still leaves a bound above rounding


@dataclass(frozen=True)
class Judgement:
    """§3's verdict on one error: the one place the rule is written down."""

    passed: bool
    ratio: float  # err / ref_err: at most about 2 passes
    bound: float  # 2·ref_err + SLACK
    reason: str  # one line: the error against the bound, or why it fails


def section3_judgement(err: float, ref_err: float) -> Judgement:
    """§3: `err` (against the float64 truth) passes when it is at most twice `ref_err` (the reference's own
    error in the same dtype) plus SLACK; NaN (a NaN or Inf in a valid row) never passes."""
    bound = 2 * ref_err + SLACK
    ratio = err / ref_err if ref_err > 0 else (0.0 if err == 0 else float("inf"))
    if err != err:
        return Judgement(False, float("nan"), bound, "NaN or Inf in valid rows")
    if err > bound:
        return Judgement(False, ratio, bound, f"error {measured(err)} exceeds 2·{measured(ref_err)} + {SLACK:g} = "
                                              f"{measured(bound)}")
    return Judgement(True, ratio, bound, f"error {measured(err)} ≤ bound {measured(bound)}")


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
    bound: float  # 2·ref_err + SLACK
    passed: bool
    reason: str
    rows_checked: int  # query rows compared per batch element

    def as_dict(self) -> dict:
        return asdict(self)

    def as_record(self) -> dict:
        """The §3 fields of a results table."""
        return {"err": self.err, "ref_err": self.ref_err, "err_ratio": self.err_ratio, "passed": self.passed,
                "rows_checked": self.rows_checked, "reason": self.reason}


class Case:
    """One shape's seeded weights, inputs and float64 truth, shared by every module checked on it.

    Where the reference fits in memory, truth covers every query row and `ref_err` is measured here;
    where it does not, truth covers `sample_rows` and `ref_err` comes from the largest suite row with
    the same d_model that the reference runs (§3). Truth and `ref_err` are computed on first use, so a
    case that is only profiled or timed never pays for them.
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
        self.reference_feasible = reference_fits(shape, dtype, device)
        self.rows = None if self.reference_feasible else sample_rows(N, n_sampled).to(device)

    @functools.cached_property
    def truth(self) -> torch.Tensor:
        """(B, R, C) float64: the reference's output on every query row, or on the sampled `rows`."""
        return float64_truth(self.layer, self.x, self.key_padding_mask, self.rows)

    @functools.cached_property
    def ref_err(self) -> float:
        """The reference's own error in this case's dtype (§3's yardstick)."""
        if self.reference_feasible:
            return self.error(self.layer(self.x, self.key_padding_mask))
        return proxy_reference_error(self.shape, self.dtype, self.device, self.padding, self.seed)

    def compute_truth(self) -> Case:
        """Compute the truth and the reference's error now (so running out of memory shows here); returns self."""
        self.truth, self.ref_err  # noqa: B018 (cached properties, computed for their side effect)
        return self

    def valid(self) -> torch.Tensor:
        """(B, R) bool: the compared query rows that are real tokens."""
        B, R = self.truth.shape[:2]
        if self.key_padding_mask is None:
            return torch.ones(B, R, dtype=torch.bool, device=self.device)
        return self.key_padding_mask if self.rows is None else self.key_padding_mask[:, self.rows]

    def error(self, out: torch.Tensor) -> float:
        """Relative Frobenius error of `out` (B, N, C) against the truth over valid rows; NaN if not finite."""
        return self.rows_error(out if self.rows is None else out[:, self.rows])

    def rows_error(self, got: torch.Tensor) -> float:
        """`error` of an output already restricted to the compared rows, (B, R, C) (what a layer split
        over processes gathers: the sampled rows only)."""
        valid = self.valid()
        got, want = got[valid].double(), self.truth[valid]  # (n_valid, C)
        if not torch.isfinite(got).all():
            return float("nan")
        return float(torch.linalg.norm(got - want) / torch.linalg.norm(want))

    def check_module(self, name: str, module: nn.Module) -> VerifyResult:
        """Run `module` on this case's input and judge its output by §3 (an output of the wrong shape,
        type or dtype fails, with the reason)."""
        out = module(self.x, self.key_padding_mask)
        wrong = _wrong_output(out, self.x)
        err = float("nan") if wrong else self.error(out)
        judged = section3_judgement(err, self.ref_err)
        passed, reason = (False, wrong) if wrong else (judged.passed, judged.reason)
        return VerifyResult(
            variant=name, row=self.shape.row, dtype=DTYPE_NAMES[self.dtype], device=self.device.type,
            padding=self.padding, err=err, ref_err=self.ref_err, err_ratio=judged.ratio, bound=judged.bound,
            passed=passed, reason=reason, rows_checked=self.truth.shape[1])


def _wrong_output(out: object, x: torch.Tensor) -> str | None:
    """Why `out` cannot be the layer's output for `x` (a (B, N, C) tensor of x's dtype and device), or None."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        return (f"returned a {tuple(out.shape)} {out.dtype} tensor on {out.device}, "
                f"expected {tuple(x.shape)} {x.dtype} on {x.device}")
    return None


@functools.lru_cache(maxsize=None)
def proxy_reference_error(shape: Shape, dtype: torch.dtype, device: torch.device, padding: str, seed: int) -> float:
    """The reference's own error at the largest suite row with `shape`'s d_model that it can run."""
    candidates = [s for s in SUITE if s.d_model == shape.d_model and reference_fits(s, dtype, device)]
    if not candidates:
        raise ValueError(f"no suite row with d_model={shape.d_model} fits the reference on {device}: "
                         "no error bound can be set")
    proxy = max(candidates, key=lambda s: (s.seq_len, s.batch))
    return Case(proxy, dtype, device, padding, seed).ref_err
