"""Test set-up: without CUDA, the Triton kernel runs under Triton's CPU interpreter.

TRITON_INTERPRET must be set before triton is first imported, so it is set here, at collection.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if HAS_CUDA else "cpu"
requires_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


@pytest.fixture
def gen():
    """A generator with a fresh seed each test, printed so that a failure can be replayed."""
    seed = torch.seed() % 2**63
    print(f"random seed {seed}")
    return torch.Generator().manual_seed(seed)
