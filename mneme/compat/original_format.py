"""The original Mneme's recording databases: read them in every layout, convert them to Mneme's, export back.

The original writes one database `<StaticHash>.json` per kernel (`KernelName`,
`DemangledName`, `StaticHash` (an integer in the current release), `Modules` (`.ll` or
`RecordedIR_<hash>.bc`), `BinaryBlobs`, `ArgNames`, `Specializations`, `Globals`, `VAddr` as a
hex string, `VASize`, and `instances`: dynamic hash -> `GridDims`, `BlockDims`, `SharedMem`,
`Occurrences`, `Args`, `Prologue`, `Epilogue`) and a snapshot file per prologue and epilogue,
whose layouts `mneme.compat.original_snapshot` reads and writes.

Importing adds what Mneme's format needs and the original lacks (`SchemaVersion`, `Backend`
and `Arch` from the IR's target triple and `target-cpu`, `ArgSizes`/`ArgOffsets`/`ArgKinds`,
the packed `Args` buffer, checksummed snapshots); the original's per-region metadata become
verification policies. Exporting writes the original's layout; Mneme's own hash, backend,
architecture and argument kinds travel in an extra `Mneme` key that the original's reader
ignores, so a recording exported and imported again is the same recording.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mneme.compat import original_snapshot as snapshots
from mneme.compat.original_snapshot import OriginalSnapshot, read_snapshot, write_snapshot
from mneme.core import limits
from mneme.core.errors import FormatError, UsageError

log = logging.getLogger(__name__)

#: Keys every database of the original has.
REQUIRED_KEYS = ("KernelName", "Modules", "instances")
INSTANCE_KEYS = ("GridDims", "BlockDims", "SharedMem", "Prologue", "Epilogue")
#: Extra key of an exported database: what Mneme's format has and the original's lacks (ignored by its reader).
EXTRA_KEY = "Mneme"
#: Export layouts: "current" is the current release's default (diff epilogues).
EXPORT_LAYOUTS = ("current", "diff", "best", "bytes", "documented")
#: Where an original database is converted to, beside it.
IMPORT_FOLDER = ".mneme-import"


#: Keys only Mneme's databases have: a database with any of them is Mneme's, however damaged.
MNEME_ONLY_KEYS = ("SchemaVersion", "Backend", "Arch", "ArgSizes", "ArgOffsets", "ArgKinds")


def is_original_database(data: Mapping[str, Any]) -> bool:
    """True for a database in the original's format: the original's keys and none only Mneme writes."""
    return all(k in data for k in REQUIRED_KEYS) and not any(k in data for k in MNEME_ONLY_KEYS)


def read_database(path: str | os.PathLike) -> dict[str, Any]:
    """The original's database JSON, checked for the keys its reader needs."""
    path = Path(path)
    data = limits.load_json(limits.read_text(path, "recording database"), path)
    if not isinstance(data, dict) or not is_original_database(data):
        raise FormatError(
            path,
            f"not a database of the original Mneme: it needs {', '.join(REQUIRED_KEYS)} "
            f"and none of the keys only Mneme writes ({', '.join(MNEME_ONLY_KEYS)})",
        )
    for key, inst in data["instances"].items():
        missing = [k for k in INSTANCE_KEYS if k not in inst]
        if missing:
            raise FormatError(path, f"missing {', '.join(missing)}", field=f"instances.{key}")
    return data


def _resolve(name: str, folder: Path, field: str, db: Path, allow_outside: bool = False) -> Path:
    """The file a database names: inside its folder, or, for a moved recording, the one of that name beside it.

    The original stores absolute paths. A path that leads out of the database's folder (after
    symbolic links) is data naming any file of the user's, refused unless `allow_outside` (the
    rule of a capture's `file:` inputs; docs/security.md).
    """
    outside = None
    for candidate in (folder / name, folder / Path(name).name):  # an absolute `name` stays itself
        if not candidate.is_file():
            continue
        try:
            inside = candidate.resolve().is_relative_to(folder.resolve())
        except (OSError, RuntimeError):  # a symbolic link loop
            inside = False
        if inside or allow_outside:
            return candidate
        outside = outside or candidate
    if outside is not None:
        raise FormatError(
            db,
            f"{name} lies outside the database's folder {folder}; an imported database reads only "
            "files in its folder: copy the file beside it, or, if you trust the recording, run mneme "
            f"import-original {db} --allow-files-outside",
            field=field,
        )
    raise FormatError(db, f"file {name} not found (also looked in {folder})", field=field)


# -- import ------------------------------------------------------------------------------------

#: Backend of the kernels whose IR targets this LLVM target (the original records GPU kernels only).
_BACKEND_OF_TARGET = {"nvptx": "cuda", "amdgpu": "hip"}


def _target_of(modules: list[Path]) -> tuple[str, str]:
    """(backend, arch) from the modules' target triple and their functions' `target-cpu` (bitcode or text).

    Modules that do not parse give ("", ""), and the caller's --backend/--arch must say it.
    """
    from mneme.core import ir, targets

    for module in modules:
        try:
            mod = ir.load(module)
        except Exception as exc:  # noqa: BLE001 - the import still works with --backend/--arch
            log.debug("cannot read the target of %s: %s", module, exc)
            continue
        cpu = next((c for c, _features in ir.function_targets(mod) if c), "")
        target = targets.target_of_triple(mod.triple)
        if target in _BACKEND_OF_TARGET:
            return _BACKEND_OF_TARGET[target], cpu
        if mod.triple:
            return "host", mod.triple.split("-")[0]
    return "", ""


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


def policy_of(metadata: snapshots.Metadata | None):
    """Mneme's verification policy for a region's original metadata (None: exact)."""
    from mneme.core.snapshot import RegionPolicy

    if metadata is None:
        return None
    return RegionPolicy(
        dtype=metadata.dtype, threshold=metadata.threshold, relative=metadata.relative, norm=metadata.norm
    )


def metadata_of(policy, where: str) -> snapshots.Metadata:
    """The original's metadata for Mneme's verification policy; a policy it cannot express is an error."""
    if policy.dtype not in snapshots.DTYPES:
        raise UsageError(
            f"{where}: the {policy.dtype} tolerance has no equivalent in the original's metadata "
            f"(it knows {', '.join(snapshots.DTYPES)}); export with --layout documented, which "
            "keeps it in the database's Mneme key"
        )
    return snapshots.Metadata(policy.dtype, policy.threshold, policy.relative, policy.norm)


def _preferred_layout(data: Mapping[str, Any]) -> str:
    # The current recorder writes an integer StaticHash and per-region metadata; the documented one neither.
    return "bytes" if isinstance(data.get("StaticHash"), int) else "documented"


def import_original(
    db_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    backend: str | None = None,
    arch: str | None = None,
    allow_files_outside: bool = False,
) -> Path:
    """Convert one original database (its IR and snapshots, any layout) into a Mneme recording under `out`.

    Returns the new database's path. `backend`/`arch` default to what the IR's target triple
    and `target-cpu` say; the original's per-region metadata become verification policies.
    Files are read from the database's folder only, unless `allow_files_outside`.
    """
    from mneme.core.records import ArgInfo, RecordedExecution
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    db_path = Path(db_path)
    data = read_database(db_path)
    folder = db_path.parent
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kernel = data["KernelName"]
    extra = data.get(EXTRA_KEY) or {}
    static = str(extra.get("StaticHash") or data.get("StaticHash") or db_path.stem)
    outside = allow_files_outside
    modules = [_resolve(m, folder, "Modules", db_path, outside) for m in data["Modules"]]
    copied = []
    for module in modules:
        target = out / module.name
        if module.resolve() != target.resolve():
            shutil.copyfile(module, target)
        copied.append(target)
    blobs = []
    for image in data.get("BinaryBlobs") or []:
        source = _resolve(image, folder, "BinaryBlobs", db_path, outside)
        shutil.copyfile(source, out / source.name)
        blobs.append((out / source.name, source.suffix.lstrip(".") or "elf"))
    guessed_backend, guessed_arch = _target_of(modules)
    guessed_backend, guessed_arch = extra.get("Backend", guessed_backend), extra.get("Arch", guessed_arch)
    if not (backend or guessed_backend) or not (arch or guessed_arch):
        raise UsageError(
            f"{db_path}: its IR modules name no target triple and target-cpu; convert it with "
            f"mneme import-original {db_path} --backend BACKEND --arch ARCH"
        )
    instances = data["instances"]
    if not instances:
        raise UsageError(f"{db_path}: the database has no instances; nothing to import")
    prefer = _preferred_layout(data)

    def read_instance(dyn: str, inst: Mapping[str, Any]) -> tuple[OriginalSnapshot, OriginalSnapshot]:
        pro_path = _resolve(inst["Prologue"], folder, f"instances.{dyn}.Prologue", db_path, outside)
        prologue = snapshots.read_snapshot(pro_path, prefer=prefer)
        epi_path = _resolve(inst["Epilogue"], folder, f"instances.{dyn}.Epilogue", db_path, outside)
        return prologue, snapshots.read_snapshot(epi_path, base=prologue, prefer=prologue.layout)

    first_key = next(iter(instances))
    first = read_instance(first_key, instances[first_key])[0]
    sizes = [len(a) for a in first.args]
    offsets, kinds = _arg_layout(modules, kernel, sizes)
    if len(extra.get("ArgOffsets", ())) == len(sizes) and len(extra.get("ArgKinds", ())) == len(sizes):
        offsets, kinds = list(extra["ArgOffsets"]), list(extra["ArgKinds"])
    names = list(data.get("ArgNames") or [f"arg{i}" for i in range(len(sizes))])
    specs = list(data.get("Specializations") or [False] * len(sizes))
    if len(names) != len(sizes) or len(specs) != len(sizes):
        raise FormatError(
            db_path,
            f"ArgNames/Specializations list {len(names)}/{len(specs)} arguments but the snapshots hold {len(sizes)}",
        )
    va = data.get("VAddr") or 0
    rec = RecordedExecution.create(
        out,
        kernel_name=kernel,
        static_hash=static,
        backend=backend or guessed_backend,
        arch=arch or guessed_arch,
        modules=copied,
        binary_blobs=blobs,
        args=[ArgInfo(n, o, s, k, bool(f)) for n, o, s, k, f in zip(names, offsets, sizes, kinds, specs)],
        va_addr=int(va, 16) if isinstance(va, str) else int(va),
        va_size=int(data.get("VASize") or 0),
        globals={name: addr for name, addr, _ in first.globals},
        demangled_name=data.get("DemangledName") or None,
    )
    extra_policies = extra.get("Policies", {})
    del first  # one instance's snapshots in memory at a time
    for dyn, inst in instances.items():
        files = {}
        pair = read_instance(dyn, inst)
        # A region's policy is the region's: the epilogue's metadata (or kept policy) verifies, both sides carry it.
        kept = extra_policies.get(dyn, {})
        region_policies = {
            b.addr: _policy_from_dict(kept[hex(b.addr)]) if hex(b.addr) in kept else policy_of(b.metadata)
            for b in pair[1].blobs
        }
        for kind, snap in zip((SnapshotType.PROLOGUE, SnapshotType.EPILOGUE), pair):
            key = "Prologue" if kind is SnapshotType.PROLOGUE else "Epilogue"
            if [len(a) for a in snap.args] != sizes:
                raise FormatError(
                    db_path, "argument sizes differ from the first instance's", field=f"instances.{dyn}.{key}"
                )
            target = out / f"DeviceState.{kind.value}.{static}.{dyn}.mneme"
            with SnapshotWriter(target, kind, static_hash=static, dynamic_hash=str(dyn)) as writer:
                writer.set_args(pack(snap.args, offsets), list(zip(offsets, sizes)))
                for blob in snap.blobs:
                    writer.add_region(blob.addr, blob.data, encoding="zstd", policy=region_policies.get(blob.addr))
                for name, _addr, contents in snap.globals:
                    writer.add_global(name, contents)
            files[key] = target
        rec.add_instance(
            grid=inst["GridDims"],
            block=inst["BlockDims"],
            shared_mem=int(inst["SharedMem"]),
            args=pack(pair[0].args, offsets),
            prologue=files["Prologue"],
            epilogue=files["Epilogue"],
            occurrences=int(inst.get("Occurrences", 1)),
            dynamic_hash=str(dyn),
        )
    return rec.to_json()


def _policy_from_dict(entry: Mapping[str, Any]):
    from mneme.core.snapshot import RegionPolicy

    return RegionPolicy(**entry)


class OriginalFormat:
    """The original Mneme's databases, for the `mneme_recording_formats` hook: converted once, beside them."""

    name = "original"
    description = "databases and snapshots of the original Mneme, every layout"

    @staticmethod
    def claims(data: Any) -> bool:
        return isinstance(data, Mapping) and is_original_database(data)

    @staticmethod
    def convert(path: str | os.PathLike, *, create: bool = True) -> Path | None:
        return converted_database(path, create=create)


def converted_database(path: str | os.PathLike, *, create: bool = True) -> Path | None:
    """The Mneme database converted from the original database `path`, in `.mneme-import/` beside it.

    Converted on first use and again when the database is newer than the conversion; with
    `create=False`, only a current conversion is returned (None when there is none).
    """
    path = Path(path)
    data = read_database(path)
    extra = data.get(EXTRA_KEY) or {}
    stem = str(extra.get("StaticHash") or data.get("StaticHash") or path.stem)
    converted = path.parent / IMPORT_FOLDER / f"{stem}.json"
    if converted.is_file() and converted.stat().st_mtime >= path.stat().st_mtime:
        return converted
    if not create:
        return None
    log.info("converting the original Mneme database %s into %s", path, converted.parent)
    try:
        return _convert_beside(path, converted)
    except OSError as exc:
        raise FormatError(
            path,
            f"cannot convert the original Mneme database into {converted.parent}: "
            f"{exc.strerror or exc}; convert it elsewhere with mneme import-original -o DIR",
        ) from exc


def _convert_beside(path: Path, converted: Path) -> Path:
    # Converted aside, then moved in: a database that fails to convert leaves its folder as it was.
    staging = path.parent / f"{IMPORT_FOLDER}.{os.getpid()}.tmp"
    try:
        staged = import_original(path, staging)
        converted.parent.mkdir(exist_ok=True)
        for item in sorted(staging.iterdir(), key=lambda f: f == staged):  # the database last
            os.replace(item, converted.parent / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return converted.parent / staged.name


# -- export ------------------------------------------------------------------------------------


def _original_static_hash(static: str) -> int:
    """The original's integer static hash for Mneme's: the hash itself when it is 64-bit hexadecimal."""
    if re.fullmatch(r"[0-9a-fA-F]{1,16}", static):
        return int(static, 16)
    return int(hashlib.sha256(static.encode()).hexdigest()[:16], 16)


def export_original(record, out: str | os.PathLike, *, layout: str = "current") -> Path:
    """Write a Mneme recording (a `RecordedExecution` or its path) in the original's format under `out`.

    `layout` "current" (the current release's default: per-region metadata, epilogues as diffs),
    "diff", "best", "bytes" (full epilogues with metadata) or "documented" (the documented
    version: no metadata; verification policies go in the database's `Mneme` key). Paths inside
    are absolute, which every version of the original's reader finds. Returns the database's path.
    """
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    if layout not in EXPORT_LAYOUTS:
        raise UsageError(f"unknown layout {layout!r}; choose one of {', '.join(EXPORT_LAYOUTS)}")
    epilogue_layout = {"current": "diff", "bytes": "bytes", "documented": "documented"}.get(layout, layout)
    prologue_layout = "documented" if layout == "documented" else "bytes"
    rec = record if isinstance(record, RecordedExecution) else RecordedExecution.from_json(record)
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    static = _original_static_hash(rec.static_hash)
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
        entry = {
            "Args": list(rec.specializations),
            "BlockDims": inst.block_dim.to_dict(),
            "GridDims": inst.grid_dim.to_dict(),
            "Occurrences": inst.occ,
            "SharedMem": inst.shared_mem,
        }
        with Snapshot.open(inst.prologue_path) as prologue, Snapshot.open(inst.epilogue_path, base=prologue) as epi:
            converted = []
            for snap in (prologue, epi):
                args = bytes(snap.args)
                arg_layout = snap.arg_layout or [(a.offset, a.size) for a in rec.args]
                converted.append(
                    snapshots.OriginalSnapshot(
                        globals=[(name, rec.globals.get(name, 0), bytes(data)) for name, data in snap.globals.items()],
                        blobs=[
                            snapshots.Blob(
                                r.addr,
                                r.size,
                                bytes(snap.read_region(r.addr)),
                                None
                                if layout == "documented"
                                else metadata_of(r.policy, f"{rec.path} instance {dyn} region {r.addr:#x}"),
                            )
                            for r in snap.regions
                        ],
                        args=[args[o : o + n] for o, n in arg_layout],
                    )
                )
            kept = {hex(r.addr): attrs.asdict(r.policy) for r in epi.regions if not r.policy.exact}
            if kept and layout == "documented":
                policies[dyn] = kept
        for key, snap in zip(("Prologue", "Epilogue"), converted):
            target = out / f"DeviceState.{key.lower()}.{static}.{dyn}.mneme"
            if key == "Prologue":
                snapshots.write_snapshot(target, snap, prologue_layout)
            else:
                snapshots.write_snapshot(target, snap, epilogue_layout, base=converted[0])
            entry[key] = str(target)
        instances[dyn] = entry
    data = {
        "ArgNames": list(rec.arg_names),
        "BinaryBlobs": images,
        "DemangledName": rec.demangled_name,
        "KernelName": rec.kernel_name,
        "Modules": modules,
        "Specializations": list(rec.specializations),
        "StaticHash": static,
        "VASize": rec.va_size,
        "VAddr": hex(rec.va_addr),
        "instances": instances,
    }
    if layout != "documented":
        data["Globals"] = sorted(rec.globals)
    data[EXTRA_KEY] = {
        "StaticHash": rec.static_hash,
        "Backend": rec.backend,
        "Arch": rec.arch,
        "ArgOffsets": [a.offset for a in rec.args],
        "ArgKinds": [a.kind for a in rec.args],
        "Policies": policies,
    }
    target = out / f"{static}.json"
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
