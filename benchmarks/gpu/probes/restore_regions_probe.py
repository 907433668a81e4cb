#!/usr/bin/env python3
"""How does prologue restore scale with region size and region count? (issue 7, restore target)

    python benchmarks/gpu/probes/restore_regions_probe.py [--json out.json]

The memory benchmark restores one 2 GiB region; recordings hold several smaller ones (the
memory benchmark's BaseExecutor.open() case: two 256 MiB regions of random floats). For one
region of 16 MiB to 1 GiB (the benchmark's float field and random floats, LZ4 at the writers'
default chunk size, and raw), and for prologues of several regions (restored in one pass, and
region by region), the restore time against a pinned H2D copy of the same bytes, decoding on
the device, on the host and as "auto" picks; and a profile of where one 256 MiB device-decode
restore spends its host time. Best of 5 each. No assertion.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_cuda_memory import BASE, best_seconds, float_field  # noqa: E402

MiB = 1 << 20


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    from cuda.bindings import driver as cu
    from mneme_cuda.backend import CudaBackend

    from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotWriter

    figures: dict = {"single": [], "multi": []}
    biggest = 1024 * MiB
    with CudaBackend().open_device(0) as device, tempfile.TemporaryDirectory() as tmp:
        space = device.alloc(biggest)
        pinned = device.pinned(biggest)
        field = float_field(biggest)
        noise = np.random.default_rng(1).standard_normal(biggest // 4).astype(np.float32).view(np.uint8)
        pinned.array[:] = field

        def h2d(n: int) -> float:
            def copy():
                cu.cuMemcpyHtoDAsync(space.addr, pinned.ptr, n, device.stream)
                device.synchronize()

            return best_seconds(copy)

        def restore_all(snap) -> None:  # one pass over every region
            device.write_snapshot_regions(snap, [(r.addr, space.addr + (r.addr - BASE)) for r in snap.regions])

        def restore_each(snap) -> None:  # region by region
            for region in snap.regions:
                device.write_snapshot_region(snap, region.addr, space.addr + (region.addr - BASE))

        def timed(snap, mode: str) -> tuple[float, str]:
            device.restore_decode = mode
            seconds = best_seconds(lambda: restore_all(snap))
            device.restore_decode = None
            return seconds, device.last_restore

        def write(name: str, sizes: list[int], source: np.ndarray, encoding: str) -> Path:
            path = Path(tmp) / f"DeviceState.prologue.{name}.mneme"
            with SnapshotWriter(path, "prologue") as w:
                w.set_args(b"\0" * 8)
                at = 0
                for size in sizes:
                    w.add_region(BASE + at, source[at : at + size], encoding=encoding, policy=RegionPolicy("f32"))
                    at += size
            return path

        cases = [
            ("single", [s * MiB], src, name)
            for s in (16, 64, 128, 256, 1024)
            for src, name in ((field, "field"), (noise, "noise"))
        ]
        cases += [("multi", [n * MiB] * (512 // n), field, "field") for n in (16, 64, 256)]
        cases += [("multi", [256 * MiB] * 2, noise, "noise")]
        for group, sizes, source, data_name in cases:
            total = sum(sizes)
            t_h2d = h2d(total)
            row = {
                "regions": len(sizes),
                "region_MiB": sizes[0] // MiB,
                "data": data_name,
                "h2d_GBps": total / t_h2d / 1e9,
            }
            for encoding in ("lz4", "raw"):
                path = write(f"{group}-{len(sizes)}-{data_name}-{encoding}", sizes, source, encoding)
                with Snapshot.open(path) as snap:
                    if encoding == "raw":
                        seconds, by = timed(snap, "auto")
                        row.update({"raw_ratio": t_h2d / seconds, "raw_by": by})
                        if len(sizes) > 1:
                            row["raw_each_ratio"] = t_h2d / best_seconds(lambda: restore_each(snap))
                        continue
                    if len(sizes) > 1:
                        device.restore_decode = "host"
                        row["lz4_host_each_ratio"] = t_h2d / best_seconds(lambda: restore_each(snap))
                        device.restore_decode = None
                    seconds, by = timed(snap, "auto")
                    row.update({"lz4_auto_ratio": t_h2d / seconds, "lz4_auto_by": by})
                    row["lz4_stored"] = sum(r.stored_size for r in snap.regions) / total
                    for mode in ("device", "host"):
                        seconds, by = timed(snap, mode)
                        row[f"lz4_{mode}_ratio"] = t_h2d / seconds
                        row[f"lz4_{mode}_ms"] = seconds * 1e3
                        row[f"lz4_{mode}_by"] = by
                    if group == "single" and sizes[0] == 256 * MiB and data_name == "noise":
                        device.restore_decode = "device"
                        profile = cProfile.Profile()
                        profile.enable()
                        for _ in range(5):
                            restore_all(snap)
                        profile.disable()
                        device.restore_decode = None
                        text = io.StringIO()
                        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(14)
                        figures["profile_256MiB_noise_device_x5"] = text.getvalue()
                path.unlink()
            figures[group].append(row)
            print(json.dumps(row), flush=True)
    print(figures.get("profile_256MiB_noise_device_x5", ""))
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
