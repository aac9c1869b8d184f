"""How the hand-written kernels are launched: through the Triton interpreter or on a GPU, and with
programmatic dependent launch where the GPU has it.

Between the kernels of a CUDA graph the GPU still idles a few microseconds: a kernel starts only once the
one before it has finished and its writes are flushed. With programmatic dependent launch (compute
capability 9.0 and newer) a kernel launched with it may start while the one before still runs. It first
lets the kernel after it launch too (`gdc_launch_dependents`), then waits for the one before
(`gdc_wait`) before it reads or writes any memory: launches overlap tails, and nothing is read early or
overwritten while still being read. A decode step's GEMMs, kernels of a few microseconds each, ask for it
(`asked`): there it took a short context's step from 24.6 to 22.7 µs per layer (results/README.md). Elsewhere
it is off unless ROOFLINE_PDL=1 is set: on the prefill's launch-bound rows it moved `residual_addmm` by under a
microsecond either way, and took `fused_gemm`'s row 1 from 38.1 to 34.9 µs but made rows 2 and 4 3–6 µs slower.
`pdl_reason` says why a kernel runs without it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import triton
import triton.language as tl
from triton.runtime import JITFunction
from triton.runtime.errors import OutOfResources

from ..core.device import T4_CAPABILITY, capability

try:  # the griddepcontrol intrinsics, in triton.language.extra.cuda of recent Tritons
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    HAS_GDC = True
except ImportError:  # an older Triton: kernels run without programmatic dependent launch (`pdl_reason`)
    HAS_GDC = False

    @triton.jit
    def gdc_launch_dependents():  # never reached: PDL stays False
        pass

    @triton.jit
    def gdc_wait():  # never reached: PDL stays False
        pass

T4_SHARED_MEMORY = 64 * 1024  # bytes of shared memory a block may use on compute capability 7.5


def shared_memory_limit(device: torch.device) -> int:
    """Bytes of shared memory one program may use on `device`: a T4's where the library chooses as on one
    (`core.device.emulate_t4`), else the GPU's opt-in maximum (what Triton compiles against)."""
    if capability(device) == T4_CAPABILITY:
        return T4_SHARED_MEMORY
    return triton.runtime.driver.active.utils.get_device_properties(device.index or 0)["max_shared_mem"]


@contextmanager
def fitting(label: str):
    """Launches inside raise a configuration the GPU cannot hold (shared memory, registers) as a one-line
    ValueError naming it, the error every build and benchmark already reports, instead of Triton's own."""
    try:
        yield
    except OutOfResources as exc:
        raise ValueError(f"configuration {label} does not fit this GPU: {str(exc).split('. ')[0]}") from None


PDL_SWITCH = "ROOFLINE_PDL"  # set to 1: programmatic dependent launch where the GPU has it


@triton.jit
def pdl_prologue(PDL: tl.constexpr):
    """A kernel's first step when launched with programmatic dependent launch: the next kernel may launch,
    and this one touches no memory before the one before it has finished."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()


INTERPRETED = not isinstance(pdl_prologue, JITFunction)  # TRITON_INTERPRET=1 was set before Triton's import


def pdl_launch(pdl: bool) -> dict:
    """The launch option of a kernel launched with programmatic dependent launch ({} without: the interpreter
    takes no such option)."""
    return {"launch_pdl": True} if pdl else {}


def pdl_reason(device: torch.device, asked: bool | None = None) -> str | None:
    """Why kernels on `device` run without programmatic dependent launch, or None when they use it: where the
    caller `asked` for it (True: a decode step's GEMMs; None: as ROOFLINE_PDL=1 says; False: never), and the GPU
    and Triton have it."""
    if asked is False:
        return "its caller launches it plain"
    if asked is None and os.environ.get(PDL_SWITCH) != "1":
        return f"not switched on ({PDL_SWITCH}=1)"
    if device.type != "cuda" or INTERPRETED:
        return "only a GPU launches kernels (here the Triton interpreter runs them)"
    major, minor = capability(device)
    if major < 9:
        return f"it needs compute capability 9.0 (Hopper) or newer, and this GPU's is {major}.{minor}"
    if not HAS_GDC:
        return f"Triton {triton.__version__} has no griddepcontrol intrinsics"
    return None
