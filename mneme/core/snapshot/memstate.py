"""`MemStateRef`: the seed API's handle to one snapshot file of a recorded kernel launch."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from mneme.core.errors import FormatError, MnemeError
from mneme.core.snapshot.compare import compare
from mneme.core.snapshot.format import SnapshotType
from mneme.core.snapshot.reader import Snapshot

log = logging.getLogger(__name__)

_EPILOGUE_NAME = re.compile(r"^(.*)\bepilogue\b(.*)$")


class MemStateRef:
    """Handle to one snapshot file (prologue or epilogue) of a kernel launch.

    Raises `FormatError` at construction if the file is missing. Loading (`open()` or
    `with`) reads and validates it; `args`, `num_args`, `snapshot` raise until then. An
    epilogue with diff regions needs its prologue: pass `base` (a `MemStateRef`, `Snapshot`
    or path), or it is found next to it by name (`...prologue...` for `...epilogue...`).

    `reset(device)` (or `bind(device)` then `reset()`) writes the recorded contents to a
    `mneme.core.backend.Device`: all regions, or the given (addr, size) ranges.
    """

    def __init__(self, fn: str | os.PathLike, kernel_name: str, snap_type: SnapshotType | str, base=None):
        self.path = Path(fn)
        self.kernel_name = kernel_name
        self.snap_type = SnapshotType.of(snap_type)
        self._base_arg = base
        self._snapshot: Snapshot | None = None
        self._owned_base: Snapshot | None = None
        self._device = None
        if not self.path.is_file():
            raise FormatError(
                self.path,
                f"{self.snap_type.value} snapshot of kernel {kernel_name!r} not found; "
                "check the recording database's Prologue/Epilogue entries",
            )

    # -- lifetime -----------------------------------------------------------------------------
    def open(self) -> MemStateRef:
        """Load the snapshot (validating its structure) and return self; a no-op when loaded."""
        if self._snapshot is not None:
            return self
        base = self._resolve_base()
        try:
            snap = Snapshot.open(self.path, base=base)
        except BaseException:
            self._close_base()
            raise
        if snap.kind is not self.snap_type:
            snap.close()
            self._close_base()
            raise FormatError(
                self.path,
                f"holds a {snap.kind.value} but is used as the {self.snap_type.value} of kernel {self.kernel_name!r}",
            )
        self._snapshot = snap
        return self

    def close(self) -> None:
        snap, self._snapshot = self._snapshot, None
        if snap is not None:
            snap.close()
        self._close_base()

    def __enter__(self) -> MemStateRef:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - disposal never raises from a finalizer
            pass

    @property
    def loaded(self) -> bool:
        return self._snapshot is not None

    # -- contents -----------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            raise MnemeError(
                f"{self.path}: the {self.snap_type.value} of kernel {self.kernel_name!r} is not "
                "loaded; call open() or use it in a with block"
            )
        return self._snapshot

    @property
    def args(self) -> bytes:
        """The recorded packed argument buffer."""
        return self.snapshot.args

    @property
    def num_args(self) -> int:
        return self.snapshot.num_args

    @property
    def arg_values(self) -> list[bytes]:
        """Each argument's bytes, per the recorded layout."""
        args = self.snapshot.args
        return [args[o : o + n] for o, n in self.snapshot.arg_layout]

    @property
    def regions(self):
        return self.snapshot.regions

    @property
    def globals(self) -> dict[str, bytes]:
        return self.snapshot.globals

    def bind(self, device) -> MemStateRef:
        """Remember the device that `reset()` restores (the seed API's argument-less reset)."""
        self._device = device
        return self

    def reset(self, device=None, ranges: list[tuple[int, int]] | None = None, *, chunk_size: int = 64 << 20) -> None:
        """Write the recorded contents to `device` (anything with `write(addr, data)`), or the bound one.

        `ranges` limits it to (addr, size) byte ranges, e.g. `changed_regions(prologue, epilogue)`.
        Mapping memory is the executor's job, and so are globals, which need a loaded kernel
        (`device.write_global`).
        """
        snap = self.snapshot
        device = device if device is not None else self._device
        if device is None:
            raise MnemeError(f"{self.path}: reset() needs a device: pass one or bind(device) first")
        if ranges is None:
            for info in snap.regions:
                offset = 0
                for piece in snap.iter_region(info.addr, chunk_size=chunk_size):
                    device.write(info.addr + offset, piece)
                    offset += len(piece)
            return
        regions = snap.regions
        for addr, size in ranges:
            info = next((r for r in regions if r.addr <= addr and addr + size <= r.end), None)
            if info is None:
                raise MnemeError(f"{self.path}: range 0x{addr:x} (+{size}) is not inside one recorded region")
            for start in range(addr, addr + size, chunk_size):
                n = min(chunk_size, addr + size - start)
                device.write(start, snap.read_range(info.addr, start - info.addr, n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemStateRef):
            return NotImplemented
        a, b = self.snapshot, other.snapshot
        if a.args != b.args or a.arg_layout != b.arg_layout or a.globals != b.globals:
            return False
        if [(r.addr, r.size) for r in a.regions] != [(r.addr, r.size) for r in b.regions]:
            return False
        return compare(a, b).ok if a.regions else True

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None  # equality is by contents of a mutable handle

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded"
        return f"<MemStateRef {self.snap_type.value} of {self.kernel_name!r}: {self.path} ({state})>"

    # -- internals -----------------------------------------------------------------------------
    def _resolve_base(self) -> Snapshot | None:
        base = self._base_arg
        if self.snap_type is SnapshotType.PROLOGUE:
            return None
        if isinstance(base, Snapshot):
            return base
        if isinstance(base, MemStateRef):
            return base.open().snapshot
        if base is None:
            match = _EPILOGUE_NAME.match(self.path.name)
            guess = self.path.with_name(f"{match.group(1)}prologue{match.group(2)}") if match else None
            if guess is None or not guess.is_file():
                return None  # fine unless the epilogue holds diff regions, which then says what to do
            base = guess
        self._owned_base = Snapshot.open(base)
        return self._owned_base

    def _close_base(self) -> None:
        base, self._owned_base = self._owned_base, None
        if base is not None:
            base.close()
