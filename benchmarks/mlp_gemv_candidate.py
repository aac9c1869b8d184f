"""A candidate for a decode step of one sequence (B = 1): the layer's whole MLP, `s + fc2(GELU(fc1(LN2(s))))`, in one
kernel instead of fused_linear's two GEMVs (fc1 with LayerNorm and GELU, fc2 with the residual), timed against them.

At B = 1 the two GEMVs are latency-bound: on an H100 each took about 3 µs for weights that stream in 0.2–0.7 µs
(results/decode/decode_gemv_5970ddd-gemv-candidate.log), and a graphed layer runs six kernels. Here program j takes
BLOCK_H hidden units: it normalizes the row (two passes in fp32, rounded as LayerNorm's output is stored), computes
its BLOCK_H values of GELU(fc1) from BLOCK_H whole rows of W1 (rounded as fc1's output is stored), and multiplies
them by the matching BLOCK_H columns of W2, a partial fc2 of all D outputs. The partials are added one of two ways
(`REDUCE`): "ordered", each stored apart and summed in program order by the last program to arrive (deterministic,
but that program reads P × D fp32 partials alone), or "atomic", added into one fp32 row with atomics (the last
program reads D values, but the order of the additions, so the last bit, can change from call to call). The last
program ends in fused_linear's epilogue (fc2's bias and the residual, one rounding) and resets the count and the
row for the next call.

    python -m benchmarks.mlp_gemv_candidate --out OUT        # on a GPU: checked against float64, then timed

Timed as `benchmarks.decode_gemv` times a projection: a CUDA graph of one call per copy of the weights, enough
copies to outweigh L2 three times, so each call streams its weights from HBM. Both sides launch plainly (the two
GEMVs with `pdl=False`; the candidate has no PDL prologue yet), so the difference is the kernel saved and the work
moved, not dependent launch. A candidate, not in the library: kept only if it wins in `benchmarks.decode`'s rows.

Measured on an H100 and not kept (results/decode/mlp_gemv_aa2acc0-candidate.log): alone, its fastest block (32/w8,
atomic) took 6.19 µs at d_model 512 and 11.4 at 1,024, against the two GEMVs' 6.35 and 11.2; "ordered" was 1.1–7.6×
slower than atomics in the same block, its last program reading every partial alone. In the library as
fused_split_kv's B = 1 MLP (8/w4, atomic, with dependent launch; commit aa2acc0), the graphed step took 18.2 µs per
layer at context 128 against the two GEMVs' 16.6, and 73.8 against 71.2 at 32k
(results/decode/decode_layer_kernel_aa2acc0-fused-mlp.log). The launch it saves did not pay for the slower kernel:
that block alone took 7.61 µs at d_model 512 against 6.35, each program reading fc2's weight 8 elements (16 bytes) a
row; the wider blocks that read more per row only drew level.
"""
from __future__ import annotations

import argparse
import copy
import sys

import pandas as pd
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import nn

from roofline_lib.kernels.epilogue import epilogue
from roofline_lib.kernels.launch import INTERPRETED, fitting

REDUCES = ("ordered", "atomic")
BLOCKS = ((8, 4), (16, 4), (32, 8))  # (BLOCK_H, warps) timed on a GPU
D_MODELS = (512, 1024)  # benchmarks.decode's B = 1 rows
TOLERANCE = 2e-3  # relative Frobenius error against float64, as decode_gemv's


@triton.jit
def _mlp_kernel(
    S,  # pointer to the MLP's input row s, (D,): LayerNorm's input and the residual
    W1, B1,  # fc1: (H, D) contiguous, (H,)
    W2, B2,  # fc2: (D, H) contiguous, (D,)
    LN_W, LN_B,  # LayerNorm's weight and bias, (D,)
    PARTIAL,  # fp32: (P, D) partials ("ordered") or one (D,) row, zero between calls ("atomic")
    COUNT,  # int32 arrival count, 0 between calls
    Y,  # pointer to the output, (D,)
    D, H, eps,
    P: tl.constexpr,  # programs: cdiv(H, BLOCK_H)
    ATOMIC: tl.constexpr,  # the partials added with atomics, else stored apart and summed in order
    BLOCK_H: tl.constexpr,  # hidden units per program
    BLOCK_D: tl.constexpr,  # D rounded up to a power of two: the whole row at once
):
    j = tl.program_id(0)
    hs = j * BLOCK_H + tl.arange(0, BLOCK_H)  # (BLOCK_H,) this program's hidden units
    ds = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    h_ok, d_ok = hs < H, ds < D
    w1 = tl.load(W1 + hs[:, None] * D + ds[None, :], mask=h_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_H, D)
    w2 = tl.load(W2 + ds[:, None] * H + hs[None, :], mask=d_ok[:, None] & h_ok[None, :], other=0.0)  # (D, BLOCK_H)
    s = tl.load(S + ds, mask=d_ok, other=0.0)
    x = s.to(tl.float32)
    mean = tl.sum(x, axis=0) / D
    diff = tl.where(d_ok, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(diff * diff, axis=0) / D + eps)
    g = tl.load(LN_W + ds, mask=d_ok, other=0.0).to(tl.float32)
    b = tl.load(LN_B + ds, mask=d_ok, other=0.0).to(tl.float32)
    xn = (diff * rstd * g + b).to(s.dtype).to(tl.float32)  # rounded as LayerNorm's output is stored
    h = tl.sum(w1.to(tl.float32) * xn[None, :], axis=1) + tl.load(B1 + hs, mask=h_ok, other=0.0).to(tl.float32)
    h = 0.5 * h * (1 + tl.math.erf(h * 0.7071067811865476))
    h = tl.where(h_ok, h.to(s.dtype).to(tl.float32), 0.0)  # rounded as fc1's output is stored
    part = tl.sum(w2.to(tl.float32) * h[None, :], axis=1)  # (BLOCK_D,) this program's share of fc2
    if ATOMIC:
        tl.atomic_add(PARTIAL + ds, part, mask=d_ok, sem="relaxed")
    else:
        tl.store(PARTIAL + j * D + ds, part, mask=d_ok)
    tl.debug_barrier()  # every thread's partial in memory before the count says so
    if tl.atomic_add(COUNT, 1, sem="acq_rel") == P - 1:  # the last program to arrive: sum, epilogue, reset
        if ATOMIC:
            acc = tl.load(PARTIAL + ds, mask=d_ok, other=0.0, cache_modifier=".cg")
            tl.store(PARTIAL + ds, tl.zeros((BLOCK_D,), dtype=tl.float32), mask=d_ok)
        else:
            acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
            for p in range(P):  # in program order: the same sum every call
                acc += tl.load(PARTIAL + p * D + ds, mask=d_ok, other=0.0, cache_modifier=".cg")
        tl.store(COUNT, 0)
        rows = tl.zeros((1,), dtype=tl.int32)
        epilogue(acc[None, :], B2, S, Y, rows, ds, rows[:, None] >= 0, D, False, True)


class MlpScratch:
    """The kernel's fp32 partials and arrival count for one (D, H, BLOCK_H, reduce), zero between calls: made once,
    so that a CUDA graph replays the same buffers; the kernel takes its block and reduce from here, so that they
    always match the buffers."""

    def __init__(self, D: int, H: int, block_h: int, reduce: str, device: torch.device):
        if reduce not in REDUCES:
            raise ValueError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
        self.D, self.block_h, self.reduce = D, block_h, reduce
        self.programs = triton.cdiv(H, block_h)
        self.partial = torch.zeros((1 if reduce == "atomic" else self.programs) * D, dtype=torch.float32,
                                   device=device)
        self.count = torch.zeros(1, dtype=torch.int32, device=device)


def mlp_gemv(s: torch.Tensor, ln: nn.LayerNorm, fc1: nn.Linear, fc2: nn.Linear, scratch: MlpScratch,
             warps: int = 4) -> torch.Tensor:
    """`s + fc2(GELU(fc1(ln(s))))` for one row s (D,) → (D,), in one launch of `_mlp_kernel` in `scratch`'s block
    and reduce, `warps` warps a program."""
    if s.dim() != 1 or s.shape[0] != scratch.D:
        raise ValueError(f"mlp_gemv takes one row, shape ({scratch.D},), got {tuple(s.shape)}")
    (D,), H = s.shape, fc1.out_features
    if triton.cdiv(H, scratch.block_h) != scratch.programs:
        raise ValueError(f"the scratch was made for {scratch.programs} programs, and fc1's {H} hidden units make "
                         f"{triton.cdiv(H, scratch.block_h)}")
    y = torch.empty_like(s)
    with fitting(f"mlp {scratch.block_h}/w{warps} {scratch.reduce}"):
        _mlp_kernel[(scratch.programs,)](
            s.contiguous(), fc1.weight.contiguous(), fc1.bias, fc2.weight.contiguous(), fc2.bias, ln.weight, ln.bias,
            scratch.partial, scratch.count, y, D, H, ln.eps, P=scratch.programs, ATOMIC=scratch.reduce == "atomic",
            BLOCK_H=scratch.block_h, BLOCK_D=triton.next_power_of_2(D), **({} if INTERPRETED else {"num_warps": warps}))
    return y


def mlp_inputs(D: int, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """s (D,), LayerNorm over D, fc1 D → 4D, fc2 4D → D: random, in `dtype`, without autograd."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ln, fc1, fc2 = nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
    with torch.no_grad():
        for linear in (fc1, fc2):
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) / linear.in_features ** 0.5)
            linear.bias.copy_(0.1 * torch.randn(linear.out_features, generator=gen))
        ln.weight.copy_(1 + 0.1 * torch.randn(D, generator=gen))
        ln.bias.copy_(0.1 * torch.randn(D, generator=gen))
    move = {"device": device, "dtype": dtype}
    s = torch.randn(D, generator=gen).to(**move)
    return (s, *(m.requires_grad_(False).to(**move) for m in (ln, fc1, fc2)))


def mlp_truth(s, ln, fc1, fc2) -> torch.Tensor:
    """The same function in float64."""
    x = F.layer_norm(s.double(), ln.normalized_shape, ln.weight.double(), ln.bias.double(), ln.eps)
    h = F.gelu(F.linear(x, fc1.weight.double(), fc1.bias.double()))
    return s.double() + F.linear(h, fc2.weight.double(), fc2.bias.double())


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark times GPU kernels: no GPU is visible")
    from triton.testing import do_bench_cudagraph

    from benchmarks.decode_gemv import weight_copies
    from roofline_lib.core.device import environment
    from roofline_lib.kernels.fused_linear import fused_linear, last_tile
    from roofline_lib.measure.ceilings import measure_ceilings
    from roofline_lib.present.report import markdown_table, write_results

    device, dtype = torch.device("cuda"), torch.float16
    copy_gbps = measure_ceilings(device, dtype).copy_gbps
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    env = environment(device, dtype)
    records = []
    for D in D_MODELS:
        s, ln, fc1, fc2 = mlp_inputs(D, device, dtype)
        weight_bytes = 2 * 4 * D * D * s.element_size()
        copies = [(fc1, fc2)] + [(copy.deepcopy(fc1), copy.deepcopy(fc2))
                                 for _ in range(weight_copies(weight_bytes, l2_bytes) - 1)]
        truth = mlp_truth(s, ln, fc1, fc2)
        row = s[None, :]

        def two_gemvs(w):  # what fused_split_kv runs at B = 1 today: fc1 (LN, GELU), then fc2 (residual)
            hidden = fused_linear(row, w[0], ln, True, None, pdl=False)
            return fused_linear(hidden, w[1], None, False, row, pdl=False)[0]

        calls = {"fc1 + fc2 (two GEMVs)": two_gemvs}
        for block in BLOCKS:
            for reduce in REDUCES:
                scratch = MlpScratch(D, 4 * D, block[0], reduce, device)
                calls[f"mlp {block[0]}/w{block[1]} {reduce}"] = (
                    lambda w, sc=scratch, warps=block[1]: mlp_gemv(s, ln, w[0], w[1], sc, warps))
        for variant, call in calls.items():
            try:
                err = relative_error(call(copies[0]), truth)
            except ValueError as exc:  # a block this GPU cannot hold: recorded, the others go on
                records.append({"d_model": D, "variant": variant, "reason": str(exc)})
                continue
            ran = last_tile() if variant.startswith("fc1") else ""
            ms = do_bench_cudagraph(lambda c=call: [c(w) for w in copies], rep=50, return_mode="median")
            us = ms * 1e3 / len(copies)
            records.append({"d_model": D, "variant": variant, "us": us, "gbps": weight_bytes / us / 1e3,
                            "fraction_of_copy": weight_bytes / us / 1e3 / copy_gbps, "ran": ran,
                            "copies": len(copies), "err": err, "passed": err < TOLERANCE, "reason": ""})
        table = pd.DataFrame.from_records(records)
        path = write_results(table.assign(**env), args.out, "mlp_gemv", env)  # after each shape: kept if stopped
    print(f"copy: {copy_gbps:,.0f} GB/s; the MLP's weights at that rate: "
          + ", ".join(f"d {D} {2 * 4 * D * D * 2 / copy_gbps / 1e3:.3g} µs" for D in D_MODELS) + "\n")
    print(markdown_table(table, floatfmt=".3g"))
    print(f"\nwrote {path}")
    return 0 if table.passed.fillna(True).astype(bool).all() else 1


if __name__ == "__main__":
    sys.exit(main())
