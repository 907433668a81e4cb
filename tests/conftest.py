"""Test-wide fixtures and the `gpu` and `amdgpu` markers: GPU tests skip cleanly where no GPU is present."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_available() -> tuple[bool, str]:
    try:
        from cuda.bindings import driver
    except ImportError:
        return False, "cuda-bindings is not installed"
    try:
        err, = driver.cuInit(0)
    except Exception as exc:  # cuda-bindings installed but no driver library (CI)
        return False, f"no CUDA driver ({type(exc).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {err}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "no CUDA device"
    return True, ""


@functools.lru_cache(maxsize=1)
def amdgpu_available() -> tuple[bool, str]:
    try:
        from mneme_hip import hipapi
    except ImportError:
        return False, "mneme-hip is not installed"
    availability = hipapi.availability()
    return availability.usable, availability.reason


def pytest_collection_modifyitems(config, items):
    if any(item.get_closest_marker("amdgpu") for item in items):
        usable, reason = amdgpu_available()
        if not usable:
            for item in items:
                if item.get_closest_marker("amdgpu"):
                    item.add_marker(pytest.mark.skip(reason=f"AMD GPU test: {reason}"))
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    usable, reason = gpu_available()
    if usable:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
