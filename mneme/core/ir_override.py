"""Replacement IR for a recorded kernel: a user's edited module compiled instead of the recording's.

An `IROverride` is the IR's bytes (text or bitcode), their SHA-256 and a label for messages. It
travels with each job to the worker processes (`mneme.core.workers`), which parse it there, in
the isolated process, exactly as they parse a recording's IR: bounded by the ``ir_bytes`` limit,
bitcode probed in a child first, verified, then linked for the kernel (internalized, pruned) and
compiled through the same backend checks (the host backend's allowlist included). Its hash starts
every variant hash built from it, so the build caches never hand out the recording's binary for
it, nor its binary for the recording.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import attrs

from mneme.core import ir, limits
from mneme.core.errors import IRError, MnemeError, UsageError


@attrs.frozen
class IROverride:
    """The IR that replaces a recording's: `data` (IR text as UTF-8, or bitcode), its `sha256`, a `label`."""

    data: bytes = attrs.field(repr=False)
    sha256: str
    label: str

    @classmethod
    def of(cls, source: bytes | str | os.PathLike, label: str | None = None) -> IROverride:
        """From bitcode or IR-text bytes, IR text, or a path to a ``.ll``/``.bc`` file (read here, bounded).

        Nothing is parsed here (that happens in the worker that compiles it); the size is checked
        against the ``ir_bytes`` limit. A file that cannot be read is a `UsageError` naming it.
        """
        if isinstance(source, os.PathLike):
            path = Path(source)
            try:
                data = limits.read_bytes(path, "IR file", limit_name="ir_bytes")
            except MnemeError as exc:  # missing, not a regular file, over the limit
                raise UsageError(f"replacement IR: {exc}") from None
            label = label or str(path)
        elif isinstance(source, str):
            data = source.encode()
        elif isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
        else:
            raise UsageError(
                f"replacement IR must be IR text, bitcode bytes or a path to a .ll/.bc file, not {type(source).__name__}"
            )
        digest = hashlib.sha256(data).hexdigest()
        label = label or f"replacement IR sha256:{digest[:12]}"
        if not data.strip():
            raise UsageError(f"{label}: empty; give LLVM IR text, bitcode or a .ll/.bc file")
        limits.check("ir_bytes", len(data), f"{label}: its size")
        return cls(data, digest, label)


def link_override(
    override: IROverride, kernel_name: str, prune: bool, internalize: bool, recorded: ir.ModuleRef | None = None
) -> ir.ModuleRef:
    """The override parsed, verified and linked for `kernel_name` (internalized and pruned as asked).

    With `recorded` (the recording's own linked module), the kernel's parameters must sit where the
    recorded argument buffer has them: replay passes the recorded argument bytes, so a kernel with
    other parameters would read them wrongly. Raises `IRError` (or `MalformedIRError`) naming the label.
    """
    module = ir.load(override.data, name=override.label)
    try:
        linked = ir.link(module, kernel_name, prune=prune, internalize=internalize)
    except IRError as exc:
        raise IRError(f"{override.label}: {exc}") from None
    finally:
        module.close()
    if recorded is not None:
        try:
            _check_params(linked, recorded, kernel_name, override.label)
        except BaseException:
            linked.close()
            raise
    return linked


def _check_params(linked: ir.ModuleRef, recorded: ir.ModuleRef, kernel_name: str, label: str) -> None:
    mine = [(p.offset, p.size) for p in ir.kernel_params(linked, kernel_name)]
    theirs = [(p.offset, p.size) for p in ir.kernel_params(recorded, kernel_name)]
    if mine != theirs:
        raise IRError(
            f"{label}: kernel {kernel_name!r} takes parameters at (offset, size) {mine}, but the recording's "
            f"kernel takes {theirs}; the replay passes the recorded arguments, so keep the kernel's signature"
        )
