"""The split-KV decode kernel on its own: µs and GB/s of one step's attention over a long cache, per configuration
(keys per block, warps, programs per SM, pipelined blocks, softmax state per lane or per program), beside SDPA's
fused kernel over the same keys with no mask (flash where it runs): how close to the copy bandwidth attention over
the cache gets, and which configuration to keep.

    python -m benchmarks.decode_attention --out OUT

Each configuration is checked against float64 attention before it is timed. Times are CUDA-graph replays of
one call (`triton.testing.do_bench_cudagraph`, median); bytes are the cache's keys and values read once.
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph

from roofline_lib.core.device import environment
from roofline_lib.kernels.decode_attention import split_count, split_kv_attention
from roofline_lib.measure.ceilings import measure_ceilings
from roofline_lib.present.report import markdown_table, write_results

CASES = [(1, 16, 100_000, 64), (1, 16, 32_768, 64), (16, 12, 8192, 64), (8, 16, 32_768, 64)]  # (B, H, keys, hd)
# (keys per block, warps, programs per SM, pipelined blocks, softmax state per lane): the per-program loop at its
# best of the last sweep (results/decode/decode_attention_*_65ce601.csv), the per-lane loop over a grid
CONFIGS = ([(128, 4, per_sm, 2, False) for per_sm in (8, 16)]
           + [(block, warps, per_sm, stages, True) for block in (64, 128, 256) for warps in (4, 8)
              for per_sm in (4, 8, 16) for stages in ((2, 3) if block == 128 else (2,))])


def flash_seqused(q, k_rows, v_rows, lengths):
    """Flash attention's variable-length form over a cache laid out (B, S, H, hd), `lengths` (B,) keys used."""
    B, S, H, hd = k_rows.shape
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device)
    cu_k = torch.arange(0, (B + 1) * S, S, dtype=torch.int32, device=q.device)
    out = torch.ops.aten._flash_attention_forward(
        q.transpose(1, 2).reshape(B, H, hd), k_rows.view(B * S, H, hd), v_rows.view(B * S, H, hd), cu_q, cu_k, 1, S,
        0.0, False, False, seqused_k=lengths)[0]
    return out.view(B, 1, H, hd).transpose(1, 2)


def efficient_seqlen(q, k_rows, v_rows, lengths):
    """The memory-efficient kernel with a per-sequence key count."""
    out = torch.ops.aten._efficient_attention_forward(q.transpose(1, 2), k_rows, v_rows, None, None, None, None, None,
                                                      0.0, 0, False, seqlen_k=lengths)[0]
    return out.transpose(1, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    args = parser.parse_args(argv)
    device, dtype = torch.device("cuda"), torch.float16
    copy_gbps = measure_ceilings(device, dtype).copy_gbps
    records = []
    for B, H, n, hd in CASES:
        gen = torch.Generator(device=device).manual_seed(0)
        q, k_new, v_new = (torch.randn(B, H, 1, hd, device=device, dtype=dtype, generator=gen) for _ in range(3))
        k, v = (torch.randn(B, H, n, hd, device=device, dtype=dtype, generator=gen) for _ in range(2))
        real = torch.ones(B, n, dtype=torch.int8, device=device)
        position = torch.tensor([n - 1], device=device)
        cache_bytes = 2 * B * H * n * hd * 2
        k[:, :, -1], v[:, :, -1] = k_new[:, :, 0], v_new[:, :, 0]
        want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
        sdpa_ms = do_bench_cudagraph(lambda: F.scaled_dot_product_attention(q, k, v), rep=50, return_mode="median")
        records.append({"B": B, "H": H, "keys": n, "config": "sdpa (no mask)", "us": sdpa_ms * 1e3,
                        "gbps": cache_bytes / (sdpa_ms * 1e-3) / 1e9, "passed": True})
        lengths = torch.full((B,), n, dtype=torch.int32, device=device)
        k_rows, v_rows = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()  # (B, n, H, hd)
        for label, call in (("flash, seqused_k", lambda: flash_seqused(q, k_rows, v_rows, lengths)),
                            ("efficient, seqlen_k", lambda: efficient_seqlen(q, k_rows, v_rows, lengths))):
            try:
                err = float((call().double() - want).norm() / want.norm())
                ms = do_bench_cudagraph(call, rep=50, return_mode="median")
            except RuntimeError as exc:
                records.append({"B": B, "H": H, "keys": n, "config": label, "passed": False,
                                "reason": str(exc).splitlines()[0][:200]})
                continue
            records.append({"B": B, "H": H, "keys": n, "config": label, "us": ms * 1e3,
                            "gbps": cache_bytes / (ms * 1e-3) / 1e9, "err": err, "passed": err < 2e-3})
        for block, warps, per_sm, stages, rowwise in CONFIGS:
            splits = split_count(B * H, n, device, per_sm, block)

            def call():
                return split_kv_attention(q, k_new, v_new, k, v, real, position, splits, block, warps, stages,
                                          rowwise)
            err = float((call().double() - want).norm() / want.norm())
            ms = do_bench_cudagraph(call, rep=50, return_mode="median")
            config = f"{block}/w{warps}/p{per_sm}/s{stages}/{'lane' if rowwise else 'prog'}"
            records.append({"B": B, "H": H, "keys": n, "config": config,
                            "splits": splits, "us": ms * 1e3, "gbps": cache_bytes / (ms * 1e-3) / 1e9, "err": err,
                            "passed": err < 2e-3})
    table = pd.DataFrame.from_records(records).assign(fraction_of_copy=lambda t: t.gbps / copy_gbps)
    env = environment(device, dtype)
    path = write_results(table.assign(**env), args.out, "decode_attention", env)
    best = table[table.config.str.contains("/")].groupby("config").fraction_of_copy.mean().sort_values()
    print(f"copy: {copy_gbps:,.0f} GB/s\n")
    shown = ["sdpa (no mask)", "flash, seqused_k", "efficient, seqlen_k", *best.index[-3:]]
    print(markdown_table(table[table.config.isin(shown)].drop(columns=["H"]), floatfmt=".3g"))
    print("\nmean fraction of the copy bandwidth over the cases, best last:\n" + best.tail(8).to_string())
    print(f"\nwrote {path}")
    return 0 if table[table.config.str.contains("/")].passed.all() else 1


if __name__ == "__main__":
    sys.exit(main())
