"""Shared test settings: the Triton interpreter on CPU-only machines, the `gpu` marker, the device to test on,
a fake host clock for the timing verdicts, and a faked T4 emulation on a faked H100."""
import os
from types import SimpleNamespace

import pytest
import torch

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")  # where device-generic tests run
CPU = torch.device("cpu")

# Without a GPU, Triton kernels run on CPU tensors through the Triton interpreter. Triton reads the
# switch when a kernel is defined, so it is set here, before any test module imports one.
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped, with the reason, where no CUDA GPU is visible."""
    if CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cpu() -> torch.device:
    return CPU


@pytest.fixture
def emulated_t4(monkeypatch) -> torch.device:
    """A CUDA device that is an H100 (its name, 132 SMs) under `core.device.emulate_t4`'s choices, faked so that a
    CPU test sees it: only the state the library reads is set, nothing is capped or switched off."""
    from roofline_lib.core import device as dev
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: SimpleNamespace(multi_processor_count=132, total_memory=80 * 2**30))
    monkeypatch.setattr(dev, "_emulated_capability", dev.T4_CAPABILITY)
    return torch.device("cuda", 0)


class FakeClock:
    """A host clock that moves only when a test says so: `sleep(s)` stands in for work that takes s seconds.
    Handed to the CPU timing (`fake_clock`), it makes every measured time, and so every verdict, exact.
    It counts whole ticks of 2**-36 s (15 ps), so a difference of two readings is exact: the same work always
    measures the same, and two equal calls compare as exactly 1."""

    TICK = 2.0**-36

    def __init__(self):
        self.ticks = 0

    def __call__(self) -> float:
        return self.ticks * self.TICK

    def sleep(self, seconds: float) -> None:
        self.ticks += round(seconds / self.TICK)


@pytest.fixture
def fake_clock(monkeypatch) -> FakeClock:
    """The CPU timing's clock (`measure.timing.host_clock`) replaced by a `FakeClock` for this test."""
    from roofline_lib.measure import timing
    clock = FakeClock()
    monkeypatch.setattr(timing, "host_clock", clock)
    return clock
