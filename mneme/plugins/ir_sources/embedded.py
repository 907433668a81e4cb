"""IR source `embedded`: device bitcode that `mneme-cc` embedded in the process's ELF files."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence

from mneme.core.demangle import demangle
from mneme.core.errors import FormatError, IRError
from mneme.core.elf import is_elf
from mneme.core.irsource import ArchitectureMismatch, IRModule, IRSource, arch_rank
from mneme.instrument.section import SECTION_NAME, EmbeddedEntry, read_entries
from mneme.instrument.symbols import module_symbols

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)
def _entries(path: str, mtime_ns: int, size: int) -> tuple[EmbeddedEntry, ...]:
    return tuple(read_entries(path))


def entries_of(path: str | os.PathLike) -> tuple[EmbeddedEntry, ...]:
    """The embedded entries of one ELF file, cached while the file does not change."""
    path = os.path.realpath(path)
    st = os.stat(path)
    return _entries(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=1024)
def _symbols(bitcode: bytes, what: str):
    return module_symbols(bitcode, what)


def entry_symbols(entry: EmbeddedEntry):
    return _symbols(entry.bitcode, f"{entry.binary}:{SECTION_NAME}@{entry.offset} ({entry.source})")


def to_ir_module(entry: EmbeddedEntry, kernel_name: str) -> IRModule:
    return IRModule(
        kernel_name=kernel_name,
        arch=entry.arch,
        data=entry.bitcode,
        kind="bitcode",
        source=entry.source,
        origin=f"{entry.binary}:{SECTION_NAME}@{entry.offset}",
        ir_source=EmbeddedIRSource.name,
        producer=entry.clang_version,
    )


class EmbeddedIRSource(IRSource):
    """Finds a kernel in the `.mneme_ir` sections of the executable and shared libraries."""

    name = "embedded"

    def find(self, kernel_name, *, arch=None, elf_files: Sequence = (), image=None):
        defining: list[EmbeddedEntry] = []
        all_entries: list[EmbeddedEntry] = []
        for path in elf_files:
            try:
                entries = entries_of(path)
            except FormatError as exc:
                if not is_elf(path):
                    log.debug("skipping %s: %s", path, exc)
                    continue
                raise
            except OSError as exc:
                log.debug("skipping %s: %s", path, exc)
                continue
            all_entries.extend(entries)
            defining += [e for e in entries if kernel_name in (e.kernels or entry_symbols(e).kernels)]
        if not defining:
            return None
        ranked = sorted(defining, key=lambda e: arch_rank(e.arch, e.targets, arch), reverse=True)
        best = ranked[0]
        if arch_rank(best.arch, best.targets, arch) == 0:
            built = ", ".join(sorted({f"{e.arch} ({os.path.basename(e.binary)})" for e in defining}))
            raise ArchitectureMismatch(
                f"kernel {demangle(kernel_name)} ({kernel_name}) has embedded IR for {built} only, and the "
                f"device is {arch}; rebuild {best.source} for {arch} (nvcc -arch={arch.replace('compute_', 'sm_')}, "
                f"clang --offload-arch={arch}) or record it without IR"
            )
        syms = entry_symbols(best)
        if kernel_name not in syms.kernels:
            raise IRError(
                f"{best.binary}: the {SECTION_NAME} entry for {best.source} lists kernel {kernel_name} but its "
                "bitcode does not define it; rebuild with mneme-cc"
            )
        modules = [to_ir_module(best, kernel_name)]
        if best.rdc:
            modules += [to_ir_module(e, kernel_name) for e in self._rdc_dependencies(best, all_entries)]
        log.debug("kernel %s: IR from %s (%s)", kernel_name, best.source, best.arch)
        return modules

    @staticmethod
    def _rdc_dependencies(root: EmbeddedEntry, entries: list[EmbeddedEntry]) -> list[EmbeddedEntry]:
        """The other -rdc entries of the same binary and arch that define what `root` needs."""
        pool = [e for e in entries if e.binary == root.binary and e.arch == root.arch and e.rdc and e is not root]
        needed = set(entry_symbols(root).undefined)
        chosen: list[EmbeddedEntry] = []
        provided = set(entry_symbols(root).defined)
        progress = True
        while needed - provided and progress:
            progress = False
            for e in pool:
                if e in chosen:
                    continue
                syms = entry_symbols(e)
                if syms.defined & (needed - provided):
                    chosen.append(e)
                    provided |= syms.defined
                    needed |= syms.undefined
                    progress = True
        return chosen
