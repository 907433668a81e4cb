"""Fixtures of the GPU tests: one CUDA backend and one open device per session, and the CUDA recorder."""

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


@pytest.fixture(scope="session")
def recorder_library(tmp_path_factory):
    """The CUDA recorder: the one `scripts/gpu-suite --prepare` built, else built here (skipped if it cannot be)."""
    from mneme_cuda import recorder

    from gpu_corpus import ROOT
    from mneme.core.errors import MnemeError

    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    if prebuilt.exists():
        return prebuilt
    try:
        return recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(str(exc))
