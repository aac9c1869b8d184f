"""What a command runs on, checked once the device is known: the device itself, the rows, and what a CPU
run would cost (refused above an hour or the machine's memory unless --force)."""
from __future__ import annotations

import argparse
import os

import torch

from ..core.lists import check_distinct
from ..core.reference import naive_peak_bytes
from ..core.shapes import Shape, select_rows
from ..measure.roofline import layer_flops

CPU_FLOPS = 20e9  # a conservative rate for the CPU (FLOP/s): few cores, float32, the naive layer's shapes
CPU_LIMIT_S = 3600.0  # a CPU run estimated longer than this is refused without --force
TRUTH_CALLS = 2  # the float64 truth costs about two float32 calls


def check_device(args: argparse.Namespace, device: torch.device, gpu_count: int) -> None:
    """Whether the resolved `device` can take this run, `gpu_count` CUDA GPUs being visible."""
    if device.type == "cuda" and device.index is not None and device.index >= gpu_count:
        raise ValueError(f"--device {args.device} asked for, but {gpu_count} CUDA GPU(s) are visible")
    if getattr(args, "memory_cap_gib", None) is not None and device.type != "cuda":
        raise ValueError("a memory cap needs a CUDA device (--memory-cap-gib emulates a smaller GPU)")
    gpus = getattr(args, "gpus", 1)
    if gpus > 1:
        if device.type != "cuda":
            raise ValueError(f"--gpus {gpus} needs --device cuda")
        if device.index is not None:
            raise ValueError(f"--gpus {gpus} uses the first {gpus} GPUs: give --device cuda, not {args.device}")
        if gpus > gpu_count:
            raise ValueError(f"--gpus {gpus} asked for, but {gpu_count} CUDA GPU(s) are visible")


def pick_rows(spec: str | None, default: tuple[Shape, ...]) -> list[Shape]:
    """The rows --rows names (None: `default`), unless it names none or one twice."""
    rows = select_rows(spec, default)
    if not rows:
        raise ValueError(f"--rows {spec!r} names no rows: use e.g. '1-13', '1,6,9', 's1' or 'smoke'")
    try:
        check_distinct(spec, [s.row for s in rows])
    except ValueError as exc:
        raise ValueError(f"--rows {exc}") from None
    return rows


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_estimate(rows: list[Shape], variants: int, calls: int, budget_s: float, dtype: torch.dtype
                 ) -> tuple[float, Shape, int]:
    """Seconds a CPU run would take at CPU_FLOPS (`calls` per variant and row, the truth, the timing budget),
    and the row whose reference needs the most memory, with those bytes (its B·H·N² scores dominate)."""
    seconds = sum(layer_flops(s) * (variants * calls + TRUTH_CALLS) / CPU_FLOPS + budget_s for s in rows)
    largest = max(rows, key=lambda s: naive_peak_bytes(s, dtype))
    return seconds, largest, naive_peak_bytes(largest, dtype)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.0f} min"


def refuse_long_cpu_run(args: argparse.Namespace, device: torch.device, rows: list[Shape], variants: int,
                        calls: int, dtype: torch.dtype) -> None:
    """ValueError with the estimate if a CPU run would take over CPU_LIMIT_S or more memory than the machine
    has, unless --force."""
    if device.type != "cpu" or args.force:
        return
    seconds, largest, peak = cpu_estimate(rows, variants, calls, getattr(args, "budget", 0.0), dtype)
    memory = _physical_memory()
    if seconds <= CPU_LIMIT_S and peak <= memory:
        return
    raise ValueError(f"{len(rows)} row(s) × {variants} variant(s) on the CPU would take about {_duration(seconds)} "
                     f"(at {CPU_FLOPS / 1e9:g} GFLOP/s) and the reference needs {peak / 2**30:,.1f} GiB at row "
                     f"{largest.row} ({largest.label}; this machine has {memory / 2**30:,.0f} GiB): pass --force "
                     "to run it anyway, or choose fewer rows (e.g. --rows smoke)")
