import os

import pytest
import torch

# Without a GPU, Triton kernels run on CPU tensors through the Triton interpreter. Triton reads the
# switch when a kernel is defined, so it is set here, before any test module imports one.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

CPU = torch.device("cpu")


@pytest.fixture
def cpu() -> torch.device:
    return CPU
