"""The recording database: one JSON file per kernel, `<static-hash>.json`.

`RecordedExecution` is one kernel's database: its identity, code (IR modules and/or
binary images), argument layout, recorded address range and `KernelInstance`s (one per
dynamic hash: launch geometry, argument bytes, prologue and epilogue snapshot files). It
behaves as a mapping from dynamic hash to instance. Paths inside the JSON are relative to
the database's folder and never leave it; loading validates every field and every
referenced file, and each error names the file and the field. The format is specified in
docs/formats.md (recording database).

The package splits along its seams: `model` (the classes), `validation` (checks of a whole
record and its files), `schema` (JSON conversion and upgrades), `paths` (path safety), `files`
(clean, copy, move), `referrers` (which databases name a file) and `journal` (what a copy or
move created, to undo exactly that).
"""

from mneme.core.records import schema  # noqa: F401 - registers the model's JSON codec (model.codec)
from mneme.core.records.files import FileReport, clean_records, copy_records, load_all
from mneme.core.records.model import (
    APP_TIMERS,
    ARG_KINDS,
    SCHEMA_VERSION,
    ArgInfo,
    ImageInfo,
    KernelInstance,
    RecordedExecution,
    demangle,
    dynamic_hash_of,
)

__all__ = [
    "APP_TIMERS",
    "ARG_KINDS",
    "SCHEMA_VERSION",
    "ArgInfo",
    "FileReport",
    "ImageInfo",
    "KernelInstance",
    "RecordedExecution",
    "clean_records",
    "copy_records",
    "demangle",
    "dynamic_hash_of",
    "load_all",
]
