"""Real recordings for the database and CLI tests: clang-built IR, real snapshot files.

`make_recording` writes what a recorder writes for `scale<float>(float* x, float a, int n)`
(tests/data/kernels/scale_template.cu): the kernel's NVPTX IR, a prologue and an epilogue
snapshot per launch context, and the database `<static-hash>.json`.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
from irbuild import build_cuda_ir

from mneme.core import ir
from mneme.core.records import ArgInfo, RecordedExecution, dynamic_hash_of

KERNEL = "_Z5scaleIfEvPT_S0_i"
VA_ADDR = 0x7F00_0000_0000


def kernel_layout(ir_path: Path) -> list[ArgInfo]:
    """The argument layout the recorder derives from the IR."""
    params = ir.kernel_params(ir.load(ir_path), KERNEL)
    return [ArgInfo(f"arg{p.index}", p.offset, p.size, p.kind, p.kind != "pointer") for p in params]


def write_snapshots(
    folder: Path,
    static_hash: str,
    dyn: str,
    args: bytes,
    layout: list[ArgInfo],
    x: np.ndarray,
    factor: float,
    snapshot_dir: str = "snapshots",
) -> tuple[Path, Path]:
    from mneme.core.snapshot import RegionPolicy, SnapshotType, SnapshotWriter

    (folder / snapshot_dir).mkdir(parents=True, exist_ok=True)
    prologue = folder / snapshot_dir / f"DeviceState.prologue.{static_hash}.{dyn}.mneme"
    epilogue = folder / snapshot_dir / f"DeviceState.epilogue.{static_hash}.{dyn}.mneme"
    with SnapshotWriter(prologue, SnapshotType.PROLOGUE, static_hash=static_hash, dynamic_hash=dyn) as w:
        w.set_args(args, [(a.offset, a.size) for a in layout])
        w.add_region(VA_ADDR, x.tobytes())
    policy = RegionPolicy(dtype="f32", threshold=1e-6, relative=True, norm="Linf")
    with SnapshotWriter(epilogue, SnapshotType.EPILOGUE, static_hash=static_hash, dynamic_hash=dyn) as w:
        w.set_args(args, [(a.offset, a.size) for a in layout])
        w.add_diff_region(VA_ADDR, x.tobytes(), (x * np.float32(factor)).tobytes(), policy=policy)
    return prologue, epilogue


def make_recording(
    folder: Path, sizes: tuple[int, ...] = (256,), snapshot_dir: str = "snapshots", save: bool = True
) -> RecordedExecution:
    """A database with one launch context per entry of `sizes` (elements of x), saved in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ir").mkdir(exist_ok=True)
    ir_path = folder / "ir" / "scale_template.ll"
    shutil.copyfile(build_cuda_ir("scale_template"), ir_path)
    static_hash = ir.module_hash(ir.link([ir_path], KERNEL))[:16]
    rec = RecordedExecution.create(
        folder,
        kernel_name=KERNEL,
        static_hash=static_hash,
        backend="cuda",
        arch="sm_90",
        modules=[ir_path],
        args=kernel_layout(ir_path),
        va_addr=VA_ADDR,
        va_size=1 << 20,
    )
    for n in sizes:
        args = struct.pack("<QfI", VA_ADDR, 2.0, n)
        grid, block = ((n + 127) // 128, 1, 1), (128, 1, 1)
        dyn = dynamic_hash_of(grid, block, 0, args)
        x = np.arange(n, dtype=np.float32)
        prologue, epilogue = write_snapshots(folder, static_hash, dyn, args, rec.args, x, 2.0, snapshot_dir)
        rec.add_instance(grid=grid, block=block, shared_mem=0, args=args, prologue=prologue, epilogue=epilogue)
    if save:
        rec.save()
    return rec


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes: to assert that nothing on disk changed."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
