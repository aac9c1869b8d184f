"""The Triton experiment on one GPU: fused residual-add + LayerNorm, measured, then kept or reverted.

    python -m benchmarks.triton_ln --out results/triton_ln --dtype fp16,bf16 --rows 1-13

For each dtype: (1) the kernel against torch on awkward shapes (s exactly x + r, y within 2× torch's
error); (2) the kernel alone against torch's add + layer_norm, in ms and in GB/s next to the device's
copy bandwidth; (3) "triton_ln" against "no_empty_mask" end to end on every row, interleaved, with the
noise spread; (4) the keep-or-revert decision. Writes four CSVs into --out (kernel check, kernel
timing, end to end, decision), each naming the GPU, torch and triton versions, dtype and date, and
prints a short table. Committed under results/, the decision file is what `best_variant` reads.

(From the repository root; with roofline_lib installed, `python benchmarks/triton_ln.py …` works too.)
Without a GPU, a tiny smoke run of the same path goes through the Triton interpreter:

    TRITON_INTERPRET=1 python -m benchmarks.triton_ln --device cpu --out "$(mktemp -d)"
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from roofline_lib.core.decision import decide
from roofline_lib.core.device import environment, resolve_device, resolve_dtype
from roofline_lib.core.shapes import SMOKE_SUITE, SUITE, select_rows
from roofline_lib.kernels import unavailable_reason
from roofline_lib.measure.ceilings import measure_ceilings
from roofline_lib.present.report import slug
from roofline_lib.runs.experiment import end_to_end
from roofline_lib.variants.best import DECISION_PREFIX, remember

GPU = {  # sizes and timing budgets on a GPU
    "check": [(m, n) for n in (96, 1000, 1023, 4096, 5120, 8192, 20000) for m in (1, 7, 1000, 4099)],
    "extra_kernel_shapes": [(16384, 4096), (16384, 8192)],
    "copy_bytes": 2**30,
    "kernel_timing": {"budget_s": 0.3},
}
CPU = {  # the smoke run through the interpreter: tiny everything
    "check": [(m, n) for n in (96, 1023) for m in (1, 3)],
    "extra_kernel_shapes": [],
    "copy_bytes": 2**24,
    "kernel_timing": {"budget_s": 0.01, "min_reps": 3, "warmup": 1},
}


def run_dtype(dtype: torch.dtype, device: torch.device, rows: list, sizes: dict, copy_gbps: float,
              e2e_timing: dict) -> dict[str, pd.DataFrame]:
    """Check, kernel timing, end to end and decision for one dtype; each frame carries the environment."""
    from roofline_lib.runs.add_layer_norm_bench import check_add_layer_norm, kernel_table
    env = environment(device, dtype)
    check = pd.DataFrame([check_add_layer_norm(m, n, dtype, device) for m, n in sizes["check"]])
    shapes = sorted({(s.tokens, s.d_model) for s in rows} | set(sizes["extra_kernel_shapes"]))
    kernel = kernel_table(shapes, dtype, device, copy_gbps, **sizes["kernel_timing"]).assign(copy_gbps=copy_gbps)
    e2e = end_to_end(rows, dtype, device, **e2e_timing)
    decision = decide(e2e, kernel_ok=bool(check["passed"].all()))
    remember(device, dtype, decision)
    frames = {"check": check, "kernel": kernel, "e2e": e2e, "decision": pd.DataFrame([decision.as_dict()])}
    return {kind: frame.assign(**env) for kind, frame in frames.items()}


def _timing(r: pd.Series, name: str) -> str:
    return f"{r[name + '_ms']:.4f} ms, {r[name + '_gbps']:,.0f} GB/s ({r[name + '_of_copy']:.0%})"


def _spread(r: pd.Series) -> str:
    return f"{r.speedup:.3f}× [{r.speedup_p20:.3f}–{r.speedup_p80:.3f}] {r.verdict}"


def print_summary(results: dict[str, pd.DataFrame]) -> None:
    """Failed checks, the kernel and end-to-end tables, and the decision per dtype."""
    check, kernel, e2e = results["check"], results["kernel"], results["e2e"]
    first = kernel.iloc[0]
    print(f"\n{first['device']}, torch {first['torch']}, triton {first['triton']}, {first['date']}; "
          f"copy bandwidth {first['copy_gbps']:,.0f} GB/s")
    for dtype, failed in check[~check["passed"]].groupby("dtype"):
        print(f"\n{dtype}: KERNEL CHECK FAILED for (n_rows, d_model) in {list(zip(failed.n_rows, failed.d_model))}")
    table = kernel.assign(triton=kernel.apply(_timing, axis=1, name="triton"),
                          torch=kernel.apply(_timing, axis=1, name="torch"), speedup=kernel.apply(_spread, axis=1))
    print("\nKernel alone: fused add + LayerNorm vs torch's add then layer_norm "
          "(GB/s of the fewest bytes; % of copy bandwidth)\n")
    print(table[["dtype", "n_rows", "d_model", "triton", "torch", "speedup"]].to_markdown(index=False))
    ok = e2e[e2e["status"] == "ok"]
    table = ok.assign(speedup=ok.apply(_spread, axis=1), check=ok["passed"].map({True: "pass", False: "FAIL"}))
    print(f"\nEnd to end: {e2e['candidate'].iloc[0]} vs {e2e['baseline'].iloc[0]} "
          "(median ms; speedup [p20–p80 of interleaved ratios])\n")
    print(table[["dtype", "row", "shape", "baseline_ms", "candidate_ms", "speedup", "check"]]
          .to_markdown(index=False, floatfmt=".4f"))
    print()
    for r in results["decision"].itertuples():
        print(f"{r.dtype}: {r.decision.upper()} → best = {r.chosen}. {r.reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV results")
    parser.add_argument("--dtype", help="comma-separated, e.g. fp16,bf16 (default: fp16,bf16 on CUDA, fp32 on CPU)")
    parser.add_argument("--rows", help="suite rows end to end (default: 1-13 on CUDA, the smoke suite on the CPU)")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of interleaved timing per row")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        gpu = device.type == "cuda"
        dtypes = [resolve_dtype(d.strip(), device) for d in (args.dtype or ("fp16,bf16" if gpu else "fp32")).split(",")]
        rows = select_rows(args.rows, SUITE[:13] if gpu else SMOKE_SUITE)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reason = unavailable_reason(device)
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    sizes = GPU if gpu else CPU
    e2e_timing = {"budget_s": args.budget} if gpu else {"budget_s": 0.01, "min_reps": 3, "warmup": 1}
    copy_gbps = measure_ceilings(device, dtypes[0], copy_bytes=sizes["copy_bytes"]).copy_gbps
    per_dtype = [run_dtype(dtype, device, rows, sizes, copy_gbps, e2e_timing) for dtype in dtypes]
    results = {kind: pd.concat([r[kind] for r in per_dtype], ignore_index=True) for kind in per_dtype[0]}
    env = results["decision"].iloc[0]
    tag = f"{slug(env['device'])}_{'-'.join(results['decision']['dtype'])}_{env['date']}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = {"check": f"triton_ln_check_{tag}", "kernel": f"triton_ln_kernel_{tag}",
             "e2e": f"triton_ln_e2e_{tag}", "decision": f"{DECISION_PREFIX}_{tag}"}
    for kind, frame in results.items():
        frame.to_csv(out / f"{names[kind]}.csv", index=False)
    print_summary(results)
    print(f"\nwrote {', '.join(f'{n}.csv' for n in names.values())} in {out}")
    e2e = results["e2e"]
    correct = results["check"]["passed"].all() and e2e.loc[e2e["status"] == "ok", "passed"].astype(bool).all()
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
