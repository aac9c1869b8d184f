"""How much a launch-bound row's time moves from one measurement to the next, and why.

    python -m benchmarks.host_noise --out results/protocol          # row 1, six phases

Measures the same layers again and again under the one protocol (`bench.time_layer_calls`, the notebooks'
0.25 s budget) in phases: from a fresh process; after the GPU sat idle, with the protocol's clock
spin-up (`bench.spin_up`); after the same idle, without it. Each measurement records the GPU's share of a
call (`bench.gpu_call_ms`), the GPU's SM clock just after it (where NVML answers), the process's CPU time
over the wall time, the CPU time the hypervisor took away (the `steal` column of /proc/stat), and the
seconds since the phase's setup ended (`since_s`), so a slowdown that fades shows as one. A fourth
phase follows a `torch.profiler` profile of the first layer (`profiling.profile_layer`, which asks for
CUPTI to be detached when it stops): launch-bound times there should match the first phases. The last two
follow `torch.compile` of the reference and of the best rung, notebook 07's two live peers (its eager calls
took twice as long after them), kept alive; then the peers are timed beside the eager layers as 07 times
them, the eager layers are timed again after that, and once more with Python's garbage collector off while
timing (as `timeit` runs); the last phase follows `torch._dynamo.reset()`. `--no-compile` leaves those out.
Each measurement also records the garbage collections in it and their milliseconds (`gc_runs`, `gc_ms`).
Beside the layers, every measurement times `launch_probe`: ten in-place adds on a tiny tensor, nothing
but launches, so its time is the host's speed alone; the last line gives its correlation with each
layer's time over all measurements (near 1: the layer's drift is the host's).
Writes one CSV naming the GPU, versions, dtype and date; prints the spread per phase and layer.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from roofline_lib.core.correctness import Case
from roofline_lib.core.device import environment, resolve_device, resolve_dtype
from roofline_lib.core.shapes import SMOKE_SUITE, SUITE, select_rows
from roofline_lib.measure.profiler import profile_layer
from roofline_lib.measure.timing import gpu_call_ms, time_layer_calls
from roofline_lib.present.report import write_results
from roofline_lib.variants.registry import build_variant


def steal_ticks() -> float:
    """Ticks of CPU time stolen from this machine so far (all CPUs), NaN where /proc/stat has no such column."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return float(fields[8])
    except (OSError, IndexError, ValueError):
        return float("nan")


def sm_clock_mhz(device: torch.device) -> float:
    """The GPU's SM clock now, in MHz (NaN without NVML or a GPU)."""
    try:
        return float(torch.cuda.clock_rate(device))
    except Exception:  # noqa: BLE001 (NVML missing or refusing: the clock is only a clue)
        return float("nan")


class GcMeter:
    """Counts the garbage collector's runs and the milliseconds they take, through `gc.callbacks`."""

    def __init__(self):
        self.runs, self.ms, self._start = 0, 0.0, 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.runs += 1
            self.ms += (time.perf_counter() - self._start) * 1e3

    def read(self) -> tuple[int, float]:
        """Runs and ms since the last read."""
        runs, ms = self.runs, self.ms
        self.runs, self.ms = 0, 0.0
        return runs, ms


PROBE_LAUNCHES = 10  # kernels one probe call launches


def launch_probe(device: torch.device) -> Callable[[], object]:
    """A call that is nothing but kernel launches (on the CPU, tiny ops): its time is the host's speed."""
    tiny = torch.zeros(8, device=device)

    def probe() -> None:
        for _ in range(PROBE_LAUNCHES):
            tiny.add_(1.0)
    return probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--row", default="1", help="the suite row (default: 1; on the CPU: s1)")
    parser.add_argument("--variants", default="reference,no_empty_mask,fastest", help="layers to time")
    parser.add_argument("--repeats", type=int, default=8, help="measurements per phase (default: 8)")
    parser.add_argument("--idle", type=float, default=15.0, help="seconds the GPU sits idle before phases 2, 3")
    parser.add_argument("--budget", type=float, default=0.25, help="seconds per measurement (default: 0.25)")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the phases after torch.compile")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
        dtype = resolve_dtype(None, device)
        (shape,) = select_rows(args.row if device.type == "cuda" else "s1",
                               SUITE if device.type == "cuda" else SMOKE_SUITE)
        if args.repeats < 1 or args.idle < 0:
            raise ValueError("--repeats must be at least 1 and --idle 0 or more")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    case = Case(shape, dtype, device)
    layers = {name: build_variant(name, case.layer) for name in args.variants.split(",")}
    calls = {name: (lambda layer=layer: layer(case.x)) for name, layer in layers.items()}
    calls["launch_probe"] = launch_probe(device)
    phases = [("fresh process, no spin-up", 0.0, False), (f"after {args.idle:g} s idle, spun up", args.idle, True),
              (f"after {args.idle:g} s idle, no spin-up", args.idle, False), ("after a profile, spun up", 0.0, True)]
    if not args.no_compile:
        phases += [("after torch.compile, spun up", 0.0, True), ("beside the compiled peers, spun up", 0.0, True),
                   ("after timing the peers, spun up", 0.0, True), ("after timing the peers, GC off", 0.0, True),
                   ("after torch._dynamo.reset(), spun up", 0.0, True)]
    records, compiled, meter = [], {}, GcMeter()
    for phase, idle, warm in phases:
        time.sleep(idle)
        if phase.startswith("after a profile"):  # CUPTI, if left attached, slows every launch after it
            profile_layer(layers[next(iter(layers))], case.x)
        elif phase.startswith("after torch.compile"):  # 07's two live peers, kept alive as they are there
            compiled = {name: build_variant(name, case.layer) for name in ("compile_reference", "compile_kept")}
            for layer in compiled.values():
                for _ in range(2):
                    layer(case.x)
        elif phase.startswith("after torch._dynamo.reset"):
            compiled = {}
            torch._dynamo.reset()
        timed = dict(calls, **{name: (lambda layer=layer: layer(case.x)) for name, layer in compiled.items()}) \
            if phase.startswith("beside") else calls
        gc_off = phase.endswith("GC off")
        started = time.perf_counter()  # a slowdown that fades after the setup (a background teardown) shows
        for repeat in range(args.repeats):
            steal, cpu, wall = steal_ticks(), time.process_time(), time.perf_counter()
            since = wall - started
            meter.read()
            if gc_off:
                gc.disable()
            try:
                samples = time_layer_calls(timed, device, budget_s=args.budget, warm_clock=warm)
            finally:
                gc.enable()
            wall, cpu, steal = time.perf_counter() - wall, time.process_time() - cpu, steal_ticks() - steal
            gc_runs, gc_ms = meter.read()
            clock = sm_clock_mhz(device)
            for name, call in timed.items():
                records.append({"phase": phase, "repeat": repeat, "since_s": since, "row": shape.row,
                                "shape": shape.label, "variant": name, "median_ms": float(np.median(samples[name])),
                                "sm_mhz": clock,
                                "gpu_ms": gpu_call_ms(call, device), "cpu_over_wall": cpu / wall,
                                "steal_ticks": steal, "gc_runs": gc_runs, "gc_ms": gc_ms})
    env = environment(device, dtype)
    table = pd.DataFrame(records).assign(**env)
    path = write_results(table, args.out, "host_noise", env)
    spread = table.pivot_table(index=["phase", "repeat"], columns="variant", values="median_ms", sort=False).join(
        table.groupby(["phase", "repeat"], sort=False)[["sm_mhz", "steal_ticks", "gc_runs", "gc_ms"]].first())
    print(f"\n{env['device']}, torch {env['torch']}, {env['dtype']}, {env['date']}: {shape.label}, median ms of "
          f"each {args.budget:g} s measurement\n")
    print(spread.reset_index().to_markdown(index=False, floatfmt=".4g"))
    print("\nGPU ms per call (host out of the way): "
          + ", ".join(f"{name} {group.min():.4g}–{group.max():.4g}" for name, group in table.groupby("variant").gpu_ms))
    probe = spread["launch_probe"]
    print("Correlation of each layer's ms with the launch probe's over all measurements: "
          + ", ".join(f"{name} {spread[name].corr(probe):.2f}" for name in layers))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
