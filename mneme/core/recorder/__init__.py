"""What every backend's native recorder shares on the Python side: its raw folder, its progress, finalize.

A native recorder (one per backend, built from the engine in `native/` and the
snapshot writer in `mneme/core/snapshot/native`) writes a raw folder: `launch-<pid>-<n>/` with a
manifest and the prologue and epilogue snapshots of each recorded launch, the code images the
kernels came from (`images/`), the process's `/proc/self/maps` and `counts-<pid>.json` at exit.
`rawdir` reads that folder, `progress` watches it fill, `finalize` turns it into recording
databases. A backend describes its recorder's files with one `RawFormat`.
docs/design/recording.md explains the mechanism, docs/design/native.md the shared native sources.
"""

from mneme.core.recorder.rawdir import COMPRESSIONS, EPILOGUE_FORMATS, RawFormat

__all__ = ["COMPRESSIONS", "EPILOGUE_FORMATS", "RawFormat"]
