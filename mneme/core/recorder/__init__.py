"""What every backend's native recorder shares on the Python side: its raw folder, its progress, finalize.

A native recorder (one per backend, built from the engine in `native/` and the
snapshot writer in `mneme/core/snapshot/native`) writes a raw folder: `launch-<pid>-<n>/` with a
manifest and the prologue and epilogue snapshots of each recorded launch, the code images the
kernels came from (`images/`), the process's `/proc/self/maps` and `counts-<pid>.json` at exit.
`rawdir` reads that folder, `progress` watches it fill, `finalize` turns it into recording
databases. A backend describes its recorder's files with one `RawFormat`.
docs/design/recording.md explains the mechanism, docs/design/native.md the shared native sources.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPRESSIONS", "EPILOGUE_FORMATS", "RawFormat"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: `mneme plugins` and `mneme --help` reach this package (the core `record`
    # command lives in it) without reading a raw folder.
    if name in __all__:
        from mneme.core.recorder import rawdir

        return getattr(rawdir, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
