"""The CUDA backend where no GPU is needed: registration, availability, device names, address reservation."""

from __future__ import annotations

import pytest

from mneme.core import plugins
from mneme.core.errors import BackendUnavailable

pytest.importorskip("mneme_cuda")
from mneme_cuda import driver as cuda_driver
from mneme_cuda.backend import CudaBackend


def test_cuda_backend_is_registered_through_its_entry_point():
    assert plugins.registry("backend")["cuda"] is CudaBackend
    (item,) = [p for p in plugins.provided("backend") if p.name == "cuda"]
    assert item.distribution == "mneme-cuda"


def test_without_a_gpu_availability_says_why_and_opening_raises():
    found = cuda_driver.probe()
    if found.usable:
        pytest.skip("a CUDA GPU is present")
    availability = CudaBackend().availability()
    assert not availability.usable
    assert any(word in availability.reason for word in ("libcuda.so.1", "cuda-bindings", "no CUDA device", "cuInit"))
    assert CudaBackend().device_count() == 0
    with pytest.raises(BackendUnavailable, match="cuda backend is unusable"):
        CudaBackend().open_device(0)
    assert CudaBackend().fingerprint()["backend"] == "cuda"


def test_small_ranges_are_reserved_inside_a_generous_aligned_span():
    from mneme_cuda.memory import GiB, reservation_attempts

    granularity = 2 << 20
    addr, size = 0x153940000000 + 3 * granularity + 5, 10 << 20
    attempts = reservation_attempts(addr, size, granularity)
    assert attempts[0] == (0x153940000000 + 3 * granularity, 6 * granularity)
    assert attempts[1:] == [(0x153940000000, 4 * GiB), (0x153940000000, 64 * GiB)]
    for base, length in attempts:
        assert base <= addr and addr + size <= base + length and base % granularity == 0 == length % granularity


def test_the_cuda_backend_names_its_devices_timers_without_opening_one():
    from mneme_cuda.backend import CudaBackend
    from mneme_cuda.device import CudaDevice

    assert CudaBackend.timers == CudaDevice.timers == ("auto", "cupti", "events")


def test_the_probes_open_libcuda_through_the_core_loader():
    import ctypes

    lib, why = cuda_driver.LIBCUDA.try_load()
    if lib is not None:  # a driver here: its functions are declared, not guessed
        assert lib.cuInit.argtypes == [ctypes.c_uint] and lib.cuDriverGetVersion.restype is ctypes.c_int
        return
    # none: the probes say so in the loader's one style (the library, its name, what failed, what to do)
    assert why.startswith("the CUDA driver (libcuda.so.1): the dynamic loader refused it")
    assert why.endswith("; install the NVIDIA driver")
    assert cuda_driver.probe_without_bindings().reason == why


@pytest.mark.parametrize(
    ("value", "chosen"), [(None, "minimum"), ("minimum", "minimum"), (" Recommended ", "recommended")]
)
def test_the_replay_maps_at_the_minimum_granularity_unless_told_the_recommended_one(monkeypatch, value, chosen):
    from mneme_cuda.memory import GRANULARITY_ENV, mapping_granularity

    if value is None:
        monkeypatch.delenv(GRANULARITY_ENV, raising=False)
    else:
        monkeypatch.setenv(GRANULARITY_ENV, value)
    assert mapping_granularity() == chosen


def test_an_unknown_mapping_granularity_is_a_usage_error_naming_the_variable_and_the_choices(monkeypatch):
    from mneme_cuda.memory import GRANULARITY_ENV, mapping_granularity

    from mneme.core.errors import UsageError

    monkeypatch.setenv(GRANULARITY_ENV, "huge")
    with pytest.raises(UsageError, match=r"MNEME_CUDA_MAP_GRANULARITY='huge' is not one of minimum, recommended"):
        mapping_granularity()


@pytest.mark.parametrize("value", ["", "read", "rewrite"])
def test_what_the_sms_do_before_a_flush_is_read_from_the_environment(monkeypatch, value):
    from mneme_cuda.timing import before_flush_setting

    monkeypatch.setenv("MNEME_CUDA_BEFORE_FLUSH", value)
    assert before_flush_setting() == value


def test_an_unknown_before_flush_setting_is_a_usage_error_naming_the_variable_and_the_choices(monkeypatch):
    from mneme_cuda.timing import before_flush_setting

    from mneme.core.errors import UsageError

    monkeypatch.setenv("MNEME_CUDA_BEFORE_FLUSH", "1")
    with pytest.raises(UsageError, match=r"MNEME_CUDA_BEFORE_FLUSH='1' is not one of read, rewrite"):
        before_flush_setting()


@pytest.mark.parametrize(("value", "count"), [("", 0), ("0", 0), ("32", 32), ("1024", 1024)])
def test_the_extra_streams_while_timing_are_read_from_the_environment(monkeypatch, value, count):
    from mneme_cuda.timing import extra_streams_setting

    monkeypatch.setenv("MNEME_CUDA_EXTRA_STREAMS", value)
    assert extra_streams_setting() == count


@pytest.mark.parametrize("value", ["-1", "many", "1025"])
def test_an_unusable_extra_streams_setting_is_a_usage_error_naming_the_variable(monkeypatch, value):
    from mneme_cuda.timing import extra_streams_setting

    from mneme.core.errors import UsageError

    monkeypatch.setenv("MNEME_CUDA_EXTRA_STREAMS", value)
    with pytest.raises(
        UsageError, match=rf"MNEME_CUDA_EXTRA_STREAMS='{value}': give a number of streams from 0 to 1024"
    ):
        extra_streams_setting()
