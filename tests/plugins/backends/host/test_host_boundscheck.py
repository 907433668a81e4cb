"""Bounds checks of the host backend (boundscheck.py, runtime_parts/bounds.inc): a checked copy of the
kernel runs on the launch a replay verifies, the original code on the timed runs (issue 24)."""

from __future__ import annotations

import struct

import pytest
from paths import ROOT

from mneme.core import ir
from mneme.core.errors import ExperimentError
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.backends.host import boundscheck
from mneme.plugins.backends.host.backend import HostBackend

SAXPY = ROOT / "examples" / "saxpy" / "saxpy.ll"
BASE = 0x7E1000000000


@pytest.fixture
def device():
    dev = HostBackend().open_device(0)
    yield dev
    dev.close()


def _saxpy(backend):
    return backend.compile(ir.load(SAXPY.read_text()), "saxpy", ExperimentConfiguration(grid=8, block=128), "x86_64")


def _place(dev, x_len: int, y_len: int) -> tuple[int, int]:
    """x at the start of one page, y at the next page; returns their addresses."""
    dev.reserve(BASE, 1 << 20)
    x, y = BASE, BASE + 64 * 1024
    dev.map(x, 4 * x_len)
    dev.map(y, 4 * y_len)
    dev.write(x, struct.pack(f"<{x_len}f", *[1.0] * x_len))
    dev.write(y, struct.pack(f"<{y_len}f", *[1.0] * y_len))
    return x, y


def test_the_checked_copy_reads_the_table_and_names_the_buffer(device):
    x, y = _place(device, 1000, 1001)
    kernel = device.load(_saxpy(HostBackend()))
    assert kernel.info.checked  # the object has the read-checked copy
    with pytest.raises(
        ExperimentError,
        match=r"read out of bounds: bytes 4000\.\.4003 of the 4000-byte buffer "
        r"at 0x7e1000000000 \(the pointer at byte 8 of the arguments\)",
    ):
        device.launch(kernel, 8, 128, 0, struct.pack("<ifQQ", 1001, 2.0, x, y))


def test_timed_runs_use_the_unchecked_code(device):
    x, y = _place(device, 1000, 1001)
    kernel = device.load(_saxpy(HostBackend()))
    args = struct.pack("<ifQQ", 1000, 2.0, x, y)
    device.launch(kernel, 8, 128, 0, args)  # verified launch: in bounds
    device.launch(kernel, 8, 128, 0, struct.pack("<ifQQ", 1001, 2.0, x, y))  # not checked: no error
    assert struct.unpack("<f", device.read(y, 4))[0] == 5.0  # 2 * 1 + 1, then 2 * 1 + 3


def test_without_the_checks_nothing_is_instrumented(monkeypatch):
    monkeypatch.setenv(boundscheck.ENV, "0")
    binary = _saxpy(HostBackend())
    assert boundscheck.CHECKED_ENTRY.encode() not in binary.data
    assert HostBackend().toolchain("x86_64")["bounds-checks"] == "off"  # not the cached build with checks


def test_every_access_through_a_non_local_pointer_gets_a_check_of_its_exact_bytes():
    text = (
        "define void @f(ptr %p, ptr %q) {\n  %a = alloca i32\n  %v = load <3 x float>, ptr %p, align 4\n"
        "  %w = load i32, ptr %a\n  store i32 %w, ptr %a\n"
        "  call void @llvm.memcpy.p0.p0.i32(ptr %q, ptr %p, i32 12, i1 false)\n"
        "  %x = load i64, ptr inttoptr (i64 4096 to ptr), align 8\n"
        "  store { i32, i8 } zeroinitializer, ptr getelementptr (i8, ptr inttoptr (i64 4096 to ptr), i64 8)\n"
        "  ret void\n}\ndeclare void @llvm.memcpy.p0.p0.i32(ptr, ptr, i32, i1)\n"
    )
    out, count = boundscheck.instrument(text)
    checks = [line.strip() for line in out.split("\n") if boundscheck.CHECK in line]
    assert (
        checks
        == [  # not the local variable; a <3 x float> touches 12 bytes (its store size), not 16
            "call void @__mneme_check_access(ptr %p, i64 12, i32 0)",
            "call void @__mneme_check_access(ptr %p, i64 %__mneme_bc.1, i32 0)",
            "call void @__mneme_check_access(ptr %q, i64 %__mneme_bc.1, i32 1)",
            "call void @__mneme_check_access(ptr inttoptr (i64 4096 to ptr), i64 8, i32 0)",
            "call void @__mneme_check_access(ptr getelementptr (i8, ptr inttoptr (i64 4096 to ptr), i64 8), i64 "
            "ptrtoint (ptr getelementptr ({ i32, i8 }, ptr null, i32 1) to i64), i32 1)",
        ]
        and count == 5
    )
    copied, count = boundscheck.with_checked_copy(text)
    assert count == 5 and "@f.__mneme_checked(" in copied
    import llvmlite.binding as llvm

    llvm.parse_assembly(copied).verify()


def test_scalable_masked_loads_are_left_as_they_are():
    text = (
        "define void @f(ptr %p, <vscale x 4 x i1> %m) {\n"
        "  %v = call <vscale x 4 x i32> @llvm.masked.load.nxv4i32.p0(ptr %p, i32 4, <vscale x 4 x i1> %m, "
        "<vscale x 4 x i32> zeroinitializer)\n  ret void\n}\n"
    )
    assert boundscheck.instrument(text) == (text, 0)
