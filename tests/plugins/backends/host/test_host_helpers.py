"""The host runtime's helper threads between launches (helper_threads.inc): launches that follow each other
closely find their helpers polling for the next one, others find them parked. Either way every launch runs every
block once, with the launch's own arguments, whether the helpers were polling, parked or turned off."""

from __future__ import annotations

import glob
import os
import struct
import time

import llvmlite.binding as llvm
import numpy as np
import pytest
from irbuild import build_cuda_ir

from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host.backend import HostBackend

BASE = 0x7E5000000000
X, Y = BASE, BASE + (16 << 20)
SOURCE = r"""
extern "C" __global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    src = tmp_path_factory.mktemp("helpers") / "axpy.cu"
    src.write_text(SOURCE)
    module = llvm.parse_assembly(build_cuda_ir(src, opt="-O3").read_text())
    return HostBackend().compile(module, "axpy", ExperimentConfiguration(grid=1, block=1), "x86_64")


@pytest.mark.parametrize("poll_us", [None, "0", "2000"])
def test_launches_back_to_back_and_after_pauses_each_run_every_block_once(binary, monkeypatch, poll_us):
    """Each launch adds its own `a` times x to y: a block run twice, skipped, or run with another launch's
    arguments shows in the sum. Pauses longer than the polling let the helpers park in between."""
    monkeypatch.setenv("MNEME_HOST_THREADS", "4")
    if poll_us is None:
        monkeypatch.delenv("MNEME_HOST_POLL_US", raising=False)
    else:
        monkeypatch.setenv("MNEME_HOST_POLL_US", poll_us)
    n = 1 << 16
    x = np.arange(n, dtype=np.float32) % 17
    dev = HostBackend().open_device(0)
    try:
        dev.reserve(BASE, 1 << 28)
        loaded = dev.load(binary)
        dev.map(X, x.nbytes)
        dev.map(Y, x.nbytes)
        dev.write(X, x.tobytes())
        dev.write(Y, np.zeros(n, np.float32).tobytes())
        total = 0
        for k in range(120):
            a = k % 5 + 1  # small integers: every sum is exact in float32
            dev.launch(loaded, (n // 128,), (128,), 0, struct.pack("<ifQQ", n, float(a), X, Y))
            total += a
            if k % 40 == 39:
                time.sleep(0.005)  # longer than any polling: the helpers park
        y = np.frombuffer(dev.read(Y, x.nbytes), np.float32)
        np.testing.assert_array_equal(y, np.float32(total) * x)
    finally:
        dev.close()


def _allowed_cpus(pid: int) -> dict[int, set[int]]:
    """Each thread of process `pid`: the CPUs it may run on."""
    found = {}
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        with open(status) as lines:
            line = next(line for line in lines if line.startswith("Cpus_allowed_list:"))
        cpus: set[int] = set()
        for part in line.split()[1].split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        found[int(status.split("/")[4])] = cpus
    return found


def _sandbox_cpus(binary, monkeypatch, workers: int, pin: str | None) -> tuple[set[int], dict[int, set[int]]]:
    """After one launch with `workers` workers (and `MNEME_HOST_PIN` = `pin`, unset for None): the CPUs the sandbox's
    main thread may run on, and those of each of its other threads."""
    monkeypatch.setenv("MNEME_HOST_THREADS", str(workers))
    if pin is None:
        monkeypatch.delenv("MNEME_HOST_PIN", raising=False)
    else:
        monkeypatch.setenv("MNEME_HOST_PIN", pin)
    dev = HostBackend().open_device(0)
    try:
        dev.reserve(BASE, 1 << 28)
        loaded = dev.load(binary)
        dev.map(X, 1 << 16)
        dev.map(Y, 1 << 16)
        dev.launch(loaded, (32,), (128,), 0, struct.pack("<ifQQ", 4096, 1.0, X, Y))
        pid = loaded.sandbox.pid
        threads = _allowed_cpus(pid)
    finally:
        dev.close()
    return threads.pop(pid), threads  # the sandbox's main thread launches: worker 0


@pytest.mark.parametrize("pin", [None, "0"], ids=["default", "MNEME_HOST_PIN=0"])
def test_workers_that_take_every_cpu_get_one_each_unless_told_not_to(binary, monkeypatch, pin):
    """Left to the scheduler, a helper polling on the launcher's CPU stayed there for hundreds of launches
    while the other CPU idled (helper_threads.inc, pin_sandbox_workers)."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip(f"this process may use {len(cpus)} CPU: one worker, nothing to place")
    serve, threads = _sandbox_cpus(binary, monkeypatch, len(cpus), pin)
    if pin == "0":
        assert serve == cpus and all(allowed == cpus for allowed in threads.values())
        return
    helpers = [allowed for allowed in threads.values() if len(allowed) == 1]
    assert len(serve) == 1 and len(helpers) == len(cpus) - 1
    assert set().union(serve, *helpers) == cpus  # a CPU each, every CPU used


def test_workers_that_take_fewer_cpus_than_the_process_may_use_stay_unpinned(binary, monkeypatch):
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip(f"this process may use {len(cpus)} CPU: no fewer workers than CPUs to start")
    serve, threads = _sandbox_cpus(binary, monkeypatch, len(cpus) - 1, None)
    assert serve == cpus and all(allowed == cpus for allowed in threads.values())
