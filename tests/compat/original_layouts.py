"""A writer of recordings in each layout the original Mneme has written, for the tests.

Written from a reading of the original's sources (Olympus-HPC/Mneme), independently of
`mneme.compat`, field by field:

- documented layout: `src/MnemeSnapshot.hpp` `takeMnemeSnapshot` / `readMnemeSnapShot` of the
  documented version: u64 global count; per global `GlobalVarInfo` (name length, name, size,
  device address, bytes); u64 blob count; per blob `operator<<(MnemeMemoryBlob)` (allocated
  size, size, device address, bytes); u64 argument count; per argument (size, bytes).
- per-region metadata (PR #136): `include/mneme/MnemeMemory.hpp` `operator<<` and `fromBuffer`
  put `metadata::serialize` after each blob's bytes; `src/MnemeAnnotationInternal.cpp`
  `serialize`/`fromBuffer`: `BuiltinDType` as its underlying u8, threshold as f64,
  `ThresholdKind` u8, `Norm` u8 (`include/mneme/MnemeAnnotation.hpp` gives their values), u64
  tag length, tag bytes (length 0 without a tag).
- diff epilogues (PR #163, `MNEME_DIFF_V1`): `include/mneme/MnemeSnapshot.hpp`
  `writeMnemeDiffSnapshot` / `applyDiffMnemeSnapShot`: the 13 magic bytes; u64 global count,
  per global name length, name, size, address, range count, ranges; u64 blob count, per blob
  allocated size, size, address, metadata, range count, ranges; a range is offset (from the
  start of the global or blob), length, bytes (`writeChangedRanges`). No argument section:
  `DiffSnapshotFile::reconstruct` starts from the base prologue.
- `best` (PR #182): `takeBestMnemeSnapshot` writes the diff when it is no larger than the
  bytes layout (`computeMnemeBytesSnapshotSize`), else the bytes layout.
- container header (the original's latest sources, `include/mneme/MnemeSnapshotFormat.hpp`
  `SnapshotHeader::write`/`parse`): `MNEMESNP`, kind u32, version u32 before the payload; the
  bytes layout above is kind 1 version 0, the diff kind 2 version 1 (`SnapshotFormatRegistry`).
- database JSON: `KernelInstancesCollection::toJSON` of the current release (`StaticHash` an
  integer, `Modules` the file name `RecordedIR_<static>.bc`, snapshot paths as file names (what
  `takeMnemeBytesSnapshot` returns); per instance `Args` (argument values as numbers),
  `Occurrences`), read by `python/mneme/recorded_execution.py` `RecordedExecution.from_json`,
  which also reads `Globals` (a list of names, with a default; its `to_dict` writes it); the
  documented version wrote absolute paths (`std::filesystem::canonical`) and no integer hash.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ("documented", "metadata", "diff", "best", "container")
STATIC = 7411001293580029477
VADDR = 0x153900000000
X_ADDR, Y_ADDR = VADDR, VADDR + 0x10000
N = 1024
# (dynamic hash, grid, block, x, y before): A changes a few floats of y (a diff is smaller),
# B changes every float of y in two bytes each (the bytes layout is smaller).
INSTANCES = {
    "1111111111111111111": (4, 256, np.concatenate([np.arange(1, 17), np.zeros(N - 16)]), np.full(N, 3.0)),
    "2222222222222222222": (8, 128, np.arange(1, N + 1), np.zeros(N)),
}
F32 = 9  # BuiltinDType::F32
Y_META = (F32, 1e-5, 1, 0, "y")  # f32, relative 1e-5, per element, tagged


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def metadata(dtype: int = 0, threshold: float = 0.0, kind: int = 0, norm: int = 0, tag: str | None = None) -> bytes:
    raw = (tag or "").encode()
    return bytes([dtype]) + struct.pack("<d", threshold) + bytes([kind, norm]) + u64(len(raw)) + raw


class _Out:
    """Bytes being written, with the offset of a marked place."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.size = 0
        self.mark: int | None = None

    def add(self, *parts: bytes) -> None:
        for part in parts:
            self.chunks.append(part)
            self.size += len(part)

    def here(self) -> None:
        if self.mark is None:
            self.mark = self.size

    def bytes(self) -> bytes:
        return b"".join(self.chunks)


def full_snapshot(blobs: list[tuple[int, bytes, bytes | None]], args: list[bytes], mark_addr: int = -1) -> _Out:
    """A snapshot in the bytes layout; each blob (address, bytes, metadata or None for the documented layout)."""
    out = _Out()
    out.add(u64(0), u64(len(blobs)))
    for addr, data, meta in blobs:
        out.add(u64(0x10000), u64(len(data)), u64(addr))
        if addr == mark_addr:
            out.here()
        out.add(data)
        if meta is not None:
            out.add(meta)
    out.add(u64(len(args)))
    for arg in args:
        out.add(u64(len(arg)), arg)
    return out


def diff_snapshot(before: dict[int, bytes], after: list[tuple[int, bytes, bytes]], mark_addr: int = -1) -> _Out:
    out = _Out()
    out.add(b"MNEME_DIFF_V1", u64(0), u64(len(after)))
    for addr, data, meta in after:
        old = before[addr]
        ranges, i = [], 0
        while i < len(data):
            if old[i] == data[i]:
                i += 1
                continue
            start = i
            while i < len(data) and old[i] != data[i]:
                i += 1
            ranges.append((start, data[start:i]))
        out.add(u64(0x10000), u64(len(data)), u64(addr), meta, u64(len(ranges)))
        for start, run in ranges:
            out.add(u64(start), u64(len(run)))
            if addr == mark_addr:
                out.here()
            out.add(run)
    return out


def bitcode_module(out: Path) -> Path:
    """The saxpy kernel as the current recorder stores it: `RecordedIR_<static>.bc`, made with llvm-as-19."""
    tool = shutil.which("llvm-as-19") or shutil.which("llvm-as")
    if tool is None:
        import pytest

        pytest.skip("llvm-as-19 is not installed: no bitcode module to record")
    target = out / f"RecordedIR_{STATIC}.bc"
    subprocess.run([tool, str(ROOT / "examples" / "saxpy" / "saxpy.ll"), "-o", str(target)], check=True)
    return target


def write_recording(out: Path, layout: str) -> tuple[Path, dict[str, tuple[Path, int]]]:
    """A saxpy recording (two launches) in `layout`; returns its database and, per instance, the
    epilogue file with the offset of a byte of y's recorded result (for corruption tests)."""
    out.mkdir(parents=True, exist_ok=True)
    module = bitcode_module(out)
    current = layout != "documented"
    meta_x = metadata() if current else None
    meta_y = metadata(*Y_META) if current else None
    instances, marks = {}, {}
    for dyn, (grid, block, x, y) in INSTANCES.items():
        x = x.astype(np.float32).tobytes()
        y_before = y.astype(np.float32)
        y_after = (np.float32(2.0) * np.frombuffer(x, np.float32) + y_before).astype(np.float32).tobytes()
        args = [struct.pack("<i", N), struct.pack("<f", 2.0), u64(X_ADDR), u64(Y_ADDR)]
        prologue = full_snapshot([(X_ADDR, x, meta_x), (Y_ADDR, y_before.tobytes(), meta_y)], args)
        diff = diff_snapshot(
            {X_ADDR: x, Y_ADDR: y_before.tobytes()},
            [(X_ADDR, x, metadata()), (Y_ADDR, y_after, metadata(*Y_META))],
            Y_ADDR,
        )
        full = full_snapshot([(X_ADDR, x, meta_x), (Y_ADDR, y_after, meta_y)], args, Y_ADDR)
        if layout == "container":
            prologue.chunks.insert(0, b"MNEMESNP" + struct.pack("<II", 1, 0))
            assert diff.chunks[0] == b"MNEME_DIFF_V1"  # the container header takes the legacy magic's place
            diff.chunks[0] = b"MNEMESNP" + struct.pack("<II", 2, 1)
            epilogue, mark = diff, diff.mark + 16 - 13
        elif layout == "diff" or (layout == "best" and diff.size <= full.size):
            epilogue, mark = diff, diff.mark
        else:
            # the first changed float's high byte: its exponent
            first = next(i for i in range(N) if y_after[4 * i : 4 * i + 4] != y_before.tobytes()[4 * i : 4 * i + 4])
            epilogue, mark = full, full.mark + 4 * first + 3
        names = {}
        for side, snap in (("prologue", prologue), ("epilogue", epilogue)):
            path = out / f"DeviceState.{side}.{STATIC}.{dyn}.mneme"
            path.write_bytes(snap.bytes())
            names[side] = path.name if current else str(path.resolve())
        marks[dyn] = (out / f"DeviceState.epilogue.{STATIC}.{dyn}.mneme", mark)
        instances[dyn] = {
            "Prologue": names["prologue"],
            "Epilogue": names["epilogue"],
            "BlockDims": {"x": block, "y": 1, "z": 1},
            "GridDims": {"x": grid, "y": 1, "z": 1},
            "SharedMem": 0,
            "Args": [float(N), 2.0, float(X_ADDR), float(Y_ADDR)],
            "Occurrences": 1,
        }
    data = {
        "StaticHash": STATIC if current else str(STATIC),
        "VAddr": hex(VADDR),
        "VASize": 0x100000,
        "KernelName": "saxpy",
        "DemangledName": "saxpy",
        "Modules": [module.name if current else str(module.resolve())],
        "BinaryBlobs": [],
        "ArgNames": ["n", "a", "x", "y"],
        "Specializations": [True, True, False, False],
        "instances": instances,
    }
    if current:
        data["Globals"] = []
    db = out / f"{STATIC}.json"
    db.write_text(json.dumps(data))
    return db, marks


def epilogue_kinds(out: Path) -> dict[str, str]:
    """Per instance, whether its epilogue file is a diff or full (what `best` chose)."""
    kinds = {}
    for dyn in INSTANCES:
        head = (out / f"DeviceState.epilogue.{STATIC}.{dyn}.mneme").read_bytes()[:13]
        kinds[dyn] = "diff" if head == b"MNEME_DIFF_V1" else "full"
    return kinds


class _Cursor:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        assert self.pos + n <= len(self.data), "truncated"
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def metadata(self) -> tuple:
        dtype, threshold, kind, norm = struct.unpack("<BdBB", self.take(11))
        tag = self.take(self.u64()).decode() or None
        return dtype, threshold, kind, norm, tag


def _header(data: bytes) -> tuple[str, int]:
    """`SnapshotHeader::parse`: (kind, payload offset) of a file."""
    if data[:8] == b"MNEMESNP" and len(data) >= 16:
        kind, version = struct.unpack_from("<II", data, 8)
        assert (kind, version) in ((1, 0), (2, 1)), "unsupported kind/version"
        return ("bytes" if kind == 1 else "diff"), 16
    if data.startswith(b"MNEME_DIFF_V1"):
        return "diff", 13
    return "bytes", 0


def read_like_the_current_original(prologue: Path, epilogue: Path) -> dict[str, dict]:
    """Both snapshots as the current release's readers rebuild them (`readFullMnemeSnapShot`,
    `MnemeMemoryBlob::fromBuffer` with `metadata::fromBuffer`, `applyDiffMnemeSnapShot`):
    {"prologue"|"epilogue": {"globals": {name: (address, bytes)}, "blobs": {address: (allocated,
    bytes, metadata)}, "args": [bytes]}}; any deviation from the layout fails an assertion."""

    def full(data: bytes, start: int) -> dict:
        c = _Cursor(data, start)
        globals_ = {}
        for _ in range(c.u64()):
            name = c.take(c.u64()).decode()
            size, addr = c.u64(), c.u64()
            globals_[name] = (addr, c.take(size))
        blobs = {}
        for _ in range(c.u64()):
            actual, size, addr = c.u64(), c.u64(), c.u64()
            blobs[addr] = (actual, c.take(size), c.metadata())
        args = [c.take(c.u64()) for _ in range(c.u64())]
        assert c.pos == len(data), "trailing bytes"
        return {"globals": globals_, "blobs": blobs, "args": args}

    def apply(data: bytes, start: int, base: dict) -> dict:
        c = _Cursor(data, start)
        out = {"globals": dict(base["globals"]), "blobs": dict(base["blobs"]), "args": base["args"]}
        assert c.u64() == len(base["globals"])
        for _ in range(len(base["globals"])):
            name = c.take(c.u64()).decode()
            size, addr = c.u64(), c.u64()
            contents = bytearray(base["globals"][name][1])
            assert len(contents) == size
            for _ in range(c.u64()):
                offset, length = c.u64(), c.u64()
                contents[offset : offset + length] = c.take(length)
            out["globals"][name] = (addr, bytes(contents))
        assert c.u64() == len(base["blobs"])
        for _ in range(len(base["blobs"])):
            actual, size, addr = c.u64(), c.u64(), c.u64()
            meta = c.metadata()
            before_actual, before, _ = base["blobs"][addr]
            assert (before_actual, len(before)) == (actual, size)
            contents = bytearray(before)
            for _ in range(c.u64()):
                offset, length = c.u64(), c.u64()
                assert offset + length <= size
                contents[offset : offset + length] = c.take(length)
            out["blobs"][addr] = (actual, bytes(contents), meta)
        assert c.pos == len(data), "trailing bytes"
        return out

    pro_data, epi_data = prologue.read_bytes(), epilogue.read_bytes()
    kind, start = _header(pro_data)
    assert kind == "bytes", "a prologue is never a diff"
    base = full(pro_data, start)
    kind, start = _header(epi_data)
    return {"prologue": base, "epilogue": full(epi_data, start) if kind == "bytes" else apply(epi_data, start, base)}
