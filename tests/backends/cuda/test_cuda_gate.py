"""The launch gate's fallbacks (no GPU needed): where the gate cannot be had, timing runs ungated and says why.

The gate itself is tested on the GPU (tests/gpu/test_cuda_timing.py); a small fake driver here
only reaches the error paths: no device-mapped host memory, no stream memory operations, a
ticket its holder never releases, and blocking launches.
"""

from __future__ import annotations

import ctypes
import time
import types

import pytest

cu = pytest.importorskip("cuda.bindings.driver")

from mneme_cuda import gate as gate_module  # noqa: E402

OK, UNSUPPORTED = cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_NOT_SUPPORTED


def _fake_driver(monkeypatch, alloc_result, wait_result):
    counter = ctypes.c_uint32(0)
    freed, waits = [], []
    fake = types.SimpleNamespace(
        CU_MEMHOSTALLOC_DEVICEMAP=cu.CU_MEMHOSTALLOC_DEVICEMAP,
        CUstreamWaitValue_flags=cu.CUstreamWaitValue_flags,
        cuMemHostAlloc=lambda size, flags: (alloc_result, ctypes.addressof(counter) if alloc_result == OK else 0),
        cuMemHostGetDevicePointer=lambda ptr, flags: (OK, ptr),
        cuStreamWaitValue32=lambda stream, addr, value, flags: waits.append(value) or (wait_result,),
        cuMemFreeHost=lambda ptr: freed.append(ptr) or (OK,),
    )
    monkeypatch.setattr(gate_module, "driver", lambda: fake)
    return counter, freed, waits


def test_without_mapped_host_memory_the_gate_says_why_and_holds_nothing(monkeypatch):
    counter, freed, waits = _fake_driver(monkeypatch, UNSUPPORTED, OK)
    gate = gate_module.LaunchGate()
    assert not gate.usable
    assert "cuMemHostAlloc of the launch gate's mapped counter" in gate.unavailable
    assert "CUDA_ERROR_NOT_SUPPORTED" in gate.unavailable
    assert gate.hold(stream=None) == 0
    gate.release(0)
    gate.close()
    assert freed == [] and waits == [] and counter.value == 0


def test_without_stream_memory_operations_timing_goes_on_ungated_and_the_counter_is_freed_once(monkeypatch, caplog):
    counter, freed, waits = _fake_driver(monkeypatch, OK, UNSUPPORTED)
    gate = gate_module.LaunchGate()
    assert gate.usable and gate.unavailable == ""
    with caplog.at_level("WARNING", logger="mneme_cuda.gate"):
        assert gate.hold(stream=None) == 0
    assert "cuStreamWaitValue32 (launch gate)" in gate.unavailable and not gate.usable
    assert "without the gate" in caplog.text
    assert gate.hold(stream=None) == 0
    assert waits == [1]  # not asked again
    gate.release(0)
    assert counter.value == 0
    gate.close()
    gate.close()
    assert freed == [ctypes.addressof(counter)]


def test_a_ticket_left_held_is_released_by_the_backstop_and_two_such_turn_the_gate_off(monkeypatch):
    counter, freed, waits = _fake_driver(monkeypatch, OK, OK)
    gate = gate_module.LaunchGate()
    for n in (1, 2):
        assert gate.hold(stream=None) == n  # never released by its holder: as if the launch waited for the stream
        deadline = time.monotonic() + 5
        while counter.value != n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert counter.value == n and gate.late == n
    assert not gate.usable and "backstop" in gate.unavailable
    assert gate.hold(stream=None) == 0 and waits == [1, 2]
    gate.close()
    assert freed == [ctypes.addressof(counter)]


def test_with_blocking_launches_the_gate_is_off_before_anything_is_allocated(monkeypatch):
    counter, freed, waits = _fake_driver(monkeypatch, OK, OK)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    gate = gate_module.LaunchGate()
    assert not gate.usable and "CUDA_LAUNCH_BLOCKING=1" in gate.unavailable
    assert gate.hold(stream=None) == 0 and waits == []
    gate.close()
    assert freed == []
