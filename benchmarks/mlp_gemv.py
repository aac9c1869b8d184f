"""The one-kernel MLP of a B = 1 decode step (`kernels.mlp_gemv`) in each block and way of adding its partials, timed
against fused_linear's two GEMVs (fc1 with LayerNorm and GELU, fc2 with the residual) that it replaces.

    python -m benchmarks.mlp_gemv --out OUT        # on a GPU: checked against float64, then timed

Timed as `benchmarks.decode_gemv` times a projection: a CUDA graph of one call per copy of the weights, enough
copies to outweigh L2 three times, so each call streams its weights from HBM. Both sides launch plainly (no
programmatic dependent launch), so the difference is the kernel saved and the work moved. Whether the decode step
keeps it is `benchmarks.decode_layer_kernel`'s A/B ("graph_fused_split_kv two-GEMV-MLP").
"""
from __future__ import annotations

import argparse
import copy
import sys

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from roofline_lib.kernels.mlp_gemv import REDUCES, MlpScratch, mlp_gemv

BLOCKS = ((8, 4), (16, 4), (32, 8))  # (BLOCK_H, warps) timed on a GPU
D_MODELS = (512, 1024)  # benchmarks.decode's B = 1 rows
TOLERANCE = 2e-3  # relative Frobenius error against float64, as decode_gemv's


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
