"""A host kernel's machine code loaded by MCJIT: its entry points, launch information and device globals.

Loading maps the code executable, so it happens only where the code may run: in the kernel's
sandbox process (`sandbox`), or in the backend's own process with ``MNEME_HOST_SANDBOX=0``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import attrs

from mneme.core.errors import ExperimentError
from mneme.plugins.backends.host import boundscheck, machine, retarget, retarget_amdgpu, steps

MODE_GRID = 4  # the runtime's mode for a kernel with a grid-wide barrier (runtime_parts/grid.inc)
MODE_BLOCK_RUNS = 5  # one call per run of blocks along x (retarget.FLAG_BLOCK_RUNS)


@attrs.frozen
class KernelInfo:
    """What the backend's process needs to launch a kernel: plain numbers and names, no addresses of code.

    `globals` maps a device global's name to its size; `mode` is the runtime's (0 one call per thread,
    1 one fiber per thread, 2 one call per block, 3 step form, 4 grid launch, 5 one call per run of blocks).
    """

    static_shared: int
    param_bytes: int
    frame_bytes: int
    mode: int
    warp: int
    globals: dict[str, int]
    checked: bool  # whether the object has the read-checked copy (boundscheck)


def writable(addr: int, size: int) -> bool:
    """Whether [addr, addr + size) lies in writable mappings of this process (/proc/self/maps; True elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:
        return True
    end, pos = addr + size, addr
    for line in sorted(lines, key=lambda l: int(l.split("-", 1)[0], 16)):
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo <= pos < hi:
            if "w" not in perms:
                return False
            pos = hi
            if pos >= end:
                return True
    return pos >= end


def mode_of(flags: int) -> int:
    if flags & retarget.FLAG_GRID:
        return MODE_GRID
    if flags & steps.FLAG_STEPS:
        return 3
    if flags & retarget.FLAG_FIBERS:
        return 1
    if flags & retarget.FLAG_BLOCK_LOOP:
        return MODE_BLOCK_RUNS if flags & retarget.FLAG_BLOCK_RUNS else 2
    return 0


class LoadedImage:
    """The object linked into this process: entry addresses, device globals (address, size) and `info`."""

    def __init__(self, data: bytes, kernel_name: str):
        llvm = machine.binding()
        try:
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine.target_machine())
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
            self.engine.finalize_object()
        except RuntimeError as exc:
            raise ExperimentError(
                f"kernel {kernel_name!r}: could not load the host object: {exc}", kind="load"
            ) from exc
        self.entry = self.engine.get_function_address(retarget.ENTRY)
        #: the same code with read checks (boundscheck), for the launch a replay verifies; 0 without
        self.entry_checked = self.engine.get_function_address(boundscheck.CHECKED_ENTRY)
        at = self.engine.get_global_value_address(retarget.INFO)
        if not self.entry or not at:
            raise ExperimentError(f"kernel {kernel_name!r}: the binary was not made by the host backend", kind="load")
        static_shared, flags, param_bytes, frame_bytes = (ctypes.c_int64 * 4).from_address(at)
        wave = self.engine.get_global_value_address(retarget_amdgpu.WAVE_GLOBAL)
        self.globals = self._read_globals()
        self.info = KernelInfo(
            static_shared=static_shared,
            param_bytes=param_bytes,
            frame_bytes=frame_bytes,
            mode=mode_of(flags),
            warp=ctypes.c_int32.from_address(wave).value if wave else 32,
            globals={name: size for name, (_, size) in self.globals.items()},
            checked=bool(self.entry_checked),
        )

    def _read_globals(self) -> dict[str, tuple[int, int]]:
        table = self.engine.get_global_value_address(retarget.GLOBAL_TABLE)
        names_at = self.engine.get_global_value_address(retarget.GLOBAL_NAMES)
        found: dict[str, tuple[int, int]] = {}
        if not table or not names_at:
            return found
        offset = 0
        index = 0
        while True:
            name = ctypes.string_at(names_at + offset)
            if not name:
                break
            addr, size = (ctypes.c_uint64 * 2).from_address(table + 16 * index)
            found[name.decode()] = (addr, size)
            offset += len(name) + 1
            index += 1
        return found

    def close(self) -> Any:
        self.engine = None
