"""`Snapshot`: a snapshot file opened for reading. Chunks are read, checked and decoded on demand."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import attrs
import xxhash
import zstandard

from mneme.core.errors import (
    CorruptFileError,
    FormatError,
    MnemeError,
    SchemaVersionError,
    UsageError,
)
from mneme.core.snapshot import codec, diff
from mneme.core.snapshot.format import (
    BLOCK_HEADER,
    BLOCK_NAMES,
    CHUNK_ENCODINGS,
    CHUNK_PREFIX,
    DTYPES,
    ENC_DIFF,
    ENC_RAW,
    ENC_SHUFFLE,
    ENC_ZSTD,
    ENCODINGS,
    END,
    FILE_HEADER,
    FLAG_RELATIVE,
    MAGIC,
    MAX_CHUNK_SIZE,
    NORMS,
    PACK_ZSTD,
    REGION,
    SHUFFLE_HEADER,
    SHUFFLE_SIZES,
    TAG_ARGS,
    TAG_CHUNK,
    TAG_END,
    TAG_GLOBAL,
    TAG_META,
    TAG_REGION,
    VERSION,
    RegionInfo,
    RegionPolicy,
    SnapshotType,
    checksum,
)

log = logging.getLogger(__name__)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@attrs.frozen
class _Chunk:
    offset: int  # raw offset inside the region
    length: int  # raw length
    encoding: int
    payload_at: int  # file offset of the payload (prefix included)
    payload_size: int
    payload_sum: int
    block: str  # "block #N CHNK at byte P", for messages


@attrs.define
class _Region:
    info: RegionInfo
    block: str
    chunks: list[_Chunk] = attrs.Factory(list)


def _block_name(seq: int, tag: bytes, pos: int) -> str:
    return f"block #{seq} {BLOCK_NAMES.get(tag, repr(tag))} at byte {pos}"


def _corrupt(path, block: str, message: str) -> CorruptFileError:
    err = CorruptFileError(path, f"{block}: {message}")
    err.block = block
    return err


class _Strings:
    """Reads the length-prefixed UTF-8 strings of a META or GLOB payload."""

    def __init__(self, data: bytes, fail):
        self.data, self.pos, self.fail = data, 0, fail

    def string(self) -> str:
        if self.pos + 4 > len(self.data):
            raise self.fail("string length runs past the block")
        (n,) = _U32.unpack_from(self.data, self.pos)
        start, self.pos = self.pos + 4, self.pos + 4 + n
        if self.pos > len(self.data):
            raise self.fail("string runs past the block")
        try:
            return self.data[start : self.pos].decode()
        except UnicodeDecodeError:
            raise self.fail("string is not UTF-8") from None


class Snapshot:
    """A snapshot file opened for reading. Use `Snapshot.open(path, base=prologue)`.

    Opening checks the header and the structure of every block (and the checksums of all
    but the chunk blocks); chunk checksums are checked as chunks are read, or all at once
    by `verify()`. It owns one file descriptor: close it, or use it as a context manager.
    """

    def __init__(self, path: str | os.PathLike, base: Snapshot | None = None):
        self.path = Path(path)
        self.base = base
        self._fd: int | None = None
        self.version = 0
        self.kind = SnapshotType.PROLOGUE
        self.snapshot_id = self.base_id = bytes(16)
        self.static_hash = self.dynamic_hash = self.producer = ""
        self.args = b""
        self.arg_layout: list[tuple[int, int]] = []
        self.globals: dict[str, bytes] = {}
        self._regions: dict[int, _Region] = {}
        self.file_size = 0
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise FormatError(self.path, "snapshot file not found; check the recording database's "
                              "Prologue/Epilogue entries or record the kernel again") from None  # fmt: skip
        except OSError as exc:
            raise FormatError(self.path, f"cannot open the snapshot: {exc.strerror}") from exc
        try:
            self._scan()
            if base is not None:
                self._check_base(base)
        except OSError as exc:
            self.close()
            raise FormatError(self.path, f"cannot read the snapshot: {exc.strerror or exc}") from exc
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike, base: Snapshot | None = None, *, verify: bool = False) -> Snapshot:
        """Open and validate `path`; `base` is the prologue, needed to read an epilogue's diff regions."""
        snap = cls(path, base)
        if verify:
            try:
                snap.verify()
            except BaseException:
                snap.close()
                raise
        return snap

    # -- lifetime -----------------------------------------------------------------------------
    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._regions)} regions"
        return f"<Snapshot {self.kind.value} {self.path.name} ({state})>"

    # -- what it holds --------------------------------------------------------------------------
    @property
    def regions(self) -> list[RegionInfo]:
        """Every region, in address order."""
        return [self._regions[a].info for a in sorted(self._regions)]

    def region(self, addr: int) -> RegionInfo:
        return self._region(addr).info

    def __contains__(self, addr: int) -> bool:
        return addr in self._regions

    @property
    def num_args(self) -> int:
        return len(self.arg_layout)

    @property
    def size(self) -> int:
        """Raw bytes of all regions together."""
        return sum(r.info.size for r in self._regions.values())

    # -- reading --------------------------------------------------------------------------------
    def read_region(self, addr: int) -> bytearray:
        """The region's bytes (checksums verified). One buffer of the region's size is allocated."""
        info = self.region(addr)
        out = bytearray(info.size)
        self.read_region_into(addr, out)
        return out

    def read_region_into(self, addr: int, out) -> None:
        """Decode the whole region into `out`, a writable buffer of exactly its size (numpy array, ...)."""
        region = self._region(addr)
        view = memoryview(out).cast("B")
        if len(view) != region.info.size:
            raise UsageError(f"{self.path}: region 0x{addr:x} has {region.info.size} bytes, the buffer {len(view)}")
        self._decode_all(region, [(c, view[c.offset : c.offset + c.length]) for c in region.chunks])

    def read_range(self, addr: int, offset: int, length: int) -> bytearray:
        """`length` bytes of the region at `addr`, from `offset` in it."""
        out = bytearray(length)
        self.read_range_into(addr, offset, out)
        return out

    def read_range_into(self, addr: int, offset: int, out) -> None:
        region = self._region(addr)
        view = memoryview(out).cast("B")
        end = offset + len(view)
        if offset < 0 or end > region.info.size:
            raise UsageError(f"{self.path}: range +{offset}..+{end} lies outside region 0x{addr:x} "
                             f"({region.info.size} bytes)")  # fmt: skip
        step = region.info.chunk_size
        whole = []
        for index in range(offset // step, -(-end // step) if end else 0):
            chunk = region.chunks[index]
            lo, hi = max(offset, chunk.offset), min(end, chunk.offset + chunk.length)
            if lo >= hi:
                continue
            if lo == chunk.offset and hi == chunk.offset + chunk.length:
                whole.append((chunk, view[lo - offset : hi - offset]))
            else:
                tmp = bytearray(chunk.length)
                self._decode(region, chunk, memoryview(tmp))
                view[lo - offset : hi - offset] = tmp[lo - chunk.offset : hi - chunk.offset]
        self._decode_all(region, whole)

    def iter_region(self, addr: int, chunk_size: int = 64 << 20, *, reuse: bool = False) -> Iterator:
        """Yield the region's bytes in order, in pieces of about `chunk_size` bytes.

        Pieces are whole stored chunks (multiples of 8 bytes but the last), so no more than
        max(chunk_size, the stored chunk size) bytes are held at a time. Each piece is a fresh
        bytearray; with `reuse=True` pieces are memoryviews of one buffer that the next step
        overwrites (no allocation per piece: for consumers that copy or compare right away).
        """
        region = self._region(addr)
        buffer = None
        group: list[_Chunk] = []
        for chunk in [*region.chunks, None]:
            if group and (chunk is None or sum(c.length for c in group) + chunk.length > chunk_size):
                length = sum(c.length for c in group)
                if reuse:
                    if buffer is None or len(buffer) < length:
                        buffer = bytearray(length)
                    # the bytearray itself where it fits: bytearray == buffer compares at memcmp speed
                    out = buffer if len(buffer) == length else memoryview(buffer)[:length]
                else:
                    out = bytearray(length)
                view, pos, jobs = memoryview(out), 0, []
                for member in group:
                    jobs.append((member, view[pos : pos + member.length]))
                    pos += member.length
                self._decode_all(region, jobs)
                yield out
                group = []
            if chunk is not None:
                group.append(chunk)

    def changed_runs(self, addr: int) -> list[tuple[int, int]] | None:
        """(offset, length) ranges a diff region changes against the prologue; None for other regions.

        Reads only the (small) diff chunks; a chunk stored whole counts as changed entirely.
        """
        region = self._region(addr)
        if region.info.encoding != "diff":
            return None
        runs: list[tuple[int, int]] = []
        for chunk in region.chunks:
            if chunk.encoding != ENC_DIFF:
                runs.append((chunk.offset, chunk.length))
                continue
            chunk_runs, _, _, _ = self._diff_body(region, chunk, self._payload(chunk))
            runs.extend((chunk.offset + o, n) for o, n in chunk_runs)
        return _merge(runs)

    def verify(self) -> None:
        """Read and check every chunk of every region (CorruptFileError names the first bad block)."""
        for region in self._regions.values():
            for _ in self.iter_region(region.info.addr, chunk_size=16 << 20, reuse=True):
                pass

    # -- internals -----------------------------------------------------------------------------
    def _region(self, addr: int) -> _Region:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        try:
            return self._regions[addr]
        except KeyError:
            raise UsageError(f"{self.path}: no region at address 0x{addr:x}; it holds "
                             + ", ".join(f"0x{a:x}" for a in sorted(self._regions))) from None  # fmt: skip

    def _decode_all(self, region: _Region, jobs: list) -> None:
        """Decode (chunk, destination) pairs, overlapping I/O, checksums and decompression.

        Raw chunks are read in file order on this thread (kernel read-ahead does best) and
        checked on the pool while the next one is read; other chunks decode on the pool.
        """
        if len(jobs) <= 1 or codec.workers() <= 1 or codec.in_pool():
            for chunk, out in jobs:
                self._decode(region, chunk, out)
            return
        executor, pending, depth = codec.pool(), [], codec.workers() + 1
        try:
            for chunk, out in jobs:
                if chunk.encoding == ENC_RAW:
                    prefix = self._read_raw(chunk, out)
                    pending.append(executor.submit(self._check_raw, chunk, prefix, out))
                else:
                    pending.append(executor.submit(self._decode, region, chunk, out))
                if len(pending) >= depth:
                    pending.pop(0).result()
            while pending:
                pending.pop(0).result()
        finally:
            for fut in pending:
                fut.cancel()
            concurrent.futures.wait(pending)

    def _read_raw(self, chunk: _Chunk, out: memoryview) -> bytearray:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        prefix = bytearray(CHUNK_PREFIX.size)
        self._pread_into([memoryview(prefix), out], chunk.payload_at, chunk.block)
        return prefix

    def _check_raw(self, chunk: _Chunk, prefix: bytearray, out: memoryview) -> None:
        h = xxhash.xxh3_64(prefix)
        h.update(out)
        if h.intdigest() != chunk.payload_sum:
            raise _corrupt(self.path, chunk.block, "payload checksum mismatch; the snapshot is corrupted, "
                           "record it again")  # fmt: skip

    def _pread_into(self, views, at: int, block: str) -> None:
        want = sum(len(v) for v in views)
        got = os.preadv(self._fd, views, at)
        while got < want:  # short reads: finish piece by piece
            done, rest = got, []
            for v in views:
                if done >= len(v):
                    done -= len(v)
                    continue
                rest.append(v[done:])
                done = 0
            more = os.preadv(self._fd, rest, at + got)
            if more == 0:
                raise _corrupt(self.path, block, "the file ended while reading this block; it is truncated")
            got += more

    def _payload(self, chunk: _Chunk) -> bytearray:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        data = bytearray(chunk.payload_size)
        self._pread_into([memoryview(data)], chunk.payload_at, chunk.block)
        if checksum(data) != chunk.payload_sum:
            raise _corrupt(self.path, chunk.block, "payload checksum mismatch; the snapshot is corrupted, record it again")
        return data

    def _decode(self, region: _Region, chunk: _Chunk, out: memoryview) -> None:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        if chunk.encoding == ENC_RAW:
            self._check_raw(chunk, self._read_raw(chunk, out), out)
            return
        payload = self._payload(chunk)
        body = memoryview(payload)[CHUNK_PREFIX.size :]
        if chunk.encoding == ENC_ZSTD:
            out[:] = self._unzstd(body, chunk.length, chunk)
            return
        if chunk.encoding == ENC_SHUFFLE:
            (element,) = SHUFFLE_HEADER.unpack_from(body) if len(body) >= SHUFFLE_HEADER.size else (0,)
            if element not in SHUFFLE_SIZES:
                raise _corrupt(self.path, chunk.block, f"shuffle element size {element} is not one of {SHUFFLE_SIZES}")
            codec.unshuffle(self._unzstd(body[SHUFFLE_HEADER.size :], chunk.length, chunk), element, out)
            return
        runs, packing, base_sum, stored = self._diff_body(region, chunk, payload)
        base = self._base_for(region, chunk)
        base.read_range_into(region.info.addr, chunk.offset, out)
        if checksum(out) != base_sum:
            raise FormatError(self.path, f"{chunk.block}: region 0x{region.info.addr:x} was recorded as a diff "
                              f"against other prologue bytes than those in {base.path}; open this epilogue with "
                              "the prologue recorded with it")  # fmt: skip
        total = sum(n for _, n in runs)
        xor = self._unzstd(stored, total, chunk) if packing == PACK_ZSTD else stored
        if len(xor) != total:
            raise _corrupt(self.path, chunk.block, f"diff holds {len(xor)} bytes for runs of {total}")
        diff.apply(out, runs, xor)

    def _diff_body(self, region: _Region, chunk: _Chunk, payload):
        try:
            runs, packing, base_sum, stored = diff.parse(memoryview(payload)[CHUNK_PREFIX.size :])
            diff.check_runs(runs, chunk.length)
        except ValueError as exc:
            raise _corrupt(self.path, chunk.block, str(exc)) from None
        return runs, packing, base_sum, stored

    def _unzstd(self, data, length: int, chunk: _Chunk) -> bytes:
        try:
            out = codec.decompressor().decompress(data, max_output_size=length)
        except zstandard.ZstdError as exc:
            raise _corrupt(self.path, chunk.block, f"zstd data does not decode ({exc})") from None
        if len(out) != length:
            raise _corrupt(self.path, chunk.block, f"zstd data decodes to {len(out)} bytes, expected {length}")
        return out

    def _base_for(self, region: _Region, chunk: _Chunk) -> Snapshot:
        base = self.base
        if base is None:
            raise FormatError(self.path, f"{region.block}: region 0x{region.info.addr:x} is stored as a diff "
                              "against the prologue; open it with Snapshot.open(epilogue, base=prologue)")  # fmt: skip
        if region.info.addr not in base._regions or base.region(region.info.addr).size != region.info.size:
            raise FormatError(self.path, f"{region.block}: diff region 0x{region.info.addr:x} "
                              f"({region.info.size} bytes) has no region of the same address and size in "
                              f"the prologue {base.path}")  # fmt: skip
        return base

    def _check_base(self, base: Snapshot) -> None:
        if base.kind is not SnapshotType.PROLOGUE:
            raise UsageError(f"{self.path}: the base of an epilogue must be a prologue; {base.path} is an epilogue")
        if self.base_id != bytes(16) and base.snapshot_id != self.base_id:
            raise FormatError(self.path, f"this epilogue was recorded against prologue id {self.base_id.hex()}, "
                              f"but {base.path} has id {base.snapshot_id.hex()}; open it with its own prologue")  # fmt: skip

    # -- structure scan -----------------------------------------------------------------------
    def _read(self, at: int, size: int, block: str) -> bytes:
        data = os.pread(self._fd, size, at)
        if len(data) != size:
            raise _corrupt(self.path, block, f"the file ends at byte {self.file_size}, inside this block; "
                           "the snapshot is truncated (the recording was interrupted?); record it again")  # fmt: skip
        return data

    def _scan(self) -> None:
        path = self.path
        self.file_size = size = os.fstat(self._fd).st_size
        head = os.pread(self._fd, FILE_HEADER.size, 0)
        if len(head) < 12 or head[:8] != MAGIC:
            raise CorruptFileError(path, "not a Mneme snapshot (the file does not start with the magic "
                                   f"{MAGIC!r}); give the path of a .mneme snapshot")  # fmt: skip
        (version,) = _U32.unpack_from(head, 8)
        if version > VERSION:
            raise SchemaVersionError(path, f"header: snapshot format version {version} is newer than the "
                                     f"version {VERSION} this Mneme reads; upgrade Mneme to read it")  # fmt: skip
        if version == 0:
            raise _corrupt(path, "file header", "format version 0 does not exist")
        if len(head) < FILE_HEADER.size:
            raise _corrupt(path, "file header", f"the file is {size} bytes, shorter than its header; it is truncated")
        _, _, header_size, kind, _flags, self.snapshot_id, self.base_id, head_sum = FILE_HEADER.unpack(head)
        if checksum(head[:-8]) != head_sum:
            raise _corrupt(path, "file header", "header checksum mismatch; the snapshot is corrupted, record it again")
        if header_size != FILE_HEADER.size or kind > 1:
            raise _corrupt(path, "file header", f"header size {header_size} / kind {kind} are not valid")
        self.version, self.kind = version, SnapshotType.of(kind)

        pos, seq = header_size, 0
        current: _Region | None = None
        seen_args = False
        while True:
            where = f"block #{seq} at byte {pos}"
            if pos + BLOCK_HEADER.size > size:
                raise _corrupt(path, where, f"the file ends at byte {size} before the END block; the snapshot "
                               "is truncated (the recording was interrupted?); record it again")  # fmt: skip
            ahead = os.pread(self._fd, BLOCK_HEADER.size + CHUNK_PREFIX.size, pos)  # header and a chunk's prefix
            raw = ahead[: BLOCK_HEADER.size]
            tag, block_seq, payload_size, payload_sum, head_sum = BLOCK_HEADER.unpack(raw)
            if checksum(raw[:-8]) != head_sum:
                raise _corrupt(path, where, "block header checksum mismatch; the snapshot is corrupted")
            block = _block_name(seq, tag, pos)
            if tag not in BLOCK_NAMES:
                raise _corrupt(path, block, f"unknown block tag {tag!r}")
            if block_seq != seq:
                raise _corrupt(path, block, f"sequence number {block_seq}, expected {seq}: a block is missing "
                               "or repeated")  # fmt: skip
            payload_at = pos + BLOCK_HEADER.size
            if payload_at + payload_size > size:
                raise _corrupt(path, block, f"needs {payload_size} payload bytes but the file ends at byte {size}; "
                               "the snapshot is truncated (the recording was interrupted?); record it again")  # fmt: skip
            if seq == 0 and tag != TAG_META:
                raise _corrupt(path, block, "the first block must be META")
            if current is not None and len(current.chunks) < current.info.num_chunks and tag != TAG_CHUNK:
                raise _corrupt(path, block, f"region 0x{current.info.addr:x} announces {current.info.num_chunks} "
                               f"chunks, only {len(current.chunks)} follow it")  # fmt: skip

            def fail(message: str, block=block) -> CorruptFileError:
                return _corrupt(path, block, message)

            if tag == TAG_CHUNK:
                if current is None or len(current.chunks) >= current.info.num_chunks:
                    raise fail("chunk block outside a region")
                if payload_size < CHUNK_PREFIX.size:
                    raise fail("chunk block shorter than its prefix")
                prefix = ahead[BLOCK_HEADER.size :]
                if len(prefix) < CHUNK_PREFIX.size:
                    prefix = self._read(payload_at, CHUNK_PREFIX.size, block)
                offset, length, enc = CHUNK_PREFIX.unpack(prefix)
                index = len(current.chunks)
                info = current.info
                want = min(info.chunk_size, info.size - index * info.chunk_size)
                if offset != index * info.chunk_size or length != want:
                    raise fail(f"chunk {index} of region 0x{info.addr:x} says offset {offset} length {length}, "
                               f"expected {index * info.chunk_size} and {want}")  # fmt: skip
                if enc not in CHUNK_ENCODINGS or (enc == ENC_DIFF and info.encoding != "diff"):
                    raise fail(f"chunk encoding {enc} is not valid in a {info.encoding} region")
                if enc == ENC_RAW and payload_size != CHUNK_PREFIX.size + length:
                    raise fail(f"raw chunk holds {payload_size - CHUNK_PREFIX.size} bytes, expected {length}")
                current.chunks.append(_Chunk(offset, length, enc, payload_at, payload_size, payload_sum,
                                             f"{block} (region 0x{info.addr:x}, chunk {index})"))  # fmt: skip
                current.info = attrs.evolve(info, stored_size=info.stored_size + BLOCK_HEADER.size + payload_size)
            else:
                payload = self._read(payload_at, payload_size, block)
                if checksum(payload) != payload_sum:
                    raise fail("payload checksum mismatch; the snapshot is corrupted, record it again")
                if tag == TAG_META:
                    if seq != 0:
                        raise fail("META must be the first block, and only once")
                    strings = _Strings(payload, fail)
                    self.static_hash, self.dynamic_hash, self.producer = (strings.string() for _ in range(3))
                elif tag == TAG_ARGS:
                    if seen_args:
                        raise fail("a second ARGS block")
                    self._parse_args(payload, fail)
                    seen_args = True
                elif tag == TAG_REGION:
                    current = self._parse_region(payload, block, fail)
                elif tag == TAG_GLOBAL:
                    strings = _Strings(payload, fail)
                    name = strings.string()
                    if not name or name in self.globals:
                        raise fail(f"device global {name!r} is unnamed or repeated")
                    self.globals[name] = bytes(payload[strings.pos :])
                elif tag == TAG_END:
                    if payload_size != END.size:
                        raise fail(f"END payload is {payload_size} bytes, expected {END.size}")
                    blocks, regions, globals_ = END.unpack(payload)
                    if (blocks, regions, globals_) != (seq, len(self._regions), len(self.globals)):
                        raise fail(f"END counts {blocks} blocks, {regions} regions, {globals_} globals; the file "
                                   f"holds {seq}, {len(self._regions)}, {len(self.globals)}")  # fmt: skip
                    if not seen_args:
                        raise fail("the snapshot has no ARGS block")
                    if payload_at + payload_size != size:
                        raise fail(f"{size - payload_at - payload_size} stray bytes follow the END block")
                    break
            pos = payload_at + payload_size
            seq += 1
        self._check_overlaps()

    def _parse_args(self, payload: bytes, fail) -> None:
        if len(payload) < 8:
            raise fail("ARGS block shorter than its header")
        (count,) = _U32.unpack_from(payload, 0)
        table_end = 8 + 8 * count
        if len(payload) < table_end + 8:
            raise fail(f"ARGS announces {count} arguments but is too short for their table")
        layout = [struct.unpack_from("<II", payload, 8 + 8 * i) for i in range(count)]
        (length,) = _U64.unpack_from(payload, table_end)
        if len(payload) != table_end + 8 + length:
            raise fail(f"ARGS buffer length {length} does not match the block")
        for offset, arg_size in layout:
            if offset + arg_size > length:
                raise fail(f"argument ({offset}, {arg_size}) lies outside the {length}-byte buffer")
        self.arg_layout = layout
        self.args = bytes(payload[table_end + 8 :])

    def _parse_region(self, payload: bytes, block: str, fail) -> _Region:
        if len(payload) != REGION.size:
            raise fail(f"REGN payload is {len(payload)} bytes, expected {REGION.size}")
        addr, size, chunk_size, num_chunks, enc, dtype, norm, flags, threshold = REGION.unpack(payload)
        if not (8 <= chunk_size <= MAX_CHUNK_SIZE and chunk_size % 8 == 0):
            raise fail(f"region 0x{addr:x}: chunk size {chunk_size} is not a multiple of 8 in 8..{MAX_CHUNK_SIZE}")
        if num_chunks != -(-size // chunk_size) or addr + size > 1 << 64:
            raise fail(f"region 0x{addr:x}: {num_chunks} chunks do not fit its size {size}")
        if enc > ENC_DIFF or dtype >= len(DTYPES) or norm >= len(NORMS) or flags & ~FLAG_RELATIVE:
            raise fail(f"region 0x{addr:x}: encoding {enc}, dtype {dtype}, norm {norm} or flags {flags} not valid")
        if enc == ENC_DIFF and self.kind is not SnapshotType.EPILOGUE:
            raise fail(f"region 0x{addr:x} is a diff region, but only an epilogue may hold one")
        if addr in self._regions:
            raise fail(f"region 0x{addr:x} appears twice")
        try:
            policy = RegionPolicy(DTYPES[dtype], threshold, bool(flags & FLAG_RELATIVE), NORMS[norm])
        except (TypeError, ValueError) as exc:
            raise fail(f"region 0x{addr:x}: verification policy is not valid ({exc})") from None
        region = _Region(RegionInfo(addr, size, ENCODINGS[enc], 0, policy, chunk_size, num_chunks), block)
        self._regions[addr] = region
        return region

    def _check_overlaps(self) -> None:
        previous = None
        for addr in sorted(self._regions):
            region = self._regions[addr]
            if previous is not None and previous.info.end > addr:
                raise _corrupt(self.path, region.block, f"region 0x{addr:x} overlaps region 0x{previous.info.addr:x}")
            previous = region


def _merge(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for offset, length in sorted(runs):
        if merged and offset <= merged[-1][0] + merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], offset + length - merged[-1][0])
        else:
            merged.append([offset, length])
    return [(o, n) for o, n in merged]
