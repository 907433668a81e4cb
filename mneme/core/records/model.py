"""The recording database's model: `RecordedExecution` and `KernelInstance` (one JSON file per kernel).

`RecordedExecution` is one kernel's database: its identity, code (IR modules and/or
binary images), argument layout, recorded address range and `KernelInstance`s (one per
dynamic hash: launch geometry, argument bytes, prologue and epilogue snapshot files). It
behaves as a mapping from dynamic hash to instance. Paths inside the JSON are relative to
the database's folder and never leave it; loading validates every field and every
referenced file, and each error names the file and the field. The format is specified in
docs/formats.md (recording database).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import attrs
import cattrs

from mneme.core.demangle import demangle
from mneme.core.errors import FormatError, UsageError
from mneme.core.launching import LaunchAttributes, cluster_misfit
from mneme.core.records.paths import check_lexical, is_inside
from mneme.core.records.validation import ARG_KINDS, SAFE_NAME, validate_record
from mneme.core.types import dim3

if TYPE_CHECKING:  # the snapshot module is imported lazily, where a snapshot is opened
    from mneme.core.snapshot import MemStateRef

log = logging.getLogger(__name__)

#: The version this code writes. Readers refuse newer versions and upgrade older ones.
SCHEMA_VERSION = 5

#: The JSON codec of these classes (`records.schema`): it builds its converter from them, so it
#: imports this module and registers itself here when the package loads; the model never imports it.
codec: Any = None
#: The cache state a recorded launch was timed from (RecordedCache): the L2 evicted first, or as it was.
RECORDED_CACHES = ("flushed", "warm")
#: What measured an instance's AppTimes: the GPU's kernel timestamps (CUPTI), or events the backend recorded around the launch.
APP_TIMERS = ("events", "cupti")
#: Longest in-application time an instance may claim (seconds, a day): sums and means of such
#: times stay finite, so a report never holds an out-of-range number.
MAX_APP_TIME = 86400.0


# -- value types -----------------------------------------------------------------------------


def _non_negative(instance, attribute, value):
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen
class ArgInfo:
    """One kernel parameter: where it sits in the packed parameter buffer and what it is."""

    name: str
    offset: int = attrs.field(validator=_non_negative)
    size: int = attrs.field(validator=_non_negative)
    kind: str = attrs.field(default="unknown", validator=attrs.validators.in_(ARG_KINDS))
    specializable: bool = False


@attrs.frozen
class ImageInfo:
    """One binary code image (cubin, ptx, hsaco, fatbin, elf) of the kernel.

    Stored with a path relative to the database's folder; `RecordedExecution.binary_blobs`
    gives the same images with absolute paths.
    """

    path: Path = attrs.field(converter=Path)
    kind: str


def _bind_instance(instance: KernelInstance, record: RecordedExecution) -> None:
    object.__setattr__(instance, "_record", record)


@attrs.define(eq=False)
class KernelInstance:
    """One dynamic launch context of a kernel: geometry, argument bytes, device state files.

    `prologue_file`/`epilogue_file` are relative to the database's folder; the instance
    knows its database once it is added to one (`rec[dynamic_hash] = inst`).
    """

    grid_dim: dim3 = attrs.field(converter=dim3.of)
    block_dim: dim3 = attrs.field(converter=dim3.of)
    shared_mem: int = attrs.field(validator=_non_negative)
    args: bytes
    prologue_file: str
    epilogue_file: str
    occ: int = attrs.field(default=1)
    #: Seconds each timed launch of this context took inside the application, as the recorder
    #: measured them; empty when unknown. Version 2 and later.
    app_times: list[float] = attrs.field(factory=list)
    #: What measured `app_times` (`APP_TIMERS`): "cupti", the kernel's own start and end
    #: timestamps, or "events", events recorded around the launch on the application's stream
    #: (the only timer before version 3). A replay compares like with like only by the same timer.
    app_timer: str = attrs.field(default="events")
    #: Launched cooperatively (a cooperative launch entry point, or the cooperative launch attribute):
    #: every block resident at once, as a grid-wide barrier (`grid.sync()`) needs. Version 4 and later.
    cooperative: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    #: Thread block cluster dimensions the launch gave (the cluster launch attribute), in blocks;
    #: None when it gave none. Version 4 and later.
    cluster_dim: dim3 | None = attrs.field(default=None, converter=attrs.converters.optional(dim3.of))
    #: Seconds the recorded launch itself took in the application (the launch the snapshots hold, by
    #: `app_timer`), None when unknown: the replay's like-for-like reference, since later launches with the
    #: same arguments may do different work (a shrinking frontier). Version 5 and later.
    recorded_time: float | None = attrs.field(default=None)
    #: The cache state `recorded_time` started from (`RECORDED_CACHES`): "flushed", the L2 evicted first
    #: (what `mneme replay` reproduces by default), or "warm". Version 5 and later.
    recorded_cache: str = attrs.field(default="flushed")
    dynamic_hash: str = ""
    _record: RecordedExecution | None = attrs.field(default=None, init=False, repr=False)

    @occ.validator
    def _check_occ(self, attribute, value):
        if value < 1:
            raise ValueError(f"occ must be >= 1, got {value}")

    @cluster_dim.validator
    def _check_cluster_dim(self, attribute, value):
        misfit = "" if value is None else cluster_misfit(self.grid_dim.as_tuple(), value.as_tuple())
        if misfit:  # worded "<field> must ..." so the reader names the JSON field (records.schema.collect)
            raise ValueError(f"cluster_dim must tile the grid with whole clusters: {misfit}")

    @property
    def launch_attributes(self) -> LaunchAttributes:
        """How the launch was made beyond its geometry (cooperative, clusters), for the device to repeat."""
        return LaunchAttributes(cooperative=self.cooperative, cluster=self.cluster_dim)

    @recorded_time.validator
    def _check_recorded_time(self, attribute, value):
        if value is not None and (isinstance(value, bool) or not (0 < value <= MAX_APP_TIME)):
            raise ValueError(f"recorded_time must be positive seconds up to {MAX_APP_TIME:g}, got {value!r}"[:200])

    @recorded_cache.validator
    def _check_recorded_cache(self, attribute, value):
        if value not in RECORDED_CACHES:
            raise ValueError(f"recorded_cache must be one of {', '.join(RECORDED_CACHES)}, got {value!r}"[:200])

    @app_timer.validator
    def _check_app_timer(self, attribute, value):
        if value not in APP_TIMERS:
            raise ValueError(f"app_timer must be one of {', '.join(APP_TIMERS)}, got {value!r}"[:200])

    @app_times.validator
    def _check_app_times(self, attribute, value):
        if any(not (t > 0 and t <= MAX_APP_TIME) for t in value):
            raise ValueError(f"app_times must be positive seconds up to {MAX_APP_TIME:g}, got {value!r}"[:200])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KernelInstance):
            return NotImplemented
        return _instance_key(self) == _instance_key(other)

    __hash__ = None  # mutable

    # -- views through the owning database ------------------------------------------------
    @property
    def record(self) -> RecordedExecution:
        if self._record is None:
            raise UsageError(f"kernel instance {self.dynamic_hash or '(unnamed)'} belongs to no database")
        return self._record

    @property
    def static_hash(self) -> str:
        return self.record.static_hash

    @property
    def kernel_name(self) -> str:
        return self.record.kernel_name

    @property
    def specializations(self) -> list[bool]:
        return self.record.specializations

    @property
    def available_specializations(self) -> list[int]:
        """Indices of the arguments that may be specialized."""
        return [i for i, flag in enumerate(self.record.specializations) if flag]

    @property
    def arg_values(self) -> list[bytes]:
        """The bytes of each argument, cut from `args` by the database's argument layout."""
        return [self.args[a.offset : a.offset + a.size] for a in self.record.args]

    @property
    def prologue_path(self) -> Path:
        return self.record.folder / self.prologue_file

    @property
    def epilogue_path(self) -> Path:
        return self.record.folder / self.epilogue_file

    def check_prologue(self, prologue: Any) -> None:
        """Refuse a prologue recorded for another kernel or launch, or whose argument bytes disagree with `Args`.

        A replay launches with the prologue's bytes; a database saying otherwise is a recording
        edited or mixed up, and replaying it would verify something else than it claims.
        """
        for what, mine, theirs in (
            ("StaticHash", self.static_hash, getattr(prologue, "static_hash", "")),
            ("instance key", self.dynamic_hash, getattr(prologue, "dynamic_hash", "")),
        ):
            if theirs and mine and theirs != mine:
                raise FormatError(
                    self.record.path,
                    f"{what} {mine!r} is not the {theirs!r} that "
                    f"{self.prologue_path.name} was recorded for; the recording was edited or mixed "
                    "up: record it again",
                    field="StaticHash" if what == "StaticHash" else "instances",
                )
        recorded = bytes(getattr(prologue, "args", b"") or b"")
        if recorded and recorded != bytes(self.args):
            first = next(
                (i for i, (a, b) in enumerate(zip(recorded, self.args)) if a != b), min(len(recorded), len(self.args))
            )
            raise FormatError(
                self.record.path,
                f"the database's argument bytes ({len(self.args)}) disagree with "
                f"those of {self.prologue_path.name} ({len(recorded)}) from byte {first}; the recording "
                "was edited or mixed up: record it again",
                field=f"instances.{self.dynamic_hash}.Args",
            )

    @property
    def prologue(self) -> MemStateRef:
        """A new handle to the prologue snapshot (load it with `open()` or `with`)."""
        from mneme.core.snapshot import MemStateRef, SnapshotType

        return MemStateRef(self.prologue_path, self.kernel_name, SnapshotType.PROLOGUE)

    @property
    def epilogue(self) -> MemStateRef:
        """A new handle to the epilogue snapshot; its diff regions read through the prologue."""
        from mneme.core.snapshot import MemStateRef, SnapshotType

        return MemStateRef(self.epilogue_path, self.kernel_name, SnapshotType.EPILOGUE, base=self.prologue_path)


def _instance_key(inst: KernelInstance) -> tuple:
    return (
        inst.grid_dim,
        inst.block_dim,
        inst.shared_mem,
        inst.args,
        inst.prologue_file,
        inst.epilogue_file,
        inst.occ,
        tuple(inst.app_times),
        inst.app_timer,
        inst.cooperative,
        inst.cluster_dim,
        inst.dynamic_hash,
    )


def dynamic_hash_of(grid: Any, block: Any, shared_mem: int, args: bytes) -> str:
    """Identity of one launch context: SHA-256 of geometry, shared memory and argument bytes (16 hex)."""
    g, b = dim3.of(grid), dim3.of(block)
    head = f"grid={g.x},{g.y},{g.z};block={b.x},{b.y},{b.z};shared={shared_mem};args=".encode()
    return hashlib.sha256(head + bytes(args)).hexdigest()[:16]


# -- the database -----------------------------------------------------------------------------


@attrs.define(eq=False)
class RecordedExecution(MutableMapping):
    """One kernel's recording database; a mapping from dynamic hash to `KernelInstance`.

    Build one with `create(...)` + `add_instance(...)` + `save()`, or load one with
    `from_json(path)`. In-memory paths (`modules`, `images`, instance files) are relative
    to `folder`; `llvm_files` and `binary_blobs` give them absolute.
    """

    kernel_name: str
    static_hash: str
    backend: str
    arch: str
    demangled_name: str = ""
    modules: list[str] = attrs.Factory(list)
    images: list[ImageInfo] = attrs.Factory(list)
    va_addr: int = attrs.field(default=0, validator=_non_negative)
    va_size: int = attrs.field(default=0, validator=_non_negative)
    arg_names: list[str] = attrs.Factory(list)
    arg_sizes: list[int] = attrs.Factory(list)
    arg_offsets: list[int] = attrs.Factory(list)
    arg_kinds: list[str] = attrs.Factory(list)
    specializations: list[bool] = attrs.Factory(list)
    globals: dict[str, int] = attrs.Factory(dict)
    kernel_instances: dict[str, KernelInstance] = attrs.Factory(dict)
    schema_version: int = SCHEMA_VERSION
    path: Path | None = attrs.field(default=None, repr=False)
    _linked: dict = attrs.field(factory=dict, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        for key, inst in self.kernel_instances.items():
            inst.dynamic_hash = key
            _bind_instance(inst, self)

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        folder: str | os.PathLike,
        *,
        kernel_name: str,
        static_hash: str,
        backend: str,
        arch: str,
        modules: Sequence[str | os.PathLike] = (),
        binary_blobs: Sequence[ImageInfo | tuple[str | os.PathLike, str]] = (),
        args: Sequence[ArgInfo] = (),
        va_addr: int = 0,
        va_size: int = 0,
        globals: Mapping[str, int] | None = None,
        demangled_name: str | None = None,
    ) -> RecordedExecution:
        """A new, empty database `<folder>/<static_hash>.json` (written by `save()`).

        File paths are absolute or relative to the current directory, as everywhere in Python
        (`folder / name` is the usual form); either way they must lie inside `folder`.
        """
        folder = Path(folder)
        if not SAFE_NAME.match(static_hash or ""):
            raise UsageError(f"static hash {static_hash!r} must be non-empty and use only [A-Za-z0-9_.-]")
        rec = cls(
            kernel_name=kernel_name,
            static_hash=static_hash,
            backend=backend,
            arch=arch,
            demangled_name=demangle(kernel_name) if demangled_name is None else demangled_name,
            va_addr=va_addr,
            va_size=va_size,
            globals=dict(globals or {}),
            path=Path(os.path.abspath(folder)) / f"{static_hash}.json",
        )
        rec.modules = [rec._relative(m, "Modules") for m in modules]
        for image in binary_blobs:
            image = image if isinstance(image, ImageInfo) else ImageInfo(*image)
            rec.images.append(ImageInfo(rec._relative(image.path, "BinaryBlobs"), image.kind))
        rec.args = list(args)
        return rec

    def add_instance(
        self,
        *,
        grid: Any,
        block: Any,
        shared_mem: int,
        args: bytes,
        prologue: str | os.PathLike,
        epilogue: str | os.PathLike,
        occurrences: int = 1,
        dynamic_hash: str | None = None,
        app_times: Sequence[float] = (),
        app_timer: str = "events",
        cooperative: bool = False,
        cluster_dim: Any = None,
    ) -> KernelInstance:
        """Add a launch context (or count another occurrence of a known one) and return it.

        `prologue`/`epilogue` are paths of snapshot files inside the database's folder;
        `app_times` are in-application durations (seconds) of launches with this context,
        measured by `app_timer` (`APP_TIMERS`). `cooperative` and `cluster_dim` say how the
        launch was made (`KernelInstance`); a context seen again must have been launched the same way.
        """
        key = dynamic_hash or dynamic_hash_of(grid, block, shared_mem, args)
        if key in self.kernel_instances:
            inst = self.kernel_instances[key]
            again = LaunchAttributes(
                cooperative=cooperative, cluster=None if cluster_dim is None else dim3.of(cluster_dim)
            )
            if again != inst.launch_attributes:
                raise UsageError(
                    f"instance {key} was launched {inst.launch_attributes.describe()}; another launch "
                    f"of it {again.describe()} cannot count as the same context"
                )
            if app_times and inst.app_times and inst.app_timer != app_timer:
                raise UsageError(
                    f"instance {key} has application times by {inst.app_timer}; times by {app_timer} "
                    "do not mix with them"
                )
            inst.occ += occurrences
            if app_times:
                inst.app_times.extend(float(t) for t in app_times)
                inst.app_timer = app_timer
            return inst
        inst = KernelInstance(
            grid_dim=grid,
            block_dim=block,
            shared_mem=shared_mem,
            args=bytes(args),
            prologue_file=self._relative(prologue, f"instances.{key}.Prologue"),
            epilogue_file=self._relative(epilogue, f"instances.{key}.Epilogue"),
            occ=occurrences,
            app_times=[float(t) for t in app_times],
            app_timer=app_timer,
            cooperative=cooperative,
            cluster_dim=cluster_dim,
        )
        self[key] = inst
        return inst

    def _relative(self, path: str | os.PathLike, field: str) -> str:
        """`path` (absolute, or relative to the current directory) relative to the database's folder."""
        try:
            p = Path(os.path.abspath(path)).relative_to(os.path.abspath(self.folder))
        except ValueError:
            raise FormatError(
                self.path,
                f"{path} is outside the database's folder {self.folder}; write it inside that folder",
                field=field,
            ) from None
        rel = PurePosixPath(*p.parts).as_posix()
        check_lexical(rel, self.path, field)
        return rel

    # -- identity and views ----------------------------------------------------------------
    @property
    def folder(self) -> Path:
        if self.path is None:
            raise UsageError(f"the database of kernel {self.kernel_name!r} has no path yet")
        return self.path.parent

    @property
    def llvm_files(self) -> list[Path]:
        return [self.folder / m for m in self.modules]

    @property
    def binary_blobs(self) -> list[ImageInfo]:
        return [ImageInfo(self.folder / i.path, i.kind) for i in self.images]

    @property
    def has_ir(self) -> bool:
        return bool(self.modules)

    @property
    def args(self) -> list[ArgInfo]:
        return [
            ArgInfo(n, o, s, k, sp)
            for n, o, s, k, sp in zip(
                self.arg_names, self.arg_offsets, self.arg_sizes, self.arg_kinds, self.specializations
            )
        ]

    @args.setter
    def args(self, value: Iterable[ArgInfo]) -> None:
        value = list(value)
        self.arg_names = [a.name for a in value]
        self.arg_offsets = [a.offset for a in value]
        self.arg_sizes = [a.size for a in value]
        self.arg_kinds = [a.kind for a in value]
        self.specializations = [a.specializable for a in value]

    @property
    def args_size(self) -> int:
        """Bytes of the packed parameter buffer the layout covers."""
        return max((o + s for o, s in zip(self.arg_offsets, self.arg_sizes)), default=0)

    def referenced_files(self) -> list[Path]:
        """Every file the database names (absolute, in a stable order, without duplicates)."""
        rels = list(self.modules) + [i.path.as_posix() for i in self.images]
        for inst in self.kernel_instances.values():
            rels += [inst.prologue_file, inst.epilogue_file]
        return [self.folder / r for r in dict.fromkeys(rels)]

    def link_llvm_modules(self, prune: bool = True, internalize: bool = True):
        """The IR modules linked into one module for this kernel (cached; clone before mutating)."""
        key = (prune, internalize)
        if key not in self._linked:
            from mneme.core import ir

            if not self.modules:
                raise FormatError(
                    self.path,
                    f"kernel {self.kernel_name!r} was recorded without LLVM IR "
                    "(binary images only); only launch-geometry tuning is possible",
                    field="Modules",
                )
            self._linked[key] = ir.link(self.llvm_files, self.kernel_name, prune=prune, internalize=internalize)
        return self._linked[key]

    def select(self, record_id: str | None = None) -> KernelInstance:
        """The instance with this dynamic hash (or unique prefix); inferred when there is only one."""
        ids = sorted(self.kernel_instances)
        where = f"{self.path} ({self.kernel_name})"
        if record_id is None:
            if len(ids) == 1:
                return self.kernel_instances[ids[0]]
            if not ids:
                raise UsageError(f"{where} holds no kernel instances")
            shown = ", ".join(ids[:20]) + (
                f", ... ({len(ids) - 20} more: mneme inspect lists them)" if len(ids) > 20 else ""
            )
            raise UsageError(f"{where} holds {len(ids)} kernel instances; choose one with a record id: {shown}")
        if record_id in self.kernel_instances:
            return self.kernel_instances[record_id]
        matches = [i for i in ids if i.startswith(record_id)]
        if len(matches) == 1:
            return self.kernel_instances[matches[0]]
        raise UsageError(
            f"{where} has no kernel instance {record_id!r}"
            + (" (ambiguous prefix)" if matches else "")
            + "; its ids: "
            + ", ".join(ids)
        )

    # -- mapping over instances -----------------------------------------------------------
    def __getitem__(self, key: str) -> KernelInstance:
        return self.kernel_instances[key]

    def __setitem__(self, key: str, inst: KernelInstance) -> None:
        if not isinstance(inst, KernelInstance):
            raise TypeError(f"a recording database holds KernelInstance values, not {type(inst).__name__}")
        if inst.dynamic_hash and inst.dynamic_hash != key:
            raise UsageError(f"kernel instance {inst.dynamic_hash} cannot be stored under dynamic hash {key}")
        inst.dynamic_hash = key
        _bind_instance(inst, self)
        self.kernel_instances[key] = inst

    def __delitem__(self, key: str) -> None:
        inst = self.kernel_instances.pop(key)
        _bind_instance(inst, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernel_instances)

    def __len__(self) -> int:
        return len(self.kernel_instances)

    def __contains__(self, key: object) -> bool:
        return key in self.kernel_instances

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordedExecution):
            return NotImplemented
        return codec.document(self) == codec.document(other)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (
            f"RecordedExecution({self.kernel_name!r}, static_hash={self.static_hash!r}, "
            f"backend={self.backend!r}, arch={self.arch!r}, instances={len(self)}, path={str(self.path)!r})"
        )

    # -- reading and writing ----------------------------------------------------------------
    @classmethod
    def from_json(
        cls, path: str | os.PathLike, *, allow_missing: bool = False, convert: bool = True
    ) -> RecordedExecution:
        """Load and validate a database: every field, and every file it names (inside its folder).

        `allow_missing` tolerates referenced files that do not exist (to clean an incomplete
        recording); paths leaving the folder are refused either way. Another tool's database
        (the original Mneme's) is read through its conversion beside it, made on first use;
        `convert=False` reads only a conversion that exists and is current.
        """
        from mneme.core import limits

        path = Path(path)
        text = limits.read_text(path, "recording database")
        data = limits.load_json(text, path)
        if isinstance(data, dict) and "SchemaVersion" not in data:
            from mneme.core.records.foreign import convert as foreign_database

            converted = foreign_database(path, data, create=convert)  # converted once into a cache beside it
            if converted is not None:
                return cls.from_json(converted, allow_missing=allow_missing)
        return cls.from_dict(data, path=path, allow_missing=allow_missing)

    @classmethod
    def from_dict(cls, data: Any, *, path: str | os.PathLike, allow_missing: bool = False) -> RecordedExecution:
        """Validate a parsed JSON document of a database located at `path`."""
        path = Path(path)
        data = codec.upgrade(data, path)
        try:
            rec = codec.converter.structure(data, cls)
        except cattrs.BaseValidationError as exc:
            problems = codec.collect(exc, "")
            field = problems[0][0]
            message = "; ".join(f"{f}: {m}" if f and f != field else m for f, m in problems)
            raise FormatError(path, message, field=field) from exc
        rec.path = Path(os.path.abspath(path))  # absolute: a worker may change directory
        rec.validate(check_files=True, allow_missing=allow_missing)
        return rec

    def to_dict(self) -> dict[str, Any]:
        """The JSON document, with paths relative to the database's folder."""
        return codec.document(self)

    def to_json(self, path: str | os.PathLike | None = None) -> Path:
        """Write the database atomically (temp file in the same folder, fsync, rename).

        Written to another folder, the database names the same files relative to that folder,
        so every file must already be inside it (`copy_records` copies a database with its files).
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise UsageError(f"no path to write the database of kernel {self.kernel_name!r} to")
        if self.path is not None and target.parent.absolute() != self.folder.absolute():
            outside = [f for f in self.referenced_files() if not is_inside(f, target.parent)]
            if outside:
                raise FormatError(
                    target,
                    f"{outside[0]} is outside {target.parent}; copy the database with its files instead (mneme copy)",
                )
            self.validate(check_files=True)
            self._rebase(target)
        else:
            old, self.path = self.path, target
            try:
                self.validate(check_files=True)
            except Exception:
                self.path = old
                raise
        from mneme.core.records.paths import atomic_write

        atomic_write(target, json.dumps(self.to_dict(), indent=2) + "\n")
        log.debug("wrote recording database %s", target)
        return target

    def _rebase(self, target: Path) -> None:
        """Point the relative paths at the same files from `target`'s folder."""

        def rel(p: str | Path) -> str:
            try:
                return (self.folder / p).absolute().relative_to(target.parent.absolute()).as_posix()
            except ValueError:
                raise FormatError(
                    target,
                    f"{self.folder / p} is not under {target.parent}; copy the database "
                    "with its files instead (mneme copy)",
                ) from None

        modules = [rel(m) for m in self.modules]
        images = [ImageInfo(rel(i.path), i.kind) for i in self.images]
        files = {key: (rel(i.prologue_file), rel(i.epilogue_file)) for key, i in self.kernel_instances.items()}
        self.modules, self.images, self.path = modules, images, target
        for key, inst in self.kernel_instances.items():
            inst.prologue_file, inst.epilogue_file = files[key]

    save = to_json

    def validate(self, *, check_files: bool = True, allow_missing: bool = False) -> None:
        """Check relations between fields, and (with `check_files`) every referenced file."""
        validate_record(self, check_files=check_files, allow_missing=allow_missing)
