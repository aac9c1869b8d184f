"""Shared test settings: the Triton interpreter on CPU-only machines, the `gpu` marker, the device to test on."""
import os

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
