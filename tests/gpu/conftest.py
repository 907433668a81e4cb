"""Fixtures of the GPU tests: one CUDA backend and one open device per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cuda_backend():
    from mneme_cuda.backend import CudaBackend

    backend = CudaBackend()
    availability = backend.availability()
    if not availability.usable:
        pytest.skip(f"cuda backend unusable: {availability.reason}")
    return backend


@pytest.fixture(scope="session")
def cuda_device(cuda_backend):
    with cuda_backend.open_device(0) as device:
        yield device
