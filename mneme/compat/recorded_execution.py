"""`mneme.recorded_execution` of the original Mneme API: databases, instances, snapshot handles.

`RecordedExecution.from_json` reads Mneme's databases and the original's alike; an
original database is imported once into a Mneme recording beside it
(`<folder>/.mneme-import/`), which is what executors then replay (`mneme_path`).
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from mneme.compat.errors import runtime_errors
from mneme.compat.kernel_source import KernelSource, SourceInfo, debug_source, read_kernel_source
from mneme.compat.original_format import IMPORT_FOLDER  # noqa: F401 - where conversions go
from mneme.compat.types import dim3


class SnapshotType(enum.Enum):
    """Which side of the launch a snapshot holds; the original's integer values."""

    PROLOGUE = 1
    EPILOGUE = 2

    @property
    def core(self):
        from mneme.core.snapshot import SnapshotType as Core

        return Core.PROLOGUE if self is SnapshotType.PROLOGUE else Core.EPILOGUE


def _is_mneme_snapshot(path: Path) -> bool:
    from mneme.core.snapshot import MAGIC

    with open(path, "rb") as fd:
        return fd.read(len(MAGIC)) == MAGIC


class MemStateRef:
    """Handle to one snapshot file; `open()`/`with` load it, `close()` disposes it.

    Reads Mneme's checksummed snapshots and the original's. `reset()` writes the recorded
    contents to the device it is bound to (a `BaseExecutor` binds its own on `open()`).
    """

    def __init__(
        self,
        fn: str,
        kernel_name: str,
        snap_type: SnapshotType,
        *,
        base: str | None = None,
        layout: list[tuple[int, int]] | None = None,
    ):
        if not Path(fn).exists():
            raise RuntimeError(f"Expected snapshot file: {fn} to exist")
        self.fn = str(fn)
        self.kernel_name = kernel_name
        self.s_type = SnapshotType(snap_type) if not isinstance(snap_type, SnapshotType) else snap_type
        self._base = base
        self._layout = layout  # (offset, size) per argument, from the database, when the file lacks it
        self._core = None
        self._original = None
        self._arg_bytes: list[bytes] | None = None
        self._args = None

    def open(self) -> MemStateRef:
        """Load the snapshot and return self."""
        if self._arg_bytes is not None:
            return self
        with runtime_errors():
            if _is_mneme_snapshot(Path(self.fn)):
                from mneme.core.snapshot import MemStateRef as Core

                self._core = Core(self.fn, self.kernel_name, self.s_type.core, base=self._base).open()
                layout = self._core.snapshot.arg_layout or self._layout or _sibling_layout(self._core.snapshot)
                args = bytes(self._core.args)
                self._arg_bytes = [args[o : o + n] for o, n in layout] if layout else [args]
            else:
                from mneme.compat.original_format import read_snapshot

                self._original = read_snapshot(self.fn, base=self._base)
                self._arg_bytes = list(self._original.args)
        return self

    @property
    def loaded(self) -> bool:
        return self._arg_bytes is not None

    def _check(self, what: str) -> None:
        if self._arg_bytes is None:
            raise RuntimeError(f"Cannot access {what} without loading memory state")

    @property
    def args(self):
        """A ctypes array of pointers, one to each recorded argument's bytes (as the original's)."""
        self._check("arguments")
        if self._args is None:
            self._buffers = [ctypes.create_string_buffer(a, max(len(a), 1)) for a in self._arg_bytes]
            self._args = (ctypes.c_void_p * len(self._buffers))(*(ctypes.addressof(b) for b in self._buffers))
        return self._args

    @property
    def packed_args(self) -> bytes:
        """The kernel's packed parameter buffer (what a launch passes)."""
        self._check("arguments")
        if self._core is not None:
            return bytes(self._core.args)
        from mneme.compat.original_format import natural_offsets, pack

        return pack(self._arg_bytes, natural_offsets([len(a) for a in self._arg_bytes]))

    def regions(self) -> list[tuple[int, bytes]]:
        """(address, recorded bytes) of every memory region."""
        self._check("memory")
        return list(self._contents()[2].items())

    def globals(self) -> dict[str, bytes]:
        self._check("globals")
        return self._contents()[1]

    @property
    def num_args(self) -> int:
        self._check("num_args")
        return len(self._arg_bytes)

    @property
    def arg_values(self) -> list[bytes]:
        self._check("arguments")
        return list(self._arg_bytes)

    def bind(self, device) -> MemStateRef:
        self._device = device
        if self._core is not None:
            self._core.bind(device)
        return self

    def reset(self, device=None) -> None:
        """Write the recorded contents back to the bound device (or `device`)."""
        if self._arg_bytes is None:
            raise RuntimeError("Cannot reset memory, if state is not read first.")
        device = device or getattr(self, "_device", None)
        if device is None:
            raise RuntimeError(
                f"{self.fn}: reset() needs a device: open the snapshot through a BaseExecutor, or pass one"
            )
        with runtime_errors():
            if self._core is not None:
                self._core.reset(device)
            else:
                for blob in self._original.blobs:
                    device.write(blob.addr, bytes(blob.data))

    def _contents(self):
        if self._core is not None:
            snap = self._core.snapshot
            return (
                [bytes(a) for a in self._arg_bytes],
                dict(snap.globals),
                {r.addr: bytes(snap.read_region(r.addr)) for r in snap.regions},
            )
        return (
            list(self._arg_bytes),
            {n: d for n, _a, d in self._original.globals},
            {b.addr: bytes(b.data) for b in self._original.blobs},
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemStateRef):
            return NotImplemented
        self._check("contents")
        other._check("contents")
        return self._contents() == other._contents()

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None

    def close(self) -> None:
        if self._core is not None:
            self._core.close()
        self._core = self._original = self._arg_bytes = self._args = None

    def __enter__(self) -> MemStateRef:
        return self.open()

    def __exit__(self, *exc_info: object) -> bool:
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - nothing escapes a finalizer
            pass


def _sibling_layout(snap) -> list[tuple[int, int]] | None:
    # Snapshots that do not store the argument layout take it from their database beside them.
    from mneme.core.records import RecordedExecution as Core

    db = snap.path.parent / f"{snap.static_hash}.json"
    if not snap.static_hash or not db.is_file():
        return None
    try:
        return [(a.offset, a.size) for a in Core.from_json(db).args] or None
    except Exception:  # noqa: BLE001 - without it the arguments stay one buffer
        return None


class RecordedExecution(MutableMapping):
    """One kernel's recording database with the original's fields; a mapping over its instances."""

    class UnrecordedInstance:
        """A launch context the recorder counted but did not snapshot (the current original's
        `UnrecordedInstances`): its geometry, shared memory and how often it ran."""

        def __init__(self, block_dim: dim3, grid_dim: dim3, shared_mem: int, occ: int):
            self.block_dim = dim3.of(block_dim)
            self.grid_dim = dim3.of(grid_dim)
            self.shared_mem = shared_mem
            self.occ = occ

        def __str__(self) -> str:
            return f"Grid:{self.grid_dim}, BlockDim: {self.block_dim}, Shared Memory {self.shared_mem}"

        def to_dict(self) -> dict[str, Any]:
            return {
                "BlockDims": self.block_dim.to_dict(),
                "GridDims": self.grid_dim.to_dict(),
                "Occurrences": self.occ,
                "SharedMem": self.shared_mem,
            }

        @classmethod
        def from_dict(cls, data: dict[str, Any]) -> RecordedExecution.UnrecordedInstance:
            return cls(
                dim3.from_dict(data["BlockDims"]),
                dim3.from_dict(data["GridDims"]),
                int(data.get("SharedMem", 0)),
                int(data.get("Occurrences", 0)),
            )

    class KernelInstance:
        """One dynamic launch context, with the original's fields; `prologue`/`epilogue` are stable handles."""

        def __init__(
            self,
            static_hash: str,
            dynamic_hash: str,
            kernel_name: str,
            args: list,
            shared_mem: int,
            block_dim: dim3,
            grid_dim: dim3,
            specializations: list[bool],
            occ: int,
            prologue_fn: str,
            epilogue_fn: str,
            *,
            layout: list[tuple[int, int]] | None = None,
        ):
            self.static_hash = static_hash
            self.dynamic_hash = dynamic_hash
            self.kernel_name = kernel_name
            self.args = args
            self.shared_mem = shared_mem
            self.block_dim = dim3.of(block_dim)
            self.grid_dim = dim3.of(grid_dim)
            self.specializations = list(specializations)
            self.available_specializations = [i for i, flag in enumerate(self.specializations) if flag]
            self.occ = occ
            #: The owning recording (set by it), so code handed an instance reaches `kernel_source()`.
            self.execution: RecordedExecution | None = None
            self.prologue = MemStateRef(prologue_fn, kernel_name, SnapshotType.PROLOGUE, layout=layout)
            self.epilogue = MemStateRef(
                epilogue_fn, kernel_name, SnapshotType.EPILOGUE, base=prologue_fn, layout=layout
            )

        def __hash__(self) -> int:
            return hash(self.dynamic_hash + self.static_hash)

        def __str__(self) -> str:
            return f"Grid:{self.grid_dim}, BlockDim: {self.block_dim}, Shared Memory {self.shared_mem}"

        def to_dict(self) -> dict[str, Any]:
            return {
                "Args": self.specializations,
                "BlockDims": self.block_dim.to_dict(),
                "GridDims": self.grid_dim.to_dict(),
                "Occurrences": self.occ,
                "SharedMem": self.shared_mem,
                "Epilogue": self.epilogue.fn,
                "Prologue": self.prologue.fn,
            }

    def __init__(
        self,
        static_hash: str,
        kernel_name: str,
        demangled_name: str,
        llvm_files: list[str],
        arg_names: list[str],
        specializations: list[bool],
        va_addr: str,
        va_size: int,
        kernel_instances: dict[str, RecordedExecution.KernelInstance],
        source_file: str | None = None,
        source_copy: str | None = None,
        source_md5: str | None = None,
        source_line: int | None = None,
        source_end_line: int | None = None,
        total_launches: int | None = None,
        unrecorded_instances: dict[str, RecordedExecution.UnrecordedInstance] | None = None,
    ):
        self.static_hash = static_hash
        self.kernel_name = kernel_name
        self.demangled_name = demangled_name
        self.llvm_files = list(llvm_files)
        self.arg_names = list(arg_names)
        self.specializations = list(specializations)
        self.va_addr = va_addr
        self.va_size = va_size
        self.kernel_instances = kernel_instances
        for instance in kernel_instances.values():
            instance.execution = self
        self.source_file = source_file
        self.source_copy = source_copy
        self.source_md5 = source_md5
        self.source_line = source_line
        self.source_end_line = source_end_line
        #: The current original's launch counts: every launch of the kernel, and the argument sets it did not
        #: record. None for Mneme's own recordings, whose recorder reports unrecorded launches in `mneme record`.
        self.total_launches = total_launches
        self.unrecorded_instances = dict(unrecorded_instances or {})
        self._source_read = source_line is not None  # else the IR's debug info is asked, once
        self._link_mod = None
        #: The Mneme-format database this one replays from (set by `from_json`).
        self.mneme_path: str | None = None

    def __str__(self) -> str:
        return f"KernelName: {self.kernel_name} NumArgs: {len(self.arg_names)}, VASize: {self.va_size}, VAddr: {self.va_addr}"

    def __getitem__(self, key: str) -> RecordedExecution.KernelInstance:
        return self.kernel_instances[key]

    def __setitem__(self, key: str, value: RecordedExecution.KernelInstance) -> None:
        value.execution = self
        self.kernel_instances[key] = value

    def __delitem__(self, key: str) -> None:
        del self.kernel_instances[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernel_instances)

    def __len__(self) -> int:
        return len(self.kernel_instances)

    def __contains__(self, key: object) -> bool:
        return key in self.kernel_instances

    def link_llvm_modules(self, prune: bool = True, internalize: bool = True):
        """The IR modules linked into one module for the kernel (cached after the first call)."""
        if self._link_mod is None:
            from mneme.core import ir
            from mneme.llvm.module import adopt_module

            with runtime_errors():
                linked = ir.link(self.llvm_files, self.kernel_name, prune=prune, internalize=internalize)
                self._link_mod = adopt_module(linked)
        return self._link_mod

    def kernel_source(self) -> KernelSource | None:
        """The recorded source text of the kernel's definition, `source_line`..`source_end_line`.

        As the original: the recorded copy is preferred to the source file, and a file whose MD5 no
        longer matches `source_md5` is skipped; None without line information or a readable, unchanged
        file. A Mneme recording takes the location from its IR's debug info (compiled with ``-g``).
        """
        if not self._source_read:
            self._source_read = True
            info = debug_source(self.llvm_files, self.kernel_name)
            self.source_file, self.source_md5 = info.source_file, info.source_md5
            self.source_line, self.source_end_line = info.source_line, info.source_end_line
        return read_kernel_source(
            SourceInfo(self.source_file, self.source_copy, self.source_md5, self.source_line, self.source_end_line)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ArgNames": self.arg_names,
            "BinaryBlobs": [],
            "DemangledName": self.demangled_name,
            "KernelName": self.kernel_name,
            "Modules": self.llvm_files,
            "Specializations": self.specializations,
            "StaticHash": self.static_hash,
            **{
                key: value
                for key, value in (
                    ("SourceFile", self.source_file),
                    ("SourceCopy", self.source_copy),
                    ("SourceMD5", self.source_md5),
                    ("SourceLine", self.source_line),
                    ("SourceEndLine", self.source_end_line),
                )
                if value is not None
            },
            **(
                {
                    "TotalLaunches": self.total_launches,
                    "UnrecordedInstances": {k: v.to_dict() for k, v in self.unrecorded_instances.items()},
                }
                if self.total_launches is not None
                else {}
            ),
            "VASize": self.va_size,
            "VAddr": self.va_addr,
            "instances": {k: v.to_dict() for k, v in self.items()},
        }

    def to_json(self, fn: str) -> None:
        """Write the database in the original's JSON layout."""
        find_non_jsonables(self.to_dict())
        with open(fn, "w") as fd:
            json.dump(self.to_dict(), fd, indent=2)

    @classmethod
    def from_core(cls, rec) -> RecordedExecution:
        """The original's view of a core `mneme.core.records.RecordedExecution`."""
        layout = [(a.offset, a.size) for a in rec.args]
        instances = {
            key: cls.KernelInstance(
                rec.static_hash,
                key,
                rec.kernel_name,
                list(rec.specializations),
                inst.shared_mem,
                dim3.of(inst.block_dim),
                dim3.of(inst.grid_dim),
                rec.specializations,
                inst.occ,
                str(inst.prologue_path),
                str(inst.epilogue_path),
                layout=layout,
            )
            for key, inst in rec.items()
        }
        out = cls(
            rec.static_hash,
            rec.kernel_name,
            rec.demangled_name,
            [str(p) for p in rec.llvm_files],
            list(rec.arg_names),
            list(rec.specializations),
            hex(rec.va_addr),
            rec.va_size,
            instances,
        )
        out.mneme_path = str(rec.path)
        return out

    @classmethod
    def from_json(cls, fn: str) -> RecordedExecution:
        """Load a database, Mneme's or the original's; a missing file or IR module raises `RuntimeError`."""
        if not Path(fn).exists():
            raise RuntimeError(f"JSON file {fn} does not exist")
        with runtime_errors():
            out = cls.from_core(load_core(fn))
        source = _original_source_keys(Path(fn))
        if source is not None:  # the original's database records where the kernel is defined
            out.source_file, out.source_copy, out.source_md5 = source.source_file, source.source_copy, source.source_md5
            out.source_line, out.source_end_line = source.source_line, source.source_end_line
            out._source_read = True
        counts = _original_launch_counts(Path(fn))
        if counts is not None:
            out.total_launches, out.unrecorded_instances = counts
        return out


def _original_database(path: Path) -> dict | None:
    """An original database's JSON; None for Mneme's (a folder, or a file in Mneme's layout) or an unreadable one."""
    from mneme.compat import original_format as fmt
    from mneme.core import limits
    from mneme.core.errors import MnemeError

    if path.is_dir():
        return None
    try:
        data = limits.load_json(limits.read_text(path, "recording database"), path)
    except MnemeError:
        return None
    return data if isinstance(data, dict) and fmt.is_original_database(data) else None


def _original_launch_counts(path: Path) -> tuple[int, dict] | None:
    """The current original's `TotalLaunches` and `UnrecordedInstances` of an original database; None without them.

    A malformed entry raises `RuntimeError` naming the file and the key, as the original's reader would fail."""
    data = _original_database(path)
    if data is None or "TotalLaunches" not in data:
        return None
    total, unrecorded = data["TotalLaunches"], data.get("UnrecordedInstances", {})
    if not isinstance(total, int) or isinstance(total, bool) or total < 0 or not isinstance(unrecorded, dict):
        raise RuntimeError(f"{path}: TotalLaunches must be a count and UnrecordedInstances an object")
    out = {}
    for key, entry in unrecorded.items():
        try:
            out[key] = RecordedExecution.UnrecordedInstance.from_dict(entry)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RuntimeError(f"{path}: UnrecordedInstances[{key!r}] is malformed ({exc!r})") from exc
    return total, out


def _original_source_keys(path: Path) -> SourceInfo | None:
    """The `Source*` keys of an original database (its `SourceCopy` relative to its folder); None for Mneme's."""
    data = _original_database(path)
    if data is None:
        return None

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and value else None

    def number(key: str) -> int | None:
        value = data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    copy = text("SourceCopy")
    if copy is not None and not Path(copy).is_absolute():
        copy = str(path.resolve().parent / copy)
    return SourceInfo(text("SourceFile"), copy, text("SourceMD5"), number("SourceLine"), number("SourceEndLine"))


def mneme_database(fn: str | os.PathLike) -> Path:
    """The Mneme-format database to replay for `fn`: itself, or its conversion when it is the original's."""
    from mneme.compat import original_format as fmt

    path = Path(fn)
    if path.is_dir():
        return path
    from mneme.core import limits
    from mneme.core.errors import MnemeError

    try:
        data = limits.load_json(limits.read_text(path, "recording database"), path)
    except MnemeError:
        return path  # the core's reader reports what is wrong with it
    if not (isinstance(data, dict) and fmt.is_original_database(data)):
        return path
    return fmt.converted_database(path)


def load_core(fn: str | os.PathLike):
    """The core `RecordedExecution` for `fn` (importing an original database first)."""
    from mneme.core.recording import load_recording

    return load_recording(mneme_database(fn))


def find_non_jsonables(obj: Any, where: str = "$") -> list[str]:
    """Paths (JSONPath-like) of values that would not serialize to JSON; printed, and returned."""
    found: list[str] = []
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return found
    if isinstance(obj, dict):
        for k, v in obj.items():
            found += find_non_jsonables(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found += find_non_jsonables(v, f"{where}[{i}]")
    else:
        found.append(where)
        print("Non-JSON type:", where, "->", type(obj))  # noqa: T201 - the original's debug output
    return found
