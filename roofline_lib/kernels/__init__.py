"""Hand-written Triton kernels. Each module imports Triton itself, so importing this package never needs it."""
from __future__ import annotations

import importlib.util
import os

import torch


def unavailable_reason(device: torch.device | str, dtype: torch.dtype | None = None) -> str | None:
    """Why the Triton kernels cannot run on `device` (in `dtype`, if given) here, or None when they can.

    Triton is an optional dependency: the kernel module is imported here, on demand, and an import
    failure is the answer rather than an error.
    """
    device = torch.device(device)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpret:  # the first reason on a CPU, whether Triton is installed or not
        return _needs_a_gpu(device)
    try:
        from .add_layer_norm import DTYPES, INTERPRETED
    except ImportError as exc:
        return f"Triton cannot be imported ({exc}); install it with `pip install triton`"
    if dtype is not None and dtype not in DTYPES:
        return f"the Triton kernels take {', '.join(map(str, DTYPES))}, not {dtype}"
    if device.type == "cuda" or INTERPRETED:
        return None
    return _needs_a_gpu(device)


def _needs_a_gpu(device: torch.device) -> str:
    """The reason on a CPU, with the way to run the kernels there anyway: Triton's interpreter, once installed."""
    interpreter = "set TRITON_INTERPRET=1 before Triton is imported to run it through the Triton interpreter"
    if importlib.util.find_spec("triton") is None:
        interpreter = "install Triton (`pip install triton`) and " + interpreter
    return f"the Triton kernel needs a CUDA GPU, and the layer is on {device} ({interpreter})"


def launch_mode(device: torch.device | str) -> str:
    """How the Triton kernels launch on `device`, in words: with programmatic dependent launch, or plain
    and why (`launch.pdl_reason`), where their caller leaves it to ROOFLINE_PDL (every prefill rung; decode's
    `fused_split_kv` decides for its own kernels); a results table records it beside its times."""
    reason = unavailable_reason(device)
    if reason is None:
        from .launch import pdl_reason
        reason = pdl_reason(torch.device(device))
    return "programmatic dependent launch" if reason is None else f"plain launches: {reason}"
