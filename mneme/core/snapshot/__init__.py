"""Snapshot container: the device state before (prologue) or after (epilogue) one kernel launch.

A snapshot file holds a header, the argument buffer, memory regions (raw, zstd, or for an
epilogue a diff against the prologue) in checksummed chunks, device globals by name and
per-region verification policies. `docs/formats.md` specifies it byte by byte.

    with SnapshotWriter(path, SnapshotType.PROLOGUE, static_hash=..., dynamic_hash=...) as w:
        w.set_args(arg_bytes)
        w.add_region(addr, data, encoding="zstd")
    snap = Snapshot.open(path)
    report = compare(epilogue, {addr: device_bytes})
"""

from mneme.core.snapshot.compare import (
    CompareReport,
    GlobalReport,
    RegionReport,
    changed_regions,
    compare,
    compare_buffers,
)
from mneme.core.snapshot.format import (
    DTYPES,
    MAGIC,
    NORMS,
    VERSION,
    RegionInfo,
    RegionPolicy,
    SnapshotType,
    file_name,
)
from mneme.core.snapshot.memstate import MemStateRef
from mneme.core.snapshot.reader import Snapshot
from mneme.core.snapshot.writer import SnapshotWriteError, SnapshotWriter

__all__ = [
    "DTYPES",
    "MAGIC",
    "NORMS",
    "VERSION",
    "CompareReport",
    "GlobalReport",
    "MemStateRef",
    "RegionInfo",
    "RegionPolicy",
    "RegionReport",
    "Snapshot",
    "SnapshotType",
    "SnapshotWriteError",
    "SnapshotWriter",
    "changed_regions",
    "compare",
    "compare_buffers",
    "file_name",
]
