"""The native CUDA recorder: build it, run an application under it, finalize what it wrote.

The recorder (`backends/cuda/recorder/mneme_recorder.cpp`) is a shared library injected with
LD_PRELOAD. It places the application's device allocations in one range reserved at a fixed
address and, for each selected launch, writes `launch-<pid>-<n>/` with a manifest, the
prologue and the epilogue bytes of every live allocation. `finalize` turns those folders into
Mneme snapshots and one recording database per kernel.

The library is built on first use with the system C++ compiler against the CUDA toolkit's
`cuda.h` (`build()`, `mneme cuda build-recorder`); where neither exists the plugin still
works for replay and `status()` says why the recorder is missing.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from mneme.core.errors import FormatError, MnemeError, UsageError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parents[1] / "recorder" / "mneme_recorder.cpp"
LIBRARY = "libmneme_cuda_recorder.so"
DEFAULT_VA_BASE = 0x153940000000
GRANULARITY = 2 << 20


def cuda_include() -> Path | None:
    """The folder holding the CUDA toolkit's cuda.h, or None."""
    candidates = [os.environ.get("CUDA_PATH", ""), os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    for root in filter(None, candidates):
        if (Path(root) / "include" / "cuda.h").exists():
            return Path(root) / "include"
    return None


def compiler() -> str | None:
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++", "clang++-19"):
        if name and shutil.which(name):
            return name
    return None


def build_dir() -> Path:
    root = os.environ.get("MNEME_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mneme")
    return Path(root) / "cuda-recorder"


def library_path() -> Path | None:
    """The built recorder: $MNEME_CUDA_RECORDER, else the build cache, when it is newer than its source."""
    explicit = os.environ.get("MNEME_CUDA_RECORDER")
    if explicit:
        return Path(explicit) if Path(explicit).exists() else None
    built = build_dir() / LIBRARY
    if built.exists() and (not SOURCE.exists() or built.stat().st_mtime >= SOURCE.stat().st_mtime):
        return built
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
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    command = [cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-nonnull-compare",
               f"-I{include}", str(SOURCE), "-o", str(tmp), "-ldl", "-lpthread"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise MnemeError(f"building the CUDA recorder failed: {' '.join(command)}\n{proc.stderr[-4000:]}")
    os.replace(tmp, target)
    return target


def environment(raw_dir: Path, kernel: str | None = None, skip: int = 0, max_recordings: int = 4,
                va_base: int = DEFAULT_VA_BASE, library: Path | None = None,
                record_ranks: str | None = None) -> dict[str, str]:  # fmt: skip
    """The environment that runs a command under the recorder.

    `record_ranks`: "all", a comma-separated list of MPI ranks, or None (rank 0 when a launcher
    announces ranks, else the one process).
    """
    library = library or build()
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(filter(None, [str(library), env.get("LD_PRELOAD", "")]))
    env["MNEME_RECORD_DIR"] = str(raw_dir)
    env["MNEME_RECORD_SKIP"] = str(skip)
    env["MNEME_RECORD_MAX"] = str(max_recordings)
    env["MNEME_RECORD_VA_BASE"] = hex(va_base)
    if kernel:
        env["MNEME_RECORD_KERNEL"] = kernel
    if record_ranks:
        env["MNEME_RECORD_RANKS"] = record_ranks
    return env


def run(command: Sequence[str], raw_dir: Path, **options) -> int:
    """Run `command` under the recorder; returns its exit code (the application's, untouched)."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    env = environment(raw_dir, **options)
    try:
        return subprocess.run(list(command), env=env, check=False).returncode
    except FileNotFoundError as exc:
        raise UsageError(f"cannot run {command[0]!r}: {exc}") from exc


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
        if manifest.get("format") != "mneme-cuda-raw" or manifest.get("version") != 1:
            raise FormatError(folder / "manifest.json", "not a version-1 mneme-cuda-raw manifest", field="format")
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


def _regions(folder: Path, name: str, regions: list[list[int]]):
    """(addr, memoryview) of each region in a dump file, mapped, not read."""
    path = folder / name
    size = sum(s for _, s in regions)
    if path.stat().st_size != size:
        raise FormatError(path, f"holds {path.stat().st_size} bytes; the manifest's regions add up to {size}")
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    view = memoryview(mapped)
    offset = 0
    out = []
    for addr, length in regions:
        out.append((addr, view[offset:offset + length]))
        offset += length
    return out


def finalize(raw_dir: Path, out: Path, ir_files: Sequence[Path] = (), arch: str = "") -> list[Path]:
    """Write one recording database per recorded kernel into `out`; returns their paths.

    Each kernel's IR is linked from `ir_files` (the ones that define it); without IR the kernel
    cannot be replayed yet and is skipped with a warning (binary images come with the recorder's
    next version).
    """
    from mneme.core import ir as irmod
    from mneme.core.records import ArgInfo, RecordedExecution, dynamic_hash_of
    from mneme.core.snapshot import SnapshotType, SnapshotWriter

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counted = occurrences(raw_dir)
    by_kernel: dict[str, list[tuple[Path, dict]]] = defaultdict(list)
    for folder, manifest in launches(raw_dir):
        by_kernel[manifest["kernel"]].append((folder, manifest))
    written = []
    for kernel, items in sorted(by_kernel.items()):
        sources = [p for p in ir_files if _defines(p, kernel)]
        if not sources:
            log.warning("kernel %s: no IR among %s; not written (pass --ir with its device IR)", kernel,
                        [str(p) for p in ir_files] or "no --ir files")  # fmt: skip
            continue
        stored = []
        for source in sources:
            target = out / "ir" / Path(source).name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            stored.append(target)
        linked = irmod.link(stored, kernel)
        static_hash = irmod.module_hash(linked)[:16]
        params = irmod.kernel_params(linked, kernel)
        recorded = [tuple(p) for p in items[0][1]["params"]]
        if [(p.offset, p.size) for p in params] != recorded:
            log.warning("kernel %s: the IR's parameters %s differ from the recorded layout %s; not written",
                        kernel, [(p.offset, p.size) for p in params], recorded)  # fmt: skip
            continue
        regions = [r for _, m in items for r in m["regions"]]
        base = items[0][1]["va_base"]
        end = max((a + s for a, s in regions), default=base + GRANULARITY)
        va_size = -(-(end - base) // GRANULARITY) * GRANULARITY
        args = [ArgInfo(p.name, p.offset, p.size, p.kind if p.kind in ("pointer", "int", "float", "struct")
                        else "unknown", p.kind in ("int", "float")) for p in params]  # fmt: skip
        db_path = out / f"{static_hash}.json"
        rec = RecordedExecution.from_json(db_path) if db_path.exists() else RecordedExecution.create(
            out, kernel_name=kernel, static_hash=static_hash, backend="cuda", arch=arch or "sm_90",
            modules=stored, args=args, va_addr=base, va_size=va_size)  # fmt: skip
        rec.va_size = max(rec.va_size, va_size)
        for folder, manifest in items:
            arg_bytes = bytes.fromhex(manifest["args"])
            grid, block, shared = manifest["grid"], manifest["block"], manifest["shared_mem"]
            dynamic = dynamic_hash_of(grid, block, shared, arg_bytes)
            if dynamic in rec.kernel_instances:
                rec.add_instance(grid=grid, block=block, shared_mem=shared, args=arg_bytes,
                                 prologue=rec.kernel_instances[dynamic].prologue_path,
                                 epilogue=rec.kernel_instances[dynamic].epilogue_path)  # fmt: skip
                continue
            prologue_path = out / f"DeviceState.prologue.{static_hash}.{dynamic}.mneme"
            epilogue_path = out / f"DeviceState.epilogue.{static_hash}.{dynamic}.mneme"
            before = _regions(folder, "prologue.bin", manifest["regions"])
            after = _regions(folder, "epilogue.bin", manifest["regions"])
            with SnapshotWriter(prologue_path, SnapshotType.PROLOGUE, static_hash=static_hash,
                                dynamic_hash=dynamic) as writer:  # fmt: skip
                writer.set_args(arg_bytes)
                for addr, data in before:
                    writer.add_region(addr, data, encoding="zstd")
            with SnapshotWriter(epilogue_path, SnapshotType.EPILOGUE, static_hash=static_hash,
                                dynamic_hash=dynamic) as writer:  # fmt: skip
                writer.set_args(arg_bytes)
                for (addr, data), (_, base_data) in zip(after, before):
                    writer.add_diff_region(addr, base_data, data)
            occ = counted.get((kernel, manifest.get("instance_key", "")), 1)
            rec.add_instance(grid=grid, block=block, shared_mem=shared, args=arg_bytes, prologue=prologue_path,
                             epilogue=epilogue_path, dynamic_hash=dynamic, occurrences=max(occ, 1))  # fmt: skip
        rec.save()
        written.append(db_path)
    return written


def _defines(path: Path, kernel: str) -> bool:
    """Whether an IR file defines `kernel` (a cheap text check for .ll; bitcode is assumed to)."""
    path = Path(path)
    if path.suffix != ".ll":
        return True
    text = path.read_text(errors="replace")
    return f"@{kernel}(" in text and "define" in text


def main_record(rdb: Path, command: Sequence[str], ir_files: Sequence[Path], kernel: str | None = None,
                skip: int = 0, max_recordings: int = 4, library: Path | None = None,
                record_ranks: str | None = None) -> int:  # fmt: skip
    """`mneme record`: run, then finalize; returns the application's exit code."""
    raw = Path(rdb) / "raw"
    code = run(command, raw, kernel=kernel, skip=skip, max_recordings=max_recordings, library=library,
               record_ranks=record_ranks)  # fmt: skip
    arch = ""
    try:
        from mneme_cuda.backend import CudaBackend

        arch = CudaBackend().arch(0)
    except MnemeError:
        pass
    written = finalize(raw, Path(rdb), ir_files, arch=arch)
    _print_summary(raw, written)
    return code


def _print_summary(raw: Path, written: Sequence[Path]) -> None:
    """The final table of `mneme record`: kernels, instances, occurrences, IR, bytes."""
    from rich.console import Console
    from rich.table import Table

    from mneme.core.records import RecordedExecution

    table = Table(title=f"recorded {len(launches(raw))} launches")
    for column in ("kernel", "instances", "launches", "IR", "bytes", "database"):
        table.add_column(column)
    for path in written:
        rec = RecordedExecution.from_json(path)
        size = sum(f.stat().st_size for f in rec.referenced_files() if f.exists())
        occ = sum(i.occ for i in rec.kernel_instances.values())
        table.add_row(rec.demangled_name or rec.kernel_name, str(len(rec.kernel_instances)), str(occ),
                      "yes" if rec.llvm_files else "no", f"{size:,}", path.name)  # fmt: skip
    Console(stderr=True).print(table)
