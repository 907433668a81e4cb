"""A kernel with an externally visible `constant` device global replays on the host (issue 28: exit 139 before)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from irbuild import build_cuda_ir, cuda_available

from mneme import capture
from paths import DATA

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
SOURCE = DATA / "realkernels" / "const_global.cu"


def test_replay_of_a_constant_global_kernel_is_verified_not_a_crash(tmp_path):
    n = 64
    outputs: dict = {}
    db = capture.capture(
        str(build_cuda_ir(SOURCE)),
        "use_table",
        1,
        n,
        [np.zeros(n, np.uint32), n],
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    i = np.arange(n, dtype=np.uint32)
    np.testing.assert_array_equal(outputs[0], np.array([1, 2, 3, 4], np.uint32)[i & 3] * 10 + i)
    # in a child process: on failure the replay used to die of SIGSEGV, which must not take pytest with it
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", "replay", "-rdb", str(db), "--backend", "host", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    result = json.loads(proc.stdout)["result"]
    assert result["verified"] and result["executed"] and not result["failed"]


def test_read_only_memory_is_told_apart_from_writable_memory_before_a_global_is_written():
    # what the sandbox process checks for each device global before it starts (a write to a read-only
    # one is refused by name instead of killing the process)
    import ctypes
    import mmap

    from mneme.plugins.backends.host import image

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    page = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    try:
        assert not image.writable(page, 16)
        heap = ctypes.create_string_buffer(64)
        assert image.writable(ctypes.addressof(heap), 64)
    finally:
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(page, 4096)
