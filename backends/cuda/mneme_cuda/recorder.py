"""The native CUDA recorder: build it, run an application under it, finalize what it wrote.

The recorder (`backends/cuda/recorder/mneme_recorder.cpp`) is a shared library injected with
LD_PRELOAD. It places the application's device allocations in one range reserved at a fixed
address and, for each selected launch, writes `launch-<pid>-<n>/` with a manifest and the
prologue and epilogue snapshots (Mneme's format, written natively from device shadow copies
by a background thread) of every live allocation and of the module's device globals; the code
image the kernel's module was loaded from goes to `images/` once, and the process's
`/proc/self/maps` to `maps-<pid>.txt`. `finalize` checks and moves those snapshots under their
database names (older raw-dump folders it converts) and writes one recording database per
kernel (IR from `--ir` files or the IR-source plugins, and the loaded cubin/PTX).
docs/design/recording.md explains the mechanism.

The library is built on first use with the system C++ compiler against the CUDA toolkit's
`cuda.h` (`build()`, `mneme cuda build-recorder`); where neither exists the plugin still
works for replay and `status()` says why the recorder is missing.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import json
import logging
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import attrs

from mneme.core.backend import check_timer
from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.native import cache_dir, compile_library
from mneme_cuda import cupti

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parents[1] / "recorder" / "mneme_recorder.cpp"
# Every file the library is built from (the snapshot writer's header included, for the rebuild check).
SOURCES = (SOURCE, SOURCE.with_name("snapshot_writer.cpp"))
HEADERS = (SOURCE.with_name("snapshot_writer.h"), cupti.HEADER)
LIBRARY = "libmneme_cuda_recorder.so"
DEFAULT_VA_BASE = 0x153940000000
GRANULARITY = 2 << 20


def cuda_include() -> Path | None:
    """The folder holding the CUDA toolkit's cuda.h, or None."""
    return next((root / "include" for root in cupti.cuda_roots() if (root / "include" / "cuda.h").exists()), None)


def compiler() -> str | None:
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++", "clang++-19"):
        if name and shutil.which(name):
            return name
    return None


def build_dir() -> Path:
    return cache_dir("cuda-recorder")


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


def library_path() -> Path | None:
    """The built recorder: $MNEME_CUDA_RECORDER, else the package's own build, else the build cache.

    A build older than the recorder's sources (an editable checkout changed since) is passed over.
    """
    explicit = os.environ.get("MNEME_CUDA_RECORDER")
    if explicit:
        return Path(explicit) if Path(explicit).exists() else None
    sources = [p for p in (*SOURCES, *HEADERS) if p.exists()]
    for built in (packaged_library(), build_dir() / LIBRARY):
        if built is not None and built.exists() and all(built.stat().st_mtime >= p.stat().st_mtime for p in sources):
            return built
    return None


def xxhash_include() -> Path | None:
    """The folder holding xxhash.h (the snapshot writer's checksums), or None."""
    for root in filter(None, [os.environ.get("XXHASH_INCLUDE", ""), "/usr/include", "/usr/local/include"]):
        if (Path(root) / "xxhash.h").exists():
            return Path(root)
    return None


def status() -> tuple[bool, str]:
    """Whether the recorder is built or can be, and what to do otherwise."""
    path = library_path()
    if path is not None:
        return True, f"built: {path}"
    if not SOURCE.exists():
        return False, f"not built: its source ({SOURCE}) is not installed; install mneme-cuda from a checkout"
    if compiler() is None:
        return False, "not built: no C++ compiler (install g++ or clang++)"
    if cuda_include() is None:
        return False, "not built: CUDA toolkit headers (cuda.h) not found; install the toolkit or set CUDA_PATH"
    if xxhash_include() is None:
        return False, "not built: xxhash.h not found; install libxxhash-dev (or set XXHASH_INCLUDE)"
    return True, "not built yet: built on first use (or run `mneme cuda build-recorder`)"


def build(out_dir: Path | None = None, force: bool = False) -> Path:
    """Compile the recorder into `out_dir` (default: the build cache) and return the library's path."""
    out_dir = Path(out_dir) if out_dir else build_dir()
    target = out_dir / LIBRARY
    if not force and out_dir == build_dir() and library_path() == target:
        return target
    cxx, include = compiler(), cuda_include()
    if not SOURCE.exists():
        raise MnemeError(f"cannot build the CUDA recorder: {SOURCE} is missing; install mneme-cuda from a "
                         "source checkout (pip install -e backends/cuda)")  # fmt: skip
    if cxx is None:
        raise MnemeError("cannot build the CUDA recorder: no C++ compiler found (install g++ or set CXX)")
    if include is None:
        raise MnemeError("cannot build the CUDA recorder: cuda.h not found; install the CUDA toolkit or set CUDA_PATH")
    xxh = xxhash_include()
    if xxh is None:
        raise MnemeError("cannot build the CUDA recorder: xxhash.h not found; install libxxhash-dev "
                         "(or set XXHASH_INCLUDE to its folder)")  # fmt: skip
    flags = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-nonnull-compare",
             f"-I{include}", f"-I{xxh}"]
    cupti_include = cupti.headers()
    if cupti_include is not None:  # the kernel timer; without it the recorder times with events
        flags += ["-DMNEME_CUPTI", f"-I{cupti_include}", f"-I{cupti.HEADER.parent}"]
    else:
        log.warning("cupti.h not found: the recorder will time launches with CUDA events only")
    return compile_library(target, lambda out: [cxx, *flags, *map(str, SOURCES), "-o", out, "-ldl", "-lpthread"],
                           "the CUDA recorder")


def environment(raw_dir: Path, kernel: str | None = None, skip: int = 0, max_recordings: int = 4,
                va_base: int = DEFAULT_VA_BASE, library: Path | None = None,
                record_ranks: str | None = None, epilogue_format: str = "diff",
                timed_launches: int | None = None, compression: str = "lz4",
                timer: str = "auto") -> dict[str, str]:  # fmt: skip
    """The environment that runs a command under the recorder.

    `timed_launches`: how many launches of each recorded instance after the recorded one are
    timed inside the application (MNEME_RECORD_TIMED; the recorder's default is 16). `timer`:
    how ("cupti": the GPU's kernel timestamps; "events"; "auto": cupti where libcupti opens).

    `record_ranks`: "all", a comma-separated list of MPI ranks, or None (rank 0 when a launcher
    announces ranks, else the one process). `epilogue_format`: how the recorder stores each
    epilogue region (see `finalize`). `compression`: "lz4", "zstd" or "none" (COMPRESSIONS).
    """
    if epilogue_format not in EPILOGUE_FORMATS:
        raise UsageError(f"unknown epilogue format {epilogue_format!r}; use one of {', '.join(EPILOGUE_FORMATS)}")
    _check_compression(compression)
    check_timer(timer, cupti.TIMERS, "cuda")
    library = library or build()
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(filter(None, [str(library), env.get("LD_PRELOAD", "")]))
    env["MNEME_RECORD_DIR"] = str(raw_dir)
    env["MNEME_RECORD_SKIP"] = str(skip)
    env["MNEME_RECORD_MAX"] = str(max_recordings)
    env["MNEME_RECORD_VA_BASE"] = hex(va_base)
    env["MNEME_RECORD_TIMER"] = timer
    found = cupti.cupti_library() if timer != "events" and "MNEME_CUPTI_LIB" not in env else None
    if found is not None:
        env["MNEME_CUPTI_LIB"] = str(found)
    if kernel:
        env["MNEME_RECORD_KERNEL"] = kernel
    if record_ranks:
        env["MNEME_RECORD_RANKS"] = record_ranks
    env["MNEME_RECORD_EPILOGUE_FORMAT"] = epilogue_format
    env["MNEME_RECORD_COMPRESSION"] = compression
    if timed_launches is not None:
        if timed_launches < 0:
            raise UsageError(f"timed launches must be >= 0, got {timed_launches}")
        env["MNEME_RECORD_TIMED"] = str(timed_launches)
    return env


def run(command: Sequence[str], raw_dir: Path, progress: bool | None = None, **options) -> int:
    """Run `command` under the recorder; returns its exit code (the application's, untouched).

    `progress`: show a live line (kernels, instances, bytes written) on stderr while it runs;
    None: when stderr is a terminal.
    """
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    env = environment(raw_dir, **options)
    if progress is None:
        progress = sys.stderr.isatty()
    try:
        if not progress:
            return subprocess.run(list(command), env=env, check=False).returncode
        from rich.console import Console

        with subprocess.Popen(list(command), env=env) as proc:
            return watch(proc, raw_dir, Console(stderr=True))
    except FileNotFoundError as exc:
        raise UsageError(f"cannot run {command[0]!r}: {exc}") from exc


@attrs.frozen
class ProgressState:
    """What the recorder has written so far: recorded kernels, instances (complete launch
    folders), bytes on disk (launch folders, in-flight ones included, and code images), and
    launches being written now."""

    kernels: int = 0
    instances: int = 0
    bytes: int = 0
    in_flight: int = 0

    def line(self, seconds: float | None = None) -> str:
        text = (f"recording: {self.kernels} kernel{'s' if self.kernels != 1 else ''}, {self.instances} "
                f"instance{'s' if self.instances != 1 else ''}, {_human(self.bytes)} written")  # fmt: skip
        if self.in_flight:
            text += f", {self.in_flight} launch{'es' if self.in_flight != 1 else ''} being written"
        if seconds is not None:
            text += f" ({seconds:.0f} s)"
        return text


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def _folder_bytes(folder: str) -> int:
    total = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:  # renamed or removed meanwhile
                    pass
    except (FileNotFoundError, NotADirectoryError):
        pass
    return total


class ProgressPoller:
    """Reads the recorder's progress from its folder, without any help from the native side.

    Complete launch folders (renamed from `.tmp` once whole) are read once: their manifest's
    kernel and their size are cached; in-flight `.tmp` folders and `images/` are measured on
    every poll. A poll costs one directory listing plus one manifest per new launch.
    """

    def __init__(self, raw_dir: Path):
        self.raw_dir = Path(raw_dir)
        self._done: dict[str, tuple[str, int]] = {}  # launch folder -> (kernel, bytes)

    def poll(self) -> ProgressState:
        in_flight = in_flight_bytes = image_bytes = 0
        try:
            with os.scandir(self.raw_dir) as entries:
                names = [(e.name, e.path) for e in entries]
        except FileNotFoundError:
            names = []
        for name, path in names:
            if name == "images":
                image_bytes = _folder_bytes(path)
            elif not name.startswith("launch-"):
                continue
            elif name.endswith(".tmp"):
                in_flight += 1
                in_flight_bytes += _folder_bytes(path)
            elif name not in self._done:
                try:
                    kernel = json.loads(Path(path, "manifest.json").read_text()).get("kernel", "")
                except (OSError, ValueError, AttributeError):
                    continue  # not a launch folder the recorder finished; looked at again next time
                self._done[name] = (str(kernel), _folder_bytes(path))
        return ProgressState(kernels=len({k for k, _ in self._done.values()}), instances=len(self._done),
                             bytes=sum(b for _, b in self._done.values()) + in_flight_bytes + image_bytes,
                             in_flight=in_flight)  # fmt: skip


def watch(proc: subprocess.Popen, raw_dir: Path, console, interval: float = 0.5) -> int:
    """Wait for `proc`, showing the recorder's progress as one live line on `console`; its exit code.

    The line is redrawn every `interval` seconds; it stays on screen with the final figures.
    A console that is not a terminal gets the final line only.
    """
    import time

    from rich.live import Live
    from rich.text import Text

    poller = ProgressPoller(raw_dir)
    start = time.monotonic()

    def render() -> Text:
        return Text(poller.poll().line(time.monotonic() - start), style="cyan")

    if not console.is_terminal:
        code = proc.wait()
        console.print(render())
        return code
    with Live(render(), console=console, auto_refresh=False, transient=False) as live:
        while True:
            try:
                code = proc.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                live.update(render(), refresh=True)
        live.update(render(), refresh=True)
    return code


# Launch manifests: 1, raw dumps (prologue.bin, epilogue.bin) that finalize converts; 2, snapshot
# files the recorder wrote itself (prologue.mneme, epilogue.mneme) that finalize moves into place.
MANIFEST_VERSIONS = (1, 2)


def launches(raw_dir: Path) -> list[tuple[Path, dict]]:
    """Every complete launch folder the recorder wrote (incomplete `.tmp` folders are skipped)."""
    found = []
    for folder in sorted(Path(raw_dir).glob("launch-*")):
        if folder.name.endswith(".tmp") or not (folder / "manifest.json").exists():
            continue
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FormatError(folder / "manifest.json", f"unreadable recorder manifest: {exc}") from exc
        if manifest.get("format") != "mneme-cuda-raw" or manifest.get("version") not in MANIFEST_VERSIONS:
            raise FormatError(folder / "manifest.json", f"not a mneme-cuda-raw manifest of version "
                              f"{' or '.join(map(str, MANIFEST_VERSIONS))}; record again with this Mneme",
                              field="format")  # fmt: skip
        found.append((folder, manifest))
    return found


def occurrences(raw_dir: Path) -> dict[tuple[str, str], int]:
    """(kernel, instance key) -> launches with that argument set, over every recorded process."""
    total: dict[tuple[str, str], int] = defaultdict(int)
    for path in sorted(Path(raw_dir).glob("counts-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FormatError(path, f"unreadable recorder counts: {exc}") from exc
        if data.get("format") != "mneme-cuda-counts" or data.get("version") != 1:
            raise FormatError(path, "not a version-1 mneme-cuda-counts file", field="format")
        for kernel, entry in data.get("kernels", {}).items():
            for key, count in entry.get("instances", {}).items():
                total[(kernel, key)] += int(count)
    return dict(total)


def in_application(raw_dir: Path) -> tuple[dict[tuple[str, str], list[float]], dict[str, int], dict[tuple[str, str], str]]:  # fmt: skip
    """What the recorder measured inside the application, over every recorded process:
    (kernel, instance key) -> seconds of each timed launch, kernel -> launches inside CUDA graphs,
    and (kernel, instance key) -> the timer of those seconds: "cupti" (the GPU's kernel timestamps,
    "kernel_times") where any process had them, else "events" ("app_times")."""
    by_timer: dict[str, dict[tuple[str, str], list[float]]] = {"cupti": defaultdict(list), "events": defaultdict(list)}
    graphs: dict[str, int] = defaultdict(int)
    for path in sorted(Path(raw_dir).glob("counts-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FormatError(path, f"unreadable recorder counts: {exc}") from exc
        for kernel, entry in data.get("kernels", {}).items():
            if entry.get("graph_launches"):
                graphs[kernel] += int(entry["graph_launches"])
            for field, timer in (("kernel_times", "cupti"), ("app_times", "events")):
                for key, seconds in entry.get(field, {}).items():
                    if not isinstance(seconds, list) or not all(isinstance(t, (int, float)) and t > 0 for t in seconds):
                        raise FormatError(path, f"expected positive seconds, got {seconds!r}"[:200],
                                          field=f"kernels.{kernel}.{field}.{key}")  # fmt: skip
                    by_timer[timer][(kernel, key)] += [float(t) for t in seconds]
    times: dict[tuple[str, str], list[float]] = {}
    timers: dict[tuple[str, str], str] = {}
    for timer in ("events", "cupti"):  # kernel timestamps win: the two do not mix
        for instance, seconds in by_timer[timer].items():
            if seconds:
                times[instance], timers[instance] = seconds, timer
    return times, dict(graphs), timers


def _regions(folder: Path, name: str, manifest: dict):
    """(addr, memoryview) of each region and {name: memoryview} of each global in a dump file, mapped."""
    path = folder / name
    regions = manifest["regions"]
    globals_ = manifest.get("globals", [])
    size = sum(s for _, s in regions) + sum(s for _, _, s in globals_)
    if path.stat().st_size != size:
        raise FormatError(path, f"holds {path.stat().st_size} bytes; the manifest's regions and globals add up to "
                          f"{size}; the recording is damaged, record again")  # fmt: skip
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    view = memoryview(mapped)
    offset = 0
    out = []
    for addr, length in regions:
        out.append((addr, view[offset:offset + length]))
        offset += length
    values = {}
    for global_name, _addr, length in globals_:
        values[global_name] = view[offset:offset + length]
        offset += length
    return out, values


# -- code images ---------------------------------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
_ENTRY_PTX, _ENTRY_ELF = 1, 2


def _arch_number(arch: str) -> int:
    match = re.match(r"^(?:sm|compute)_(\d+)", arch or "")
    return int(match.group(1)) if match else 0


def _ptx_defines(text: str, kernel: str) -> bool:
    return re.search(rf"\.entry\s+{re.escape(kernel)}\s*\(", text) is not None


_FLAG_LZ4 = 0x2000  # entry flag: the payload is one LZ4 block (nvcc's -compress-mode default/speed/balance)


def lz4_block(src: bytes, size: int) -> bytes:
    """Decode one raw LZ4 block (no frame) of `size` decoded bytes; the entry may be padded after it."""
    from mneme.core.snapshot import codec

    try:
        return codec.lz4_decode_python(src, size, stop_at_size=True)
    except ValueError as exc:
        raise FormatError("<lz4>", str(exc)) from None


def fatbin_entries(data: bytes, where: str = "<fatbin>") -> list[tuple[str, int, bytes]]:
    """(kind "cubin"|"ptx", architecture number, image) of each entry of one raw fatbin.

    Compressed entries are decompressed: zstd (`-compress-mode=size`) and LZ4 (nvcc's other
    modes); entries nothing here can read are left out with a debug message.
    """
    from mneme.instrument import fatbin

    magic, _version, header, size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise FormatError(where, "not a fatbin (magic 0xBA55ED50 missing)")
    entries = []
    pos, end = header, min(len(data), header + size)
    while pos + 32 <= end:
        kind, _ver, entry_header, payload_size = struct.unpack_from("<HHIQ", data, pos)
        (arch,) = struct.unpack_from("<I", data, pos + 28)
        flags, decoded_size = struct.unpack_from("<Q", data, pos + 40)[0], 0
        if entry_header >= 64:
            (decoded_size,) = struct.unpack_from("<Q", data, pos + 56)
        body = bytes(data[pos + entry_header: pos + entry_header + payload_size])
        if flags & _FLAG_LZ4 and decoded_size and body[:4] not in (b"\x7fELF", fatbin.ZSTD_MAGIC):
            try:
                body = lz4_block(body, decoded_size)
            except (FormatError, IndexError) as exc:
                log.debug("%s@%d: skipping an LZ4 entry that does not decode: %s", where, pos, exc)
                body = b""
        if kind == _ENTRY_ELF:
            image = fatbin._payload(body, f"{where}@{pos}")
            if image is not None:
                entries.append(("cubin", arch, image))
        elif kind == _ENTRY_PTX:
            if body[:4] == fatbin.ZSTD_MAGIC:
                import zstandard

                body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
            text = body.split(b"\0", 1)[0]
            if text.lstrip().startswith((b"//", b".version")):
                entries.append(("ptx", arch, text + b"\0"))
            else:
                log.debug("%s@%d: skipping a PTX entry in an unknown compressed form", where, pos)
        if entry_header == 0:
            break
        pos += entry_header + payload_size
    return entries


def kernel_image(data: bytes, kernel: str, arch: str, where: str = "<image>") -> tuple[bytes, str] | None:
    """The loadable image of `kernel` for a device of `arch`, from what a module load was given.

    A cubin or PTX is taken as it is when it defines the kernel; from a fatbin, the cubin for
    the device's architecture, else a compatible older one of the same major version, else PTX
    the driver can JIT. None when the image does not define the kernel.
    """
    from mneme.instrument import fatbin
    from mneme.instrument.elf import ElfFile

    def cubin_defines(image: bytes) -> bool:
        try:
            return kernel in fatbin.kernel_names(ElfFile.parse(image, where))
        except MnemeError:
            return False

    if data[:4] == b"\x7fELF":
        return (data, "cubin") if cubin_defines(data) else None
    if len(data) >= 16 and struct.unpack_from("<I", data, 0)[0] == FATBIN_MAGIC:
        want = _arch_number(arch) or 90
        best, best_rank = None, 0
        for kind, entry_arch, image in fatbin_entries(data, where):
            if kind == "cubin" and cubin_defines(image):
                rank = 3 if entry_arch == want else (2 if entry_arch // 10 == want // 10 and entry_arch < want else 0)
            elif kind == "ptx" and _ptx_defines(image.decode(errors="replace"), kernel):
                rank = 1 if entry_arch <= want else 0
            else:
                rank = 0
            if rank > best_rank:
                best, best_rank = (image, kind), rank
        return best
    text = data.split(b"\0", 1)[0]
    if _ptx_defines(text.decode(errors="replace"), kernel):
        return text + b"\0", "ptx"
    return None


def loaded_elf_files(raw_dir: Path) -> list[str]:
    """The ELF files the recorded processes had mapped (from the recorder's maps-<pid>.txt)."""
    from mneme.plugins.ir_sources.embedded import elf_files_from_maps

    files: list[str] = []
    for path in sorted(Path(raw_dir).glob("maps-*.txt")):
        for name in elf_files_from_maps(path.read_text(errors="replace")):
            if name not in files:
                files.append(name)
    return files


def _resolve_ir(kernel: str, ir_files: Sequence[Path], out: Path, arch: str, elf_files: Sequence[str],
                image: bytes | None) -> tuple[list[Path], str]:  # fmt: skip
    """IR files for `kernel` inside `out`: from --ir files that define it, else the IR-source plugins."""
    from mneme.instrument.irsource import resolve

    sources = [p for p in ir_files if _defines(p, kernel)]
    if sources:
        stored = []
        for source in sources:
            target = out / "ir" / Path(source).name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            stored.append(target)
        return stored, "--ir"
    try:
        found = resolve(kernel, arch=arch or None, elf_files=elf_files, image=image)
    except (MnemeError, OSError) as exc:  # ArchitectureMismatch, an unreadable file: binary only, said once
        log.warning("kernel %s: looking for its IR failed: %s; recorded without IR", kernel, exc)
        return [], ""
    if not found:
        return [], ""
    source_name, ir_modules = found
    stored = []
    for index, module in enumerate(ir_modules):
        digest = hashlib.sha256(module.data).hexdigest()[:16]
        target = out / "ir" / f"{digest}{module.suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_bytes(module.data)
        stored.append(target)
    return stored, source_name


EPILOGUE_FORMATS = ("diff", "bytes", "best")
# How snapshot regions are compressed (`mneme record --compression`, MNEME_RECORD_COMPRESSION):
# LZ4 restores about twice as fast as zstd for a few percent more disk; "none" stores them raw.
COMPRESSIONS = ("lz4", "zstd", "none")


def _check_compression(compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise UsageError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")


def region_encoding(compression: str) -> str:
    """The Python writer's region encoding for `compression` (zstd where liblz4 is missing, with a warning)."""
    from mneme.core.snapshot import codec

    return codec.writable_encoding({"lz4": "lz4", "zstd": "zstd", "none": "raw"}[compression])


def region_policies(manifest: dict, where: str = "<manifest>") -> dict:
    """{region address: RegionPolicy} from a launch manifest's "policies" (mneme_annotate calls).

    Each entry is {"addr", "dtype", "threshold", "relative", "norm", "tag"}; the tag names the
    buffer in messages only. Entries for addresses that are not a recorded region are ignored.
    """
    from mneme.core.snapshot import RegionPolicy

    regions = {addr for addr, _ in manifest.get("regions", [])}
    out = {}
    for entry in manifest.get("policies", []):
        try:
            policy = RegionPolicy(dtype=entry["dtype"], threshold=entry["threshold"],
                                  relative=entry.get("relative", False), norm=entry.get("norm", "none"))  # fmt: skip
            addr = int(entry["addr"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(where, f"invalid verification policy {entry!r}: {exc}", field="policies") from exc
        if addr in regions:
            out[addr] = policy
    return out


def _mostly_rewritten(before, after) -> bool:
    """Whether more than half of a region's bytes changed (a diff would store it nearly whole)."""
    import numpy as np

    if len(before) == 0:
        return False
    a, b = np.frombuffer(before, dtype=np.uint8), np.frombuffer(after, dtype=np.uint8)
    return int(np.count_nonzero(a != b)) * 2 > len(a)


def finalize(raw_dir: Path, out: Path, ir_files: Sequence[Path] = (), arch: str = "",
             epilogue_format: str = "diff", compression: str = "lz4") -> list[Path]:  # fmt: skip
    """Write one recording database per recorded kernel into `out`; returns their paths.

    A kernel's IR comes from the `ir_files` that define it, else from the IR-source plugins
    (IR that `mneme-cc` embedded in the files the process loaded, Triton's cache); IR whose
    parameters differ from the recorded layout is dropped with a warning. The code image the
    driver loaded is stored too (`BinaryBlobs`), so a kernel without IR replays from it
    (`--mode cubin|ptx`). A kernel with neither is skipped with a warning.

    `epilogue_format`: "diff" (each region as a diff against the prologue), "bytes" (each
    region whole, zstd), "best" (whole for regions the kernel mostly rewrote, else a diff);
    it applies to raw-dump (version 1) launch folders: the recorder writes version-2 folders'
    snapshots itself, as `mneme record --epilogue-format` told it (MNEME_RECORD_EPILOGUE_FORMAT).
    `compression` ("lz4", "zstd", "none") applies to raw-dump folders too; the recorder
    compresses version-2 folders' snapshots as MNEME_RECORD_COMPRESSION told it.
    Regions the application annotated (mneme_annotate, mneme.annotate) get that verification
    policy in both snapshots; the others compare exactly.
    """
    from mneme.core import ir as irmod
    from mneme.core.fsutil import atomic_write
    from mneme.core.records import ArgInfo, RecordedExecution, dynamic_hash_of
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    if epilogue_format not in EPILOGUE_FORMATS:
        raise UsageError(f"unknown epilogue format {epilogue_format!r}; use one of {', '.join(EPILOGUE_FORMATS)}")
    _check_compression(compression)
    encoding = None  # chosen at the first raw-dump folder (it may warn)
    raw_dir, out = Path(raw_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    arch = arch or "sm_90"
    counted = occurrences(raw_dir)
    timed, _, timers = in_application(raw_dir)
    elf_files = loaded_elf_files(raw_dir)
    by_kernel: dict[str, list[tuple[Path, dict]]] = defaultdict(list)
    for folder, manifest in launches(raw_dir):
        by_kernel[manifest["kernel"]].append((folder, manifest))
    written = []
    for kernel, items in sorted(by_kernel.items()):
        recorded = [tuple(p) for p in items[0][1]["params"]]
        image = None
        for _, manifest in items:
            name = manifest.get("image") or ""
            if name and (raw_dir / name).is_file():
                image = kernel_image((raw_dir / name).read_bytes(), kernel, arch, str(raw_dir / name))
                if image is not None:
                    break
        stored, ir_source = _resolve_ir(kernel, ir_files, out, arch, elf_files, image[0] if image else None)
        params = None
        if stored:
            try:
                linked = irmod.link(stored, kernel)
                params = irmod.kernel_params(linked, kernel)
            except MnemeError as exc:
                log.warning("kernel %s: its IR (from %s) does not link: %s; recorded without IR", kernel, ir_source, exc)
                stored = []
        if stored and [(p.offset, p.size) for p in params] != recorded:
            log.warning("kernel %s: the IR's parameters %s (from %s) differ from the recorded layout %s; "
                        "recorded without IR (binary only)", kernel, [(p.offset, p.size) for p in params],
                        ir_source, recorded)  # fmt: skip
            stored = []
        if not stored and image is None:
            log.warning("kernel %s: neither IR nor a loaded code image was found; not written (pass --ir with its "
                        "device IR, or build the application with mneme-cc)", kernel)  # fmt: skip
            continue
        if stored:
            static_hash = irmod.module_hash(linked)[:16]
            args = [ArgInfo(p.name, p.offset, p.size, p.kind if p.kind in ("pointer", "int", "float", "struct")
                            else "unknown", p.kind in ("int", "float")) for p in params]  # fmt: skip
        else:
            static_hash = hashlib.sha256(kernel.encode() + b"\0" + image[0]).hexdigest()[:16]
            args = [ArgInfo(f"arg{i}", offset, size, "unknown", False) for i, (offset, size) in enumerate(recorded)]
        blobs = []
        if image is not None:
            code = out / "code" / f"{static_hash}.{image[1]}"
            code.parent.mkdir(parents=True, exist_ok=True)
            if not code.exists():
                atomic_write(code, image[0])
            blobs.append((code, image[1]))
        regions = [r for _, m in items for r in m["regions"]]
        base = items[0][1]["va_base"]
        end = max((a + s for a, s in regions), default=base + GRANULARITY)
        va_size = -(-(end - base) // GRANULARITY) * GRANULARITY
        globals_sizes = {g[0]: g[2] for _, m in items for g in m.get("globals", [])}
        db_path = out / f"{static_hash}.json"
        rec = RecordedExecution.from_json(db_path) if db_path.exists() else RecordedExecution.create(
            out, kernel_name=kernel, static_hash=static_hash, backend="cuda", arch=arch, modules=stored,
            binary_blobs=blobs, args=args, va_addr=base, va_size=va_size, globals=globals_sizes)  # fmt: skip
        rec.va_size = max(rec.va_size, va_size)
        rec.globals.update(globals_sizes)
        for folder, manifest in items:
            arg_bytes = bytes.fromhex(manifest["args"])
            grid, block, shared = manifest["grid"], manifest["block"], manifest["shared_mem"]
            dynamic = dynamic_hash_of(grid, block, shared, arg_bytes)
            occ = max(counted.get((kernel, manifest.get("instance_key", "")), 1), 1)
            if dynamic in rec.kernel_instances:
                rec.add_instance(grid=grid, block=block, shared_mem=shared, args=arg_bytes,
                                 prologue=rec.kernel_instances[dynamic].prologue_path,
                                 epilogue=rec.kernel_instances[dynamic].epilogue_path, occurrences=occ)  # fmt: skip
                continue
            prologue_path = out / f"DeviceState.prologue.{static_hash}.{dynamic}.mneme"
            epilogue_path = out / f"DeviceState.epilogue.{static_hash}.{dynamic}.mneme"
            policies = region_policies(manifest, str(folder / "manifest.json"))
            if manifest["version"] >= 2:  # the recorder wrote the snapshots itself: check them, move them
                _place_snapshots(folder, manifest, policies, prologue_path, epilogue_path)
                rec.add_instance(grid=grid, block=block, shared_mem=shared, args=arg_bytes, prologue=prologue_path,
                                 epilogue=epilogue_path, dynamic_hash=dynamic, occurrences=occ)  # fmt: skip
                continue
            encoding = encoding or region_encoding(compression)
            before, globals_before = _regions(folder, "prologue.bin", manifest)
            after, globals_after = _regions(folder, "epilogue.bin", manifest)
            with SnapshotWriter(prologue_path, SnapshotType.PROLOGUE, static_hash=static_hash,
                                dynamic_hash=dynamic) as writer:  # fmt: skip
                writer.set_args(arg_bytes, layout=recorded)
                for addr, data in before:
                    writer.add_region(addr, data, encoding=encoding, policy=policies.get(addr))
                for name, data in globals_before.items():
                    writer.add_global(name, bytes(data))
            with SnapshotWriter(epilogue_path, SnapshotType.EPILOGUE, static_hash=static_hash,
                                dynamic_hash=dynamic) as writer:  # fmt: skip
                writer.set_args(arg_bytes, layout=recorded)
                for (addr, data), (_, base_data) in zip(after, before):
                    whole = epilogue_format == "bytes" or (epilogue_format == "best"
                                                           and _mostly_rewritten(base_data, data))  # fmt: skip
                    if whole:
                        writer.add_region(addr, data, encoding=encoding, policy=policies.get(addr))
                    else:
                        writer.add_diff_region(addr, base_data, data, policy=policies.get(addr))
                for name, data in globals_after.items():
                    writer.add_global(name, bytes(data))
            rec.add_instance(grid=grid, block=block, shared_mem=shared, args=arg_bytes, prologue=prologue_path,
                             epilogue=epilogue_path, dynamic_hash=dynamic, occurrences=occ)  # fmt: skip
        for dynamic, key in {dynamic_hash_of(m["grid"], m["block"], m["shared_mem"], bytes.fromhex(m["args"])):
                             m.get("instance_key", "") for _, m in items}.items():  # fmt: skip
            # set, not added: finalizing the same raw folder twice gives the same times
            if timed.get((kernel, key)) and dynamic in rec.kernel_instances:
                rec[dynamic].app_times = list(timed[(kernel, key)])
                rec[dynamic].app_timer = timers[(kernel, key)]
        rec.save()
        log.info("kernel %s: %d instances, %s", kernel, len(rec.kernel_instances),
                 f"IR from {ir_source}" if stored else f"binary only ({image[1]})")  # fmt: skip
        written.append(db_path)
    return written


def _place_snapshots(folder: Path, manifest: dict, policies: dict, prologue_path: Path, epilogue_path: Path) -> None:
    """Check the recorder's own snapshots of one launch against its manifest, then move them into place.

    Their META names no static or dynamic hash (the recorder cannot know the code's identity
    before its IR is linked; no reader compares them): the database's names are the identity.
    """
    from mneme.core.snapshot import Snapshot
    from mneme.core.snapshot.format import EXACT

    sources = [folder / Path(manifest.get(side, f"{side}.mneme")).name for side in ("prologue", "epilogue")]
    for source in sources:
        if not source.is_file():
            raise FormatError(source, "the recorder's snapshot of this launch is missing; the recording is damaged "
                              "(or was finalized already), record again")  # fmt: skip
    expected = sorted((int(a), int(n)) for a, n in manifest["regions"])
    with Snapshot.open(sources[0]) as prologue:
        found = sorted((r.addr, r.size) for r in prologue.regions)
        if found != expected:
            raise FormatError(sources[0], f"holds regions {found}; the manifest lists {expected}; the recording is "
                              "damaged, record again", field="regions")  # fmt: skip
        for region in prologue.regions:
            if region.policy != policies.get(region.addr, EXACT):
                raise FormatError(sources[0], f"region 0x{region.addr:x} has policy {region.policy}; the manifest "
                                  f"says {policies.get(region.addr, EXACT)}", field="policies")  # fmt: skip
        with Snapshot.open(sources[1], base=prologue) as epilogue:  # the epilogue's base id names this prologue
            if sorted((r.addr, r.size) for r in epilogue.regions) != expected:
                raise FormatError(sources[1], f"its regions differ from the manifest's {expected}; record again",
                                  field="regions")  # fmt: skip
    for source, target in zip(sources, (prologue_path, epilogue_path)):
        _move(source, target)


def _move(source: Path, target: Path) -> None:
    """Rename `source` over `target`; across file systems, copy to a temporary name, rename, then remove."""
    try:
        os.replace(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise MnemeError(f"cannot move {source} to {target}: {exc.strerror}") from exc
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise MnemeError(f"cannot copy {source} to {target}: {exc.strerror}") from exc
    source.unlink()


def _defines(path: Path, kernel: str) -> bool:
    """Whether an IR file defines `kernel` (a cheap text check for .ll; bitcode is assumed to)."""
    path = Path(path)
    if path.suffix != ".ll":
        return True
    text = path.read_text(errors="replace")
    return f"@{kernel}(" in text and "define" in text


def main_record(rdb: Path, command: Sequence[str], ir_files: Sequence[Path], kernel: str | None = None,
                skip: int = 0, max_recordings: int = 4, library: Path | None = None,
                record_ranks: str | None = None, epilogue_format: str = "diff",
                progress: bool | None = None, compression: str = "lz4", timer: str = "auto") -> int:  # fmt: skip
    """`mneme record`: run, then finalize; returns the application's exit code."""
    if epilogue_format not in EPILOGUE_FORMATS:
        raise UsageError(f"unknown epilogue format {epilogue_format!r}; use one of {', '.join(EPILOGUE_FORMATS)}")
    _check_compression(compression)
    raw = Path(rdb) / "raw"
    code = run(command, raw, progress=progress, kernel=kernel, skip=skip, max_recordings=max_recordings,
               library=library, record_ranks=record_ranks, epilogue_format=epilogue_format,
               compression=compression, timer=timer)  # fmt: skip
    arch = ""
    try:
        from mneme_cuda.backend import CudaBackend

        arch = CudaBackend().arch(0)
    except MnemeError:
        pass
    written = finalize(raw, Path(rdb), ir_files, arch=arch, epilogue_format=epilogue_format, compression=compression)
    _print_summary(raw, written)
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N


def _print_summary(raw: Path, written: Sequence[Path]) -> None:
    """The final table of `mneme record`: kernels, instances, occurrences, IR, bytes."""
    from rich.console import Console
    from rich.table import Table

    from mneme.core.records import RecordedExecution

    table = Table(title=f"recorded {len(launches(raw))} launches")
    for column in ("kernel", "instances", "launches", "code", "globals", "bytes", "database"):
        table.add_column(column)
    for path in written:
        rec = RecordedExecution.from_json(path)
        size = sum(f.stat().st_size for f in rec.referenced_files() if f.exists())
        occ = sum(i.occ for i in rec.kernel_instances.values())
        code = "IR" if rec.llvm_files else "binary only"
        if rec.binary_blobs:
            code += " + " + ", ".join(sorted({image.kind for image in rec.binary_blobs}))
        table.add_row(rec.demangled_name or rec.kernel_name, str(len(rec.kernel_instances)), str(occ), code,
                      str(len(rec.globals)), f"{size:,}", path.name)  # fmt: skip
    console = Console(stderr=True)
    console.print(table)
    for kernel, n in sorted(in_application(raw)[1].items()):
        console.print(f"{kernel}: {n} launch{'es' if n != 1 else ''} inside CUDA graphs not recorded "
                      "(run the application without CUDA graphs to record them)")  # fmt: skip
