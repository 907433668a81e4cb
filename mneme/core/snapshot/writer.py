"""`SnapshotWriter`: streams a snapshot to a temporary file and renames it into place on success."""

from __future__ import annotations

import bisect
import errno
import functools
import logging
import os
import secrets
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from mneme.core import fsutil
from mneme.core.errors import MnemeError, UsageError
from mneme.core.snapshot import codec, diff
from mneme.core.snapshot.format import (
    BLOCK_HEADER,
    CHUNK_PREFIX,
    DEFAULT_CHUNK_SIZE,
    DTYPES,
    ENC_DIFF,
    ENC_LZ4,
    ENC_LZ4_SHUFFLE,
    ENC_RAW,
    ENC_SHUFFLE,
    ENC_ZSTD,
    ENCODING_CODES,
    END,
    EXACT,
    FILE_HEADER,
    FLAG_RELATIVE,
    LZ4_CHUNK_SIZE,
    MAGIC,
    MAX_CHUNK_SIZE,
    NORMS,
    REGION,
    SHUFFLE_HEADER,
    TAG_ARGS,
    TAG_CHUNK,
    TAG_END,
    TAG_GLOBAL,
    TAG_META,
    TAG_REGION,
    LZ4_VERSION,
    RegionPolicy,
    SnapshotType,
    checksum,
)

log = logging.getLogger(__name__)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# A chunk is stored compressed only when that saves at least this fraction of it.
_MIN_SAVING = 1 / 32
# A chunk of a diff region is stored as a diff only when fewer bytes than this fraction changed.
_DIFF_MAX_CHANGED = 0.5


class SnapshotWriteError(MnemeError):
    """A snapshot could not be written (disk full, permissions); nothing was left under its name."""

    def __init__(self, path: str | os.PathLike, message: str, *, errno_: int | None = None):
        self.path = os.fspath(path)
        self.errno = errno_
        super().__init__(f"{self.path}: {message}")


@functools.lru_cache(maxsize=1)
def _producer() -> str:
    from mneme._version import __version__

    return f"mneme {__version__}"


def _string(text: str) -> bytes:
    data = text.encode()
    return _U32.pack(len(data)) + data


class SnapshotWriter:
    """Write one snapshot file, block by block, without holding more than a chunk in memory.

    The file appears under `path` only when the writer closes without error (temp file in
    the same folder, fsync, rename); on any error, or `abort()`, the temp file is removed.

    Parameters
    ----------
    path : destination file (conventionally `DeviceState.<kind>.<static>.<dynamic>.mneme`)
    kind : `SnapshotType` (or "prologue" / "epilogue")
    static_hash, dynamic_hash : identity of the kernel and of the launch
    chunk_size : raw bytes per stored chunk (a multiple of 8); by default 256 KiB in "lz4"
        regions (so a restore can decode them on the device) and 4 MiB in the others
    level : zstd compression level for "zstd" regions and diff payloads ("lz4" regions use
        LZ4's fast mode)

    The file's format version is the lowest that holds its contents: 1, or 2 once a region
    is stored as "lz4", so readers older than LZ4 keep reading every other snapshot.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        kind: SnapshotType | str,
        *,
        static_hash: str = "",
        dynamic_hash: str = "",
        chunk_size: int | None = None,
        level: int = 3,
        producer: str | None = None,
    ):
        if chunk_size is not None and not (8 <= chunk_size <= MAX_CHUNK_SIZE and chunk_size % 8 == 0):
            raise UsageError(f"snapshot chunk_size must be a multiple of 8 in 8..{MAX_CHUNK_SIZE}, got {chunk_size}")
        self.path = Path(path)
        self.kind = SnapshotType.of(kind)
        self.chunk_size = chunk_size
        self.snapshot_id = secrets.token_bytes(16)
        self._base_id = bytes(16)
        self.version = 1
        self.level = level
        self._seq = 0
        self._args_written = False
        self._regions: list[tuple[int, int]] = []
        self._globals: set[str] = set()
        self._fd: int | None = None
        self._done = False
        self.bytes_written = 0
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as exc:
            raise SnapshotWriteError(
                self.path,
                f"cannot create a snapshot here: {exc.strerror}; check that the folder exists and is writable",
                errno_=exc.errno,
            ) from exc
        self._write(self._header())
        self._block(TAG_META, _string(static_hash) + _string(dynamic_hash) + _string(producer or _producer()))

    # -- lifetime -----------------------------------------------------------------------------
    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def close(self) -> Path:
        """Finish the file (END block, fsync) and move it under its final name; returns that path."""
        if self._done:
            return self.path
        self._check_open()
        if not self._args_written:
            self.set_args(b"")
        self._block(TAG_END, END.pack(self._seq, len(self._regions), len(self._globals)))
        try:
            if self._base_id != bytes(16) or self.version != 1:
                os.pwrite(self._fd, self._header(), 0)
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.replace(self._tmp, self.path)
            fsutil.fsync_dir(self.path.parent)
        except OSError as exc:
            self._fail(exc)
        self._done = True
        log.debug("wrote snapshot %s (%d bytes)", self.path, self.bytes_written)
        return self.path

    def abort(self) -> None:
        """Drop the temp file; nothing appears under `path`. Safe to call more than once."""
        if self._done:
            return
        self._done = True
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        try:
            os.unlink(self._tmp)
        except OSError:
            pass

    def __del__(self):
        try:
            self.abort()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    # -- contents -----------------------------------------------------------------------------
    def set_args(self, data, layout: Sequence[tuple[int, int]] | None = None) -> None:
        """The packed kernel parameter buffer; `layout` lists each parameter's (offset, size)."""
        self._check_open()
        if self._args_written:
            raise UsageError(f"{self.path}: set_args was already called; a snapshot has one argument buffer")
        data = _bytes_view(data, self.path, "the argument buffer")
        layout = list(layout or ())
        for offset, size in layout:
            if offset < 0 or size < 0 or offset + size > len(data):
                raise UsageError(f"{self.path}: argument ({offset}, {size}) lies outside the {len(data)}-byte buffer")
        table = _U32.pack(len(layout)) + bytes(4) + b"".join(struct.pack("<II", o, s) for o, s in layout)
        self._block(TAG_ARGS, table + _U64.pack(len(data)), data)
        self._args_written = True

    def add_region(self, addr: int, data, encoding: str = "raw", policy: RegionPolicy | None = None) -> None:
        """A memory region at device address `addr` with the bytes of `data` (any buffer)."""
        view = _bytes_view(data, self.path, f"region 0x{addr:x}")
        size = len(view)
        step = self._chunk(encoding)
        self._add_region(addr, size, (view[o : o + step] for o in range(0, size, step)), step, encoding, policy)

    def add_region_stream(
        self, addr: int, size: int, chunks: Iterable, encoding: str = "raw", policy: RegionPolicy | None = None
    ) -> None:
        """A region whose `size` bytes arrive as an iterable of bytes-like pieces of any length.

        Pieces are consumed before the next one is asked for, so a producer may reuse its buffer.
        """
        # Compressed chunks are encoded behind the producer: give the pool pieces it owns.
        step = self._chunk(encoding)
        self._add_region(addr, size, _rechunk(chunks, step, own=encoding != "raw"), step, encoding, policy)

    def _add_region(self, addr: int, size: int, pieces, chunk_size: int, encoding: str, policy) -> None:
        """Write a region from `pieces` of `chunk_size` bytes (the last may be shorter), unchanged meanwhile."""
        if encoding not in ("raw", "zstd", "lz4"):
            raise UsageError(
                f"{self.path}: region encoding must be 'raw', 'zstd' or 'lz4' (diffs: add_diff_region), "
                f"got {encoding!r}"
            )
        if encoding == "lz4":
            if not codec.lz4_available():
                raise UsageError(
                    f"{self.path}: region 0x{addr:x}: the lz4 encoding needs the system's liblz4.so.1, "
                    f"which is not installed; {codec.LZ4_INSTALL_HINT}, or write it as zstd"
                )
            self.version = max(self.version, LZ4_VERSION)
        code = ENCODING_CODES[encoding]
        policy = policy or EXACT
        self._region_header(addr, size, code, policy, chunk_size)
        offsets = _Offsets(self.path, addr, size)
        if code == ENC_RAW:
            for piece in pieces:
                self._block(TAG_CHUNK, CHUNK_PREFIX.pack(offsets.next(piece), len(piece), ENC_RAW), piece)
        else:
            pieces = iter(pieces)
            first = next(pieces, None)
            if first is not None:
                # Pick plain or byte-shuffled data on the first chunk (zstd or LZ4); the region's data is alike.
                element = policy.itemsize if policy.itemsize > 1 else 4
                level = self.level if code == ENC_ZSTD else None
                plain, shuffled = _encode(first, 0, level), _encode(first, element, level)
                best = min(plain, shuffled, key=lambda enc: sum(len(p) for p in enc[1]))
                element = element if best is shuffled else 0
                self._block(TAG_CHUNK, CHUNK_PREFIX.pack(offsets.next(first), len(first), best[0]), *best[1])
                depth = codec.workers() + 1 if codec.workers() > 1 else 1
                encoded = codec.ordered(lambda p: (p, _encode(p, element, level)), pieces, depth)
                for piece, (stored, parts) in encoded:
                    self._block(TAG_CHUNK, CHUNK_PREFIX.pack(offsets.next(piece), len(piece), stored), *parts)
        offsets.finish()

    def add_diff_region(self, addr: int, base_data, data, policy: RegionPolicy | None = None) -> None:
        """An epilogue region stored as a diff against the prologue's bytes of the same region.

        `base_data` is the prologue region's bytes (any buffer) or the prologue `Snapshot`
        itself, which also records the prologue's id in this file's header.
        """
        if self.kind is not SnapshotType.EPILOGUE:
            raise UsageError(f"{self.path}: only an epilogue can store a region as a diff against the prologue")
        view = _bytes_view(data, self.path, f"region 0x{addr:x}")
        size = len(view)
        base_view = None
        if hasattr(base_data, "read_range"):  # a prologue Snapshot
            info = base_data.region(addr)
            if info.size != size:
                raise UsageError(f"{self.path}: region 0x{addr:x} has {size} bytes but the prologue's has {info.size}")
            self._base_id = base_data.snapshot_id
        else:
            base_view = _bytes_view(base_data, self.path, f"the base of region 0x{addr:x}")
            if len(base_view) != size:
                raise UsageError(f"{self.path}: region 0x{addr:x} has {size} bytes but its base has {len(base_view)}")
        step = self._chunk("diff")
        self._region_header(addr, size, ENC_DIFF, policy, step)
        for offset in range(0, size, step):
            piece = view[offset : offset + step]
            if base_view is not None:
                base = base_view[offset : offset + len(piece)]
            else:
                base = base_data.read_range(addr, offset, len(piece))
            runs = diff.changed_runs(base, piece)
            if sum(n for _, n in runs) > _DIFF_MAX_CHANGED * len(piece):
                stored, parts = _encode(piece, 0, self.level)
                self._block(TAG_CHUNK, CHUNK_PREFIX.pack(offset, len(piece), stored), *parts)
            else:
                self._block(
                    TAG_CHUNK,
                    CHUNK_PREFIX.pack(offset, len(piece), ENC_DIFF),
                    diff.encode(base, piece, codec.compressor(self.level), runs),
                )

    def add_global(self, name: str, data) -> None:
        """A device global variable's bytes, by its symbol name."""
        if not name:
            raise UsageError(f"{self.path}: a device global needs a name")
        if name in self._globals:
            raise UsageError(f"{self.path}: device global {name!r} was already added")
        self._block(TAG_GLOBAL, _string(name), _bytes_view(data, self.path, f"device global {name!r}"))
        self._globals.add(name)

    # -- blocks -------------------------------------------------------------------------------
    def _header(self) -> bytes:
        head = FILE_HEADER.pack(
            MAGIC, self.version, FILE_HEADER.size, self.kind.code, 0, self.snapshot_id, self._base_id, 0
        )
        return head[:-8] + _U64.pack(checksum(head[:-8]))

    def _chunk(self, encoding: str) -> int:
        """The chunk size of a region stored as `encoding`."""
        if self.chunk_size is not None:
            return self.chunk_size
        return LZ4_CHUNK_SIZE if encoding == "lz4" else DEFAULT_CHUNK_SIZE

    def _region_header(self, addr: int, size: int, code: int, policy: RegionPolicy | None, chunk_size: int) -> None:
        self._check_open()
        if not (0 <= addr < 1 << 64 and 0 <= size and addr + size <= 1 << 64):
            raise UsageError(f"{self.path}: region 0x{addr:x} of {size} bytes is outside the 64-bit address space")
        at = bisect.bisect_left(self._regions, (addr, size))  # kept sorted: recorders add thousands
        for other, other_size in self._regions[max(0, at - 1) : at + 1]:
            if addr < other + other_size and other < addr + size or addr == other:
                raise UsageError(
                    f"{self.path}: region 0x{addr:x} (+{size}) overlaps region 0x{other:x} (+{other_size})"
                )
        policy = EXACT if policy is None else policy
        if not isinstance(policy, RegionPolicy):
            raise UsageError(f"{self.path}: region 0x{addr:x}: policy must be a RegionPolicy, got {policy!r}")
        num_chunks = -(-size // chunk_size)
        flags = FLAG_RELATIVE if policy.relative else 0
        self._block(
            TAG_REGION,
            REGION.pack(
                addr,
                size,
                chunk_size,
                num_chunks,
                code,
                DTYPES.index(policy.dtype),
                NORMS.index(policy.norm),
                flags,
                policy.threshold,
            ),
        )
        self._regions.insert(at, (addr, size))

    def _block(self, tag: bytes, *parts) -> None:
        self._check_open()
        size = sum(len(p) for p in parts)
        head = BLOCK_HEADER.pack(tag, self._seq, size, checksum(*parts), 0)
        self._write(head[:-8] + _U64.pack(checksum(head[:-8])))
        for part in parts:
            self._write(part)
        self._seq += 1

    def _write(self, data) -> None:
        view = memoryview(data).cast("B")
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
                self.bytes_written += n
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError):
        self.abort()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "the disk is full" if exc.errno == errno.ENOSPC else "the disk quota is exhausted"
            message = (
                f"{what} after {self.bytes_written} bytes; the partial snapshot was removed. "
                "Free space in this folder or record to another one"
            )
        else:
            message = f"cannot write the snapshot: {exc.strerror or exc}; the partial file was removed"
        raise SnapshotWriteError(self.path, message, errno_=exc.errno) from exc

    def _check_open(self) -> None:
        if self._done:
            raise UsageError(f"{self.path}: the snapshot writer is already closed")


def _bytes_view(data, path, what: str) -> memoryview:
    try:
        return memoryview(data).cast("B")
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"{path}: {what} must be a contiguous bytes-like buffer (numpy: np.ascontiguousarray); "
            f"got {type(data).__name__} ({exc})"
        ) from None


def _encode(piece, element: int, level: int | None) -> tuple[int, tuple]:
    """(chunk encoding, body parts) of a compressed region's chunk: zstd at `level`, or LZ4 when
    `level` is None; shuffled when `element`; raw when compressing does not pay."""
    data = codec.shuffle(piece, element) if element else piece
    packed = codec.lz4_compress(data) if level is None else codec.compressor(level).compress(data)
    if packed is None:  # too large for one LZ4 block
        return ENC_RAW, (piece,)
    if element:
        stored, parts = (ENC_SHUFFLE if level is not None else ENC_LZ4_SHUFFLE), (SHUFFLE_HEADER.pack(element), packed)
    else:
        stored, parts = (ENC_ZSTD if level is not None else ENC_LZ4), (packed,)
    if sum(len(p) for p in parts) > len(piece) * (1 - _MIN_SAVING):
        return ENC_RAW, (piece,)
    return stored, parts


class _Offsets:
    """Counts a region's bytes as chunks are written; raises when they overrun or fall short."""

    def __init__(self, path, addr: int, size: int):
        self.path, self.addr, self.size, self.done = path, addr, size, 0

    def next(self, piece) -> int:
        offset = self.done
        self.done += len(piece)
        if self.done > self.size:
            raise UsageError(f"{self.path}: region 0x{self.addr:x} got more than the {self.size} bytes announced")
        return offset

    def finish(self) -> None:
        if self.done != self.size:
            raise UsageError(f"{self.path}: region 0x{self.addr:x} got {self.done} bytes, {self.size} announced")


def _rechunk(pieces: Iterable, size: int, *, own: bool = False):
    """Yield `size`-byte pieces (the last may be shorter) from pieces of any length.

    With `own`, nothing yielded shares memory with the producer's buffers (which it may reuse).
    """
    pending = bytearray()
    for piece in pieces:
        view = _bytes_view(piece, "<stream>", "a streamed piece")
        if pending:
            take = min(size - len(pending), len(view))
            pending += view[:take]
            view = view[take:]
            if len(pending) < size:
                continue
            yield memoryview(pending)
            pending = bytearray()
        while len(view) >= size:
            yield memoryview(bytes(view[:size])) if own else view[:size]
            view = view[size:]
        if view:
            pending += view
    if pending:
        yield memoryview(pending)
