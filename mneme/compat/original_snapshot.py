"""The original Mneme's snapshot files, in every layout its recorders have written: read and write.

Every integer is a little-endian u64 unless said otherwise; nothing is checksummed.

documented (the original's documented version)::

    n_globals, per global: name_len, name, size, device_address, bytes[size]
    n_blobs,   per blob:   allocated_size, size, device_address, bytes[size]
    n_args,    per arg:    size, bytes[size]

bytes (the current release: per-region metadata, original PR #136): as documented, with each
blob's bytes followed by its verification metadata::

    dtype: u8 (U8 I8 U16 I16 U32 I32 U64 I64 F16 F32 F64), threshold: f64,
    threshold_kind: u8 (absolute, relative), norm: u8 (none, L1, L2, Linf), tag_len, tag

diff (an epilogue stored against its prologue, `MNEME_DIFF_V1`, the current default, #163)::

    b"MNEME_DIFF_V1"
    n_globals, per global: name_len, name, size, device_address, n_ranges, ranges
    n_blobs,   per blob:   allocated_size, size, device_address, metadata, n_ranges, ranges
    range: offset (from the start of the global or blob), length, bytes[length]

A diff epilogue has no argument section: its arguments are its prologue's. The `best` mode
(#182) writes each epilogue as a diff or in the bytes layout, whichever is smaller. The
original's latest sources put a 16-byte container header before either payload (`MNEMESNP`,
then kind and version as u32: bytes 1/0, diff 2/1); its readers take both forms, and so does
this one. Files are written without it, which every original release since #163 reads.
Nothing in a bytes-layout file says whether blobs carry metadata, so a reader tries both
layouts and keeps the one that accounts for every byte of the file.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import attrs

from mneme.core.errors import FormatError

DIFF_MAGIC = b"MNEME_DIFF_V1"
#: The container header of the original's latest sources: this magic, then kind and version as u32.
CONTAINER_MAGIC = b"MNEMESNP"
CONTAINER_SIZE = 16
CONTAINER_BYTES, CONTAINER_DIFF = (1, 0), (2, 1)  # (kind, version): the bytes layout, the diff layout
#: Layouts a snapshot file may have; `best` is a choice among them, not a layout of its own.
LAYOUTS = ("documented", "bytes", "diff")
DTYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "f32", "f64")
NORMS = ("none", "L1", "L2", "Linf")
_U64 = struct.Struct("<Q")
_META = struct.Struct("<BdBBQ")


@attrs.frozen
class Metadata:
    """A region's verification metadata as the original stores it (`mneme::Metadata`)."""

    dtype: str = "u8"
    threshold: float = 0.0
    relative: bool = False
    norm: str = "none"
    tag: str | None = None

    def encode(self) -> bytes:
        tag = (self.tag or "").encode()
        return (
            _META.pack(DTYPES.index(self.dtype), self.threshold, int(self.relative), NORMS.index(self.norm), len(tag))
            + tag
        )


DEFAULT_METADATA = Metadata()


@attrs.frozen
class Blob:
    """One device memory region: address, allocated size, recorded bytes, metadata (None: documented layout).

    Read from a file, `data` is a view of the file's bytes (regions can be gigabytes; nothing is copied).
    """

    addr: int
    actual: int
    data: bytes | memoryview
    metadata: Metadata | None = None


@attrs.frozen
class OriginalSnapshot:
    """One snapshot of the original, reconstructed: globals (name, address, bytes), blobs, arguments."""

    globals: list[tuple[str, int, bytes]]
    blobs: list[Blob]
    args: list[bytes]
    layout: str = "documented"


class _Reader:
    def __init__(self, path: Path, data: bytes, pos: int = 0):
        self.path, self.data, self.pos = path, data, pos
        self.view = memoryview(data)

    def u64(self, what: str) -> int:
        if self.pos + 8 > len(self.data):
            raise FormatError(
                self.path,
                f"truncated at byte {self.pos} reading {what}; the file is not a "
                "complete snapshot of the original Mneme",
            )
        (value,) = _U64.unpack_from(self.data, self.pos)
        self.pos += 8
        return value

    def take(self, n: int, what: str) -> memoryview:
        """The next `n` bytes, without copying them (a view of the file's bytes)."""
        if n > len(self.data) - self.pos:
            raise FormatError(
                self.path, f"{what} claims {n} bytes at byte {self.pos} but only {len(self.data) - self.pos} remain"
            )
        self.pos += n
        return self.view[self.pos - n : self.pos]

    def count(self, what: str, least: int) -> int:
        # Each item takes at least `least` bytes: a count the rest of the file cannot hold is corrupt.
        n = self.u64(what)
        if n * least > len(self.data) - self.pos:
            raise FormatError(
                self.path,
                f"{what} is {n} at byte {self.pos - 8}, more than the {len(self.data) - self.pos} bytes left can hold",
            )
        return n

    def metadata(self, where: str) -> Metadata:
        raw = self.take(_META.size, f"{where}'s metadata")
        dtype, threshold, kind, norm, tag_len = _META.unpack(raw)
        if dtype >= len(DTYPES) or kind > 1 or norm >= len(NORMS) or not math.isfinite(threshold) or threshold < 0:
            raise FormatError(
                self.path,
                f"{where}'s metadata (dtype {dtype}, threshold {threshold}, kind {kind}, "
                f"norm {norm}) is not one the original writes",
            )
        tag = bytes(self.take(tag_len, f"{where}'s metadata tag")).decode("utf-8", "replace") if tag_len else None
        return Metadata(DTYPES[dtype], threshold, bool(kind), NORMS[norm], tag)

    def name(self, what: str) -> str:
        return bytes(self.take(self.u64(f"{what}'s name length"), f"{what}'s name")).decode("utf-8", "replace")

    def end(self, what: str) -> None:
        if self.pos != len(self.data):
            raise FormatError(self.path, f"{len(self.data) - self.pos} unexpected bytes after {what}")


def _read_bytes_layout(r: _Reader, with_metadata: bool) -> OriginalSnapshot:
    globals_ = []
    for i in range(r.count("the global count", 24)):
        name = r.name(f"global {i}")
        size = r.u64(f"global {name}'s size")
        addr = r.u64(f"global {name}'s address")
        globals_.append((name, addr, bytes(r.take(size, f"global {name}'s bytes"))))
    blobs = []
    for i in range(r.count("the memory blob count", 24)):
        actual = r.u64(f"blob {i}'s allocated size")
        size = r.u64(f"blob {i}'s size")
        addr = r.u64(f"blob {i}'s address")
        blob = r.take(size, f"blob {i} at {addr:#x}")
        blobs.append(Blob(addr, actual, blob, r.metadata(f"blob {i} at {addr:#x}") if with_metadata else None))
    n_args = r.count("the argument count", 8)
    args = [bytes(r.take(r.u64(f"argument {i}'s size"), f"argument {i}")) for i in range(n_args)]
    r.end("the arguments")
    return OriginalSnapshot(globals_, blobs, args, "bytes" if with_metadata else "documented")


def _apply_ranges(r: _Reader, target: bytearray, what: str) -> None:
    for k in range(r.count(f"{what}'s range count", 16)):
        offset = r.u64(f"{what}'s range {k} offset")
        length = r.u64(f"{what}'s range {k} length")
        if offset > len(target) or length > len(target) - offset:
            raise FormatError(
                r.path, f"{what}'s range {k} (offset {offset}, {length} bytes) exceeds its {len(target)} bytes"
            )
        target[offset : offset + length] = r.take(length, f"{what}'s range {k}")


def _read_diff(path: Path, data: bytes, base: OriginalSnapshot, start: int) -> OriginalSnapshot:
    r = _Reader(path, data, start)
    prologue_globals = {name: (addr, blob) for name, addr, blob in base.globals}
    n_globals = r.count("the global count", 32)
    if n_globals != len(base.globals):
        raise FormatError(path, f"the diff has {n_globals} globals, its prologue {len(base.globals)}")
    globals_ = []
    for i in range(n_globals):
        name = r.name(f"global {i}")
        size = r.u64(f"global {name}'s size")
        addr = r.u64(f"global {name}'s address")
        if name not in prologue_globals or len(prologue_globals[name][1]) != size:
            raise FormatError(path, f"global {name} ({size} bytes) is not in its prologue with that size")
        contents = bytearray(prologue_globals[name][1])
        _apply_ranges(r, contents, f"global {name}")
        globals_.append((name, addr, bytes(contents)))
    prologue_blobs = {b.addr: b for b in base.blobs}
    n_blobs = r.count("the memory blob count", 24 + _META.size + 8)
    if n_blobs != len(base.blobs):
        raise FormatError(path, f"the diff has {n_blobs} memory blobs, its prologue {len(base.blobs)}")
    blobs = []
    for i in range(n_blobs):
        actual = r.u64(f"blob {i}'s allocated size")
        size = r.u64(f"blob {i}'s size")
        addr = r.u64(f"blob {i}'s address")
        before = prologue_blobs.get(addr)
        if before is None or before.actual != actual or len(before.data) != size:
            raise FormatError(path, f"blob {i} at {addr:#x} ({size} bytes) is not in its prologue with that size")
        metadata = r.metadata(f"blob {i} at {addr:#x}")
        contents = bytearray(before.data)
        _apply_ranges(r, contents, f"blob {i} at {addr:#x}")
        blobs.append(Blob(addr, actual, bytes(contents), metadata))
    r.end("the memory blobs")
    return OriginalSnapshot(globals_, blobs, list(base.args), "diff")


def read_snapshot(
    path: str | os.PathLike, *, base: str | os.PathLike | OriginalSnapshot | None = None, prefer: str = "bytes"
) -> OriginalSnapshot:
    """Parse a snapshot file of the original in any of its layouts.

    A diff epilogue needs `base`, its prologue (a path or a parsed snapshot). `prefer` names
    the bytes layout tried first ("bytes": per-region metadata, or "documented"). A truncated
    or malformed file is a `FormatError` naming the file and the field.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot read the original snapshot: {exc.strerror or exc}") from exc
    diff_at = len(DIFF_MAGIC) if data.startswith(DIFF_MAGIC) else None
    if data.startswith(CONTAINER_MAGIC) and len(data) >= CONTAINER_SIZE:
        kind, version = struct.unpack_from("<II", data, len(CONTAINER_MAGIC))
        if (kind, version) == CONTAINER_BYTES:
            return _read_bytes_layout(_Reader(path, data, CONTAINER_SIZE), True)
        if (kind, version) != CONTAINER_DIFF:
            raise FormatError(
                path,
                f"snapshot container kind {kind} version {version} is not a layout the "
                "original has written that Mneme knows (bytes 0, diff 1); is the file corrupt?",
            )
        diff_at = CONTAINER_SIZE
    if diff_at is not None:
        if base is None:
            raise FormatError(
                path,
                "an epilogue stored as a diff (MNEME_DIFF_V1) needs its prologue; "
                "open it through its recording database",
            )
        prologue = base if isinstance(base, OriginalSnapshot) else read_snapshot(base, prefer=prefer)
        return _read_diff(path, data, prologue, diff_at)
    order = (True, False) if prefer == "bytes" else (False, True)
    errors = []
    for with_metadata in order:
        reader = _Reader(path, data)
        try:
            return _read_bytes_layout(reader, with_metadata)
        except FormatError as exc:
            errors.append((reader.pos, exc))
    # Report the reading that got further: the likelier layout (the preferred one on a tie).
    raise max(errors, key=lambda e: e[0])[1]


# -- writing ---------------------------------------------------------------------------------


def _bytes_layout(snap: OriginalSnapshot, with_metadata: bool) -> bytes:
    out = [_U64.pack(len(snap.globals))]
    for name, addr, data in snap.globals:
        raw = name.encode()
        out += [_U64.pack(len(raw)), raw, _U64.pack(len(data)), _U64.pack(addr), data]
    out.append(_U64.pack(len(snap.blobs)))
    for blob in snap.blobs:
        out += [_U64.pack(max(blob.actual, len(blob.data))), _U64.pack(len(blob.data)), _U64.pack(blob.addr), blob.data]
        if with_metadata:
            out.append((blob.metadata or DEFAULT_METADATA).encode())
    out.append(_U64.pack(len(snap.args)))
    for data in snap.args:
        out += [_U64.pack(len(data)), data]
    return b"".join(out)


def _ranges(before: bytes, after: bytes) -> list[bytes]:
    """The changed runs of `after` against `before`, each as offset, length, bytes."""
    out, i, n = [], 0, len(after)
    while i < n:
        if before[i] == after[i]:
            i += 1
            continue
        start = i
        while i < n and before[i] != after[i]:
            i += 1
        out.append(_U64.pack(start) + _U64.pack(i - start) + after[start:i])
    return out


def _diff_layout(snap: OriginalSnapshot, base: OriginalSnapshot) -> bytes:
    before_globals = {name: data for name, _addr, data in base.globals}
    before_blobs = {b.addr: b.data for b in base.blobs}
    out = [DIFF_MAGIC, _U64.pack(len(snap.globals))]
    for name, addr, data in snap.globals:
        raw, ranges = name.encode(), _ranges(before_globals[name], data)
        out += [_U64.pack(len(raw)), raw, _U64.pack(len(data)), _U64.pack(addr), _U64.pack(len(ranges)), *ranges]
    out.append(_U64.pack(len(snap.blobs)))
    for blob in snap.blobs:
        ranges = _ranges(before_blobs[blob.addr], blob.data)
        out += [
            _U64.pack(max(blob.actual, len(blob.data))),
            _U64.pack(len(blob.data)),
            _U64.pack(blob.addr),
            (blob.metadata or DEFAULT_METADATA).encode(),
            _U64.pack(len(ranges)),
            *ranges,
        ]
    return b"".join(out)


def encode_snapshot(snap: OriginalSnapshot, layout: str, *, base: OriginalSnapshot | None = None) -> bytes:
    """The bytes of `snap` in `layout` ("documented", "bytes", "diff", or "best": the smaller of diff and bytes).

    "diff" and "best" are for epilogues and need `base`, the prologue (same globals and blobs).
    """
    if layout == "documented":
        return _bytes_layout(snap, False)
    if layout == "bytes":
        return _bytes_layout(snap, True)
    if layout not in ("diff", "best"):
        raise ValueError(f"unknown snapshot layout {layout!r}")
    if base is None:
        raise ValueError(f"the {layout} layout is for epilogues; pass the prologue as base")
    diff = _diff_layout(snap, base)
    if layout == "diff":
        return diff
    full = _bytes_layout(snap, True)
    return diff if len(diff) <= len(full) else full  # the original's rule: a diff when it is no larger


def write_snapshot(
    path: str | os.PathLike, snap: OriginalSnapshot, layout: str = "bytes", *, base: OriginalSnapshot | None = None
) -> None:
    """Write `snap` in `layout` (see `encode_snapshot`), atomically: temp file, then rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(encode_snapshot(snap, layout, base=base))
    os.replace(tmp, path)
