"""An experiment for the launch-bound rows: the whole layer in one persistent Triton kernel, tuned and timed.

`roofline_lib.kernels.whole_layer` is the kernel (its docstring says how it works), and `fastest` times it as
one more candidate on shapes of few tokens. This benchmark says where it stands against the rungs and what
its time is made of, for its default configuration and for any other tiles, warps and stages given
(`WholeLayerConfig.parse`: "MxNxK/S[/wWsT[u]][/pP][/rR]"):

    python -m benchmarks.layer_megakernel --out OUT         # on a GPU: rows 1-5, fp16
    python -m benchmarks.layer_megakernel --out OUT --configs 32x64x128/4/w4s3,64x128x64/4/w8s1u   # more tiles
    python -m benchmarks.layer_megakernel --device cpu --rows s1 --out "$(mktemp -d)"   # the CPU path

For each row the CSVs and the tables give §3 (no padding, left padding and holes; fp16 and bf16 on a GPU,
fp16 under the interpreter: CHECK_DTYPES), then, beside `no_empty_mask` and `residual_addmm`, for the kernel
and for its phases launched one by one (`whole_layer_phases`: the pair measures what the launches between
phases cost): its §3 error ratio in fp16, kernels per layer, GPU µs per layer in an 8-layer graph, kernel and
gap µs, and one call's latency (`roofline_lib.runs.stack.launch_bound_row`); on a GPU, last, the kernel µs of each
phase (`phase_times`), which say where the persistent kernel's time goes.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from roofline_lib import Case, build_variant
from roofline_lib.core.device import environment, free_memory, resolve_device
from roofline_lib.core.outcome import first_line
from roofline_lib.core.progress import progress_bar
from roofline_lib.core.reference import ReferenceLayer
from roofline_lib.core.shapes import SMOKE_SUITE, SUITE, select_rows
from roofline_lib.kernels.whole_layer import INTERPRETED, PHASE_NAMES, WholeLayerConfig, default_config
from roofline_lib.measure.profiler import kernel_timeline
from roofline_lib.present.report import markdown_table
from roofline_lib.runs.stack import launch_bound_row
from roofline_lib.variants.whole_layer import WholeLayer

BASELINES = ("no_empty_mask", "residual_addmm")
FACTORIES = {"whole_layer": WholeLayer, "whole_layer_phases": lambda ref: WholeLayer(ref, phases=True)}
# bf16 only on a GPU: the Triton interpreter converts fp32 to bf16 without rounding to nearest (half of all
# values), a bias that no rounding-sensitive check survives
CHECK_DTYPES = (torch.float16,) if INTERPRETED else (torch.float16, torch.bfloat16)
PADDINGS = ("none", "left", "holes")
TIMES_COLUMNS = ["row", "variant", "status", "passed", "err_ratio", "kernels_per_layer", "gpu_us_per_layer",
                 "kernel_us_per_layer", "gap_us_per_layer", "latency_us", "reason"]  # the printed table's
CONFIGURED = "whole_layer "  # the prefix of the kernel with other tiles: "whole_layer 32x64x128/4/w8s3"


def configured(config: str, phases: bool = False) -> Callable[[ReferenceLayer], nn.Module]:
    """A factory of the persistent layer (or its phases) with the configuration `config` reads as."""
    parsed = WholeLayerConfig.parse(config)
    return lambda ref: WholeLayer(ref, parsed, phases=phases)


def build(name: str, ref: ReferenceLayer) -> nn.Module:
    """An experiment layer (FACTORIES, or "whole_layer CONFIG" for other tiles) or a rung of the ladder."""
    if name in FACTORIES:
        return FACTORIES[name](ref)
    if name.startswith(CONFIGURED):
        return configured(name.removeprefix(CONFIGURED))(ref)
    return build_variant(name, ref)


def checks(shape, device: torch.device) -> list[dict]:
    """§3 of both experiment layers on `shape`, per dtype (CHECK_DTYPES) and padding (PADDINGS)."""
    records = []
    for dtype, padding in ((dtype, padding) for dtype in CHECK_DTYPES for padding in PADDINGS):
        case = Case(shape, dtype, device, padding)
        for name in FACTORIES:
            result = case.check_module(name, build(name, case.layer))
            records.append({"row": shape.row, "variant": name, "dtype": str(dtype).removeprefix("torch."),
                            "padding": padding, "err_ratio": result.err_ratio, "passed": result.passed,
                            "reason": result.reason})
    return records


def timings(shape, dtype: torch.dtype, device: torch.device, budget_s: float,
            configs: Sequence[str] = ()) -> list[dict]:
    """The launch-bound measures (`stack.launch_bound_row`) of the baselines, the experiment layers and the
    persistent one in each of `configs`, on `shape`, each experiment layer checked against §3 first. A
    configuration this GPU cannot compile or launch (too many registers or programs for its SMs) is recorded
    with the reason, and the run goes on."""
    case = Case(shape, dtype, device)
    records = []
    for name in (*BASELINES, *FACTORIES, *(f"{CONFIGURED}{config}" for config in configs)):
        try:
            checked = None if name in BASELINES else case.check_module(name, build(name, case.layer))
            (record,) = launch_bound_row(shape, [name], dtype, device, budget_s=budget_s, build=build)
            if checked is not None:
                record |= {"err_ratio": checked.err_ratio, "passed": checked.passed}
        except Exception as exc:  # noqa: BLE001 - a configuration's own failure, recorded in its row
            if not name.startswith(CONFIGURED):
                raise
            record = {"row": shape.row, "shape": shape.label, "variant": name, "status": "error", "passed": False,
                      "reason": first_line(exc, 200)}
        records.append(record)
        free_memory(device)
    return records


def phase_times(shape, dtype: torch.dtype, device: torch.device, configs: Sequence[str] = ()) -> list[dict]:
    """Where the persistent layer's time goes on `shape`, per configuration: each phase's kernel µs, profiled
    with the phases launched one by one, beside the persistent kernel's µs. The persistent kernel's excess
    over the phases' sum is what its grid barriers cost beyond the ramp-ups they replace."""
    case = Case(shape, dtype, device)
    records = []
    for config in (default_config().label, *configs):
        record = {"row": shape.row, "shape": shape.label, "config": config}
        try:
            phases = kernel_timeline(configured(config, phases=True)(case.layer), case.x).duration_us
            whole = kernel_timeline(configured(config)(case.layer), case.x).duration_us
            record |= {**dict(zip(PHASE_NAMES, phases.tolist())), "sum_of_phases": float(phases.sum()),
                       "persistent": float(whole.sum())}
        except Exception as exc:  # noqa: BLE001 - as in `timings`
            record["reason"] = first_line(exc, 200)
        records.append(record)
        free_memory(device)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV files")
    parser.add_argument("--rows", help="suite rows (default: 1-5 on CUDA, the smoke suite on the CPU)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--budget", type=float, default=0.3, help="timing seconds per layer (default 0.3)")
    parser.add_argument("--configs", default="", help="more tiles to time, comma-separated, e.g. "
                        f"64x64x64/4,16x64x128/8/w8s3 (the default, {default_config().label}, is always timed)")
    parser.add_argument("--checks", action=argparse.BooleanOptionalAction, default=True,
                        help="§3 of both experiment layers in every dtype and padding first (default: on; "
                        "each configuration timed is checked in fp16 either way)")
    args = parser.parse_args(argv)
    try:
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        device = resolve_device(args.device)
        gpu = device.type == "cuda"
        rows = select_rows(args.rows or ("1-5" if gpu else None), SUITE if gpu else SMOKE_SUITE)
        for config in map(WholeLayerConfig.parse, configs):
            for shape in rows:
                config.check_unrollable(shape.d_model, shape.d_ff)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if device.type != "cuda" and not INTERPRETED:
        print("error: without a GPU the kernel runs only through the Triton interpreter: set TRITON_INTERPRET=1",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(device, torch.float16)
    stem = f"layer_megakernel_{env['device'].lower().replace(' ', '-')}_fp16_{env['date']}"
    failed = pd.DataFrame()
    if args.checks:
        verdicts = pd.DataFrame([r for shape in progress_bar(rows, desc="§3", unit="row")
                                 for r in checks(shape, device)]).assign(
            **{k: v for k, v in env.items() if k != "dtype"})  # each check names its own dtype
        verdicts.to_csv(out / f"{stem}_checks.csv", index=False)
        failed = verdicts[~verdicts.passed.astype(bool)]
        print(f"§3: {len(verdicts) - len(failed)} of {len(verdicts)} checks pass"
              + "".join(f"\n  FAIL row {r.row} {r.variant} {r.dtype} {r.padding}: {r.reason}"
                        for r in failed.itertuples()))
    times = pd.DataFrame([r for shape in progress_bar(rows, desc="timings", unit="row")
                          for r in timings(shape, torch.float16, device, args.budget, configs)])
    times = times.reindex(columns=[*TIMES_COLUMNS, *(c for c in times if c not in TIMES_COLUMNS)]).assign(**env)
    times.to_csv(out / f"{stem}.csv", index=False)
    if device.type != "cuda":
        print("On the CPU the Triton interpreter runs the kernel: kernels_per_layer counts the aten ops it calls, "
              "and the times say nothing about a GPU.")
    print(markdown_table(times[[*TIMES_COLUMNS]], floatfmt=".1f"))
    if device.type == "cuda":  # the interpreter's kernels are not on a GPU's time axis
        phases = pd.DataFrame([r for shape in progress_bar(rows, desc="phases", unit="row")
                               for r in phase_times(shape, torch.float16, device, configs)]).assign(**env)
        phases.to_csv(out / f"{stem}_phases.csv", index=False)
        print("Kernel µs per phase (profiled, launched one by one) and of the persistent kernel:")
        print(markdown_table(phases.drop(columns=list(env))))
    return 0 if failed.empty and not times.passed.eq(False).any() else 1  # a configuration failing §3 or to run: 1


if __name__ == "__main__":
    sys.exit(main())
