"""The HIP native recorder: build it, run an application under it, finalize its raw folder.

The library (backends/hip/recorder, ``LD_PRELOAD``) interposes libamdhip64's allocation, code
loading and launch entry points and writes the same raw folder as the CUDA recorder, through the
core's shared engine (mneme/core/recorder/native); finalize is the core's. It needs a C++
compiler and xxhash.h, and no ROCm header (backends/hip/recorder/hip_abi.h declares the ABI it
uses). It has run only against the test double of the HIP runtime in tests/backends/hip/hip_recorder, never
on an AMD GPU (backends/hip/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mneme.core.native import RECORDER_SOURCES, SNAPSHOT_SOURCES, NativeLibrary, cxx_compiler, xxhash_include
from mneme.core.recorder import finalize as _finalize
from mneme.core.recorder import preload
from mneme.core.recorder.build import engine_toolchain
from mneme.core.recorder.finalize import print_summary
from mneme.core.recorder.rawdir import RawFormat
from mneme_hip.bundle import kernel_image

__all__ = ["FORMAT", "build", "environment", "finalize", "library_path", "main_record", "run", "status"]

SOURCE = Path(__file__).resolve().parents[1] / "recorder" / "mneme_hip_recorder.cpp"
PARTS = sorted((SOURCE.parent / "parts").glob("*.h"))
SOURCES = (SOURCE, SNAPSHOT_SOURCES / "snapshot_writer.cpp")
HEADERS = (
    *PARTS,
    SOURCE.parent / "hip_abi.h",
    *sorted(RECORDER_SOURCES.glob("*.h")),
    SNAPSHOT_SOURCES / "snapshot_writer.h",
)
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-nonnull-compare")
DEFAULT_VA_BASE = preload.DEFAULT_VA_BASE
GRANULARITY = 2 << 20
DEFAULT_ARCH = "gfx90a"

#: The files this recorder writes, for the core's finalize.
FORMAT = RawFormat(
    backend="hip",
    manifest="mneme-hip-raw",
    counts="mneme-hip-counts",
    granularity=GRANULARITY,
    default_arch=DEFAULT_ARCH,
    kernel_image=kernel_image,
    graphs="HIP graphs",
)

NATIVE = NativeLibrary(
    "mneme_hip_recorder", "the HIP recorder", SOURCES, HEADERS, FLAGS, cache="hip-recorder", env="MNEME_HIP_RECORDER"
)


def library_path() -> Path | None:
    """The built recorder: $MNEME_HIP_RECORDER, else the build cache."""
    return NATIVE.find()


def status() -> tuple[bool, str]:
    """Whether the recorder is built or can be, and what to do otherwise."""
    return NATIVE.status(
        "mneme-hip",
        [
            (cxx_compiler, "no C++ compiler (install g++ or clang++)"),
            (xxhash_include, "xxhash.h not found; install libxxhash-dev (or set XXHASH_INCLUDE)"),
        ],
        "mneme hip build-recorder",
    )


def build(out_dir: Path | None = None, force: bool = False) -> Path:
    """Compile the recorder into `out_dir` (default: the build cache) and return the library's path."""
    # hip_abi.h, beside the sources, declares the runtime's ABI: no ROCm header is needed
    cxx, includes = engine_toolchain(
        NATIVE, "mneme-hip from a source checkout (pip install -e backends/hip)", [(SOURCE.parent, "")]
    )
    flags = [*FLAGS, *includes]
    return NATIVE.build(lambda sources, out: [*cxx, *flags, *sources, "-o", out, "-ldl", "-lpthread"], out_dir, force)


def environment(raw_dir: Path, *, library: Path | None = None, **settings: Any) -> dict[str, str]:
    """The environment that runs a command under the HIP recorder.

    `library`: the recorder to preload (default: the built one, built now if there is none).
    `settings`: the engine's, by name (`mneme.core.recorder.preload.environment`): kernel, skip,
    max_recordings, va_base, record_ranks, epilogue_format, compression.
    """
    return preload.environment(library or (lambda: library_path() or build()), raw_dir, **settings)


def run(command: Sequence[str], raw_dir: Path, progress: bool | None = None, **options) -> int:
    """Run `command` under the recorder; returns its exit code (the application's, untouched)."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    return preload.run(command, raw_dir, environment(raw_dir, **options), progress)


def finalize(
    raw_dir: Path,
    out: Path,
    ir_files: Sequence[Path] = (),
    arch: str = "",
    epilogue_format: str = "diff",
    compression: str = "lz4",
) -> list[Path]:
    """Write one recording database per recorded kernel into `out` (`mneme.core.recorder.finalize.finalize`)."""
    return _finalize.finalize(FORMAT, raw_dir, out, ir_files, arch, epilogue_format, compression)


def main_record(
    rdb: Path,
    command: Sequence[str],
    ir_files: Sequence[Path] = (),
    arch: str = DEFAULT_ARCH,
    progress: bool | None = None,
    **options,
) -> int:
    """`mneme hip record`: run, then finalize; returns the application's exit code."""
    raw = Path(rdb) / "raw"
    code = run(command, raw, progress=progress, **options)
    written = finalize(
        raw,
        Path(rdb),
        ir_files,
        arch=arch,
        epilogue_format=options.get("epilogue_format", "diff"),
        compression=options.get("compression", "lz4"),
    )
    print_summary(FORMAT, raw, written)
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N
