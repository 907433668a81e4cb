"""The native snapshot reader (`native/snapio.c`): decodes a range of a region on threads of its own.

It checks and decodes exactly what `mneme.core.snapshot.Snapshot.read_range_into` does (raw,
zstd, LZ4, either of byte-shuffled data, and diff chunks, every payload checksum) and raises the same errors, but
reads, hashes and decompresses on C threads with the GIL released, straight into the
caller's memory (a backend's pinned staging buffers). The library is compiled once
per source hash with the system C compiler (it needs xxhash.h, Debian libxxhash-dev) and
opens libzstd.so.1 and liblz4.so.1 at run time, so raw snapshots decode even where they are
missing (their chunks then go through the Python reader).
Found by `mneme.core.native.NativeLibrary`: $MNEME_SNAPIO, the build cache, or a folder of prebuilt
copies a backend declared. Without it, callers keep the Python reader (`native_decoder()` returns None).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path

import numpy as np

from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.native import SNAPSHOT_SOURCES, NativeLibrary, c_compiler, xxhash_include
from mneme.core.native_loader import Abi, NativeLoader
from mneme.core.snapshot.format import ENC_DIFF, SHUFFLE_SIZES
from mneme.core.snapshot.layout import corrupt

log = logging.getLogger(__name__)

SOURCE = SNAPSHOT_SOURCES / "snapio.c"
FLAGS = ("-O3", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread", "-std=gnu11")
LIBRARY = NativeLibrary(
    "mneme_snapio", "the native snapshot reader", (SOURCE,), flags=FLAGS, cache="snapio", env="MNEME_SNAPIO"
)
ABI = 4
DECODE, STORED = 0, 1  # snapio_chunk.mode

(
    OK,
    CHECKSUM,
    TRUNCATED,
    IO,
    ZSTD,
    ZSTD_SIZE,
    SHUFFLE,
    DIFF_SHORT,
    DIFF_TABLE,
    DIFF_RUN,
    DIFF_BASE,
    DIFF_SIZE,
    NO_ZSTD,
    ENCODING,
    NOMEM,
    LZ4,
    LZ4_SIZE,
    NO_LZ4,
    ZSTD_FRAME,
) = range(19)


class ChunkEntry(ctypes.Structure):
    """One chunk to decode: `snapio_chunk` in snapio.c."""

    _fields_ = [
        ("file_offset", ctypes.c_uint64),
        ("stored", ctypes.c_uint64),
        ("checksum", ctypes.c_uint64),
        ("dest", ctypes.c_uint64),
        ("base", ctypes.c_uint64),
        ("raw_length", ctypes.c_uint32),
        ("encoding", ctypes.c_uint32),
        ("error", ctypes.c_int32),
        ("mode", ctypes.c_int32),
        ("detail", ctypes.c_uint64),
        ("detail2", ctypes.c_uint64),
    ]


ENTRY_DTYPE = np.dtype(ChunkEntry)  # the same rows as a numpy structured array (tables built without a loop)


def library_name() -> str:
    return LIBRARY.name()


def library_path() -> Path | None:
    """The built library for this source: $MNEME_SNAPIO, the build cache, or a backend's declared folder."""
    return LIBRARY.find()


def build(out_dir: Path | None = None, force: bool = False) -> Path:
    """Compile snapio.c into `out_dir` (default: the build cache); returns the library's path."""
    cc = c_compiler()
    if cc is None:
        raise MnemeError(f"cannot build the native snapshot reader {SOURCE}: no C compiler; install gcc or set CC")
    xxh = xxhash_include()
    if xxh is None:
        raise MnemeError(
            f"cannot build the native snapshot reader {SOURCE}: xxhash.h is missing; install libxxhash-dev"
        )
    return LIBRARY.build(
        lambda sources, out: [*cc.split(), *FLAGS, f"-I{xxh}", "-o", out, *sources, "-ldl"], out_dir, force
    )


def _locate() -> Path | None:
    """The built library; built on first use where a compiler and xxhash.h are present."""
    path = library_path()
    if path is None and c_compiler() is not None and xxhash_include() is not None and LIBRARY.available():
        path = build()
    return path


def _report(lib: ctypes.CDLL, path: str) -> None:
    log.debug(
        "native snapshot reader %s (zstd: %s, lz4: %s)",
        path,
        *("yes" if ok else "no, Python fallback" for ok in (lib.snapio_has_zstd(), lib.snapio_has_lz4())),
    )


_DECODE_ARGS = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ChunkEntry), ctypes.c_size_t]
LOADER = NativeLoader(
    "the native snapshot reader",
    _locate,
    {
        "snapio_create": (ctypes.c_void_p, [ctypes.c_int]),
        "snapio_destroy": (None, [ctypes.c_void_p]),
        "snapio_decode": (ctypes.c_int, _DECODE_ARGS),
        "snapio_submit": (ctypes.c_void_p, _DECODE_ARGS),
        "snapio_wait": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
        "snapio_pread": (
            ctypes.c_int,
            [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64],
        ),
        "snapio_has_zstd": (ctypes.c_int, []),
        "snapio_has_lz4": (ctypes.c_int, []),
    },
    abi=Abi("snapio_abi", ABI),
    after_load=_report,
    remedy="snapshots are read by the Python reader meanwhile; to use it, install a C compiler and libxxhash-dev "
    "and remove the file (Mneme rebuilds it), or unset MNEME_SNAPIO",
)


def library() -> ctypes.CDLL | None:
    """The loaded library, or None (callers then use the Python reader; the reason is logged once)."""
    lib, why = LOADER.try_load()
    if lib is None and not _reported.is_set():
        _reported.set()
        if library_path() is None and (c_compiler() is None or xxhash_include() is None):
            log.debug("%s", why)  # no toolchain here: the Python reader is the expected path
        else:
            log.warning("%s", why)
    return lib


_reported = threading.Event()


def native_decoder(threads: int) -> NativeDecoder | None:
    """A decoder on `threads` threads, or None when the library is not available (callers use the Python reader)."""
    return NativeDecoder(threads) if library() is not None else None


def read_parallel(fd: int, offset: int, length: int, ptr: int, threads: int, piece: int = 1 << 20) -> None:
    """Plain positional reads of [offset, offset + length) of `fd` into memory at `ptr`, no checks (a ceiling)."""
    lib = library()
    if lib is None:
        raise MnemeError("the native snapshot reader is not available")
    rc = lib.snapio_pread(fd, offset, length, ptr, threads, piece)
    if rc:
        raise MnemeError(f"parallel read failed: {os.strerror(rc) if rc > 0 else 'end of file'}")


class NativeDecoder:
    """Decodes snapshot ranges on `threads` persistent C threads, which keep their scratch buffers (fresh memory is
    slow to fault in) and take chunks in submission order, so a decode submitted behind another starts at once."""

    def __init__(self, threads: int):
        self._lib = library()
        if self._lib is None:
            raise MnemeError("the native snapshot reader is not available")
        self.threads = threads
        self._pool = self._lib.snapio_create(threads)
        if not self._pool:
            raise MnemeError("out of host memory creating the native snapshot reader")
        self._pending: set[Decode] = set()

    def close(self) -> None:
        for pending in list(self._pending):  # no C thread may write into memory after this returns
            pending.wait(check=False)
        pool, self._pool = self._pool, None
        if pool:
            self._lib.snapio_destroy(pool)

    def __enter__(self) -> NativeDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def read_range_into(self, snapshot, addr: int, offset: int, out) -> None:
        """Like `Snapshot.read_range_into`: `len(out)` bytes of region `addr` from `offset`, checked, into `out`."""
        array = np.frombuffer(out, np.uint8) if not isinstance(out, np.ndarray) else out.reshape(-1).view(np.uint8)
        if not array.flags.writeable or not array.flags.c_contiguous:
            raise UsageError("the native snapshot reader decodes into writable contiguous memory only")
        self.decode_to(snapshot, addr, offset, int(array.ctypes.data), array.nbytes)

    def decode_to(self, snapshot, addr: int, offset: int, ptr: int, length: int) -> None:
        """Decode `length` bytes of region `addr` from `offset` into host memory at `ptr`."""
        self.submit(snapshot, addr, offset, ptr, length).wait()

    def submit(self, snapshot, addr: int, offset: int, ptr: int, length: int) -> Decode:
        """Start decoding into `ptr` (it must stay valid, and unread, until the returned `Decode.wait()`)."""
        if self._pool is None:
            raise MnemeError("the native snapshot reader was closed")
        region = snapshot.chunk_index(addr)  # raises for a closed snapshot or no such region
        end = offset + length
        if offset < 0 or end > region.info.size:
            raise UsageError(
                f"{snapshot.path}: range +{offset}..+{end} lies outside region 0x{addr:x} ({region.info.size} bytes)"
            )
        step = region.info.chunk_size
        jobs, partial, keep = [], [], []
        for index in range(offset // step, -(-end // step) if length else 0):
            chunk = region.chunks[index]
            lo, hi = max(offset, chunk.offset), min(end, chunk.offset + chunk.length)
            if lo >= hi:
                continue
            if lo == chunk.offset and hi == chunk.offset + chunk.length:
                jobs.append((chunk, ptr + lo - offset))
            else:  # a chunk only partly in range: decoded whole aside, then the range copied out
                tmp = np.empty(chunk.length, np.uint8)
                keep.append(tmp)
                jobs.append((chunk, int(tmp.ctypes.data)))
                partial.append((ptr + lo - offset, int(tmp.ctypes.data) + lo - chunk.offset, hi - lo))
        self._fill_bases(snapshot, region, jobs)
        return self._start(snapshot, region, jobs, DECODE, partial, keep)

    def submit_stored(self, snapshot, region, chunks, rows: np.ndarray) -> Decode:
        """Start reading `chunks` of `region` (`snapshot.chunk_index`) as stored: `rows` (ENTRY_DTYPE, one per
        chunk, mode STORED) say where each whole payload, prefix included, goes once its checksum holds; for a
        device that decodes them itself. `rows` must stay alive and unread until `Decode.wait()`."""
        if self._pool is None:
            raise MnemeError("the native snapshot reader was closed")
        table = (ChunkEntry * len(rows)).from_buffer(rows)
        handle = self._lib.snapio_submit(self._pool, snapshot.fileno(), table, len(rows)) if len(rows) else None
        if len(rows) and not handle:
            raise MnemeError(f"{snapshot.path}: out of host memory while reading; free memory and retry")
        pending = Decode(self, snapshot, region, list(zip(chunks, rows["dest"].tolist())), table, handle, [], [])
        self._pending.add(pending)
        return pending

    def _start(self, snapshot, region, jobs, mode: int, partial, keep) -> Decode:
        table = (ChunkEntry * len(jobs))()
        for entry, (chunk, dest) in zip(table, jobs):
            entry.file_offset, entry.stored, entry.checksum = chunk.payload_at, chunk.payload_size, chunk.payload_sum
            entry.dest, entry.base, entry.raw_length, entry.encoding = dest, 0, chunk.length, chunk.encoding
            entry.mode = mode
        handle = self._lib.snapio_submit(self._pool, snapshot.fileno(), table, len(jobs)) if jobs else None
        if jobs and not handle:
            raise MnemeError(f"{snapshot.path}: out of host memory while decoding; free memory and retry")
        pending = Decode(self, snapshot, region, jobs, table, handle, partial, keep)
        self._pending.add(pending)
        return pending

    def _fill_bases(self, snapshot, region, jobs) -> None:
        """Put the prologue's bytes under each diff chunk (runs of adjacent chunks in one call); C XORs in place."""
        spans: list[list[int]] = []  # [offset in region, destination, length]
        for chunk, dest in jobs:
            if chunk.encoding != ENC_DIFF:
                continue
            if spans and spans[-1][0] + spans[-1][2] == chunk.offset and spans[-1][1] + spans[-1][2] == dest:
                spans[-1][2] += chunk.length
            else:
                spans.append([chunk.offset, dest, chunk.length])
        if spans:
            base = snapshot.diff_base(region, jobs[0][0])
            for at, dest, n in spans:
                self.decode_to(base, region.info.addr, at, dest, n)


class Decode:
    """A decode in flight (`NativeDecoder.submit`); `wait()` finishes it and raises the Python reader's error."""

    def __init__(self, decoder, snapshot, region, jobs, table, handle, partial, keep):
        self._decoder, self._snapshot, self._region = decoder, snapshot, region
        self._jobs, self._table, self._handle, self._partial, self._keep = jobs, table, handle, partial, keep

    def wait(self, check: bool = True) -> None:
        """Block (GIL released) until the C threads are done with this range; then check every chunk."""
        handle, self._handle = self._handle, None
        self._decoder._pending.discard(self)
        failed = self._decoder._lib.snapio_wait(self._decoder._pool, handle) if handle else 0
        if not check:
            return
        snapshot, region = self._snapshot, self._region
        if failed:
            for entry, (chunk, dest) in zip(self._table, self._jobs):
                if entry.error in (NO_ZSTD, NO_LZ4):  # no libzstd / liblz4 here: this chunk through the Python reader
                    snapshot.decode_chunk(region, chunk, memoryview((ctypes.c_ubyte * chunk.length).from_address(dest)))
                elif entry.error != OK:
                    raise _error(snapshot, region, chunk, entry)
        for dst, src, n in self._partial:
            ctypes.memmove(dst, src, n)


def _error(snapshot, region, chunk, entry) -> MnemeError:
    """The error the Python reader raises for this chunk."""
    path, block, code = snapshot.path, chunk.block, entry.error
    if code == DIFF_BASE:
        base = snapshot.base
        return FormatError(
            path,
            f"{block}: region 0x{region.info.addr:x} was recorded as a diff against other "
            f"prologue bytes than those in {base.path}; open this epilogue with the prologue "
            "recorded with it",
        )
    if code == IO:
        return FormatError(path, f"{block}: cannot read the snapshot: {os.strerror(entry.detail)}")
    if code == NOMEM:
        return MnemeError(f"{path}: {block}: out of host memory while decoding; free memory and retry")
    name = ctypes.string_at(entry.detail2).decode(errors="replace") if code == ZSTD and entry.detail2 else "?"
    messages = {
        CHECKSUM: "payload checksum mismatch; the snapshot is corrupted, record it again",
        TRUNCATED: "the file ended while reading this block; it is truncated",
        ZSTD: f"zstd data does not decode ({name})",
        ZSTD_SIZE: f"zstd data decodes to {entry.detail} bytes, expected {entry.detail2}",
        SHUFFLE: f"shuffle element size {entry.detail} is not one of {SHUFFLE_SIZES}",
        DIFF_SHORT: "diff chunk shorter than its header",
        DIFF_TABLE: "diff chunk run table is malformed",
        DIFF_RUN: f"diff run ({entry.detail}, {entry.detail2}) is out of order or outside the "
        f"{chunk.length}-byte chunk",
        DIFF_SIZE: f"diff holds {entry.detail} bytes for runs of {entry.detail2}",
        ENCODING: f"unknown chunk encoding {entry.detail}",
        LZ4: "LZ4 data does not decode (malformed block, or it decodes to more bytes than expected)",
        LZ4_SIZE: f"LZ4 data decodes to {entry.detail} bytes, expected {entry.detail2}",
        ZSTD_FRAME: {
            1: "is not a zstd frame (bad magic number)",
            2: f"zstd frame declares {entry.detail2} bytes, the chunk holds {chunk.length}",
            3: f"{entry.detail2} bytes follow the zstd frame (trailing data or a second frame)",
        }.get(entry.detail, "has a bad or truncated zstd frame"),
    }
    return corrupt(path, block, messages.get(code, f"the native reader failed with code {code}"))
