"""A device's two roofline ceilings: matmul TFLOP/s and memory GB/s, from datasheets or measured here.

Datasheet numbers are what the vendor prints (dense, no sparsity); measured numbers are what a large
matmul in the run dtype and a large device-to-device copy reach on this device, timed with
`roofline_lib.measure.timing`. The floor of docs/design.md §5 uses the measured ones.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

import pandas as pd
import torch

from ..core.device import DTYPE_NAMES, device_name, free_memory, memory_capacity, timed_on
from .timing import Timing, benchmark, spin_up


@dataclass(frozen=True)
class DeviceSpec:
    """One device's datasheet figures (dense tensor-core rates, i.e. without 2:4 sparsity)."""

    name: str
    fp16_tflops: float  # tensor core, fp32 accumulate where the sheet says so
    bf16_tflops: float  # NaN where the device has no bf16 tensor cores
    fp32_tflops: float  # CUDA cores / vector units, no TF32
    bandwidth_gbps: float  # memory bandwidth, GB/s (10^9 bytes)
    memory_gb: float  # as marketed (GB); NaN where it varies
    compute_capability: str
    source: str
    pattern: str = ""  # regex matched against a GPU's name (torch.cuda.get_device_name()); "" matches nothing

    @property
    def dtype_tflops(self) -> dict[str, float]:
        return {"fp16": self.fp16_tflops, "bf16": self.bf16_tflops, "fp32": self.fp32_tflops}


NAN = float("nan")

DATASHEET: tuple[DeviceSpec, ...] = (
    DeviceSpec("T4", 65.0, NAN, 8.1, 320.0, 16, "7.5",
               "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/"
               "t4-tensor-core-datasheet-951643.pdf",
               r"\bT4\b"),
    DeviceSpec("L4", 121.0, 121.0, 30.3, 300.0, 24, "8.9",
               "https://www.nvidia.com/en-us/data-center/l4/ (242 TFLOP/s fp16 is with sparsity)", r"\bL4\b"),
    DeviceSpec("A10G", 70.0, 70.0, 35.0, 600.0, 24, "8.6",
               "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ (AWS-only part, "
               "no NVIDIA datasheet)", r"\bA10G\b"),
    DeviceSpec("A100 SXM4 80GB", 312.0, 312.0, 19.5, 2039.0, 80, "8.0",
               "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
               "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf", r"\bA100-SXM4-80GB\b"),
    DeviceSpec("H100 SXM", 989.5, 989.5, 67.0, 3350.0, 80, "9.0",
               "https://www.nvidia.com/en-us/data-center/h100/ (1,979 TFLOP/s fp16 is with sparsity)",
               r"\bH100\b(?!.*\b(PCIe|NVL)\b)"),
    DeviceSpec("H200 SXM", 989.5, 989.5, 67.0, 4800.0, 141, "9.0",
               "https://www.nvidia.com/en-us/data-center/h200/ (1,979 TFLOP/s fp16 is with sparsity)",
               r"\bH200\b(?!.*\bNVL\b)"),
    DeviceSpec("generic CPU (nominal)", NAN, NAN, 4.1, 307.0, NAN, "-",
               "nominal one-socket server: 32 cores × 2.0 GHz × 64 fp32 FLOP/cycle (2 AVX-512 FMA units); "
               "8 channels × DDR5-4800 × 8 B. Measure the real ceilings with measure_ceilings()"),
)


def datasheet() -> pd.DataFrame:
    """The datasheet table, one row per device, with its source."""
    return pd.DataFrame([{f.name: getattr(s, f.name) for f in fields(s) if f.name != "pattern"} for s in DATASHEET])


def datasheet_spec(name: str) -> DeviceSpec | None:
    """The datasheet entry whose pattern matches a device name (e.g. "NVIDIA H200"), or None; an emulated device's
    is its GPU's ("T4 (emulated on NVIDIA H200)": the H200's), whose speeds it measures (`core.device.timed_on`)."""
    for spec in DATASHEET:
        if spec.pattern and re.search(spec.pattern, timed_on(name), flags=re.IGNORECASE):
            return spec
    return None


@dataclass(frozen=True)
class Ceilings:
    """The two roofline ceilings of one device in one dtype."""

    device: str
    dtype: str
    matmul_tflops: float
    copy_gbps: float
    source: str  # "measured: …" or "datasheet: …"

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOPs per byte) where the two ceilings meet."""
        return self.matmul_tflops * 1e12 / (self.copy_gbps * 1e9)

    def floor_ms(self, flops: float, min_bytes: float) -> float:
        """max(FLOPs / peak, bytes / bandwidth) in ms: no implementation can be faster."""
        return max(flops / (self.matmul_tflops * 1e12), min_bytes / (self.copy_gbps * 1e9)) * 1e3

    def as_dict(self) -> dict:
        return asdict(self)


def datasheet_ceilings(name: str, dtype: torch.dtype) -> Ceilings | None:
    """Ceilings from the datasheet for device `name` in `dtype`, or None if the device or dtype is not listed."""
    spec = datasheet_spec(name)
    tflops = spec.dtype_tflops.get(DTYPE_NAMES[dtype], NAN) if spec else NAN
    if tflops != tflops:
        return None
    return Ceilings(name, DTYPE_NAMES[dtype], tflops, spec.bandwidth_gbps, f"datasheet: {spec.name}, {spec.source}")


def _time_matmul(n: int, device: torch.device, dtype: torch.dtype, budget_s: float) -> Timing:
    """Time an n×n×n `torch.mm` in `dtype`. A function of its own so that its operands go out of scope, and
    are freed, on return: before the copy allocates its buffers."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)  # (n, n)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)  # (n, n)
    c = torch.empty_like(a)  # (n, n)
    spin_up(device)  # at the clock it works at: an idle GPU clocks down
    return benchmark(lambda: torch.mm(a, b, out=c), device, budget_s=budget_s)


def _time_copy(copy_bytes: int, device: torch.device, budget_s: float) -> Timing:
    """Time a device-to-device copy of `copy_bytes` bytes; like `_time_matmul`'s, its buffers are freed on return."""
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=device)  # (copy_bytes,)
    dst = torch.empty_like(src)
    return benchmark(lambda: dst.copy_(src), device, budget_s=budget_s)


def measure_ceilings(device: torch.device, dtype: torch.dtype, matmul_size: int | None = None,
                     copy_bytes: int | None = None, budget_s: float = 0.3) -> Ceilings:
    """Measure matmul TFLOP/s (an n×n×n product in `dtype`) and copy GB/s (read + write bytes of a copy).

    Defaults: n = 8192 and a 1 GiB copy on CUDA (less if the memory cap is small), n = 1024 and a
    64 MiB copy on the CPU. Medians of `measure.timing.benchmark`, after `measure.timing.spin_up`.
    """
    cuda = device.type == "cuda"
    budget = memory_capacity(device) // 8
    copy_bytes = copy_bytes or min(2**30 if cuda else 64 * 2**20, budget // 2)
    n = matmul_size or (8192 if cuda else 1024)
    n = min(n, int((budget / (3 * torch.finfo(dtype).bits // 8)) ** 0.5))
    if n < 1 or copy_bytes < 1:
        raise ValueError(f"matmul_size ({n}) and copy_bytes ({copy_bytes}) must be positive")
    matmul = _time_matmul(n, device, dtype, budget_s)
    copy = _time_copy(copy_bytes, device, budget_s)
    free_memory(device)
    tflops = 2 * n**3 / (matmul.median_ms * 1e-3) / 1e12
    gbps = 2 * copy_bytes / (copy.median_ms * 1e-3) / 1e9
    return Ceilings(device_name(device), DTYPE_NAMES[dtype], tflops, gbps,
                    f"measured: {n}×{n}×{n} matmul, {copy_bytes / 2**20:,.0f} MiB copy (read + write)")
