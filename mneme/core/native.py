"""Mneme's native libraries: one helper names, finds and builds each of them.

Every native library Mneme loads (the host runtime, the snapshot reader, a backend's recorder
and timer helpers) is a `NativeLibrary`: its file name carries the hash of its sources, headers
and flags (``lib<stem>-<hash>.so``), so a build of other sources never goes by that name and a
changed checkout never loads a stale build. It is found at, in order: the file an environment
variable names, the copy the package's own build installed (passed over when older than the
sources, as in an edited checkout), the build cache (``cache_root()/<cache>``), then the folders
a backend declared (`add_search_folder`: a checkout's prebuilt copies for a machine without a
compiler). A build writes a temporary file beside its target and renames it into place: a
reader never loads half a library, and a failed build leaves nothing behind.
docs/design/native.md explains where the shared native sources live and how backends build them.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from mneme.core import envvars
from mneme.core.errors import MnemeError

log = logging.getLogger(__name__)

#: The shared native sources of the core's formats, shipped as package data of `mneme`:
#: the snapshot writer and reader (`snapshot/native`) and the recorder's engine (`recorder/native`).
NATIVE_ROOT = Path(__file__).resolve().parent
SNAPSHOT_SOURCES = NATIVE_ROOT / "snapshot" / "native"
RECORDER_SOURCES = NATIVE_ROOT / "recorder" / "native"
#: Compiled into every library preloaded into applications (the recorders): glibc functions bound to
#: versions glibc 2.28 has (docs/design/native.md "Preloaded libraries: manylinux_2_28").
PRELOAD_COMPAT = RECORDER_SOURCES / "glibc_compat.cpp"
#: Their link options: the C++ runtime and libgcc statically, none of their symbols exported (a preloaded
#: library must not interpose on the application's own C++ runtime); libdl and libpthread named, for a
#: glibc older than 2.34 where the functions PRELOAD_COMPAT binds still live there.
PRELOAD_LINK = (
    "-static-libstdc++",
    "-static-libgcc",
    "-Wl,--exclude-libs,ALL",
    "-Wl,--no-as-needed",
    "-l:libdl.so.2",
    "-l:libpthread.so.0",
    "-Wl,--as-needed",
)

_SEARCH: list[Path] = []


def source_dirs() -> dict[str, Path]:
    """The folders of the core's native sources by role, for a backend's build (CMake asks this)."""
    return {"snapshot": SNAPSHOT_SOURCES, "recorder": RECORDER_SOURCES}


def add_search_folder(folder: Path) -> None:
    """Look for prebuilt libraries in `folder` too, after the build cache (a backend's prepared copies)."""
    folder = Path(folder)
    if folder not in _SEARCH:
        _SEARCH.append(folder)


def search_folders() -> tuple[Path, ...]:
    """The folders `add_search_folder` declared, in the order they were declared."""
    return tuple(_SEARCH)


def cache_root() -> Path:
    """``$MNEME_CACHE_DIR`` (default ``~/.cache/mneme``): Mneme's caches, builds and native libraries."""
    return Path(envvars.get("MNEME_CACHE_DIR")).expanduser()


def cache_dir(name: str) -> Path:
    """``cache_root()/<name>``: where a native library is built."""
    return cache_root() / name


def c_compiler() -> str | None:
    """The C compiler to build with: $CC (it may carry flags), else cc, gcc, clang, clang-19; None: none found."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang", "clang-19"):
        if name and shutil.which(name.split()[0]):
            return name
    return None


def cxx_compiler() -> str | None:
    """The C++ compiler to build with: $CXX (it may carry flags), else c++, g++, clang++, clang++-19; None: none."""
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++", "clang++-19"):
        if name and shutil.which(name.split()[0]):
            return name
    return None


def xxhash_include() -> Path | None:
    """The folder holding xxhash.h (the snapshot format's checksums): $XXHASH_INCLUDE, else the system's; or None."""
    for root in filter(None, [os.environ.get("XXHASH_INCLUDE", ""), "/usr/include", "/usr/local/include"]):
        if (Path(root) / "xxhash.h").exists():
            return Path(root)
    return None


def compile_library(
    target: Path, command: Callable[[str], list[str]], what: str, error: type[MnemeError] = MnemeError
) -> Path:
    """Run `command(output_path)` to build `target` atomically; raise `error` naming `what` when it fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    import subprocess  # here: finding a library (`mneme plugins`) must not pay for these imports
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        argv = command(tmp)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise error(f"could not compile {what} ({' '.join(argv)}):\n{proc.stderr[-4000:]}")
        os.chmod(tmp, 0o755)  # mkstemp's 0600 would hide it from other users of a shared cache
        os.replace(tmp, target)
        log.info("built %s: %s", what, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@attrs.frozen
class NativeLibrary:
    """One native library: what it is built from, how it is named, where it is found.

    `sources` are compiled, `headers` only included; both, with `flags`, make the name's hash.
    `env`: a variable naming a built library to use instead (as given: a missing one is not found).
    `packaged`: returns the copy the package's build installed, if any. `cache`: the build
    cache's folder under `cache_root()` (default: `stem`).
    """

    stem: str
    what: str
    sources: tuple[Path, ...] = attrs.field(converter=tuple)
    headers: tuple[Path, ...] = attrs.field(default=(), converter=tuple)
    flags: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    cache: str = ""
    env: str | None = None
    packaged: Callable[[], Path | None] | None = None

    def available(self) -> bool:
        """Whether its sources are installed (a wheel without them can only use a prebuilt copy)."""
        return all(path.exists() for path in self.sources)

    def name(self) -> str:
        """``lib<stem>-<hash>.so``: the hash of the sources, the headers and the flags."""
        import hashlib

        digest = hashlib.sha256()
        for path in (*self.sources, *self.headers):
            digest.update(path.read_bytes())
        digest.update("\0".join(self.flags).encode())
        return f"lib{self.stem}-{digest.hexdigest()[:16]}.so"

    def build_dir(self) -> Path:
        return cache_dir(self.cache or self.stem)

    def status(
        self, distribution: str, prerequisites: Sequence[tuple[Callable[[], object], str]], build_command: str
    ) -> tuple[bool, str]:
        """Whether the library is built or can be, and what to do otherwise.

        `prerequisites`: (finds it, what to do when it finds nothing) for each thing a build needs,
        looked for in turn and only while the library is not built; `build_command` builds it by hand.
        """
        path = self.find()
        if path is not None:
            return True, f"built: {path}"
        if not self.available():
            return False, (
                f"not built: its sources ({self.sources[0]}) are not installed; install {distribution} from a checkout"
            )
        for find, advice in prerequisites:
            if find() is None:
                return False, f"not built: {advice}"
        return True, f"not built yet: built on first use (or run `{build_command}`)"

    def find(self, *folders: Path) -> Path | None:
        """The library to load: $env, the packaged copy, the build cache, `folders`, the declared search folders."""
        explicit_text = envvars.get_named(self.env) if self.env else None
        if explicit_text:
            explicit = Path(explicit_text)
            return explicit if explicit.exists() else None
        packaged = self.packaged() if self.packaged is not None else None
        checkout = self.available()  # the sources are here: an editable checkout, which may have been edited
        # An installed package has no sources to be newer than its build (pip stamps each file with the
        # time it wrote it, so comparing its files would be a race); a checkout's build is stale once
        # a source or header is newer.
        if (
            packaged is not None
            and packaged.exists()
            and (
                not checkout
                or all(
                    packaged.stat().st_mtime >= p.stat().st_mtime for p in (*self.sources, *self.headers) if p.exists()
                )
            )
        ):
            return packaged
        if not checkout:
            return None
        name = self.name()
        return next((f / name for f in (self.build_dir(), *folders, *_SEARCH) if (f / name).exists()), None)

    def build(
        self,
        command: Callable[[Sequence[str], str], list[str]],
        out_dir: Path | None = None,
        force: bool = False,
        error: type[MnemeError] = MnemeError,
    ) -> Path:
        """Compile into `out_dir` (default: the build cache) unless built already; the library's path.

        `command(sources, output)` is the compiler's argument list.
        """
        if not self.available():
            missing = next(p for p in self.sources if not p.exists())
            raise error(
                f"cannot build {self.what}: its source {missing} is not installed; install from a "
                "source checkout or a package that ships it"
            )
        target = (Path(out_dir) if out_dir else self.build_dir()) / self.name()
        if target.exists() and not force:
            return target
        sources = [str(p) for p in self.sources]
        return compile_library(target, lambda out: command(sources, out), self.what, error)


@functools.lru_cache(maxsize=16)
def tool_version(tool: str) -> str:
    """The last line a toolchain program prints for `--version` ("missing" when it does not run)."""
    import subprocess

    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "missing"
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown"
