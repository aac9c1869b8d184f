"""Device and dtype choice, what the run happened on, and the memory bookkeeping a sweep needs."""
from __future__ import annotations

import datetime
import gc
import os
import platform
import re

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def resolve_device(name: str | None = None) -> torch.device:
    """`name` as a torch.device; None picks CUDA when there is a GPU, else the CPU."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but no CUDA GPU is visible; use --device cpu")
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"unsupported device {name!r}: use 'cuda' or 'cpu'")
    return device


def resolve_dtype(name: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The run dtype: fp16 on CUDA and fp32 on CPU by default; bf16 only where the GPU has it natively."""
    if name is None:
        return torch.float16 if device.type == "cuda" else torch.float32
    dtype = name if isinstance(name, torch.dtype) else DTYPES.get(name)
    if dtype is None:
        raise ValueError(f"unknown dtype {name!r}: use one of {', '.join(DTYPES)}")
    if dtype == torch.bfloat16 and device.type == "cuda":
        major, minor = capability(device)
        if major < 8:
            raise ValueError(f"bf16 needs a GPU of compute capability ≥ 8.0, but {device_name(device)} "
                             f"is {major}.{minor}: use fp16 instead (--dtype fp16)")
    return dtype


def device_name(device: torch.device) -> str:
    """The device as the library names it in every table, sentence, figure and results file: the GPU's marketing
    name, under `emulate_t4` "T4 (emulated on <that name>)" (its choices a T4's, its speeds the GPU's), or the
    CPU's description."""
    if device.type != "cuda":
        return platform.processor() or platform.machine() or "CPU"
    gpu = torch.cuda.get_device_name(device)
    return f"{T4_NAME} (emulated on {gpu})" if emulating(device) else gpu


EMULATED_NAME = re.compile(r".+? \(emulated on (?P<gpu>.+)\)")  # `device_name` under emulation


def timed_on(name: str) -> str:
    """The GPU whose speeds a device's measurements are, from its `device_name`: the GPU inside an emulated device's
    name ("T4 (emulated on NVIDIA H100 80GB HBM3)" → "NVIDIA H100 80GB HBM3"), else the name itself."""
    match = EMULATED_NAME.fullmatch(name)
    return match["gpu"] if match else name


def environment(device: torch.device, dtype: torch.dtype) -> dict[str, str]:
    """What every results file records: device name, versions, dtype and date."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "triton": triton_version,
        "dtype": DTYPE_NAMES[dtype],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }


def memory_capacity(device: torch.device) -> int:
    """Bytes this process may allocate on `device` (a per-process cap on CUDA is honoured)."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return int(total * memory_fraction(device))
    if device.type == "meta":  # tensors without storage: nothing is allocated
        return 2**63 - 1
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


SMALL_GPU_BYTES = 16 * 2**30  # a GPU of this much memory or less is T4-class: slow to compile, too small for 1M tokens


def small_gpu(device: torch.device) -> bool:
    """Whether `device` is a GPU of SMALL_GPU_BYTES or less (a T4, Colab's): where the notebooks leave out what
    would take them many minutes there (06's million tokens, 07's compile of the naive layer)."""
    return device.type == "cuda" and memory_capacity(device) <= SMALL_GPU_BYTES


_fractions: dict[int, float] = {}
_emulated_gib: dict[int, float] = {}  # set by emulate_t4: the memory this process treats as the whole card


def _index(device: torch.device) -> int:
    return torch.cuda.current_device() if device.index is None else device.index


def set_memory_cap(device: torch.device, gib: float | None) -> None:
    """Cap this process's CUDA allocations at `gib` GiB, to emulate a smaller GPU; None lifts the cap.

    Under `emulate_t4` the emulated card's memory stays the ceiling: a cap is never above it and lifting
    one returns to it, so a run that caps and uncaps (the long-context runs) still sees a T4.
    """
    if device.type != "cuda":
        raise ValueError("a memory cap needs a CUDA device")
    gib = effective_cap_gib(device, gib)
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = 1.0 if gib is None else min(1.0, gib * 2**30 / total)
    torch.cuda.set_per_process_memory_fraction(fraction, _index(device))
    _fractions[_index(device)] = fraction


def emulated_memory_gib(device: torch.device) -> float | None:
    """The GiB `emulate_t4` made this process's whole card on `device`, or None where nothing is emulated."""
    return _emulated_gib.get(_index(device)) if device.type == "cuda" else None


def effective_cap_gib(device: torch.device, gib: float | None) -> float | None:
    """The cap a run asking for `gib` (None: none) gets: never above an emulated card's memory, which is the
    cap where it asks for none."""
    ceiling = emulated_memory_gib(device)
    return gib if ceiling is None else ceiling if gib is None else min(gib, ceiling)


def memory_fraction(device: torch.device) -> float:
    """The per-process fraction set by `set_memory_cap` (1.0 when none)."""
    return _fractions.get(_index(device), 1.0)


def allocated_bytes(device: torch.device) -> int:
    """Bytes held by live tensors on `device` (0 on the CPU, where torch keeps no count)."""
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def memory_state(device: torch.device) -> str:
    """A one-line account of the CUDA allocator: allocated, reserved, peak."""
    if device.type != "cuda":
        return "cpu"
    gib = 2**30
    return (f"allocated {torch.cuda.memory_allocated(device) / gib:.2f} GiB, "
            f"reserved {torch.cuda.memory_reserved(device) / gib:.2f} GiB, "
            f"peak {torch.cuda.max_memory_allocated(device) / gib:.2f} GiB")


def free_memory(device: torch.device) -> None:
    """Collect garbage and hand cached blocks back, so the next row starts clean."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def warm_up_libraries(device: torch.device, dtype: torch.dtype) -> None:
    """Create the cuBLAS/attention workspaces once, so memory they keep is not mistaken for a leak."""
    a = torch.randn(2, 2, 64, 64, device=device, dtype=dtype)
    torch.nn.functional.scaled_dot_product_attention(a, a, a, is_causal=True)
    torch.nn.functional.linear(a, a[0, 0], a[0, 0, 0])
    del a
    free_memory(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued work on `device` (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


T4_NAME = "T4"
T4_CAPABILITY = (7, 5)
T4_MEMORY_GIB = 14.7  # what a Colab T4 shows of its 16 GB (torch's total_memory): all one process may allocate
T4_MULTIPROCESSORS = 40  # a T4's SMs
_emulated_capability: tuple[int, int] | None = None  # set by emulate_t4: what the library's choices see


def emulating(device: torch.device) -> bool:
    """Whether the library chooses on `device` as on a T4 (`emulate_t4`); never off a GPU."""
    return device.type == "cuda" and _emulated_capability is not None


def capability(device: torch.device) -> tuple[int, int]:
    """The compute capability the library chooses by: the GPU's own, or a T4's under `emulate_t4` (which
    leaves torch's answer alone, so that Triton still compiles for the GPU it runs on)."""
    return _emulated_capability or torch.cuda.get_device_capability(device)


def multiprocessor_count(device: torch.device) -> int:
    """How many multiprocessors run programs side by side on `device`, as the library sizes launches and split
    counts by them and shows them: the GPU's own, a T4's under `emulate_t4` (fewer than any GPU it runs on has, so
    a persistent kernel's programs still all fit at once); 1 off a GPU."""
    if device.type != "cuda":
        return 1
    return T4_MULTIPROCESSORS if emulating(device) else torch.cuda.get_device_properties(device).multi_processor_count


def emulate_t4(device: torch.device) -> str:
    """Make this process, on a larger CUDA GPU, choose as it would on a Colab T4; returns what is not emulated.

    The library's choices see compute capability 7.5 (fp16 by default, no bf16) and a T4's 40 multiprocessors
    (`multiprocessor_count`), the device is named as a T4 on that GPU (`device_name`), SDPA's flash and cuDNN
    backends are switched off (a T4 has neither), and allocations are capped at T4_MEMORY_GIB for the rest of the
    process (`set_memory_cap` keeps that as the ceiling). Speed stays the real GPU's, and kernels the library does
    not choose (cuBLAS, Triton's code generation) still target it.
    """
    if device.type != "cuda":
        raise ValueError("T4 emulation needs a CUDA GPU to run on")
    global _emulated_capability
    _emulated_capability = T4_CAPABILITY
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    _emulated_gib[_index(device)] = T4_MEMORY_GIB
    set_memory_cap(device, None)
    return ("timings are the real GPU's; cuBLAS and Triton still compile for it; a forced SDPA backend, and the "
            "private attention ops the chunked layer could call directly, are refused by the library's own check "
            "of the SDPA switches")
