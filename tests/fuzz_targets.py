"""Fuzz targets shared by the hypothesis properties (tests/core/test_safe_open_fuzz.py) and the atheris job
(tests/fuzz/run.py): each takes the bytes of one input and returns, or raises a `MnemeError`.

Anything else escaping a target is a finding. The limits are lowered (1 MiB buffers, 10 s runs) so a
fuzzer cannot make the machine swap, which is the configurability the limits promise.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path

from mneme.core.errors import MnemeError

#: Lower limits while a target runs (restored after, so other tests in the process see the defaults).
LIMITS = {
    "MNEME_LIMIT_BUFFER_BYTES": str(1 << 20),
    "MNEME_LIMIT_TEXT_BYTES": str(1 << 20),
    "MNEME_LIMIT_PARAM_VALUES": "10000",
    "MNEME_LIMIT_JSON_NODES": "200",
    "MNEME_LIMIT_VALUE_CHARS": "4096",
    "MNEME_LIMIT_SPACE_BYTES": str(64 << 10),
    "MNEME_LIMIT_IR_BYTES": str(1 << 20),
}


@contextlib.contextmanager
def lowered_limits():
    saved = {k: os.environ.get(k) for k in LIMITS}
    os.environ.update(LIMITS)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _limited(function):
    @functools.wraps(function)
    def run(*args, **kwargs):
        with lowered_limits():
            return function(*args, **kwargs)

    return run


CORPUS = Path(__file__).resolve().parent / "fuzz" / "corpus"
_scratch: Path | None = None


def scratch() -> Path:
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="mneme-fuzz-"))
    return _scratch


# -- snapshots -------------------------------------------------------------------------------------


def seed_snapshot(folder: Path) -> bytes:
    """A small prologue with a raw, a zstd and a shuffled region, and a global: the snapshot seed."""
    import numpy as np

    from mneme.core.snapshot import RegionPolicy, SnapshotWriter

    path = Path(folder) / "DeviceState.prologue.s.d.mneme"
    with SnapshotWriter(path, "prologue", static_hash="s", dynamic_hash="d", chunk_size=4096) as w:
        w.set_args(bytes(range(16)), [(0, 8), (8, 8)])
        w.add_region(0x7000_0000, bytes(range(256)) * 3)
        w.add_region(
            0x7100_0000, np.arange(3000, dtype=np.float32).tobytes(), encoding="zstd", policy=RegionPolicy("f32", 1e-6)
        )
        w.add_region(0x7200_0000, bytes(5000), encoding="zstd")
        w.add_global("g", b"\x01\x02\x03\x04")
    return path.read_bytes()


def mutate(blob: bytes, edits, cut: int) -> bytes:
    data = bytearray(blob[:cut] if cut else blob)
    for at, value in edits:
        if data:
            data[at % len(data)] = value
    return bytes(data)


def _native():
    from mneme.core.snapshot import snapio

    return snapio if snapio.library() is not None else None


@_limited
def read_snapshot(path: Path) -> None:
    """Open, verify and read every region with the Python reader, and compare with the native reader."""
    from mneme.core.snapshot import Snapshot

    try:
        snap = Snapshot.open(path)
    except MnemeError:
        return
    with snap:
        regions = list(snap.regions)
        python: dict[int, bytes | None] = {}
        for region in regions:
            try:
                python[region.addr] = bytes(snap.read_region(region.addr))
            except MnemeError:
                python[region.addr] = None
        try:
            snap.verify()
        except MnemeError:
            pass
        snapio = _native()
        if snapio is None:
            return
        import numpy as np

        with snapio.NativeDecoder(1) as decoder:
            for region in regions:
                out = np.zeros(region.size, np.uint8)
                try:
                    decoder.read_range_into(snap, region.addr, 0, out)
                    native = out.tobytes()
                except MnemeError:
                    native = None
                assert native == python[region.addr], f"readers disagree on region 0x{region.addr:x} of {path}"


def snapshot_target(blob: bytes) -> None:
    path = scratch() / "DeviceState.prologue.s.d.mneme"
    path.write_bytes(blob)
    read_snapshot(path)


# -- recording databases --------------------------------------------------------------------------


@_limited
def load_database(folder: Path, blob: bytes) -> None:
    from mneme.core.records import RecordedExecution

    path = Path(folder) / "s.json"
    path.write_bytes(blob)
    try:
        rec = RecordedExecution.from_json(path)
    except MnemeError:
        return
    rec.to_dict()
    repr(rec)


def database_target(blob: bytes) -> None:
    folder = scratch() / "db"
    folder.mkdir(exist_ok=True)
    (folder / "k.ll").write_text("")
    load_database(folder, blob)


# -- capture descriptions -------------------------------------------------------------------------


@_limited
def build_capture_args(folder: Path, blob: bytes) -> None:
    from mneme import capture

    path = Path(folder) / "spec.yaml"
    path.write_bytes(blob)
    from mneme.capture_spec import build_buffers, build_globals

    try:
        spec = capture.load_spec(path)
        capture.build_args(spec, path, Path(folder))
        build_buffers(spec, path, Path(folder))
        build_globals(spec, {"table": 16, "bias": 4}, path, Path(folder))  # as a module's globals
    except MnemeError:
        return


def capture_target(blob: bytes) -> None:
    folder = scratch() / "capture"
    folder.mkdir(exist_ok=True)
    build_capture_args(folder, blob)


# -- search spaces and constraints ----------------------------------------------------------------


@_limited
def load_space_text(folder: Path, blob: bytes, suffix: str = ".yaml") -> None:
    from mneme.core.tuning.space import load_space

    path = Path(folder) / f"space{suffix}"
    path.write_bytes(blob)
    try:
        space = load_space(str(path), None, None)
        space.describe()
    except MnemeError:
        return


def space_target(blob: bytes) -> None:
    folder = scratch() / "space"
    folder.mkdir(exist_ok=True)
    load_space_text(folder, blob)


@_limited
def constraint_text(blob: bytes) -> None:
    from mneme.core.tuning.constraints import Constraint

    try:
        text = blob.decode("utf-8")
        constraint = Constraint(text)
        constraint.holds({"a": 3, "b": -7, "x": 0, "block_x": 128, "codegen_method": "ptxas", "s": "s" * 1000})
    except UnicodeDecodeError:
        return
    except MnemeError:
        return


# -- kernel IR (text or bitcode) ------------------------------------------------------------------


@_limited
def ir_target(blob: bytes) -> None:
    """Parse and verify one module as `mneme.core.ir.load` does for a recording's or a capture's IR."""
    from mneme.core import ir

    try:
        ir.load(blob, name="fuzz.ir")
    except MnemeError:
        return


TARGETS = {
    "snapshot": snapshot_target,
    "database": database_target,
    "capture": capture_target,
    "space": space_target,
    "constraint": constraint_text,
    "ir": ir_target,
}


def seeds(name: str) -> list[bytes]:
    folder = CORPUS / name
    return [p.read_bytes() for p in sorted(folder.iterdir())] if folder.is_dir() else []
