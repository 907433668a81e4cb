"""A writer and a reader of the original Mneme's recording format, written for the tests from its documented layout.

Independent of `mneme.compat.original_format`: the tests check that module against these.
Snapshot: little-endian u64 counts and sizes; globals (name length, name, size, address,
bytes), then memory blobs (actual size, size, address, bytes), then arguments (size, bytes).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def snapshot_bytes(globals_: list[tuple[str, int, bytes]], blobs: list[tuple[int, bytes]], args: list[bytes]) -> bytes:
    out = [u64(len(globals_))]
    for name, addr, data in globals_:
        out += [u64(len(name)), name.encode(), u64(len(data)), u64(addr), data]
    out.append(u64(len(blobs)))
    for addr, data in blobs:
        out += [u64(len(data)), u64(len(data)), u64(addr), data]
    out.append(u64(len(args)))
    for data in args:
        out += [u64(len(data)), data]
    return b"".join(out)


def parse_snapshot(data: bytes) -> dict:
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        assert pos + n <= len(data), "truncated"
        pos += n
        return data[pos - n : pos]

    def num() -> int:
        return struct.unpack("<Q", take(8))[0]

    globals_ = []
    for _ in range(num()):
        name = take(num()).decode()
        size, addr = num(), num()
        globals_.append((name, addr, take(size)))
    blobs = []
    for _ in range(num()):
        _actual, size, addr = num(), num(), num()
        blobs.append((addr, take(size)))
    args = [take(num()) for _ in range(num())]
    assert pos == len(data), "trailing bytes"
    return {"globals": globals_, "blobs": blobs, "args": args}


def read_database(path: Path) -> dict:
    """What the original's `RecordedExecution.from_json` reads, checked as it checks it."""
    data = json.loads(Path(path).read_text())
    for module in data["Modules"]:
        assert Path(module).exists(), module
    instances = {}
    for key, inst in data["instances"].items():
        for side in ("Prologue", "Epilogue"):
            assert Path(inst[side]).exists(), inst[side]
        instances[key] = {
            "grid": (inst["GridDims"]["x"], inst["GridDims"]["y"], inst["GridDims"]["z"]),
            "block": (inst["BlockDims"]["x"], inst["BlockDims"]["y"], inst["BlockDims"]["z"]),
            "shared": inst["SharedMem"],
            "occ": inst["Occurrences"],
            "args": inst["Args"],
            "prologue": parse_snapshot(Path(inst["Prologue"]).read_bytes()),
            "epilogue": parse_snapshot(Path(inst["Epilogue"]).read_bytes()),
        }
    return {
        key: data[key]
        for key in ("StaticHash", "KernelName", "DemangledName", "ArgNames", "Specializations", "VAddr", "VASize")
    } | {"instances": instances}


def write_original_recording(mneme_db: Path, out: Path) -> Path:
    """Write the recording of `mneme_db` as the original's recorder and finalizer would: decimal hashes, absolute paths."""
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    rec = RecordedExecution.from_json(mneme_db)
    out.mkdir(parents=True, exist_ok=True)
    static = "1234567890123456789"
    modules = []
    for module in rec.llvm_files:
        (out / module.name).write_bytes(module.read_bytes())
        modules.append(str(out / module.name))
    instances = {}
    for number, (_key, inst) in enumerate(rec.items()):
        dynamic = str(9876543210 + number)
        entry = {
            "Args": rec.specializations,
            "BlockDims": inst.block_dim.to_dict(),
            "GridDims": inst.grid_dim.to_dict(),
            "Occurrences": inst.occ,
            "SharedMem": inst.shared_mem,
        }
        with Snapshot.open(inst.prologue_path) as pro, Snapshot.open(inst.epilogue_path, base=pro) as epi:
            for side, snap in (("Prologue", pro), ("Epilogue", epi)):
                args = bytes(snap.args)
                path = out / f"DeviceState.{side.lower()}.{static}.{dynamic}.mneme"
                path.write_bytes(
                    snapshot_bytes(
                        [(name, rec.globals.get(name, 0), bytes(d)) for name, d in snap.globals.items()],
                        [(r.addr, bytes(snap.read_region(r.addr))) for r in snap.regions],
                        [args[a.offset : a.offset + a.size] for a in rec.args],
                    )
                )
                entry[side] = str(path)
        instances[dynamic] = entry
    db = out / f"{static}.json"
    db.write_text(
        json.dumps(
            {
                "ArgNames": rec.arg_names,
                "BinaryBlobs": [],
                "DemangledName": rec.demangled_name,
                "KernelName": rec.kernel_name,
                "Modules": modules,
                "Specializations": rec.specializations,
                "StaticHash": static,
                "VASize": rec.va_size,
                "VAddr": hex(rec.va_addr),
                "instances": instances,
            },
            indent=2,
        )
    )
    return db
