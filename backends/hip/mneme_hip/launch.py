"""Launching a kernel with the packed argument buffer a recording holds.

``hipModuleLaunchKernel`` takes the explicit kernel arguments as one buffer through its `extra`
array: ``HIP_LAUNCH_PARAM_BUFFER_POINTER, &buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
HIP_LAUNCH_PARAM_END`` (values 1, 2, 3 in HIP's headers); the runtime appends the hidden
arguments itself. The buffer is the recording's argument bytes, each argument at its natural
alignment as clang lays out the kernarg segment.
"""

from __future__ import annotations

import ctypes

from mneme.core.errors import ExperimentError

HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
HIP_LAUNCH_PARAM_END = 3
MAX_WORK_ITEMS = 1 << 32  # HIP refuses a dimension whose grid * block reaches 2**32


class ArgumentBuffer:
    """The argument bytes and their size in host memory that outlives the launch call."""

    def __init__(self, args: bytes, param_bytes: int = 0):
        data = bytes(args)
        if len(data) < param_bytes:
            raise ExperimentError(
                f"the kernel takes {param_bytes} bytes of arguments; the buffer has {len(data)}", kind="launch"
            )
        padded = data + bytes(-len(data) % 8)  # whole 8-byte words: the runtime copies pointers at that width
        self.buffer = ctypes.create_string_buffer(padded, max(len(padded), 8))
        self.size = ctypes.c_size_t(len(data))

        words = extra_words(ctypes.addressof(self.buffer), ctypes.addressof(self.size))
        self._extra = (ctypes.c_void_p * 5)(*words)

    def extra(self) -> ctypes.Array:
        """The `extra` array of hipModuleLaunchKernel: five `void*`, passed to hip-python as one pointer.

        (A Python tuple would not do: hip-python packs a tuple's items as the kernel's arguments.)
        """
        return self._extra


def extra_words(buffer_addr: int, size_addr: int) -> tuple[int, int, int, int, int]:
    return (HIP_LAUNCH_PARAM_BUFFER_POINTER, buffer_addr, HIP_LAUNCH_PARAM_BUFFER_SIZE, size_addr, HIP_LAUNCH_PARAM_END)


def check_geometry(kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], max_threads: int) -> None:
    """Refuse a launch HIP would refuse, before it reaches the device."""
    threads = block[0] * block[1] * block[2]
    if threads > max_threads:
        raise ExperimentError(
            f"kernel {kernel!r}: block {block} has {threads} threads; the kernel allows at most {max_threads}",
            kind="launch",
        )
    for axis, (g, b) in zip("xyz", zip(grid, block)):
        if g * b >= MAX_WORK_ITEMS:
            raise ExperimentError(
                f"kernel {kernel!r}: grid.{axis} * block.{axis} = {g * b} work-items; HIP needs "
                f"fewer than 2**32 per dimension",
                kind="launch",
            )
