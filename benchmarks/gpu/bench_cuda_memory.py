"""CUDA replay performance (issue 7): restore, verification and per-experiment overhead, as ratios in one run.

    python benchmarks/gpu/bench_cuda_memory.py [--size-mib 1024] [--json results.json]

- restore: prologue restore throughput of 2 GiB raw, zstd and LZ4 snapshot files (warm page cache,
  through pinned staging, native reader and Python reader) over a pinned host-to-device copy of
  the same bytes (target >= 0.7), beside the ceiling for reading a file: page cache -> pinned
  memory with 16 threads;
- verify: device-side compare throughput over a device-to-device copy of the same bytes
  (target >= 0.5), exact and with an f32 tolerance;
- overhead: per-experiment time outside compile and kernel time, for a small kernel (target < 5 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BASE = 0x200000000000
MiB = 1 << 20


def best_seconds(fn, repeat: int = 5) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def event_seconds(device, fn, repeat: int = 5) -> float:
    """Best time of `fn` (operations enqueued on the device's stream), by CUDA events."""
    from mneme_cuda.driver import check, driver

    cu = driver()
    start, end = (check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    fn()
    device.synchronize()
    times = []
    for _ in range(repeat):
        check(cu.cuEventRecord(start, device.stream), "cuEventRecord")
        fn()
        check(cu.cuEventRecord(end, device.stream), "cuEventRecord")
        device.synchronize()
        times.append(check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime") / 1e3)
    cu.cuEventDestroy(start)
    cu.cuEventDestroy(end)
    return min(times)


def reservation_probe(device) -> dict:
    """Which (base, size) reservations the driver places exactly at the hint (informs the recorder's range)."""
    from mneme_cuda.driver import check, driver

    cu = driver()
    honored = {}
    for base in (0x153940000000, 0x200000000000, 0x300000000000, 0x600000000000):
        for size in (2 * MiB, 64 * MiB, 512 * MiB, 1 << 30, 2 << 30, 4 << 30, 64 << 30, 1 << 40):
            got = int(check(cu.cuMemAddressReserve(size, 0, base, 0), "cuMemAddressReserve"))
            check(cu.cuMemAddressFree(got, size), "cuMemAddressFree")
            honored[f"{base:#x}+{size // MiB}MiB"] = got == base
    smallest = {}
    for key, ok in honored.items():
        base, size = key.split("+")
        if ok and base not in smallest:
            smallest[base] = size
    return {"honored": honored, "smallest_honored": smallest}


def decode_only(device, snap, addr: int) -> None:
    """Decode a region into the pinned staging buffers as a restore does, with no copy (the host side alone)."""
    from mneme_cuda.restore import STAGE_BYTES
    from mneme_cuda.memory import restore_plan

    stages, _ = device._staging()
    info = snap.region(addr)
    for i, (offset, _length, pieces) in enumerate(restore_plan(info.size, info.chunk_size, STAGE_BYTES)):
        device._decode_into(snap, addr, offset, stages[i % 2].array, pieces)


def float_field(size: int) -> np.ndarray:
    """`size` bytes of float32 like a simulation's state: a smooth field with noise in the low mantissa bits.

    One 16 MiB tile repeated (chunks compress independently, so repetition across chunks gains nothing).
    """
    tile_n = min(size, 16 * MiB) // 4
    x = np.arange(tile_n, dtype=np.float32)
    noise = np.random.default_rng(0).standard_normal(tile_n, dtype=np.float32)
    tile = (np.sin(x * 1e-4) * 100 + np.cos(x * 3e-3) * 10 + noise * 1e-2).astype(np.float32).view(np.uint8)
    out = np.empty(size, np.uint8)
    for at in range(0, size, tile.nbytes):
        out[at : at + tile.nbytes] = tile[: size - at]
    return out


@contextlib.contextmanager
def python_path(device):
    """Make `device` decode through the Python reader (as before the native reader) inside the block."""
    saved = device._native()
    device._decoder = None
    try:
        yield
    finally:
        device._decoder = saved


def sweep_threads(device, snap, size: int) -> dict:
    from mneme_cuda.snapio import NativeDecoder

    saved, found = device._native(), {}
    try:
        for threads in (4, 8, 12, 16, 24, 32):
            with NativeDecoder(threads) as decoder:
                device._decoder = decoder
                found[threads] = size / best_seconds(lambda: device.write_snapshot_region(snap, BASE), repeat=3) / 1e9
    finally:
        device._decoder = saved
    return found


def restore(device, size: int) -> dict:
    """Warm page cache (the files were just written); cold reads depend on the disk and cannot be controlled."""
    from mneme_cuda.restore import HOST_THREADS
    from mneme_cuda.driver import check, driver
    from mneme_cuda.snapio import read_parallel

    from mneme.core.snapshot import Snapshot, SnapshotType, SnapshotWriter, codec

    cu = driver()
    # (name, encoding, chunk size; None: the writer's default): LZ4 at 4 MiB, 1 MiB and 256 KiB (the writers'
    # default for LZ4) chunks; LZ4 restores decode on the device (a warp per chunk: more chunks, more parallel)
    # and, for comparison, on the host
    kinds = [("raw", "raw", None), ("zstd", "zstd", None)]
    if codec.lz4_available():
        kinds += [("lz4", "lz4", 4 * MiB), ("lz4_1m", "lz4", MiB), ("lz4_256k", "lz4", None)]
    data = float_field(size)
    pinned = device.pinned(size)
    pinned.array[:] = data
    native = device._native() is not None

    def pinned_copy():
        check(cu.cuMemcpyHtoDAsync(BASE, pinned.ptr, size, device.stream), "pinned copy")
        device.synchronize()

    t_pinned = best_seconds(pinned_copy)
    t_write = best_seconds(lambda: device.write(BASE, data), repeat=3)
    out: dict = {"bytes": size, "native_reader": native, "host_threads": HOST_THREADS}
    t = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, encoding, chunk in kinds:
            paths[name] = Path(tmp) / f"DeviceState.prologue.{name}.mneme"
            with SnapshotWriter(
                paths[name], SnapshotType.PROLOGUE, static_hash="bench", dynamic_hash="bench", chunk_size=chunk
            ) as writer:
                writer.set_args(b"\0" * 8)
                writer.add_region(BASE, data, encoding=encoding)
        with open(paths["raw"], "rb") as handle:  # the ceiling: page cache -> pinned, plain reads, no checks
            fd = handle.fileno()
            t["ceiling"] = best_seconds(lambda: read_parallel(fd, 0, size, pinned.ptr, 16, 1 << 20))
        for encoding, _, _ in kinds:
            with Snapshot.open(paths[encoding]) as snap:
                out[f"{encoding}_chunk_size"] = snap.region(BASE).chunk_size
                if encoding != "raw":
                    out[f"{encoding}_stored_ratio"] = snap.region(BASE).stored_size / size
                    out[f"{encoding}_chunk_encodings"] = sorted({c.encoding for c in snap.chunk_index(BASE).chunks})
                t[f"{encoding}_restore"] = best_seconds(lambda: device.write_snapshot_region(snap, BASE))
                out[f"{encoding}_restored_by"] = device.last_restore
                if encoding.startswith("lz4"):
                    device.restore_decode = "host"
                    t[f"{encoding}_host_decode_restore"] = best_seconds(
                        lambda: device.write_snapshot_region(snap, BASE)
                    )
                    device.restore_decode = None
                    device.write_snapshot_region(snap, BASE)  # the default path's bytes are checked below
                t[f"{encoding}_decode"] = best_seconds(lambda: decode_only(device, snap, BASE))
                with python_path(device):
                    t[f"{encoding}_python_restore"] = best_seconds(
                        lambda: device.write_snapshot_region(snap, BASE), repeat=2
                    )
                if encoding == "raw" and native:  # how the native restore scales with its thread count
                    out["restore_raw_GBps_by_threads"] = sweep_threads(device, snap, size)
                device.write_snapshot_region(snap, BASE)
                for at in (0, size // 2 + 12345, size - 4096):
                    assert device.read(BASE + at, 4096) == data[at : at + 4096].tobytes(), (encoding, at)
    gbps = lambda sec: size / sec / 1e9
    out.update(
        {
            "pinned_h2d_GBps": gbps(t_pinned),
            "write_pageable_GBps": gbps(t_write),
            "ratio_write_vs_pinned": t_pinned / t_write,
            "pagecache_to_pinned_16t_GBps": gbps(t["ceiling"]),
            "ratio_ceiling_vs_pinned": t_pinned / t["ceiling"],
        }
    )
    out["encodings"] = [name for name, _, _ in kinds]
    for encoding, _, _ in kinds:
        restore_s, python_s = t[f"{encoding}_restore"], t[f"{encoding}_python_restore"]
        out.update(
            {
                f"restore_{encoding}_GBps": gbps(restore_s),
                f"ratio_restore_{encoding}_vs_pinned": t_pinned / restore_s,
                f"ratio_restore_{encoding}_vs_ceiling": t["ceiling"] / restore_s,
                f"decode_{encoding}_into_pinned_GBps": gbps(t[f"{encoding}_decode"]),
                f"restore_{encoding}_python_reader_GBps": gbps(python_s),
                f"ratio_restore_{encoding}_python_reader_vs_pinned": t_pinned / python_s,
            }
        )
        if f"{encoding}_host_decode_restore" in t:
            host_s = t[f"{encoding}_host_decode_restore"]
            out.update(
                {
                    f"restore_{encoding}_host_decode_GBps": gbps(host_s),
                    f"ratio_restore_{encoding}_host_decode_vs_pinned": t_pinned / host_s,
                }
            )
    return out


def executor_open(size: int) -> dict:
    """`BaseExecutor.open()` of a captured kernel whose prologue holds `size` bytes: its restore and the rest."""
    sys.path[:0] = [str(ROOT / "tests" / "gpu"), str(ROOT / "tests")]
    from gpu_corpus import cuda_ir

    from mneme import capture
    from mneme.core.executor import BaseExecutor

    n = size // 8  # two float arrays of n elements
    rng = np.random.default_rng(2)
    args = [
        np.int32(n),
        np.float32(2.0),
        rng.standard_normal(n).astype(np.float32),
        rng.standard_normal(n).astype(np.float32),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        db = capture.capture(
            ir=cuda_ir("saxpy"), kernel="saxpy", grid=1024, block=256, args=args, out=tmp, backend="cuda"
        )
        del args
        opens, restores = [], []
        for _ in range(3):
            start = time.perf_counter()
            with BaseExecutor(db, backend="cuda", iterations=1) as ex:
                opened = time.perf_counter() - start
                ex.device.synchronize()
                t0 = time.perf_counter()
                ex.restore()
                restores.append(time.perf_counter() - t0)
                encodings = sorted({r.encoding for r in ex.prologue.regions})
                chunks = sorted({r.chunk_size for r in ex.prologue.regions})
                restored_by = ex.device.last_restore
                prologue_bytes = ex.prologue.size
                ok = ex.execute(ex.default_config()).ok
            opens.append(opened)
    return {
        "prologue_bytes": prologue_bytes,
        "encodings": encodings,
        "chunk_sizes": chunks,
        "restored_by": restored_by,
        "open_s": min(opens),
        "restore_s": min(restores),
        "restore_GBps": prologue_bytes / min(restores) / 1e9,
        "verified": ok,
    }


def verify(device, size: int) -> dict:
    from mneme_cuda.compare import CompareRequest

    expected = device.alloc(size)
    actual = BASE
    device.copy(expected.addr, actual, size)
    device.synchronize()
    device.copy_through = "engine"
    t_copy = event_seconds(device, lambda: device.copy(expected.addr, actual, size))
    device.copy_through = "sm"
    t_sm_copy = event_seconds(device, lambda: device.copy(expected.addr, actual, size))
    device.copy_through = "engine"
    t_exact = best_seconds(lambda: device.compare(expected.addr, actual, size))
    policy = types.SimpleNamespace(dtype="f32", threshold=1e-6, relative=True, norm="none")
    t_f32 = best_seconds(lambda: device.compare_regions([CompareRequest(expected.addr, actual, size, policy)]))
    assert device.compare(expected.addr, actual, size).ok
    device.free(expected)
    gbps = lambda t: size / t / 1e9
    return {
        "bytes": size,
        "d2d_copy_GBps": gbps(t_copy),
        "d2d_sm_copy_GBps": gbps(t_sm_copy),
        "compare_exact_GBps": gbps(t_exact),
        "compare_f32_GBps": gbps(t_f32),
        "ratio_compare_exact_vs_d2d": t_copy / t_exact,
        "ratio_compare_f32_vs_d2d": t_copy / t_f32,
    }


def overhead(runs: int = 20) -> dict:
    sys.path[:0] = [str(ROOT / "tests" / "gpu"), str(ROOT / "tests")]
    from gpu_corpus import cuda_ir

    from mneme import capture
    from mneme.core.executor import BaseExecutor

    n = 1 << 20
    rng = np.random.default_rng(1)
    args = [
        rng.standard_normal(n).astype(np.float32),
        rng.standard_normal(n).astype(np.float32),
        np.zeros(n, np.float32),
        np.int32(n),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        db = capture.capture(
            ir=cuda_ir("vector_add"), kernel="vector_add", grid=n // 256, block=256, args=args, out=tmp, backend="cuda"
        )
        with BaseExecutor(db, backend="cuda", iterations=3) as ex:
            config = ex.default_config()
            binary = ex.build(config)
            ex.execute(config, binary)  # warm: module loaded, compare kernels JIT-compiled
            walls, kernels, ok = [], [], True
            for _ in range(runs):
                start = time.perf_counter()
                result = ex.execute(config, binary)
                walls.append(time.perf_counter() - start)
                timed = result.exec_time + result.warmup_time
                kernels.append(sum(timed) + statistics.median(timed))  # + the verification launch
                ok = ok and result.ok
            fast = device_side_experiments(ex, binary, config, runs)
    per = [w - k for w, k in zip(walls, kernels)]
    return {
        "experiments": runs,
        "verified": ok,
        "overhead_ms_median": 1e3 * statistics.median(per),
        "overhead_ms_min": 1e3 * min(per),
        "wall_ms_median": 1e3 * statistics.median(walls),
        "kernel_ms_median": 1e3 * statistics.median(kernels),
        **fast,
    }


def device_side_experiments(ex, binary, config, runs: int) -> dict:
    """The same experiment with the CUDA device's fast paths: resets device to device, compare on the device."""
    from mneme_cuda.compare import CompareRequest

    device, prologue, epilogue = ex.device, ex.prologue, ex.epilogue
    pristine = {r.addr: device.upload(prologue.read_region(r.addr)) for r in prologue.regions}
    expected = {r.addr: device.upload(epilogue.read_region(r.addr)) for r in epilogue.regions}
    written = [r.addr for r in epilogue.regions if epilogue.read_region(r.addr) != prologue.read_region(r.addr)]
    sizes = {r.addr: r.size for r in epilogue.regions}
    kernel = device.load(binary)

    def reset():
        for addr in written:
            device.copy(addr, pristine[addr].addr, sizes[addr])

    walls, kernels, ok = [], [], True
    for _ in range(runs + 1):
        start = time.perf_counter()
        reset()
        device.launch(kernel, config.grid, config.block, config.shared_mem, ex.args)
        diffs = device.compare_regions([CompareRequest(expected[a].addr, a, sizes[a]) for a in expected])
        times = device.time(kernel, config.grid, config.block, config.shared_mem, ex.args, 4, before_each=reset)
        walls.append(time.perf_counter() - start)
        kernels.append(sum(times) + statistics.median(times))
        ok = ok and all(d.ok for d in diffs)
    kernel.close()
    per = [w - k for w, k in zip(walls[1:], kernels[1:])]
    return {"device_paths_overhead_ms_median": 1e3 * statistics.median(per), "device_paths_verified": ok}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--restore-mib", type=int, default=2048, help="bytes of the restore section's snapshots")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    from mneme_cuda.backend import CudaBackend

    backend = CudaBackend()
    if not backend.availability().usable:
        print(f"skipped: {backend.availability().reason}")
        return 0
    size = opts.size_mib * MiB
    restore_size = opts.restore_mib * MiB
    figures: dict = {}

    def section(name, fn, *args):
        try:
            figures[name] = fn(*args)
        except Exception as exc:  # one broken figure must not hide the others
            logging.exception("benchmark %s failed", name)
            figures[name] = {"error": repr(exc)}
        if opts.json:  # each section as it ends: a run cut short keeps what it measured
            opts.json.write_text(json.dumps(figures, indent=2))

    with backend.open_device(0) as device:
        figures["device"] = device.info.name
        section("reservations", reservation_probe, device)
        device.reserve(BASE, 2 * max(size, restore_size))
        device.map(BASE, max(size, restore_size))
        section("restore", restore, device, restore_size)
        section("verify", verify, device, size)
    section("overhead", overhead)
    section("executor_open", executor_open, min(size, 512 * MiB))
    r, v, o, p = (figures[k] for k in ("restore", "verify", "overhead", "reservations"))
    lines = []
    if "error" not in r:
        reader = "native reader" if r["native_reader"] else "Python reader (native reader NOT built)"
        lines.append(
            f"restore   {r['bytes'] >> 20} MiB of float32 field data, warm page cache, {reader}, "
            f"{r['host_threads']} host threads: pinned H2D {r['pinned_h2d_GBps']:.1f} GB/s; ceiling "
            f"page cache -> pinned (16 threads, plain reads) {r['pagecache_to_pinned_16t_GBps']:.1f} GB/s "
            f"= {r['ratio_ceiling_vs_pinned']:.2f}x; raw snapshot restore {r['restore_raw_GBps']:.1f} GB/s "
            f"= {r['ratio_restore_raw_vs_pinned']:.2f}x (target >= 0.7; {r['ratio_restore_raw_vs_ceiling']:.2f}x "
            f"of the ceiling; Python reader {r['restore_raw_python_reader_GBps']:.1f} GB/s = "
            f"{r['ratio_restore_raw_python_reader_vs_pinned']:.2f}x); zstd snapshot (stored "
            f"{100 * r['zstd_stored_ratio']:.0f}%, chunk encodings {r['zstd_chunk_encodings']}) "
            f"{r['restore_zstd_GBps']:.1f} GB/s = {r['ratio_restore_zstd_vs_pinned']:.2f}x (Python reader "
            f"{r['restore_zstd_python_reader_GBps']:.1f} GB/s = "
            f"{r['ratio_restore_zstd_python_reader_vs_pinned']:.2f}x); host decode alone (one fill at a time): raw "
            f"{r['decode_raw_into_pinned_GBps']:.1f} GB/s, zstd {r['decode_zstd_into_pinned_GBps']:.1f} GB/s; "
            f"write (pageable, staged) {r['write_pageable_GBps']:.1f} GB/s = {r['ratio_write_vs_pinned']:.2f}x"
            + "; raw restore by native threads: "
            + ", ".join(f"{n}: {g:.1f}" for n, g in r.get("restore_raw_GBps_by_threads", {}).items())
        )
        for k in (k for k in r.get("encodings", []) if k.startswith("lz4")):
            chunk = f"{r[k + '_chunk_size'] >> 10} KiB"
            lines.append(
                f"restore   {k} snapshot ({chunk} chunks, stored {100 * r[k + '_stored_ratio']:.0f}%, chunk "
                f"encodings {r[k + '_chunk_encodings']}) restored by {r[k + '_restored_by']} "
                f"{r['restore_' + k + '_GBps']:.1f} GB/s = {r['ratio_restore_' + k + '_vs_pinned']:.2f}x of "
                f"pinned H2D (target >= 0.7); decoding on the host instead "
                f"{r['restore_' + k + '_host_decode_GBps']:.1f} GB/s = "
                f"{r['ratio_restore_' + k + '_host_decode_vs_pinned']:.2f}x; host decode alone "
                f"{r['decode_' + k + '_into_pinned_GBps']:.1f} GB/s; Python reader "
                f"{r['ratio_restore_' + k + '_python_reader_vs_pinned']:.2f}x"
            )
    e = figures.get("executor_open", {})
    if "error" not in e:
        lines.append(
            f"open      BaseExecutor.open() of a {e['prologue_bytes'] >> 20} MiB prologue ({'/'.join(e['encodings'])}, "
            f"{'/'.join(f'{c >> 10} KiB' for c in e['chunk_sizes'])} chunks) {e['open_s']:.2f} s; its "
            f"restore() by {e['restored_by']} {e['restore_s'] * 1e3:.0f} ms = {e['restore_GBps']:.1f} GB/s, "
            f"verified={e['verified']}"
        )
    if "error" not in v:
        lines.append(
            f"verify    D2D copy {v['d2d_copy_GBps']:.0f} GB/s; compare exact {v['compare_exact_GBps']:.0f} GB/s "
            f"= {v['ratio_compare_exact_vs_d2d']:.2f}x; f32 {v['compare_f32_GBps']:.0f} GB/s "
            f"= {v['ratio_compare_f32_vs_d2d']:.2f}x (target >= 0.5)"
        )
    if "error" not in o:
        lines.append(
            f"overhead  per experiment {o['overhead_ms_median']:.2f} ms median (target < 5 ms), "
            f"verified={o['verified']}; with device-side reset and compare "
            f"{o['device_paths_overhead_ms_median']:.2f} ms, verified={o['device_paths_verified']}"
        )
    if "error" not in p:
        lines.append(
            "reserve   smallest span placed at the hint: "
            + ", ".join(f"{b}: {sz}" for b, sz in p["smallest_honored"].items())
        )
    lines += [f"{name}: FAILED {f['error']}" for name, f in figures.items() if isinstance(f, dict) and "error" in f]
    figures["summary"] = lines
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
