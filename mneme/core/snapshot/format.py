"""Byte layout of a snapshot file (versions 1 and 2) and the value types that describe its contents.

`docs/formats.md` is the normative description; this module is its executable twin. All
integers are little-endian; every checksum is XXH3-64 (seed 0) of the bytes it covers.
"""

from __future__ import annotations

import ctypes
import enum
import math
import struct

import attrs
import xxhash

from mneme.core.errors import MnemeError
from mneme.core.native_loader import NativeLoader

MAGIC = b"MNEMESNP"
VERSION = 2  # the newest version this reader understands
# Writers write the lowest version that holds what they wrote, so older readers keep reading
# every file that does not need the newer features: version 2 adds the LZ4 encodings.
LZ4_VERSION = 2

# File header: magic, version, header size, kind, 3 reserved, flags, snapshot id, base id, checksum.
FILE_HEADER = struct.Struct("<8sIIB3xI16s16sQ")
FILE_HEADER_SIZE = FILE_HEADER.size  # 64
# Block header: tag, sequence number, payload size, payload checksum, header checksum.
BLOCK_HEADER = struct.Struct("<4sIQQQ")
BLOCK_HEADER_SIZE = BLOCK_HEADER.size  # 32
# REGN payload: addr, size, chunk size, chunk count, encoding, dtype, norm, flags, 4 reserved, threshold.
REGION = struct.Struct("<QQQQBBBB4xd")
# CHNK payload prefix: offset in region, raw length, chunk encoding, 3 reserved.
CHUNK_PREFIX = struct.Struct("<QIB3x")
# Diff chunk body header: run count, packing, 3 reserved, base checksum.
DIFF_HEADER = struct.Struct("<IB3xQ")
RUN = struct.Struct("<II")
END = struct.Struct("<QQQ")

TAG_META, TAG_ARGS, TAG_REGION, TAG_CHUNK, TAG_GLOBAL, TAG_END = b"META", b"ARGS", b"REGN", b"CHNK", b"GLOB", b"END "
BLOCK_NAMES = {
    TAG_META: "META",
    TAG_ARGS: "ARGS",
    TAG_REGION: "REGN",
    TAG_CHUNK: "CHNK",
    TAG_GLOBAL: "GLOB",
    TAG_END: "END",
}

# Region encodings (REGN) and chunk encodings (CHNK) share codes; diff chunks only live in diff regions.
ENC_RAW, ENC_ZSTD, ENC_DIFF = 0, 1, 2
ENC_SHUFFLE = 3  # chunk only: byte-shuffled, then zstd (floats compress far better this way)
ENC_LZ4 = 4  # version 2: one LZ4 block (decodes about 3x as fast as zstd, stores a few percent more)
ENC_LZ4_SHUFFLE = 5  # version 2, chunk only: byte-shuffled, then one LZ4 block
ENCODINGS = {ENC_RAW: "raw", ENC_ZSTD: "zstd", ENC_DIFF: "diff", ENC_LZ4: "lz4"}  # region encodings
ENCODING_CODES = {name: code for code, name in ENCODINGS.items()}
CHUNK_ENCODINGS = {
    ENC_RAW: "raw",
    ENC_ZSTD: "zstd",
    ENC_DIFF: "diff",
    ENC_SHUFFLE: "zstd-shuffle",
    ENC_LZ4: "lz4",
    ENC_LZ4_SHUFFLE: "lz4-shuffle",
}
LZ4_ENCODINGS = (ENC_LZ4, ENC_LZ4_SHUFFLE)  # the codes a version-1 file cannot hold
SHUFFLE_HEADER = struct.Struct("<B7x")  # element size, 7 reserved
SHUFFLE_SIZES = (2, 4, 8)
PACK_RAW, PACK_ZSTD = 0, 1

DTYPES = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64")
NORMS = ("none", "L1", "L2", "Linf")
FLAG_RELATIVE = 1

DEFAULT_CHUNK_SIZE = 4 << 20
# LZ4 regions: a restore decodes chunks this small in parallel on the device (one warp each),
# and they compress about as well (0.5 points of the stored size) as 4 MiB ones.
LZ4_CHUNK_SIZE = 256 << 10
MAX_CHUNK_SIZE = (1 << 32) - 8  # a chunk's raw length is a u32


def file_name(kind: SnapshotType | str, static_hash: str, dynamic_hash: str) -> str:
    """The conventional name of a snapshot file: `DeviceState.<kind>.<static>.<dynamic>.mneme`."""
    return f"DeviceState.{SnapshotType.of(kind).value}.{static_hash}.{dynamic_hash}.mneme"


# Above this size a chunk's checksum is computed through xxHash's C functions via ctypes, which
# releases the GIL, so threads that decode chunks in parallel also check them in parallel.
_GIL_FREE_MIN = 1 << 20


def _xxhash_extension() -> str:
    try:
        import xxhash._xxhash as ext
    except ImportError as exc:
        raise MnemeError(f"the xxhash module has no C extension ({exc})") from exc
    return ext.__file__


_VP = ctypes.c_void_p
#: xxHash's streaming XXH3 functions, from the xxhash module's own extension.
XXH3 = NativeLoader(
    "xxHash's C functions (the xxhash module's extension)",
    _xxhash_extension,
    {
        "XXH3_createState": (_VP, []),
        "XXH3_freeState": (ctypes.c_int, [_VP]),
        "XXH3_64bits_reset": (ctypes.c_int, [_VP]),
        "XXH3_64bits_update": (ctypes.c_int, [_VP, _VP, ctypes.c_size_t]),
        "XXH3_64bits_digest": (ctypes.c_uint64, [_VP]),
    },
    remedy="checksums are computed holding the GIL meanwhile; reinstall xxhash (pip install --force-reinstall xxhash)",
)


def _xxh3_native():
    """xxHash's streaming XXH3 functions from the xxhash extension module, or None."""
    return XXH3.try_load()[0]


def _pointer(part) -> tuple[object, int]:
    """A ctypes object over `part`'s bytes (keep it alive while the address is used) and its size."""
    view = memoryview(part).cast("B")
    if view.readonly:  # read-only buffers have no ctypes view without a copy
        return ctypes.create_string_buffer(view.tobytes(), len(view)), len(view)
    return (ctypes.c_char * len(view)).from_buffer(view), len(view)


def checksum(*parts) -> int:
    """XXH3-64 of the concatenation of `parts` (bytes-like), without concatenating them."""
    lib = _xxh3_native()
    if lib is not None and sum(memoryview(p).nbytes for p in parts) >= _GIL_FREE_MIN:
        state = lib.XXH3_createState()
        try:
            lib.XXH3_64bits_reset(state)
            for part in parts:
                buffer, size = _pointer(part)
                if size:
                    lib.XXH3_64bits_update(state, ctypes.addressof(buffer), size)
            return lib.XXH3_64bits_digest(state)
        finally:
            lib.XXH3_freeState(state)
    if len(parts) == 1:
        return xxhash.xxh3_64_intdigest(parts[0])
    h = xxhash.xxh3_64()
    for part in parts:
        h.update(part)
    return h.intdigest()


class SnapshotType(enum.Enum):
    """Which side of a launch a snapshot holds."""

    PROLOGUE = "prologue"  # the state right before the launch
    EPILOGUE = "epilogue"  # the state right after it

    @property
    def code(self) -> int:
        return 0 if self is SnapshotType.PROLOGUE else 1

    @classmethod
    def of(cls, value: SnapshotType | str | int) -> SnapshotType:
        if isinstance(value, SnapshotType):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return (cls.PROLOGUE, cls.EPILOGUE)[value]
        text = str(value)
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"snapshot type must be 'prologue' or 'epilogue', got {value!r}") from None


def _threshold(instance, attribute, value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"threshold must be a finite number >= 0, got {value!r}")


@attrs.frozen
class RegionPolicy:
    """How an epilogue region is verified.

    The default compares bytes exactly. A typed policy reads the region as `dtype` and
    accepts element errors |actual - expected| up to `threshold` (absolute), or up to
    `threshold` times the expected magnitude (`relative=True`), combined by `norm`:
    "none" checks every element, "L1"/"L2"/"Linf" check the norm of the error vector
    (relative: divided by the same norm of the expected values).
    """

    dtype: str = attrs.field(default="u8", validator=attrs.validators.in_(DTYPES))
    threshold: float = attrs.field(default=0.0, converter=float, validator=_threshold)
    relative: bool = attrs.field(default=False, converter=bool)
    norm: str = attrs.field(default="none", validator=attrs.validators.in_(NORMS))

    @property
    def exact(self) -> bool:
        """True when the policy is plain byte equality."""
        return self.threshold == 0 and self.norm == "none" and not self.is_float

    @property
    def is_float(self) -> bool:
        return self.dtype in ("f16", "bf16", "f32", "f64")

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    def __str__(self) -> str:
        if self == EXACT:
            return "exact"
        kind = "rel" if self.relative else "abs"
        return f"{self.dtype} {kind} {self.threshold:g} norm {self.norm}"


ITEMSIZE = {
    "u8": 1,
    "u16": 2,
    "u32": 4,
    "u64": 8,
    "i8": 1,
    "i16": 2,
    "i32": 4,
    "i64": 8,
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
}
EXACT = RegionPolicy()


@attrs.frozen
class RegionInfo:
    """One memory region of a snapshot, as its REGN block describes it."""

    addr: int
    size: int
    encoding: str
    stored_size: int  # bytes its chunk blocks take in the file, headers included
    policy: RegionPolicy = EXACT
    chunk_size: int = DEFAULT_CHUNK_SIZE
    num_chunks: int = 0

    @property
    def end(self) -> int:
        return self.addr + self.size

    @property
    def ratio(self) -> float:
        """Raw size over stored size (1.0 for an empty region)."""
        return self.size / self.stored_size if self.stored_size else 1.0
