import pytest
import torch

CPU = torch.device("cpu")


@pytest.fixture
def cpu() -> torch.device:
    return CPU
