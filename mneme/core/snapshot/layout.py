"""The structure of a snapshot file, as read (and checked) from its blocks when it is opened."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import attrs

from mneme.core.errors import CorruptFileError, SchemaVersionError
from mneme.core.snapshot.format import (
    BLOCK_HEADER,
    BLOCK_NAMES,
    CHUNK_ENCODINGS,
    CHUNK_PREFIX,
    DTYPES,
    ENC_DIFF,
    ENC_LZ4,
    ENC_LZ4_SHUFFLE,
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
    REGION,
    TAG_ARGS,
    TAG_CHUNK,
    TAG_END,
    TAG_GLOBAL,
    TAG_META,
    TAG_REGION,
    LZ4_ENCODINGS,
    LZ4_VERSION,
    VERSION,
    RegionInfo,
    RegionPolicy,
    SnapshotType,
    checksum,
)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


# The most a compressed chunk can expand: zstd's RLE block turns 4 bytes into 128 KiB; an LZ4
# sequence adds at most 255 bytes of match per byte of length (RFC 8878; LZ4 block format).
MAX_EXPANSION = {ENC_ZSTD: 32768, ENC_SHUFFLE: 32768, ENC_LZ4: 256, ENC_LZ4_SHUFFLE: 256}
LZ4_MAX_BLOCK = 0x7E000000  # LZ4_MAX_INPUT_SIZE: writers store larger chunks another way


@attrs.frozen
class Chunk:
    offset: int  # raw offset inside the region
    length: int  # raw length
    encoding: int
    payload_at: int  # file offset of the payload (prefix included)
    payload_size: int
    payload_sum: int
    block: str  # "block #N CHNK at byte P", for messages


@attrs.define
class Region:
    info: RegionInfo
    block: str
    chunks: list[Chunk] = attrs.Factory(list)


def block_name(seq: int, tag: bytes, pos: int) -> str:
    return f"block #{seq} {BLOCK_NAMES.get(tag, repr(tag))} at byte {pos}"


def corrupt(path, block: str, message: str) -> CorruptFileError:
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


class Layout:
    """Header fields, arguments, globals and the chunk map of one snapshot file.

    `Layout(fd, path)` walks every block header, checks every small block's checksum and the
    structure of the whole file; chunk payloads are checked when they are read.
    """

    def __init__(self, fd: int, path: Path):
        self._fd, self.path = fd, path
        self.file_size = 0
        self.version = 0
        self.kind = SnapshotType.PROLOGUE
        self.snapshot_id = self.base_id = bytes(16)
        self.static_hash = self.dynamic_hash = self.producer = ""
        self.args = b""
        self.arg_layout: list[tuple[int, int]] = []
        self.globals: dict[str, bytes] = {}
        self._regions: dict[int, Region] = {}
        self._scan()

    @property
    def regions(self) -> dict[int, Region]:
        return self._regions

    def _read(self, at: int, size: int, block: str) -> bytes:
        data = os.pread(self._fd, size, at)
        if len(data) != size:
            raise corrupt(
                self.path,
                block,
                f"the file ends at byte {self.file_size}, inside this block; "
                "the snapshot is truncated (the recording was interrupted?); record it again",
            )
        return data

    def _scan(self) -> None:
        path = self.path
        self.file_size = size = os.fstat(self._fd).st_size
        head = os.pread(self._fd, FILE_HEADER.size, 0)
        if len(head) < 12 or head[:8] != MAGIC:
            raise CorruptFileError(
                path,
                "not a Mneme snapshot (the file does not start with the magic "
                f"{MAGIC!r}); give the path of a .mneme snapshot",
            )
        (version,) = _U32.unpack_from(head, 8)
        if version > VERSION:
            raise SchemaVersionError(
                path,
                f"header: snapshot format version {version} is newer than the "
                f"version {VERSION} this Mneme reads; upgrade Mneme to read it",
            )
        if version == 0:
            raise corrupt(path, "file header", "format version 0 does not exist")
        if len(head) < FILE_HEADER.size:
            raise corrupt(path, "file header", f"the file is {size} bytes, shorter than its header; it is truncated")
        _, _, header_size, kind, _flags, self.snapshot_id, self.base_id, head_sum = FILE_HEADER.unpack(head)
        if checksum(head[:-8]) != head_sum:
            raise corrupt(path, "file header", "header checksum mismatch; the snapshot is corrupted, record it again")
        if header_size != FILE_HEADER.size or kind > 1:
            raise corrupt(path, "file header", f"header size {header_size} / kind {kind} are not valid")
        self.version, self.kind = version, SnapshotType.of(kind)

        pos, seq = header_size, 0
        current: Region | None = None
        seen_args = False
        while True:
            where = f"block #{seq} at byte {pos}"
            if pos + BLOCK_HEADER.size > size:
                raise corrupt(
                    path,
                    where,
                    f"the file ends at byte {size} before the END block; the snapshot "
                    "is truncated (the recording was interrupted?); record it again",
                )
            ahead = os.pread(self._fd, BLOCK_HEADER.size + CHUNK_PREFIX.size, pos)  # header and a chunk's prefix
            raw = ahead[: BLOCK_HEADER.size]
            tag, block_seq, payload_size, payload_sum, head_sum = BLOCK_HEADER.unpack(raw)
            if checksum(raw[:-8]) != head_sum:
                raise corrupt(path, where, "block header checksum mismatch; the snapshot is corrupted")
            block = block_name(seq, tag, pos)
            if tag not in BLOCK_NAMES:
                raise corrupt(path, block, f"unknown block tag {tag!r}")
            if block_seq != seq:
                raise corrupt(
                    path, block, f"sequence number {block_seq}, expected {seq}: a block is missing or repeated"
                )
            payload_at = pos + BLOCK_HEADER.size
            if payload_at + payload_size > size:
                raise corrupt(
                    path,
                    block,
                    f"needs {payload_size} payload bytes but the file ends at byte {size}; "
                    "the snapshot is truncated (the recording was interrupted?); record it again",
                )
            if seq == 0 and tag != TAG_META:
                raise corrupt(path, block, "the first block must be META")
            if current is not None and len(current.chunks) < current.info.num_chunks and tag != TAG_CHUNK:
                raise corrupt(
                    path,
                    block,
                    f"region 0x{current.info.addr:x} announces {current.info.num_chunks} "
                    f"chunks, only {len(current.chunks)} follow it",
                )

            def fail(message: str, block=block) -> CorruptFileError:
                return corrupt(path, block, message)

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
                    raise fail(
                        f"chunk {index} of region 0x{info.addr:x} says offset {offset} length {length}, "
                        f"expected {index * info.chunk_size} and {want}"
                    )
                if enc not in CHUNK_ENCODINGS or (enc == ENC_DIFF and info.encoding != "diff"):
                    raise fail(f"chunk encoding {enc} is not valid in a {info.encoding} region")
                if enc in LZ4_ENCODINGS and self.version < LZ4_VERSION:
                    raise fail(
                        f"chunk encoding {enc} ({CHUNK_ENCODINGS[enc]}) needs snapshot format version "
                        f"{LZ4_VERSION}, but the header says {self.version}"
                    )
                if enc == ENC_RAW and payload_size != CHUNK_PREFIX.size + length:
                    raise fail(f"raw chunk holds {payload_size - CHUNK_PREFIX.size} bytes, expected {length}")
                if enc in LZ4_ENCODINGS and max(length, payload_size) > LZ4_MAX_BLOCK:  # liblz4 sizes are ints
                    raise fail(
                        f"LZ4 chunk of {length} bytes ({payload_size} stored) is larger than one LZ4 block "
                        f"can be ({LZ4_MAX_BLOCK} bytes)"
                    )
                ratio = MAX_EXPANSION.get(enc)
                if ratio and length > ratio * payload_size:  # checked before a reader sizes a buffer by it
                    raise fail(
                        f"chunk of {payload_size} bytes claims to decode to {length}, more than its encoding "
                        f"({CHUNK_ENCODINGS[enc]}) can expand ({ratio}:1)"
                    )
                current.chunks.append(
                    Chunk(
                        offset,
                        length,
                        enc,
                        payload_at,
                        payload_size,
                        payload_sum,
                        f"{block} (region 0x{info.addr:x}, chunk {index})",
                    )
                )
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
                        raise fail(
                            f"END counts {blocks} blocks, {regions} regions, {globals_} globals; the file "
                            f"holds {seq}, {len(self._regions)}, {len(self.globals)}"
                        )
                    if not seen_args:
                        raise fail("the snapshot has no ARGS block")
                    if payload_at + payload_size != size:
                        raise fail(f"{size - payload_at - payload_size} stray bytes follow the END block")
                    break
            pos = payload_at + payload_size
            seq += 1
        for region in self._regions.values():  # once each: a region may hold thousands of chunks
            stored = sum(chunk.payload_size for chunk in region.chunks) + BLOCK_HEADER.size * len(region.chunks)
            region.info = attrs.evolve(region.info, stored_size=stored)
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

    def _parse_region(self, payload: bytes, block: str, fail) -> Region:
        if len(payload) != REGION.size:
            raise fail(f"REGN payload is {len(payload)} bytes, expected {REGION.size}")
        addr, size, chunk_size, num_chunks, enc, dtype, norm, flags, threshold = REGION.unpack(payload)
        if not (8 <= chunk_size <= MAX_CHUNK_SIZE and chunk_size % 8 == 0):
            raise fail(f"region 0x{addr:x}: chunk size {chunk_size} is not a multiple of 8 in 8..{MAX_CHUNK_SIZE}")
        if num_chunks != -(-size // chunk_size) or addr + size > 1 << 64:
            raise fail(f"region 0x{addr:x}: {num_chunks} chunks do not fit its size {size}")
        if enc not in ENCODINGS or dtype >= len(DTYPES) or norm >= len(NORMS) or flags & ~FLAG_RELATIVE:
            raise fail(f"region 0x{addr:x}: encoding {enc}, dtype {dtype}, norm {norm} or flags {flags} not valid")
        if enc == ENC_LZ4 and self.version < LZ4_VERSION:
            raise fail(
                f"region 0x{addr:x} is an lz4 region, which needs snapshot format version {LZ4_VERSION}, "
                f"but the header says {self.version}"
            )
        if enc == ENC_DIFF and self.kind is not SnapshotType.EPILOGUE:
            raise fail(f"region 0x{addr:x} is a diff region, but only an epilogue may hold one")
        if addr in self._regions:
            raise fail(f"region 0x{addr:x} appears twice")
        try:
            policy = RegionPolicy(DTYPES[dtype], threshold, bool(flags & FLAG_RELATIVE), NORMS[norm])
        except (TypeError, ValueError) as exc:
            raise fail(f"region 0x{addr:x}: verification policy is not valid ({exc})") from None
        region = Region(RegionInfo(addr, size, ENCODINGS[enc], 0, policy, chunk_size, num_chunks), block)
        self._regions[addr] = region
        return region

    def _check_overlaps(self) -> None:
        previous = None
        for addr in sorted(self._regions):
            region = self._regions[addr]
            if previous is not None and previous.info.end > addr:
                raise corrupt(self.path, region.block, f"region 0x{addr:x} overlaps region 0x{previous.info.addr:x}")
            previous = region
