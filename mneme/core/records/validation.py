"""Checks of a `RecordedExecution` as a whole: relations between its fields, then its files.

Each field is checked where it is converted (`records.model`, `records.schema`); what needs the
whole record (one entry per argument in every list, printable names, a user address range, code
to replay, instances' argument bytes, every referenced file inside the database's folder) is
checked here. Every error is a `FormatError` naming the file and the field.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mneme.core.errors import FormatError
from mneme.core.records.paths import FileChecker

if TYPE_CHECKING:  # annotations only: the model imports this module
    from mneme.core.records.model import RecordedExecution

#: Argument kinds; "unknown" where the recorder saw only sizes (a binary without IR).
ARG_KINDS = ("pointer", "int", "float", "struct", "unknown")
#: What may name a file: the static hash and instance keys.
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# Where a recorded address range may lie: above Linux's mmap_min_addr default (64 KiB), below the
# top of a 57-bit (5-level paging) user address space.
MIN_VA_ADDR = 1 << 16
MAX_VA_END = 1 << 56


def validate_record(rec: RecordedExecution, *, check_files: bool = True, allow_missing: bool = False) -> None:
    """Check relations between `rec`'s fields, and (with `check_files`) every referenced file."""
    p = rec.path
    if not SAFE_NAME.match(rec.static_hash):
        raise FormatError(p, "must be non-empty and use only [A-Za-z0-9_.-] (it names files)", field="StaticHash")
    for field, value in (("KernelName", rec.kernel_name), ("Backend", rec.backend), ("Arch", rec.arch)):
        if not value:
            raise FormatError(p, "must not be empty", field=field)
    texts = [
        ("KernelName", rec.kernel_name),
        ("DemangledName", rec.demangled_name),
        ("Backend", rec.backend),
        ("Arch", rec.arch),
        *(("ArgNames", n) for n in rec.arg_names),
        *(("Globals", g) for g in rec.globals),
    ]
    for field, value in texts:
        if not printable(value):
            raise FormatError(p, f"{value!r} holds a NUL byte or a lone surrogate (not UTF-8 text)"[:300], field=field)
    for key in rec.kernel_instances:
        if not SAFE_NAME.match(key):
            raise FormatError(
                p, f"instance key {key!r} must use only [A-Za-z0-9_.-] (it names files)"[:300], field="instances"
            )
    n = len(rec.arg_names)
    for field, values in (
        ("ArgSizes", rec.arg_sizes),
        ("ArgOffsets", rec.arg_offsets),
        ("ArgKinds", rec.arg_kinds),
        ("Specializations", rec.specializations),
    ):
        if len(values) != n:
            raise FormatError(
                p, f"has {len(values)} entries but ArgNames has {n}; one per kernel argument", field=field
            )
    for i, (size, offset, kind) in enumerate(zip(rec.arg_sizes, rec.arg_offsets, rec.arg_kinds)):
        if size < 0 or offset < 0:
            raise FormatError(
                p,
                f"argument {i} ({rec.arg_names[i]}) has a negative size or offset",
                field="ArgSizes" if size < 0 else "ArgOffsets",
            )
        if kind not in ARG_KINDS:
            raise FormatError(
                p,
                f"argument {i} ({rec.arg_names[i]}): unknown kind {kind!r}; one of {', '.join(ARG_KINDS)}",
                field="ArgKinds",
            )
    if rec.va_size and not (MIN_VA_ADDR <= rec.va_addr and rec.va_addr + rec.va_size <= MAX_VA_END):
        # refused here, not later as "address taken" by the process (mmap_min_addr) or an overflow
        raise FormatError(
            p,
            f"the range {rec.va_addr:#x} + {rec.va_size:#x} is not a user address range "
            f"({MIN_VA_ADDR:#x} .. {MAX_VA_END:#x}); record the launch again",
            field="VAddr",
        )
    for name, size in rec.globals.items():
        if not name or size < 0:
            raise FormatError(p, f"global {name!r} needs a name and a size >= 0", field="Globals")
    if not rec.modules and not rec.images:
        raise FormatError(
            p, "the database names no code: give LLVM IR files in Modules or images in BinaryBlobs", field="Modules"
        )
    for i, image in enumerate(rec.images):
        if not image.kind:
            raise FormatError(p, f"image {i} has no kind", field="BinaryBlobs")
    need = rec.args_size
    for key, inst in rec.kernel_instances.items():
        if len(inst.args) < need:
            raise FormatError(
                p,
                f"holds {len(inst.args)} bytes but the argument layout covers {need} bytes",
                field=f"instances.{key}.Args",
            )
    if not check_files or p is None:
        return
    checker = FileChecker(rec.folder, p, allow_missing)
    for i, rel in enumerate(rec.modules):
        checker.check(rel, f"Modules[{i}]")
    for i, image in enumerate(rec.images):
        checker.check(image.path.as_posix(), f"BinaryBlobs[{i}].Path")
    for key, inst in rec.kernel_instances.items():
        checker.check(inst.prologue_file, f"instances.{key}.Prologue")
        checker.check(inst.epilogue_file, f"instances.{key}.Epilogue")


def printable(text: str) -> bool:
    """True for text that holds no NUL byte and encodes as UTF-8 (no lone surrogate)."""
    if "\0" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
