"""The IR-source interface: where a finalizer finds the LLVM IR of a recorded kernel.

An IR source is a class with a `name`, registered through the hook `mneme_ir_sources`.
The finalizer asks each source in turn; the first one that answers with modules wins::

    source = SourceClass()
    modules = source.find(kernel_name, arch=device_arch, elf_files=[exe, *shared_libs], image=image_bytes)
    # None: this source knows nothing about the kernel (ask the next one)
    # [IRModule, ...]: the module that defines the kernel first, then any it needs (-rdc)
    # raises ArchitectureMismatch: IR exists, but only for architectures the device cannot be
"""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import attrs

from mneme.core import plugins, targets
from mneme.core.errors import IRError


class ArchitectureMismatch(IRError):
    """A kernel's IR exists, but only for GPU architectures other than the device's."""


@attrs.frozen
class IRModule:
    """One LLVM module found for a kernel: bitcode or textual IR, and where it came from."""

    kernel_name: str  # the mangled name of the kernel this module was found for
    arch: str  # the architecture it was compiled for ("sm_90", "gfx942")
    data: bytes = attrs.field(repr=False)
    kind: str  # "bitcode" or "text"
    source: str  # the translation unit (or cache file) it was built from
    origin: str  # where it was found: "<binary>:.mneme_ir@<offset>" or a cache path
    ir_source: str  # the IR-source plugin that found it
    producer: str = ""  # the compiler that produced it, when known

    @property
    def suffix(self) -> str:
        return ".bc" if self.kind == "bitcode" else ".ll"

    def parse(self):
        """The module as a llvmlite `ModuleRef` (IRError names the origin if LLVM cannot read it)."""
        import llvmlite.binding as llvm

        try:
            if self.kind == "bitcode":
                return llvm.parse_bitcode(self.data)
            return llvm.parse_assembly(self.data.decode())
        except Exception as exc:
            raise IRError(f"{self.origin}: LLVM cannot read the IR of kernel {self.kernel_name}: {exc}") from exc

    def write(self, path: str | os.PathLike) -> Path:
        """Write the module to `path` (a `.ll` path gets textual IR, anything else the stored form)."""
        path = Path(path)
        if path.suffix == ".ll" and self.kind == "bitcode":
            path.write_text(str(self.parse()))
        elif path.suffix == ".bc" and self.kind == "text":
            path.write_bytes(self.parse().as_bitcode())
        else:
            path.write_bytes(self.data)
        return path


class IRSource(abc.ABC):
    """Finds the LLVM IR of a kernel. Subclasses set `name` and implement `find`."""

    name: ClassVar[str]

    @abc.abstractmethod
    def find(
        self,
        kernel_name: str,
        *,
        arch: str | None = None,
        elf_files: Sequence[str | os.PathLike] = (),
        image: bytes | None = None,
    ) -> list[IRModule] | None:
        """The modules that define `kernel_name` for `arch`, defining module first; None if unknown here.

        `elf_files` are the ELF files the recorded process loaded (executable, shared libraries);
        `image` is the code image the driver loaded for the kernel (one of the backend's `image_kinds`), when known.
        Raise `ArchitectureMismatch` when IR exists only for architectures `arch` cannot run.
        """


def runs_on(target: str, device_arch: str) -> bool:
    """Whether code built for `target` runs on a device of `device_arch`.

    The backend that claims `device_arch` decides (`Backend.runs_on`: its loader's rule of which
    older or portable code a newer device runs); without one, only the same architecture does.
    """
    return targets.runs_on(target, device_arch)


def arch_rank(arch: str, targets: Sequence[str], device_arch: str | None) -> int:
    """How well code of `arch` (run as `targets`) fits the device: 2 exact, 1 compatible, 0 not usable."""
    if device_arch is None or arch == device_arch or device_arch in targets:
        return 2
    return 1 if any(runs_on(t, device_arch) for t in (targets or (arch,))) else 0


PREFERRED_ORDER = ("embedded", "triton")


def resolve(
    kernel_name: str,
    *,
    arch: str | None = None,
    elf_files: Sequence[str | os.PathLike] = (),
    image: bytes | None = None,
    sources: Sequence[str] | None = None,
) -> tuple[str, list[IRModule]] | None:
    """Ask the registered IR sources in turn; (source name, modules) from the first that answers.

    `sources` names the sources to ask, in order (default: embedded, triton, then any other
    registered source by name). None when no source has the kernel; when sources have it only
    for other architectures, the first `ArchitectureMismatch` is raised.
    """
    table = plugins.registry("ir-source")
    if sources is None:
        sources = [n for n in PREFERRED_ORDER if n in table] + sorted(set(table) - set(PREFERRED_ORDER))
    mismatch: ArchitectureMismatch | None = None
    for name in sources:
        cls = plugins.lookup("ir-source", name)
        try:
            modules = cls().find(kernel_name, arch=arch, elf_files=elf_files, image=image)
        except ArchitectureMismatch as exc:
            mismatch = mismatch or exc
            continue
        if modules:
            return name, modules
    if mismatch is not None:
        raise mismatch
    return None
