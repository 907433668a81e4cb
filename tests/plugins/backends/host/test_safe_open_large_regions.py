"""Host device memory of any size up to the limits reads and writes whole (issue 36): a region over
2 GiB used to fail verification with "unexpected SystemError: Negative size" (ctypes.string_at takes
a C int). The region here is anonymous memory touched only at its ends; reading it whole costs
2 GiB for the copy, once. The 3 GiB replay is benchmarks/host_large_region.py."""

from __future__ import annotations

import pytest

from mneme.plugins.backends.host.memory import AddressSpace

ADDR = 0x3E00_0000_0000
SIZE = (2 << 30) + (64 << 10)  # past the C int's range by 64 KiB


@pytest.fixture
def space():
    space = AddressSpace()
    yield space
    space.close()


def test_a_region_over_2_GiB_reads_back_whole_with_its_last_bytes(space):
    space.map(ADDR, SIZE)
    space.write(ADDR, b"head")
    space.write(ADDR + SIZE - 4, b"tail")
    data = space.read(ADDR, SIZE)
    assert len(data) == SIZE
    assert bytes(data[:4]) == b"head" and bytes(data[-4:]) == b"tail"
    assert data[SIZE // 2] == 0
    del data


def test_a_copy_of_over_2_GiB_inside_host_memory_moves_every_byte(space):
    space.map(ADDR, 2 * SIZE)
    space.write(ADDR + SIZE - 4, b"last")
    space.copy(ADDR + SIZE, ADDR, SIZE)
    assert space.read(ADDR + 2 * SIZE - 4, 4) == b"last"
