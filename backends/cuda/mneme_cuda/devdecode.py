"""Restore LZ4 snapshot regions by decoding on the device (`kernels/lz4.cu`), planned on the host.

Host decoding of a compressed prologue is bound by its passes over host memory (measured on
the H200: 0.45x of a pinned copy with 16 threads). Decoding on the device instead, the host
only reads and checks the stored bytes (their payload checksums) into pinned staging, they
cross PCIe at their stored size, and a warp per chunk decodes them in place. This module plans
the staging fills and builds the tables the native reader and the kernels read, with numpy
(a 2 GiB region of 256 KiB chunks has 8,192 of them); `CudaDevice` runs the pipeline.

A region qualifies when every chunk is raw or LZ4 (plain or byte-shuffled), at least one is
LZ4, and every chunk fits a fill; "auto" (the default) also wants chunks small enough that a
fill holds many (a warp decodes one chunk: 4 MiB chunks leave most of the device idle, and the
host decodes them faster) and a region large enough to pay for the pipeline. Everything else
restores through the host reader.
"""

from __future__ import annotations

import struct
from importlib import resources

import attrs
import numpy as np

from mneme.core import envvars
from mneme.core.errors import UsageError
from mneme.core.snapshot.format import CHUNK_PREFIX, ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW

DECODE_KERNEL, UNSHUFFLE_KERNEL = "mneme_lz4_decode", "mneme_unshuffle"
WARPS_PER_BLOCK = 4  # decode: one warp per chunk
UNSHUFFLE_BLOCK = 256
ENV = "MNEME_CUDA_RESTORE_DECODE"
MODES = ("auto", "device", "host")
# "auto" decodes on the device only up to this chunk size (H200, 2 GiB of float32 state: 256 KiB
# chunks 1.20x of pinned H2D on the device against 0.55x on the host; 1 MiB 0.28x against 0.49x),
AUTO_MAX_CHUNK = 256 << 10
# and only in regions this large: a warp takes a few ms over a 256 KiB chunk, so small regions leave
# the device idle (H200, float32 field, device against host decode: 64 MiB 0.23x against 0.28x of
# pinned H2D, 128 MiB 0.35x against 0.34x, 256 MiB 0.51x against 0.39x, 1 GiB 0.82x against 0.45x;
# random floats even at 256 MiB; docs/design/internals.md, "Restoring snapshots on the device").
AUTO_MIN_REGION = 256 << 20
PREFIX = CHUNK_PREFIX.size  # the payload's 16-byte prefix, in front of the body
ALIGN = 16  # payloads start at multiples of this in a fill
PLANE_ALIGN = 256  # byte planes start at multiples of this in the scratch

# `Chunk` in lz4.cu: 40 bytes.
CHUNK_DTYPE = np.dtype(
    [
        ("src", "<u8"),
        ("out", "<u8"),
        ("dst", "<u8"),
        ("src_len", "<u4"),
        ("raw_len", "<u4"),
        ("index", "<u4"),
        ("encoding", "<u4"),
    ]
)
assert CHUNK_DTYPE.itemsize == 40


def ptx() -> bytes:
    return resources.files("mneme_cuda").joinpath("kernels/lz4.ptx").read_bytes()


def pack_decode_args(table: int, count: int, counters: int) -> bytes:
    """mneme_lz4_decode(const Chunk *chunks, u32 n, u32 *status)."""
    return struct.pack("<QI4xQ", table, count, counters)


def pack_unshuffle_args(table: int) -> bytes:
    """mneme_unshuffle(const Chunk *chunks)."""
    return struct.pack("<Q", table)


def mode(value: str | None = None) -> str:
    """Where LZ4 regions decode: `value`, else $MNEME_CUDA_RESTORE_DECODE, else "auto"."""
    chosen = (value if value is not None else envvars.get(ENV)) or "auto"
    if chosen not in MODES:
        raise UsageError(f"{ENV}={chosen!r}: choose one of {', '.join(MODES)}")
    return chosen


def _up(values, alignment: int):
    return -(-values // alignment) * alignment


@attrs.define
class Fill:
    """Chunks `start..stop` of a region read into one staging slot: payloads back to back at `at`
    (aligned), then the kernels' table of the fill's LZ4 chunks at `table_at`."""

    start: int
    stop: int
    at: np.ndarray  # each chunk's payload position in the slot
    table_at: int
    lz4: np.ndarray  # indices (in the fill) of the LZ4 chunks, one table row each
    planes: np.ndarray  # for each LZ4 row: where its byte planes go in the scratch (-1: decodes in place)

    @property
    def size(self) -> int:
        """Bytes to copy to the device: the payloads and the table."""
        return self.table_at + len(self.lz4) * CHUNK_DTYPE.itemsize

    @property
    def shuffled(self) -> bool:
        return bool((self.planes >= 0).any())


@attrs.define
class RegionPlan:
    """A region's chunks as arrays, and its fills; made once per region and kept."""

    chunks: list  # the region's `Chunk`s (snapshot.chunk_index), for messages
    offset: np.ndarray
    length: np.ndarray
    encoding: np.ndarray
    payload_at: np.ndarray
    payload_size: np.ndarray
    payload_sum: np.ndarray
    fills: list[Fill] = attrs.Factory(list)

    @classmethod
    def of(cls, chunks) -> RegionPlan:
        columns = np.array(
            [(c.offset, c.length, c.encoding, c.payload_at, c.payload_size, c.payload_sum) for c in chunks],
            dtype=np.uint64,
        ).reshape(-1, 6)
        return cls(list(chunks), *(columns[:, i].astype(np.int64 if i != 5 else np.uint64) for i in range(6)))

    def eligible(self) -> bool:
        """Whether the region can restore through the device decoder."""
        kinds = set(np.unique(self.encoding).tolist())
        return bool(kinds & {ENC_LZ4, ENC_LZ4_SHUFFLE}) and kinds <= {ENC_RAW, ENC_LZ4, ENC_LZ4_SHUFFLE}


def plan(chunks, fill_bytes: int, scratch_bytes: int) -> RegionPlan | None:
    """The region's chunks in fills of at most `fill_bytes` (payloads and table) and `scratch_bytes` of
    byte planes, in order; None when a chunk alone does not fit (the region then restores on the host)."""
    region = chunks if isinstance(chunks, RegionPlan) else RegionPlan.of(chunks)
    stored = _up(region.payload_size, ALIGN)
    is_lz4 = region.encoding != ENC_RAW
    cost = stored + is_lz4 * CHUNK_DTYPE.itemsize  # a chunk's share of the fill
    planes = np.where(region.encoding == ENC_LZ4_SHUFFLE, _up(region.length, PLANE_ALIGN), 0)
    if len(cost) and (cost.max() > fill_bytes or planes.max() > scratch_bytes):
        return None
    fills, start, used, scratch = [], 0, 0, 0
    for i, (c, p) in enumerate(zip(cost.tolist(), planes.tolist())):  # greedy, in order: a loop over ints
        if used + c > fill_bytes or scratch + p > scratch_bytes:
            fills.append(_fill(region, stored, planes, start, i))
            start, used, scratch = i, 0, 0
        used += c
        scratch += p
    if start < len(cost):
        fills.append(_fill(region, stored, planes, start, len(cost)))
    region.fills = fills
    return region


def _fill(region: RegionPlan, stored: np.ndarray, planes: np.ndarray, start: int, stop: int) -> Fill:
    sizes = stored[start:stop]
    at = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    lz4 = np.flatnonzero(region.encoding[start:stop] != ENC_RAW)
    plane_sizes = planes[start:stop][lz4]
    plane_at = np.concatenate(([0], np.cumsum(plane_sizes)[:-1])).astype(np.int64) if len(lz4) else plane_sizes
    plane_at = np.where(plane_sizes > 0, plane_at, -1)
    return Fill(start, stop, at, int(sizes.sum()), lz4, plane_at)


def reader_table(region: RegionPlan, fill: Fill, slot: int, entry_dtype: np.dtype, stored_mode: int) -> np.ndarray:
    """The native reader's `snapio_chunk` rows for a fill: each payload, as stored, into the host slot at `slot`."""
    s = slice(fill.start, fill.stop)
    rows = np.zeros(fill.stop - fill.start, entry_dtype)
    rows["file_offset"] = region.payload_at[s]
    rows["stored"] = region.payload_size[s]
    rows["checksum"] = region.payload_sum[s]
    rows["dest"] = slot + fill.at
    rows["raw_length"] = region.length[s]
    rows["encoding"] = region.encoding[s]
    rows["mode"] = stored_mode
    return rows


def table(region: RegionPlan, fill: Fill, device_slot: int, scratch: int, dst: int) -> np.ndarray:
    """The kernels' rows for the LZ4 chunks of `fill`, copied to `device_slot` (its payloads at their positions),
    decoding into `dst` + the chunk's offset, or byte planes into `scratch`."""
    pick = fill.start + fill.lz4
    rows = np.zeros(len(pick), CHUNK_DTYPE)
    rows["src"] = device_slot + fill.at[fill.lz4] + PREFIX
    rows["src_len"] = region.payload_size[pick] - PREFIX
    rows["raw_len"] = region.length[pick]
    rows["index"] = pick
    rows["encoding"] = region.encoding[pick]
    rows["dst"] = dst + region.offset[pick]
    rows["out"] = np.where(fill.planes >= 0, scratch + fill.planes, dst + region.offset[pick])
    return rows


def raw_copies(region: RegionPlan, fill: Fill, slot: int, dst: int) -> list[tuple[int, int, int]]:
    """(device destination, host source, bytes) for the raw chunks of a fill in the host slot at `slot`."""
    raw = np.flatnonzero(region.encoding[fill.start : fill.stop] == ENC_RAW)
    pick = fill.start + raw
    return list(
        zip((dst + region.offset[pick]).tolist(), (slot + fill.at[raw] + PREFIX).tolist(), region.length[pick].tolist())
    )


def unshuffle_grid(region: RegionPlan, fill: Fill) -> tuple[int, int]:
    """(blocks per row, rows) for the unshuffle launch; (0, 0) when no chunk of the fill is shuffled."""
    if not fill.shuffled:
        return 0, 0
    longest = int(region.length[fill.start + fill.lz4[fill.planes >= 0]].max())
    return max(1, min(64, -(-longest // (4 * UNSHUFFLE_BLOCK)))), len(fill.lz4)
