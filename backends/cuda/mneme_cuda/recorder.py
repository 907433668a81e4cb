"""The native CUDA recorder: build it, run an application under it, finalize what it wrote.

The recorder (`backends/cuda/recorder/`: the CUDA API layer in `mneme_recorder.cpp` and its
`parts/`, compiled with the core's shared engine `mneme/core/recorder/native` and snapshot writer
`mneme/core/snapshot/native`) is a shared library injected with LD_PRELOAD. It places the
application's device allocations in one range reserved at a fixed address and, for each selected
launch, writes `launch-<pid>-<n>/` with a manifest and the prologue and epilogue snapshots (Mneme's
format, written natively from device shadow copies by a background thread) of every live
allocation and of the module's device globals; the code image the kernel's module was loaded from
goes to `images/` once, and the process's `/proc/self/maps` to `maps-<pid>.txt`. `finalize` (the
core's, `mneme.core.recorder.finalize`, told the CUDA recorder's files by `FORMAT`) writes one
recording database per kernel. docs/design/recording.md explains the mechanism,
docs/design/native.md the shared native sources.

The library is built on first use with the system C++ compiler against the CUDA toolkit's
`cuda.h` (`build()`, `mneme cuda build-recorder`); where neither exists the plugin still
works for replay and `status()` says why the recorder is missing.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mneme.core.backend import check_timer
from mneme.core.errors import MnemeError, UsageError
from mneme.core.native import (
    PRELOAD_COMPAT,
    PRELOAD_LINK,
    RECORDER_SOURCES,
    SNAPSHOT_SOURCES,
    NativeLibrary,
    cxx_compiler,
    xxhash_include,
)
from mneme.core.recorder import finalize as _finalize
from mneme.core.recorder import preload, rawdir
from mneme.core.recorder.build import engine_toolchain
from mneme.core.recorder.finalize import print_summary
from mneme.core.recorder.progress import ProgressPoller, ProgressState, watch
from mneme.core.recorder.rawdir import COMPRESSIONS, EPILOGUE_FORMATS, RawFormat, check_compression, region_policies
from mneme.instrument.fatbin import FATBIN_MAGIC, kernel_image
from mneme_cuda import cupti, libraries, numerics  # noqa: F401 - libraries declares the checkout's .gpu/lib

__all__ = [
    "COMPRESSIONS",
    "EPILOGUE_FORMATS",
    "FATBIN_MAGIC",
    "FORMAT",
    "ProgressPoller",
    "ProgressState",
    "build",
    "environment",
    "finalize",
    "in_application",
    "kernel_image",
    "launches",
    "library_path",
    "loaded_elf_files",
    "main_record",
    "occurrences",
    "region_policies",
    "run",
    "status",
    "watch",
]

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parents[1] / "recorder" / "mneme_recorder.cpp"
PARTS = sorted((SOURCE.parent / "parts").glob("*.h"))
# Every file the library is built from: compiled sources, then the headers they include (the name's hash).
SOURCES = (SOURCE, SNAPSHOT_SOURCES / "snapshot_writer.cpp", PRELOAD_COMPAT)
HEADERS = (
    *PARTS,
    *sorted(RECORDER_SOURCES.glob("*.h")),
    SNAPSHOT_SOURCES / "snapshot_writer.h",
    cupti.HEADER,
    SOURCE.parent / "exports.map",
)
LIBRARY = "libmneme_cuda_recorder.so"  # the package build's copy (CMake); the others carry their hash
DEFAULT_VA_BASE = preload.DEFAULT_VA_BASE
GRANULARITY = 2 << 20
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-nonnull-compare")
#: Linked into the library, as backends/cuda/recorder/CMakeLists.txt links the package's build: the C++
#: runtime statically (an application's own libstdc++ may be older), glibc's dl and pthread parts by
#: name (where they are apart, before 2.34), so that one build loads on glibc 2.28 and newer with
#: PRELOAD_COMPAT (docs/design/native.md "Preloaded libraries: manylinux_2_28").
EXPORTS = SOURCE.parent / "exports.map"  # the interposers and the recorder's API, nothing else
LINK = (*PRELOAD_LINK, f"-Wl,--version-script={EXPORTS}")

#: The files this recorder writes, for the core's finalize.
FORMAT = RawFormat(
    backend="cuda",
    manifest="mneme-cuda-raw",
    counts="mneme-cuda-counts",
    granularity=GRANULARITY,
    default_arch="sm_90",
    kernel_image=kernel_image,
    kernel_timer="cupti",
    graphs="CUDA graphs",
    ir_numerics=numerics.ir_numerics,
)


def cuda_include() -> Path | None:
    """The folder holding the CUDA toolkit's cuda.h, or None."""
    return next((root / "include" for root in cupti.cuda_roots() if (root / "include" / "cuda.h").exists()), None)


def compiler() -> str | None:
    return cxx_compiler()


def packaged_library() -> Path | None:
    """The recorder the package's build (scikit-build-core, CMake) installed as mneme_cuda/lib/, if any."""
    try:
        files = importlib.metadata.files("mneme-cuda") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.name == LIBRARY and entry.parent.name == "lib":
            path = Path(entry.locate())
            return path if path.exists() else None
    return None


# Named by the flags without the map's path (its content is hashed as a header): a build prepared in one
# checkout is found by the same name in a copy of it elsewhere (scripts/gpu-suite).
NATIVE = NativeLibrary(
    "mneme_cuda_recorder",
    "the CUDA recorder",
    SOURCES,
    HEADERS,
    (*FLAGS, *PRELOAD_LINK, "-Wl,--version-script=exports.map"),
    cache="cuda-recorder",
    env="MNEME_CUDA_RECORDER",
    packaged=lambda: packaged_library(),
)


def library_name() -> str:
    """``libmneme_cuda_recorder-<hash>.so``: the name of a build of these sources."""
    return NATIVE.name()


def build_dir() -> Path:
    return NATIVE.build_dir()


def library_path() -> Path | None:
    """The built recorder: $MNEME_CUDA_RECORDER, else the package's own build, else the build cache
    (else the checkout's .gpu/lib). A package build older than the recorder's sources (an editable
    checkout changed since) is passed over."""
    return NATIVE.find()


def status() -> tuple[bool, str]:
    """Whether the recorder is built or can be, and what to do otherwise."""
    return NATIVE.status(
        "mneme-cuda",
        [
            (compiler, "no C++ compiler (install g++ or clang++)"),
            (cuda_include, "CUDA toolkit headers (cuda.h) not found; install the toolkit or set CUDA_PATH"),
            (xxhash_include, "xxhash.h not found; install libxxhash-dev (or set XXHASH_INCLUDE)"),
        ],
        "mneme cuda build-recorder",
    )


def build(out_dir: Path | None = None, force: bool = False) -> Path:
    """Compile the recorder into `out_dir` (default: the build cache) and return the library's path."""
    cuda_h = (cuda_include(), "cuda.h not found; install the CUDA toolkit or set CUDA_PATH")
    cxx, includes = engine_toolchain(
        NATIVE, "mneme-cuda from a source checkout (pip install -e backends/cuda)", [cuda_h]
    )
    flags = [*FLAGS, *includes]
    cupti_include = cupti.headers()
    if cupti_include is not None:  # the kernel timer; without it the recorder times with events
        flags += ["-DMNEME_CUPTI", f"-I{cupti_include}", f"-I{cupti.HEADER.parent}"]
    else:
        log.warning("cupti.h not found: the recorder will time launches with CUDA events only")
    return NATIVE.build(lambda sources, out: [*cxx, *flags, *sources, "-o", out, *LINK], out_dir, force)


def environment(
    raw_dir: Path,
    *,
    library: Path | None = None,
    timed_launches: int | None = None,
    timer: str = "auto",
    **settings: Any,
) -> dict[str, str]:
    """The environment that runs a command under the recorder.

    `library`: the recorder to preload (default: the built one, built now if there is none).
    `timed_launches`: how many launches of each recorded instance after the recorded one are
    timed inside the application (MNEME_RECORD_TIMED; the recorder's default is 16). `timer`:
    how ("cupti": the GPU's kernel timestamps; "events"; "auto": cupti where libcupti opens).
    `settings`: the engine's, by name (`mneme.core.recorder.preload.environment`): kernel, skip,
    max_recordings, va_base, record_ranks, epilogue_format, compression.
    """
    check_timer(timer, cupti.TIMERS, "cuda")
    if timed_launches is not None and timed_launches < 0:
        raise UsageError(f"timed launches must be >= 0, got {timed_launches}")
    env = preload.environment(library or (lambda: library_path() or build()), raw_dir, **settings)
    env["MNEME_RECORD_TIMER"] = timer
    found = cupti.cupti_library() if timer != "events" and "MNEME_CUPTI_LIB" not in env else None
    if found is not None:
        env["MNEME_CUPTI_LIB"] = str(found)
    if timed_launches is not None:
        env["MNEME_RECORD_TIMED"] = str(timed_launches)
    return env


def run(command: Sequence[str], raw_dir: Path, progress: bool | None = None, **options) -> int:
    """Run `command` under the recorder; returns its exit code (the application's, untouched).

    `progress`: show a live line (kernels, instances, bytes written) on stderr while it runs;
    None: when stderr is a terminal.
    """
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    return preload.run(command, raw_dir, environment(raw_dir, **options), progress)


def launches(raw_dir: Path) -> list[tuple[Path, dict]]:
    """Every complete launch folder the recorder wrote (incomplete `.tmp` folders are skipped)."""
    return rawdir.launches(FORMAT, raw_dir)


def occurrences(raw_dir: Path) -> dict[tuple[str, str], int]:
    """(kernel, instance key) -> launches with that argument set, over every recorded process."""
    return rawdir.occurrences(FORMAT, raw_dir)


def in_application(raw_dir: Path):
    """What the recorder measured inside the application (`mneme.core.recorder.rawdir.in_application`)."""
    return rawdir.in_application(FORMAT, raw_dir)


loaded_elf_files = _finalize.loaded_elf_files


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
    ir_files: Sequence[Path],
    kernel: str | None = None,
    skip: int = 0,
    max_recordings: int = 4,
    library: Path | None = None,
    record_ranks: str | None = None,
    epilogue_format: str = "diff",
    progress: bool | None = None,
    compression: str = "lz4",
    timer: str = "auto",
) -> int:
    """`mneme record`: run, then finalize; returns the application's exit code."""
    if epilogue_format not in EPILOGUE_FORMATS:
        raise UsageError(f"unknown epilogue format {epilogue_format!r}; use one of {', '.join(EPILOGUE_FORMATS)}")
    check_compression(compression)
    raw = Path(rdb) / "raw"
    code = run(
        command,
        raw,
        progress=progress,
        kernel=kernel,
        skip=skip,
        max_recordings=max_recordings,
        library=library,
        record_ranks=record_ranks,
        epilogue_format=epilogue_format,
        compression=compression,
        timer=timer,
    )
    arch = ""
    try:
        from mneme_cuda.backend import CudaBackend

        arch = CudaBackend().arch(0)
    except MnemeError:
        pass
    written = finalize(raw, Path(rdb), ir_files, arch=arch, epilogue_format=epilogue_format, compression=compression)
    print_summary(FORMAT, raw, written)
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N
