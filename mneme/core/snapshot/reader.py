"""`Snapshot`: a snapshot file opened for reading. Chunks are read, checked and decoded on demand."""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import xxhash
import zstandard

from mneme.core.errors import (
    FormatError,
    MnemeError,
    UsageError,
)
from mneme.core.snapshot import codec, diff
from mneme.core.snapshot.format import (
    CHUNK_PREFIX,
    ENC_DIFF,
    ENC_LZ4,
    ENC_LZ4_SHUFFLE,
    ENC_RAW,
    ENC_SHUFFLE,
    ENC_ZSTD,
    PACK_ZSTD,
    SHUFFLE_HEADER,
    SHUFFLE_SIZES,
    RegionInfo,
    SnapshotType,
    checksum,
)
from mneme.core.snapshot.layout import Chunk, Layout, Region, corrupt

log = logging.getLogger(__name__)

#: Chunks larger than this are verified in pieces of this size (memory bounded by it, not by the file's claims).
VERIFY_PIECE = 16 << 20


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
        self._regions: dict[int, Region] = {}
        self._sorted: list[RegionInfo] | None = None
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise FormatError(
                self.path,
                "snapshot file not found; check the recording database's "
                "Prologue/Epilogue entries or record the kernel again",
            ) from None
        except OSError as exc:
            raise FormatError(self.path, f"cannot open the snapshot: {exc.strerror}") from exc
        try:
            layout = Layout(self._fd, self.path)
            self.file_size, self.version, self.kind = layout.file_size, layout.version, layout.kind
            self.snapshot_id, self.base_id = layout.snapshot_id, layout.base_id
            self.static_hash, self.dynamic_hash, self.producer = (
                layout.static_hash,
                layout.dynamic_hash,
                layout.producer,
            )
            self.args, self.arg_layout, self.globals = layout.args, layout.arg_layout, layout.globals
            self._regions = layout.regions
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
        if self._sorted is None:
            self._sorted = [self._regions[a].info for a in sorted(self._regions)]
        return list(self._sorted)

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
            raise UsageError(
                f"{self.path}: range +{offset}..+{end} lies outside region 0x{addr:x} ({region.info.size} bytes)"
            )
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
        group: list[Chunk] = []
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
        """Read and check every chunk of every region (CorruptFileError names the first bad block).

        Memory stays bounded by the file, not by the sizes it declares: a chunk larger than
        `VERIFY_PIECE` is checked in pieces (its checksum, or its zstd frame decoded piece by piece).
        """
        for region in self._regions.values():
            small = [c for c in region.chunks if not self._verify_chunk(region, c)]
            buffer = bytearray(max(c.length for c in small)) if small else bytearray()
            for chunk in small:  # chunks that are small, LZ4 (bounded by the payload: 255:1) or diffs
                self._decode(region, chunk, memoryview(buffer)[: chunk.length])

    # -- for readers that decode chunks themselves (a backend's native reader) -------------
    def chunk_index(self, addr: int) -> Region:
        """Region `addr`'s chunk table (`.info`, `.chunks`: where each payload lies, its checksum and encoding)."""
        return self._region(addr)

    def fileno(self) -> int:
        """The snapshot's file descriptor (for positional reads); it stays this object's to close."""
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        return self._fd

    def decode_chunk(self, region: Region, chunk: Chunk, out: memoryview) -> None:
        """Check and decode one chunk of `chunk_index(addr)` into `out` (its length), raising what reads raise."""
        self._decode(region, chunk, out)

    def diff_base(self, region: Region, chunk: Chunk) -> Snapshot:
        """The prologue a diff chunk of this epilogue applies to; FormatError when it was opened without one."""
        return self._base_for(region, chunk)

    # -- internals -----------------------------------------------------------------------------
    def _region(self, addr: int) -> Region:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        try:
            return self._regions[addr]
        except KeyError:
            raise UsageError(
                f"{self.path}: no region at address 0x{addr:x}; it holds "
                + ", ".join(f"0x{a:x}" for a in sorted(self._regions))
            ) from None

    def _decode_all(self, region: Region, jobs: list) -> None:
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

    def _read_raw(self, chunk: Chunk, out: memoryview) -> bytearray:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        prefix = bytearray(CHUNK_PREFIX.size)
        self._pread_into([memoryview(prefix), out], chunk.payload_at, chunk.block)
        return prefix

    def _check_raw(self, chunk: Chunk, prefix: bytearray, out: memoryview) -> None:
        if checksum(prefix, out) != chunk.payload_sum:
            raise corrupt(
                self.path, chunk.block, "payload checksum mismatch; the snapshot is corrupted, record it again"
            )

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
                raise corrupt(self.path, block, "the file ended while reading this block; it is truncated")
            got += more

    def _payload(self, chunk: Chunk) -> bytearray:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        data = bytearray(chunk.payload_size)
        self._pread_into([memoryview(data)], chunk.payload_at, chunk.block)
        if checksum(data) != chunk.payload_sum:
            raise corrupt(
                self.path, chunk.block, "payload checksum mismatch; the snapshot is corrupted, record it again"
            )
        return data

    def _decode(self, region: Region, chunk: Chunk, out: memoryview) -> None:
        if self._fd is None:
            raise MnemeError(f"{self.path}: the snapshot is closed; open it again")
        if chunk.encoding == ENC_RAW:
            self._check_raw(chunk, self._read_raw(chunk, out), out)
            return
        payload = self._payload(chunk)
        body = memoryview(payload)[CHUNK_PREFIX.size :]
        if chunk.encoding == ENC_ZSTD:
            self._unzstd_into(body, out, chunk)
            return
        if chunk.encoding == ENC_LZ4:
            self._unlz4_into(body, out, chunk)
            return
        if chunk.encoding in (ENC_SHUFFLE, ENC_LZ4_SHUFFLE):
            (element,) = SHUFFLE_HEADER.unpack_from(body) if len(body) >= SHUFFLE_HEADER.size else (0,)
            if element not in SHUFFLE_SIZES:
                raise corrupt(self.path, chunk.block, f"shuffle element size {element} is not one of {SHUFFLE_SIZES}")
            packed = body[SHUFFLE_HEADER.size :]
            if chunk.encoding == ENC_SHUFFLE:
                planes = self._unzstd(packed, chunk.length, chunk)
            else:
                planes = bytearray(chunk.length)
                self._unlz4_into(packed, planes, chunk)
            codec.unshuffle(planes, element, out)
            return
        runs, packing, base_sum, stored = self._diff_body(region, chunk, payload)
        base = self._base_for(region, chunk)
        base.read_range_into(region.info.addr, chunk.offset, out)
        if checksum(out) != base_sum:
            raise FormatError(
                self.path,
                f"{chunk.block}: region 0x{region.info.addr:x} was recorded as a diff "
                f"against other prologue bytes than those in {base.path}; open this epilogue with "
                "the prologue recorded with it",
            )
        total = sum(n for _, n in runs)
        xor = self._unzstd(stored, total, chunk) if packing == PACK_ZSTD else stored
        if len(xor) != total:
            raise corrupt(self.path, chunk.block, f"diff holds {len(xor)} bytes for runs of {total}")
        diff.apply(out, runs, xor)

    def _diff_body(self, region: Region, chunk: Chunk, payload):
        try:
            runs, packing, base_sum, stored = diff.parse(memoryview(payload)[CHUNK_PREFIX.size :])
            diff.check_runs(runs, chunk.length)
        except ValueError as exc:
            raise corrupt(self.path, chunk.block, str(exc)) from None
        return runs, packing, base_sum, stored

    def _unzstd(self, data, length: int, chunk: Chunk) -> bytes:
        problem = codec.zstd_frame_problem(data, length)
        if problem is not None:
            raise corrupt(self.path, chunk.block, problem)
        try:
            out = codec.decompressor().decompress(data, max_output_size=length)
        except zstandard.ZstdError as exc:
            raise corrupt(self.path, chunk.block, f"zstd data does not decode ({exc})") from None
        if len(out) != length:
            raise corrupt(self.path, chunk.block, f"zstd data decodes to {len(out)} bytes, expected {length}")
        return out

    def _unzstd_into(self, data, out, chunk: Chunk) -> None:
        """Decode straight into `out`: a chunk of n bytes costs n bytes of memory, not 2n."""
        problem = codec.zstd_frame_problem(data, len(out))
        if problem is not None:
            raise corrupt(self.path, chunk.block, problem)
        try:
            got = codec.zstd_decode_into(data, out)
        except zstandard.ZstdError as exc:
            raise corrupt(self.path, chunk.block, f"zstd data does not decode ({exc})") from None
        if got != len(out):
            raise corrupt(
                self.path,
                chunk.block,
                f"zstd data decodes to {'more than ' if got > len(out) else ''}"
                f"{min(got, len(out))} bytes, expected {len(out)}",
            )

    def _verify_chunk(self, region: Region, chunk: Chunk) -> bool:
        """Check a large chunk in pieces of bounded memory; False for a chunk to decode as a read does."""
        if chunk.length <= VERIFY_PIECE:
            return False
        if chunk.encoding == ENC_RAW:
            digest = xxhash.xxh3_64()
            piece = bytearray(min(VERIFY_PIECE, CHUNK_PREFIX.size + chunk.length))
            at, left = chunk.payload_at, chunk.payload_size
            while left:
                view = memoryview(piece)[: min(left, len(piece))]
                self._pread_into([view], at, chunk.block)
                digest.update(view)
                at, left = at + len(view), left - len(view)
            if digest.intdigest() != chunk.payload_sum:
                raise corrupt(
                    self.path, chunk.block, "payload checksum mismatch; the snapshot is corrupted, record it again"
                )
            return True
        if chunk.encoding not in (ENC_ZSTD, ENC_SHUFFLE):
            return False
        body = memoryview(self._payload(chunk))[CHUNK_PREFIX.size :]
        if chunk.encoding == ENC_SHUFFLE:
            (element,) = SHUFFLE_HEADER.unpack_from(body) if len(body) >= SHUFFLE_HEADER.size else (0,)
            if element not in SHUFFLE_SIZES:
                raise corrupt(self.path, chunk.block, f"shuffle element size {element} is not one of {SHUFFLE_SIZES}")
            body = body[SHUFFLE_HEADER.size :]
        problem = codec.zstd_frame_problem(body, chunk.length)
        if problem is not None:
            raise corrupt(self.path, chunk.block, problem)
        try:
            got = codec.zstd_decoded_length(body, chunk.length)
        except zstandard.ZstdError as exc:
            raise corrupt(self.path, chunk.block, f"zstd data does not decode ({exc})") from None
        if got != chunk.length:
            raise corrupt(
                self.path,
                chunk.block,
                f"zstd data decodes to {'more than ' if got > chunk.length else ''}"
                f"{min(got, chunk.length)} bytes, expected {chunk.length}",
            )
        return True

    def _unlz4_into(self, data, out, chunk: Chunk) -> None:
        try:
            codec.lz4_decompress_into(data, out)
        except ValueError as exc:
            raise corrupt(self.path, chunk.block, str(exc)) from None

    def _base_for(self, region: Region, chunk: Chunk) -> Snapshot:
        base = self.base
        if base is None:
            raise FormatError(
                self.path,
                f"{region.block}: region 0x{region.info.addr:x} is stored as a diff "
                "against the prologue; open it with Snapshot.open(epilogue, base=prologue)",
            )
        if region.info.addr not in base._regions or base.region(region.info.addr).size != region.info.size:
            raise FormatError(
                self.path,
                f"{region.block}: diff region 0x{region.info.addr:x} "
                f"({region.info.size} bytes) has no region of the same address and size in "
                f"the prologue {base.path}",
            )
        return base

    def _check_base(self, base: Snapshot) -> None:
        if base.kind is not SnapshotType.PROLOGUE:
            raise UsageError(f"{self.path}: the base of an epilogue must be a prologue; {base.path} is an epilogue")
        if self.base_id != bytes(16) and base.snapshot_id != self.base_id:
            raise FormatError(
                self.path,
                f"this epilogue was recorded against prologue id {self.base_id.hex()}, "
                f"but {base.path} has id {base.snapshot_id.hex()}; open it with its own prologue",
            )


def _merge(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for offset, length in sorted(runs):
        if merged and offset <= merged[-1][0] + merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], offset + length - merged[-1][0])
        else:
            merged.append([offset, length])
    return [(o, n) for o, n in merged]
