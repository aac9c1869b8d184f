"""The launch-bound regime measured as a model meets it: a stack of layers with distinct weights.

On short rows a layer's time is set by how many kernels it launches, not by its FLOPs or bytes. Two
numbers tell the story per rung:

- GPU time per layer: a stack of `layers` layers (distinct seeded weights, the rung's own modules)
  captured as one CUDA graph and replayed many times queued behind a sleep kernel, so no host time
  shows; the time of one replay divided by the number of layers. Gaps between kernels inside a graph
  still count: that is what fewer kernels remove.
- Latency of one layer call, host included, under the one protocol (`measure.timing.time_layer_calls`).

Plus the kernels one layer launches, from a profile, and the GPU time per layer split from the trace of
one profiled replay into time some kernel runs and idle gaps between kernels: where the gaps are most of
it, fewer kernels pay; where the kernels are, faster kernels must. On the CPU there are no CUDA graphs:
the GPU time is not measured there (status "skipped", with the reason), the latency and op count are.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..core.correctness import Case, random_reference
from ..core.device import environment, free_memory, synchronize
from ..core.outcome import VariantUnavailable, device_failed, first_line
from ..core.progress import progress_bar
from ..core.reference import ReferenceLayer
from ..core.shapes import Shape
from ..kernels import launch_mode
from ..measure.profiler import kernel_timeline
from ..measure.timing import gpu_call_ms, time_layer_calls
from ..variants.graphed import CudaGraphLayer, capture
from ..variants.registry import build_variant
from ..variants.whole_layer import whole_layer

LAYERS = 8  # layers of the stack: enough that one replay is many times a replay's own launch cost


class Stack(nn.Module):
    """`layers` applied one after another, as a model's decoder layers are (padding mask passed to each)."""

    def __init__(self, layers: Sequence[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        return x


EXTRA_LAYERS = {"whole_layer": whole_layer}  # what `build_layer` builds beyond the registry: not rungs


def build_layer(name: str, ref: ReferenceLayer) -> nn.Module:
    """A rung or peer of the registry, or one of EXTRA_LAYERS (`whole_layer`: a candidate of `fastest`)."""
    return EXTRA_LAYERS[name](ref) if name in EXTRA_LAYERS else build_variant(name, ref)


def build_stack(name: str, shape: Shape, dtype: torch.dtype, device: torch.device, layers: int = LAYERS,
                seed: int = 0, build: Callable[[str, ReferenceLayer], nn.Module] = build_layer) -> Stack:
    """`layers` copies of rung `name` (made by `build`), each on a reference with its own seeded weights."""
    return Stack([build(name, random_reference(shape, seed + i, dtype, device)) for i in range(layers)])


def graph_gpu_us(graph: torch.cuda.CUDAGraph, device: torch.device, replays: int = 50) -> float:
    """GPU µs of one replay of `graph`: replays queued behind a sleep kernel, timed with CUDA events
    (`measure.timing.gpu_call_ms`), so the host's launch time never shows."""
    return gpu_call_ms(graph.replay, device, calls=replays) * 1e3


def kernel_and_gap_us(timeline: pd.DataFrame) -> tuple[float, float]:
    """(µs in which some kernel runs, µs of idle gaps between them) from the first kernel's start to the last
    one's end, in a `measure.profiler.kernel_timeline` table. Profiled: each includes the profiler's own cost, and
    launches that overlap without the profiler (programmatic dependent launch) may not overlap under it."""
    if timeline.empty:
        return float("nan"), float("nan")
    gaps = float(timeline.gap_before_us.sum())
    return float(timeline.end_us.max()) - gaps, gaps


def kernels_per_call(module: nn.Module, x: torch.Tensor) -> float:
    """GPU kernels one call runs (on the CPU: the aten ops it calls), from the profiler's trace of one call, so
    that the kernels of a CUDA-graph replay count too (a profile's per-op tables see only the graph launch)."""
    return float(len(kernel_timeline(module, x)))


def unstackable_reason(exc: Exception, layers: int, chosen: str = "") -> str:
    """Why a rung's GPU time per layer comes from one layer called `layers` times instead of a stack: the
    capture's error, in words where it is the known one (a graph replayed inside another's capture). `chosen`: the
    candidate the one layer runs, where it chooses per shape (`fastest`); one that is not `graph_…` replays no graph
    itself, though the stack's layers, which chose apart from it, did."""
    nested = "Cannot prepare for replay during capturing stage" in str(exc)
    if nested and chosen and not chosen.startswith("graph_"):
        why = (f"the stack's layers replay CUDA graphs of their own, and a graph cannot be captured inside another; "
               f"the one layer called here chose {chosen}, eager")
    elif nested:
        why = ("it replays a CUDA graph of its own, and a graph cannot be captured inside another; its kernel count "
               "includes the input copy and the output clone around that replay")
    else:
        why = first_line(exc, 200)
    return (f"one layer called {layers}× back to back (same weights) instead of a stack, since {why}; its kernel "
            "and gap µs are not split, as one call's trace counts the host's launches between kernels as gaps")


def stack_choices(stack: Stack, single: nn.Module, x: torch.Tensor) -> str:
    """Where a stack's layers choose per shape (`fastest`) and chose otherwise than the single layer timed beside
    them, what they chose, for the stack's GPU µs are theirs; else ''."""
    if not hasattr(single, "choice_on"):
        return ""
    picked = sorted({layer.choice_on(x)[0] for layer in stack.layers} - {single.choice_on(x)[0], ""})
    return f"; its graphed stack's layers chose {', '.join(picked)}, and its GPU µs are theirs" if picked else ""


def launch_bound_row(shape: Shape, names: Sequence[str], dtype: torch.dtype, device: torch.device,
                     layers: int = LAYERS, budget_s: float = 0.3, seed: int = 0,
                     build: Callable[[str, ReferenceLayer], nn.Module] = build_layer) -> list[dict]:
    """Per rung on `shape`: kernels per layer, GPU µs per layer in the graphed stack, one call's latency (µs).
    `build(name, reference)` makes each layer (default: `build_layer`)."""
    case = Case(shape, dtype, device, seed=seed)
    records = []
    for name in names:
        record = {"row": shape.row, "shape": shape.label, "variant": name, "layers": layers, "status": "ok",
                  "reason": ""}
        try:
            single = build(name, case.layer)
        except VariantUnavailable as exc:
            records.append(record | {"status": "skipped", "reason": str(exc)})
            continue
        try:
            single(case.x)  # first call: compile, tune, choose
            synchronize(device)
        except Exception as exc:  # noqa: BLE001 - a layer that cannot run this shape is recorded; the table goes on
            if device_failed(exc):
                raise
            records.append(record | {"status": "error", "reason": first_line(exc, 200)})
            continue
        latency = time_layer_calls({name: lambda: single(case.x)}, device, budget_s=budget_s)[name]
        record |= {"latency_us": float(np.median(latency)) * 1e3, "kernels_per_layer": kernels_per_call(single, case.x),
                   "detail": getattr(single, "choices", getattr(single, "detail", "")),  # per shape; the rest once:
                   "not_timed": getattr(single, "not_timed", "")}
        if device.type != "cuda":
            record |= {"status": "skipped", "reason": "GPU time per layer needs a CUDA graph (no GPU)"}
        else:
            try:
                stack = build_stack(name, shape, dtype, device, layers, seed, build)
                graph = capture(stack, case.x).graph
            except (RuntimeError, VariantUnavailable) as exc:  # a graph inside (`fastest`): no graph of graphs
                # One call's trace holds the host's launches of its input copy, replay and output clone, so
                # its gaps are not the replay's: kernel and gap µs are left unsplit.
                record |= {"gpu_us_per_layer": gpu_call_ms(lambda: single(case.x), device, calls=layers) * 1e3,
                           "reason": unstackable_reason(exc, layers, single.choice_on(case.x)[0]
                                                        if hasattr(single, "choice_on") else "")}
                kernels_us = gaps_us = float("nan")
            else:
                record["gpu_us_per_layer"] = graph_gpu_us(graph, device) / layers
                record["detail"] += stack_choices(stack, single, case.x)
                replay = kernel_timeline(lambda x, mask: graph.replay(), case.x)
                kernels_us, gaps_us = (us / layers for us in kernel_and_gap_us(replay))
            record |= {"kernel_us_per_layer": kernels_us, "gap_us_per_layer": gaps_us}
        records.append(record)
        free_memory(device)
    return records


def launch_bound_table(rows: Sequence[Shape], names: Sequence[str], dtype: torch.dtype, device: torch.device,
                       layers: int = LAYERS, budget_s: float = 0.3, show_progress: bool = True) -> pd.DataFrame:
    """`launch_bound_row` over `rows`, with the device, versions, dtype and date."""
    records = [r for shape in progress_bar(rows, desc="launch-bound rows", unit="row", disable=not show_progress)
               for r in launch_bound_row(shape, names, dtype, device, layers, budget_s)]
    columns = ["row", "shape", "variant", "status", "layers", "kernels_per_layer", "gpu_us_per_layer",
               "kernel_us_per_layer", "gap_us_per_layer", "latency_us", "detail", "not_timed", "reason"]
    return pd.DataFrame.from_records(records).reindex(columns=columns).assign(
        triton_launch=launch_mode(device), **environment(device, dtype))


def host_and_wall_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(host µs per call without a sync, wall µs per call including the final sync) over `calls` calls."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return host / calls * 1e6, wall / calls * 1e6


def graph_costs(name: str, shape: Shape, dtype: torch.dtype, device: torch.device, calls: int = 2000,
                seed: int = 0) -> pd.DataFrame:
    """Where a CUDA-graph call of rung `name` spends its time on `shape`: host µs (no sync) and wall µs (with
    the final sync) per call of the eager layer, the graphed layer, and each piece of the graphed call — the
    replay, the copy of the input into the graph's static buffer, the clone of its output — plus the GPU µs
    of one replay with the host out of the way (`measure.timing.gpu_call_ms`). Needs a CUDA GPU."""
    if device.type != "cuda":
        raise ValueError("CUDA graphs need a CUDA GPU")
    case = Case(shape, dtype, device, seed=seed)
    eager = build_layer(name, case.layer)
    graphed = CudaGraphLayer(eager)
    graphed(case.x)
    (cap,) = graphed.captures.values()
    pieces = {f"{name}(x), eager": lambda: eager(case.x), f"{name}(x), graphed": lambda: graphed(case.x),
              "replay": cap.graph.replay, "input copy": lambda: cap.x.copy_(case.x), "output clone": cap.out.clone}
    records = [{"row": shape.row, "shape": shape.label, "piece": piece,
                **dict(zip(("host_us", "wall_us"), host_and_wall_us(fn, calls)))} for piece, fn in pieces.items()]
    records.append({"row": shape.row, "shape": shape.label, "piece": "replay, GPU only",
                    "gpu_us": gpu_call_ms(cap.graph.replay, device, calls=min(calls, 200)) * 1e3})
    return pd.DataFrame.from_records(records).reindex(columns=["row", "shape", "piece", "host_us", "wall_us", "gpu_us"])
