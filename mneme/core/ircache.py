"""The build cache: compiled variants keyed by variant hash + the backend's toolchain + arch + config.

Two levels: a per-process dictionary (an identical variant compiles once per process) and a
directory shared by processes (`$MNEME_CACHE_DIR/builds`, default `~/.cache/mneme/builds`).
Writers put a temporary file next to the entry and `os.replace` it, so concurrent writers
never expose a partial entry; the directory is bounded in size, evicting the least
recently used entries first. A corrupt entry is ignored (and removed), never trusted.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import attrs

from mneme.core import envvars, fsutil
from mneme.core.backend import DeviceBinary, Resources
from mneme.core.native import cache_root
from mneme.core.types import ExperimentConfiguration, build_fields, canonical_json

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 512 << 20
_MAGIC = b"MNEMEBIN1\n"
_ALIAS = b"MNEMEALIAS1\n"  # a request key's entry: the build key it resolved to


def build_key(
    variant_hash: str,
    config: ExperimentConfiguration,
    toolchain: Mapping[str, str],
    arch: str,
    emit: str,
    *,
    kernel: str = "",
    intermediate: bool = False,
) -> str:
    """The cache key of one build: SHA-256 over everything that changes its output.

    `toolchain` is what the backend declares about its tools (`Backend.toolchain(arch)`);
    of the configuration, the fields `params.build_fields()` names count (the rest are in the variant hash).
    `kernel`: the kernel the binary is for (a module that is not pruned to one kernel has one
    variant hash for all of its kernels). `intermediate`: the key of a backend's intermediate code
    (`Backend.intermediate`), which the assemble stage's fields do not change.
    """
    data = {
        "variant": variant_hash,
        "kernel": kernel,
        "arch": arch,
        "emit": emit,
        "config": build_fields(config, assemble=not intermediate),
        "toolchain": dict(toolchain),
    }
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


@functools.lru_cache(maxsize=4096)
def _config_text(config: ExperimentConfiguration) -> str:
    return config.canonical_json()


def request_key(
    base_hash: str,
    kernel_name: str,
    config: ExperimentConfiguration,
    toolchain: Mapping[str, str],
    arch: str,
    emit: str,
    args: bytes | None,
    arg_layout,
    specialize_indexes,
    extra_transforms,
    pipeline_plugins=(),
) -> str:
    """The key of a compile request: the input IR's hash and everything the transforms and build read.

    Equal requests give equal builds, so a hit needs no preprocessing; argument bytes count
    only when the configuration specializes them; `pipeline_plugins` names the plugins in the
    transform pipeline besides the core.
    """
    uses_args = bool(config.specialize)
    data = {
        "base": base_hash,
        "kernel": kernel_name,
        "config": _config_text(config),
        "arch": arch,
        "emit": emit,
        "toolchain": dict(toolchain),
        "extra": sorted(extra_transforms),
        "args": hashlib.sha256(bytes(args)).hexdigest() if uses_args and args is not None else None,
        "layout": [[a.offset, a.size, bool(getattr(a, "specializable", True))] for a in arg_layout]
        if uses_args and arg_layout is not None
        else None,
        "indexes": sorted(specialize_indexes) if uses_args and specialize_indexes is not None else None,
    }
    if pipeline_plugins:  # plugins in the transform pipeline decide the build too (absent: keys as before)
        data["pipeline"] = sorted(pipeline_plugins)
    return "r" + hashlib.sha256(canonical_json(data).encode()).hexdigest()[1:]


def _encode(binary: DeviceBinary) -> bytes:
    header = {
        "backend": binary.backend,
        "arch": binary.arch,
        "kind": binary.kind,
        "kernel_name": binary.kernel_name,
        "resources": attrs.asdict(binary.resources),
        "stage_times": binary.stage_times,
        "variant_hash": binary.variant_hash,
        "sha256": hashlib.sha256(binary.data).hexdigest(),
    }
    head = json.dumps(header, sort_keys=True).encode()
    return _MAGIC + len(head).to_bytes(8, "little") + head + binary.data


def _decode(blob: bytes) -> DeviceBinary | None:
    if not blob.startswith(_MAGIC):
        return None
    pos = len(_MAGIC)
    size = int.from_bytes(blob[pos : pos + 8], "little")
    try:
        header = json.loads(blob[pos + 8 : pos + 8 + size])
    except ValueError:
        return None
    data = blob[pos + 8 + size :]
    if hashlib.sha256(data).hexdigest() != header.get("sha256"):
        return None
    return DeviceBinary(
        header["backend"],
        header["arch"],
        header["kind"],
        header["kernel_name"],
        data,
        Resources(**header["resources"]),
        header["stage_times"],
        header["variant_hash"],
    )


class BuildCache:
    """Process memory in front of a size-bounded directory of builds."""

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        memory_entries: int = 256,
        disk: bool = True,
    ):
        self.directory = Path(directory) if directory else cache_root() / "builds"
        self.max_bytes = max_bytes
        self.disk = disk
        self._memory: OrderedDict[str, DeviceBinary] = OrderedDict()
        self._memory_entries = memory_entries
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.bin"

    def get(self, key: str) -> DeviceBinary | None:
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                self.hits += 1
                return self._memory[key]
        binary = None
        if self.disk:
            path = self._path(key)
            try:
                blob = path.read_bytes()
                if blob.startswith(_ALIAS):
                    path = self._path(blob[len(_ALIAS) :].decode("ascii"))
                    blob = path.read_bytes()
            except (OSError, UnicodeDecodeError):
                blob = None
            if blob is not None:
                binary = _decode(blob)
                if binary is None:
                    log.warning("ignoring a corrupt build cache entry %s", path)
                    path.unlink(missing_ok=True)
                else:
                    try:
                        os.utime(path)  # recently used: evicted last
                    except OSError:
                        pass
        with self._lock:
            if binary is None:
                self.misses += 1
                return None
            self.hits += 1
            self._remember(key, binary)
        return binary

    def _remember(self, key: str, binary: DeviceBinary) -> None:
        self._memory[key] = binary
        self._memory.move_to_end(key)
        while len(self._memory) > self._memory_entries:
            self._memory.popitem(last=False)

    def put(self, key: str, binary: DeviceBinary, *, alias_of: str | None = None) -> None:
        """Store `binary` under `key`; with `alias_of`, the disk entry only points at that build key."""
        with self._lock:
            self._remember(key, binary)
        if not self.disk:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
            try:
                os.fchmod(fd, fsutil.file_mode(path))  # the user's umask, not mkstemp's 0600: caches are shared
                with os.fdopen(fd, "wb") as f:
                    f.write(_ALIAS + alias_of.encode("ascii") if alias_of else _encode(binary))
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            self.evict()
        except OSError as exc:  # a read-only or full cache must not fail the build
            log.warning("could not write the build cache entry %s: %s", path, exc)

    def entries(self) -> list[tuple[Path, os.stat_result]]:
        found = []
        if self.directory.exists():
            for path in self.directory.glob("*/*.bin"):
                try:
                    found.append((path, path.stat()))
                except OSError:
                    continue
        return found

    def size(self) -> int:
        return sum(st.st_size for _, st in self.entries())

    def evict(self) -> int:
        """Remove the least recently used entries until the directory fits `max_bytes`."""
        entries = self.entries()
        total = sum(st.st_size for _, st in entries)
        removed = 0
        for path, st in sorted(entries, key=lambda e: e[1].st_mtime):
            if total <= self.max_bytes:
                break
            try:
                path.unlink()
                total -= st.st_size
                removed += 1
            except OSError:
                continue
        return removed

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()


_default: BuildCache | None = None
_default_lock = threading.Lock()


def default_cache() -> BuildCache:
    """The process-wide cache; `MNEME_CACHE_DIR` and `MNEME_CACHE_MAX_BYTES` configure it."""
    global _default
    with _default_lock:
        if _default is None:
            max_bytes = envvars.get_int("MNEME_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES, minimum=0)
            disk = (envvars.get("MNEME_CACHE_DISABLE") or "").lower() not in ("1", "true", "yes")
            _default = BuildCache(max_bytes=max_bytes, disk=disk)
        return _default
