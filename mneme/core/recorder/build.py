"""What every backend's native recorder needs to be compiled: a C++ compiler, xxhash.h, the shared engine
(`native/`) and the snapshot writer; each backend adds its own API's headers and flags.
docs/design/native.md explains the shared native sources."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mneme.core.errors import MnemeError
from mneme.core.native import RECORDER_SOURCES, SNAPSHOT_SOURCES, NativeLibrary, cxx_compiler, xxhash_include

XXHASH_ADVICE = "xxhash.h not found; install libxxhash-dev (or set XXHASH_INCLUDE to its folder)"


def engine_toolchain(
    native: NativeLibrary, install: str, includes: Sequence[tuple[Path | None, str]] = ()
) -> tuple[list[str], list[str]]:
    """The C++ compiler's command and the -I flags that compile `native`, a recorder built on the engine.

    `install`: how to get the recorder's sources where they are missing ("mneme-vendor from a source
    checkout (...)"). `includes`: the backend's own header folders in order, each with what to do
    when it was not found (None); they come before xxhash.h's, the engine's and the snapshot writer's.
    A MnemeError names the first thing missing.
    """
    if not native.available():
        raise MnemeError(f"cannot build {native.what}: {native.sources[0]} is missing; install {install}")
    cxx = cxx_compiler()
    if cxx is None:
        raise MnemeError(f"cannot build {native.what}: no C++ compiler found (install g++ or set CXX)")
    flags = []
    for folder, advice in (*includes, (xxhash_include(), XXHASH_ADVICE)):
        if folder is None:
            raise MnemeError(f"cannot build {native.what}: {advice}")
        flags.append(f"-I{folder}")
    return cxx.split(), [*flags, f"-I{RECORDER_SOURCES}", f"-I{SNAPSHOT_SOURCES}"]
