"""A decode step's four projections on their own: µs and GB/s of `fused_linear` at M = B rows (LayerNorm, GELU and
the residual folded in, as `fused_split_kv` calls it; at B = 1 its CUDA-core GEMV), the same in its tensor-core tiles
(`gemv=False`: at B = 1 the path before the GEMV, at B 16 the same one), the same GEMM without its LayerNorm
prologue, forced tiles, and cuBLAS's plain `F.linear`, on the rows of `benchmarks.decode`: how close to the copy
bandwidth streaming the weights gets, what the LayerNorm prologue costs, and which tile or GEMV block ran. `--gemv`
adds blocks of `roofline_lib.kernels.gemv`, the CUDA-core GEMV (no tensor cores), per BLOCK_N and warps.

    python -m benchmarks.decode_gemv --out OUT                       # on a GPU
    python -m benchmarks.decode_gemv --out OUT --tiles 16x16x256/1/w4s4,16x32x256/4/w4s3   # forced tiles beside
    python -m benchmarks.decode_gemv --out OUT --stats-elements 1024  # the LayerNorm prologue in narrower steps
    python -m benchmarks.decode_gemv --out OUT --gemv 1/w4,2/w4,4/w4,8/w4,4/w8,8/w8   # GEMV blocks beside,
                                                                      # as BLOCK_N/wWARPS

`--stats-elements` sets `kernels.fused_linear.STATS_ELEMENTS` for this process before anything compiles: 1024 reads
a 16-row tile's statistics 64 columns a step, as BLOCK_K = 64 did before it had a width of its own. With `--gemv` the
closing table of a layer's four projections gains "gemv (best per projection)": each projection's fastest passing
gemv variant, summed (the four may be different variants: a table before it names them).

Each is checked against the same function in float64 before it is timed. In a decode step the weights come from
HBM (the cache read between two layers' GEMMs, and the other layers' weights, push them out of L2), so each call
is timed on copies of its weight in turn, enough of them to outweigh L2 three times (`weight_copies`): a CUDA
graph of one call per copy (`triton.testing.do_bench_cudagraph`, median), divided by the copies. Bytes are the
weight's, read once (the activations are a few KB).
"""
from __future__ import annotations

import argparse
import copy
import re
import sys

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

CASES = [(1, 512), (1, 1024), (16, 768)]  # (B, d_model): the rows of benchmarks.decode
# (name, K ÷ d_model, N ÷ d_model, LayerNorm before, GELU after, residual added): a layer's four projections
PROJECTIONS = [("qkv", 1, 3, True, False, False), ("out_proj", 1, 1, False, False, True),
               ("fc1", 1, 4, True, True, False), ("fc2", 4, 1, False, False, True)]
TOLERANCE = 2e-3  # relative Frobenius error against float64 that an fp16 GEMM of K up to 4,096 stays under
GEMV_WARPS = (1, 2, 4, 8, 16)  # warps a gemv variant may ask for
GEMV_BEST = "gemv (best per projection)"  # the closing table's column: each projection's fastest gemv variant, summed
TENSOR_CORES = "fused_linear, tensor cores"  # fused_linear(gemv=False): its tiles at B = 1 too
WHOLE = ["fused_linear", TENSOR_CORES, "F.linear (cuBLAS, alone)"]  # variants timed on all four projections


def projection_inputs(B: int, K: int, N: int, residual: bool, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """a (B, K), a Linear K → N, an affine LayerNorm over K, and the residual (B, N) or None: random, in `dtype`."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    linear, ln = nn.Linear(K, N), nn.LayerNorm(K)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(N, K, generator=gen) / K ** 0.5)
        linear.bias.copy_(torch.randn(N, generator=gen) * 0.1)
        ln.weight.copy_(1 + 0.1 * torch.randn(K, generator=gen))
        ln.bias.copy_(0.1 * torch.randn(K, generator=gen))
    a = torch.randn(B, K, generator=gen)
    res = torch.randn(B, N, generator=gen) if residual else None
    move = {"device": device, "dtype": dtype}
    linear, ln = (m.requires_grad_(False).to(**move) for m in (linear, ln))  # inference: no autograd graph
    return a.to(**move), linear, ln, None if res is None else res.to(**move)


def projection_truth(a, linear, ln, gelu: bool, residual) -> torch.Tensor:
    """residual + act(linear(ln(a))) in float64 (`ln`, `residual` None: left out): what each variant computes."""
    x = a.double()
    if ln is not None:
        x = F.layer_norm(x, ln.normalized_shape, ln.weight.double(), ln.bias.double(), ln.eps)
    y = F.linear(x, linear.weight.double(), linear.bias.double())
    if gelu:
        y = F.gelu(y)
    return y if residual is None else y + residual.double()


def weight_copies(weight_bytes: int, l2_bytes: int, most: int = 512) -> int:
    """Copies of a weight that, read in turn, outweigh L2 three times: each call then streams its weight from HBM."""
    return max(2, min(most, -(-3 * l2_bytes // weight_bytes)))


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def parse_gemv(text: str) -> list[tuple[int, int]]:
    """`--gemv`'s comma-separated "BLOCK_N/wWARPS" items (e.g. "1/w4,4/w8") as (BLOCK_N, warps) pairs; a bad item
    is a one-line SystemExit."""
    blocks = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        match = re.fullmatch(r"(\d+)/w(\d+)", item)
        block_n, warps = map(int, match.groups()) if match else (0, 0)
        if block_n not in [1 << i for i in range(7)] or warps not in GEMV_WARPS:
            raise SystemExit(f"--gemv item {item!r}: expected BLOCK_N/wWARPS, BLOCK_N a power of two from 1 to 64 and "
                             f"WARPS one of {', '.join(map(str, GEMV_WARPS))}, e.g. 4/w4")
        blocks.append((block_n, warps))
    return blocks


def layer_sums(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The closing tables. µs of a layer's four projections, a row per (B, d_model): a column each for the WHOLE
    variants (fused_linear, its tensor-core tiles, cuBLAS) and, where gemv variants ran, GEMV_BEST: each projection's
    fastest gemv variant among those that passed, summed (NaN unless all four have one). Then those fastest gemv
    variants, a row per projection."""
    whole = table.variant.isin(WHOLE) & table.us.notna()  # all four each
    step = table[whole].groupby(["B", "d_model", "variant"]).us.sum().unstack("variant")
    gemv = table[table.variant.str.startswith("gemv ") & table.us.notna() & table.passed.eq(True)]
    fastest = gemv.loc[gemv.groupby(["B", "d_model", "projection"], sort=False).us.idxmin()]
    if table.variant.str.startswith("gemv ").any():
        step[GEMV_BEST] = fastest.groupby(["B", "d_model"]).us.sum(min_count=len(PROJECTIONS))
    return step, fastest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--stats-elements", type=int, help="the LayerNorm prologue's step, rows × columns (a power "
                        "of two from 256 to 16384; default: the kernel's)")
    parser.add_argument("--tiles", default="", help="comma-separated tiles of fused_linear to time beside the "
                        "autotuner's, as MxNxK/SPLIT_K/wWARPSsSTAGES")
    parser.add_argument("--gemv", default="", help="comma-separated BLOCK_N/wWARPS of the CUDA-core GEMV "
                        "(roofline_lib.kernels.gemv) to time beside the others, e.g. 1/w4,4/w4,4/w8")
    args = parser.parse_args(argv)
    if args.stats_elements is not None and (args.stats_elements not in [1 << i for i in range(8, 15)]):
        raise SystemExit(f"--stats-elements must be a power of two from 256 to 16384, got {args.stats_elements}")
    from roofline_lib.kernels.fused_linear import parse_tile
    tiles = [t.strip() for t in args.tiles.split(",") if t.strip()]
    for tile in tiles:
        try:
            parse_tile(tile)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    gemv_blocks = parse_gemv(args.gemv)
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark times GPU kernels: no GPU is visible")
    from triton.testing import do_bench_cudagraph  # Triton, once a GPU is known to be there

    from roofline_lib.core.device import environment
    from roofline_lib.core.progress import progress_bar
    from roofline_lib.kernels import fused_linear as kernel
    from roofline_lib.kernels.gemv import gemv_label, gemv_linear
    from roofline_lib.measure.ceilings import measure_ceilings
    from roofline_lib.present.report import markdown_table, write_results

    if args.stats_elements is not None:  # before the kernel's first compile in this process
        import triton.language as tl
        kernel.STATS_ELEMENTS = tl.constexpr(args.stats_elements)
    stats_elements = kernel.STATS_ELEMENTS.value
    device, dtype = torch.device("cuda"), torch.float16
    copy_gbps = measure_ceilings(device, dtype).copy_gbps
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    env = environment(device, dtype)
    records = []
    for B, d in progress_bar(CASES, desc="projections", unit="shape"):
        for name, k_mult, n_mult, ln, gelu, residual in PROJECTIONS:
            K, N = k_mult * d, n_mult * d
            a, linear, norm, res = projection_inputs(B, K, N, residual, device, dtype)
            weight_bytes = N * K * a.element_size()
            copies = [linear] + [copy.deepcopy(linear) for _ in range(weight_copies(weight_bytes, l2_bytes) - 1)]
            norm_or_none = norm if ln else None
            calls = {"fused_linear": (lambda w, n=norm_or_none: kernel.fused_linear(a, w, n, gelu, res),
                                      norm_or_none, gelu, res),
                     TENSOR_CORES: (lambda w, n=norm_or_none: kernel.fused_linear(a, w, n, gelu, res, gemv=False),
                                    norm_or_none, gelu, res),
                     "F.linear (cuBLAS, alone)": (lambda w: F.linear(a, w.weight, w.bias), None, False, None)}
            if ln:
                calls["fused_linear, no LayerNorm"] = (lambda w: kernel.fused_linear(a, w, None, gelu, res),
                                                       None, gelu, res)
            for tile in tiles:
                calls[f"fused_linear {tile}"] = (lambda w, t=tile, n=norm_or_none: kernel.fused_linear(
                    a, w, n, gelu, res, tile=t), norm_or_none, gelu, res)
            for block in gemv_blocks:
                calls[gemv_label(block)] = (lambda w, b=block, n=norm_or_none: gemv_linear(a, w, n, gelu, res, b),
                                            norm_or_none, gelu, res)
            for variant, (call, want_ln, want_gelu, want_res) in calls.items():
                try:
                    err = relative_error(call(linear), projection_truth(a, linear, want_ln, want_gelu, want_res))
                except ValueError as exc:  # a forced tile or gemv block this GPU cannot hold: recorded, others go on
                    if not variant.startswith(("fused_linear ", "gemv ")):
                        raise
                    records.append({"B": B, "d_model": d, "projection": name, "K": K, "N": N, "variant": variant,
                                    "reason": str(exc)})
                    continue
                chosen = variant in ("fused_linear", TENSOR_CORES) or variant.endswith("LayerNorm")  # by fused_linear
                tile = kernel.last_tile() if chosen else ""
                ms = do_bench_cudagraph(lambda c=call, ws=copies: [c(w) for w in ws], rep=50, return_mode="median")
                us = ms * 1e3 / len(copies)
                records.append({"B": B, "d_model": d, "projection": name, "K": K, "N": N, "variant": variant,
                                "us": us, "gbps": weight_bytes / us / 1e3, "tile": tile,
                                "copies": len(copies), "stats_elements": stats_elements, "err": err,
                                "passed": err < TOLERANCE, "reason": ""})
        table = pd.DataFrame.from_records(records).assign(fraction_of_copy=lambda t: t.gbps / copy_gbps)
        path = write_results(table.assign(**env), args.out, "decode_gemv", env)  # after each shape: kept if stopped
    print(f"copy: {copy_gbps:,.0f} GB/s\n")
    print(markdown_table(table.drop(columns=["K", "N"]), floatfmt=".3g"))
    step, fastest = layer_sums(table)
    if gemv_blocks:
        print("\nthe fastest gemv variant of each projection (among those that passed):\n" + markdown_table(
            fastest[["B", "d_model", "projection", "variant", "us", "gbps", "fraction_of_copy"]], floatfmt=".3g"))
    floor = {(B, d): 12 * d * d * 2 / (copy_gbps * 1e3) for B, d in CASES}  # a layer's weights at the copy rate, µs
    print("\nthe four projections of one layer, µs (floor: their weights at the copy bandwidth"
          + (f"; {GEMV_BEST}: the sum of each projection's fastest gemv variant" if gemv_blocks else "") + "):\n"
          + markdown_table(step.assign(floor=[floor[i] for i in step.index]).reset_index(), floatfmt=".3g"))
    print(f"\nwrote {path}")
    return 0 if table.passed.fillna(True).astype(bool).all() else 1


if __name__ == "__main__":
    sys.exit(main())
