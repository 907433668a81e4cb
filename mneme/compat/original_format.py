"""The original Mneme's recording format: read it, import it into Mneme's, export back to it.

The original writes one database `<StaticHash>.json` per kernel (`KernelName`,
`DemangledName`, `StaticHash`, `Modules`, `BinaryBlobs`, `ArgNames`, `Specializations`,
`VAddr` as a hex string, `VASize`, and `instances`: dynamic hash -> `GridDims`,
`BlockDims`, `SharedMem`, `Occurrences`, `Args`, `Prologue`, `Epilogue`) and one
unchecksummed binary snapshot per prologue/epilogue, every integer a little-endian u64::

    n_globals, then per global:  name_len, name, size, device_address, bytes[size]
    n_blobs,   then per blob:    actual_size, size, device_address, bytes[size]
    n_args,    then per arg:     size, bytes[size]

Importing adds what Mneme's format needs and the original lacks (`SchemaVersion`,
`Backend`, `Arch`, `ArgSizes`/`ArgOffsets`/`ArgKinds`, the packed `Args` buffer,
checksummed snapshots). Exporting writes the original's layout; Mneme's verification
policies, backend, architecture and argument kinds travel in an extra `Mneme` key that the
original's reader ignores, so a recording exported and imported again is the same recording.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mneme.core import limits
from mneme.core.errors import FormatError, UsageError

log = logging.getLogger(__name__)

_U64 = struct.Struct("<Q")
#: Keys every database of the original has.
REQUIRED_KEYS = ("KernelName", "Modules", "instances")
INSTANCE_KEYS = ("GridDims", "BlockDims", "SharedMem", "Prologue", "Epilogue")
#: Extra key of an exported database: what Mneme's format has and the original's lacks (ignored by its reader).
EXTRA_KEY = "Mneme"


@attrs.frozen
class OriginalSnapshot:
    """One snapshot file of the original: globals, memory blobs and arguments as bytes."""

    globals: list[tuple[str, int, bytes]]  # (name, device address, bytes)
    blobs: list[tuple[int, int, bytes]]  # (device address, actual (allocated) size, bytes)
    args: list[bytes]


def is_original_database(data: Mapping[str, Any]) -> bool:
    """True for a database in the original's format (no `SchemaVersion`, the original's keys)."""
    return "SchemaVersion" not in data and all(k in data for k in REQUIRED_KEYS)


def read_snapshot(path: str | os.PathLike) -> OriginalSnapshot:
    """Parse an original snapshot file; a truncated or malformed one is a `FormatError` naming the field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot read the original snapshot: {exc.strerror or exc}") from exc
    pos = 0

    def u64(what: str) -> int:
        nonlocal pos
        if pos + 8 > len(data):
            raise FormatError(path, f"truncated at byte {pos} reading {what}; the file is not a complete "
                              "snapshot of the original Mneme")  # fmt: skip
        (value,) = _U64.unpack_from(data, pos)
        pos += 8
        return value

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if n > len(data) - pos:
            raise FormatError(path, f"{what} claims {n} bytes at byte {pos} but only {len(data) - pos} remain")
        out = data[pos : pos + n]
        pos += n
        return out

    globals_ = []
    for i in range(u64("the global count")):
        name = take(u64(f"global {i}'s name length"), f"global {i}'s name").decode("utf-8", "replace")
        size = u64(f"global {name}'s size")
        addr = u64(f"global {name}'s address")
        globals_.append((name, addr, take(size, f"global {name}'s bytes")))
    blobs = []
    for i in range(u64("the memory blob count")):
        actual = u64(f"blob {i}'s actual size")
        size = u64(f"blob {i}'s size")
        addr = u64(f"blob {i}'s address")
        blobs.append((addr, actual, take(size, f"blob {i} at {addr:#x}")))
    args = [take(u64(f"argument {i}'s size"), f"argument {i}") for i in range(u64("the argument count"))]
    if pos != len(data):
        raise FormatError(path, f"{len(data) - pos} unexpected bytes after the arguments")
    return OriginalSnapshot(globals_, blobs, args)


def write_snapshot(path: str | os.PathLike, snap: OriginalSnapshot) -> None:
    """Write `snap` in the original's layout (atomically: temp file, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fd:
        fd.write(_U64.pack(len(snap.globals)))
        for name, addr, data in snap.globals:
            raw = name.encode()
            fd.write(_U64.pack(len(raw)) + raw + _U64.pack(len(data)) + _U64.pack(addr))
            fd.write(data)
        fd.write(_U64.pack(len(snap.blobs)))
        for addr, actual, data in snap.blobs:
            fd.write(_U64.pack(max(actual, len(data))) + _U64.pack(len(data)) + _U64.pack(addr))
            fd.write(data)
        fd.write(_U64.pack(len(snap.args)))
        for data in snap.args:
            fd.write(_U64.pack(len(data)))
            fd.write(data)
    os.replace(tmp, path)


def read_database(path: str | os.PathLike) -> dict[str, Any]:
    """The original's database JSON, checked for the keys its reader needs."""
    path = Path(path)
    data = limits.load_json(limits.read_text(path, "recording database"), path)
    if not isinstance(data, dict) or not is_original_database(data):
        raise FormatError(path, "not a database of the original Mneme: it needs "
                          f"{', '.join(REQUIRED_KEYS)} and no SchemaVersion")  # fmt: skip
    for key, inst in data["instances"].items():
        missing = [k for k in INSTANCE_KEYS if k not in inst]
        if missing:
            raise FormatError(path, f"missing {', '.join(missing)}", field=f"instances.{key}")
    return data


def _resolve(name: str, folder: Path, field: str, db: Path) -> Path:
    # The original stores absolute paths; a copied recording is found beside its database.
    candidates = [Path(name), folder / name, folder / Path(name).name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FormatError(db, f"file {name} not found (also looked in {folder})", field=field)


# -- import ------------------------------------------------------------------------------------


def _target_of(modules: list[Path]) -> tuple[str, str]:
    """(backend, arch) read from the IR's target triple and target-cpu."""
    triple, cpu = "", ""
    for module in modules:
        text = module.read_bytes()[:200_000].decode("latin-1") if module.suffix == ".ll" else ""
        if not text:
            continue
        found = re.search(r'target triple\s*=\s*"([^"]+)"', text)
        triple = triple or (found.group(1) if found else "")
        found = re.search(r'"target-cpu"="([^"]+)"', text)
        cpu = cpu or (found.group(1) if found else "")
    if triple.startswith("nvptx"):
        return "cuda", cpu
    if triple.startswith("amdgcn"):
        return "hip", cpu
    return "host", triple.split("-")[0] if triple else ""


def _arg_layout(modules: list[Path], kernel: str, sizes: list[int]) -> tuple[list[int], list[str]]:
    """Offsets and kinds of the arguments: from the kernel's IR signature when it agrees with the sizes."""
    if modules:
        try:
            from mneme.core import ir

            params = ir.kernel_params(ir.link([str(m) for m in modules], kernel), kernel)
            if [p.size for p in params] == sizes:
                return [p.offset for p in params], [p.kind for p in params]
        except Exception as exc:  # noqa: BLE001 - any IR problem falls back to natural packing
            log.debug("argument layout from IR failed for %s: %s", kernel, exc)
    return natural_offsets(sizes), ["unknown"] * len(sizes)


def natural_offsets(sizes: list[int]) -> list[int]:
    """Offsets of arguments packed with natural alignment (scalars by size, anything else by 8)."""
    offsets, offset = [], 0
    for size in sizes:
        align = min(8, size) if size in (1, 2, 4, 8) else 8
        offset = (offset + align - 1) // align * align
        offsets.append(offset)
        offset += size
    return offsets


def pack(args: list[bytes], offsets: list[int]) -> bytes:
    buffer = bytearray(max((o + len(a) for o, a in zip(offsets, args)), default=0))
    for offset, data in zip(offsets, args):
        buffer[offset : offset + len(data)] = data
    return bytes(buffer)


def _policy_of(entry: Any):
    from mneme.core.snapshot import RegionPolicy

    return RegionPolicy(**entry) if entry else None


def import_original(db_path: str | os.PathLike, out: str | os.PathLike, *, backend: str | None = None,
                    arch: str | None = None) -> Path:  # fmt: skip
    """Convert one original database (and its IR and snapshots) into a Mneme recording under `out`.

    Returns the new database's path. `backend`/`arch` default to what the IR's target says.
    """
    from mneme.core.records import ArgInfo, RecordedExecution
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    db_path = Path(db_path)
    data = read_database(db_path)
    folder = db_path.parent
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kernel = data["KernelName"]
    static = str(data.get("StaticHash") or db_path.stem)
    modules = [_resolve(m, folder, "Modules", db_path) for m in data["Modules"]]
    copied = []
    for module in modules:
        target = out / module.name
        if module.resolve() != target.resolve():
            shutil.copyfile(module, target)
        copied.append(target)
    blobs = []
    for image in data.get("BinaryBlobs") or []:
        source = _resolve(image, folder, "BinaryBlobs", db_path)
        shutil.copyfile(source, out / source.name)
        blobs.append((out / source.name, source.suffix.lstrip(".") or "elf"))
    extra = data.get(EXTRA_KEY) or {}
    guessed_backend, guessed_arch = _target_of(modules)
    guessed_backend, guessed_arch = extra.get("Backend", guessed_backend), extra.get("Arch", guessed_arch)
    instances = data["instances"]
    if not instances:
        raise UsageError(f"{db_path}: the database has no instances; nothing to import")
    first = next(iter(instances.values()))
    first_snap = read_snapshot(_resolve(first["Prologue"], folder, "Prologue", db_path))
    sizes = [len(a) for a in first_snap.args]
    offsets, kinds = _arg_layout(modules, kernel, sizes)
    if len(extra.get("ArgOffsets", ())) == len(sizes) and len(extra.get("ArgKinds", ())) == len(sizes):
        offsets, kinds = list(extra["ArgOffsets"]), list(extra["ArgKinds"])
    names = list(data.get("ArgNames") or [f"arg{i}" for i in range(len(sizes))])
    specs = list(data.get("Specializations") or [False] * len(sizes))
    if len(names) != len(sizes) or len(specs) != len(sizes):
        raise FormatError(db_path, f"ArgNames/Specializations list {len(names)}/{len(specs)} arguments but the "
                          f"snapshots hold {len(sizes)}")  # fmt: skip
    va = data.get("VAddr") or 0
    rec = RecordedExecution.create(
        out, kernel_name=kernel, static_hash=static, backend=backend or guessed_backend, arch=arch or guessed_arch,
        modules=copied, binary_blobs=blobs,
        args=[ArgInfo(n, o, s, k, bool(f)) for n, o, s, k, f in zip(names, offsets, sizes, kinds, specs)],
        va_addr=int(va, 16) if isinstance(va, str) else int(va), va_size=int(data.get("VASize") or 0),
        globals={name: addr for name, addr, _ in first_snap.globals},
        demangled_name=data.get("DemangledName") or None,
    )  # fmt: skip
    policies = extra.get("Policies", {})
    for dyn, inst in instances.items():
        files = {}
        packed = b""
        for kind in (SnapshotType.PROLOGUE, SnapshotType.EPILOGUE):
            key = "Prologue" if kind is SnapshotType.PROLOGUE else "Epilogue"
            snap = read_snapshot(_resolve(inst[key], folder, f"instances.{dyn}.{key}", db_path))
            if [len(a) for a in snap.args] != sizes:
                raise FormatError(db_path, "argument sizes differ from the first instance's",
                                  field=f"instances.{dyn}.{key}")  # fmt: skip
            target = out / f"DeviceState.{kind.value}.{static}.{dyn}.mneme"
            args = pack(snap.args, offsets)
            packed = args if kind is SnapshotType.PROLOGUE else packed  # the instance's Args: the launch's
            with SnapshotWriter(target, kind, static_hash=static, dynamic_hash=dyn) as writer:
                writer.set_args(args, list(zip(offsets, sizes)))
                region_policies = policies.get(dyn, {}) if kind is SnapshotType.EPILOGUE else {}
                for addr, _actual, blob in snap.blobs:
                    writer.add_region(addr, blob, encoding="zstd", policy=_policy_of(region_policies.get(hex(addr))))
                for name, _addr, blob in snap.globals:
                    writer.add_global(name, blob)
            files[key] = target
        rec.add_instance(grid=inst["GridDims"], block=inst["BlockDims"], shared_mem=int(inst["SharedMem"]),
                         args=packed, prologue=files["Prologue"], epilogue=files["Epilogue"],
                         occurrences=int(inst.get("Occurrences", 1)), dynamic_hash=str(dyn))  # fmt: skip
    return rec.to_json()


# -- export ------------------------------------------------------------------------------------


def export_original(record, out: str | os.PathLike) -> Path:
    """Write a Mneme recording (a `RecordedExecution` or its path) in the original's format under `out`.

    Paths inside are absolute, as the original's recorder writes them. Returns the database's path.
    """
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    rec = record if isinstance(record, RecordedExecution) else RecordedExecution.from_json(record)
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    modules = []
    for module in rec.llvm_files:
        shutil.copyfile(module, out / module.name)
        modules.append(str(out / module.name))
    images = []
    for image in rec.binary_blobs:
        shutil.copyfile(image.path, out / image.path.name)
        images.append(str(out / image.path.name))
    instances, policies = {}, {}
    for dyn, inst in rec.items():
        entry = {"Args": list(rec.specializations), "BlockDims": inst.block_dim.to_dict(),
                 "GridDims": inst.grid_dim.to_dict(), "Occurrences": inst.occ, "SharedMem": inst.shared_mem}  # fmt: skip
        with Snapshot.open(inst.prologue_path) as prologue, Snapshot.open(inst.epilogue_path, base=prologue) as epi:
            for key, snap in (("Prologue", prologue), ("Epilogue", epi)):
                args = bytes(snap.args)
                layout = snap.arg_layout or [(a.offset, a.size) for a in rec.args]
                target = out / f"DeviceState.{key.lower()}.{rec.static_hash}.{dyn}.mneme"
                write_snapshot(target, OriginalSnapshot(
                    globals=[(name, rec.globals.get(name, 0), bytes(data)) for name, data in snap.globals.items()],
                    blobs=[(r.addr, r.size, bytes(snap.read_region(r.addr))) for r in snap.regions],
                    args=[args[o : o + n] for o, n in layout],
                ))  # fmt: skip
                entry[key] = str(target)
            kept = {hex(r.addr): attrs.asdict(r.policy) for r in epi.regions if not r.policy.exact}
            if kept:
                policies[dyn] = kept
        instances[dyn] = entry
    data = {
        "ArgNames": list(rec.arg_names), "BinaryBlobs": images, "DemangledName": rec.demangled_name,
        "KernelName": rec.kernel_name, "Modules": modules, "Specializations": list(rec.specializations),
        "StaticHash": rec.static_hash, "VASize": rec.va_size, "VAddr": hex(rec.va_addr), "instances": instances,
    }  # fmt: skip
    data[EXTRA_KEY] = {"Backend": rec.backend, "Arch": rec.arch, "ArgOffsets": [a.offset for a in rec.args],
                       "ArgKinds": [a.kind for a in rec.args], "Policies": policies}  # fmt: skip
    target = out / f"{rec.static_hash}.json"
    target.write_text(json.dumps(data, indent=2))
    return target


def import_folder(folder: str | os.PathLike, out: str | os.PathLike, **options: Any) -> list[Path]:
    """Import every original database (`*.json` in the original's format) found in `folder`."""
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = limits.load_json(limits.read_text(path, "recording database"), path)
        except FormatError:
            continue
        if isinstance(data, dict) and is_original_database(data):
            found.append(import_original(path, out, **options))
    if not found:
        raise UsageError(f"no recording database of the original Mneme in {folder}")
    return found
