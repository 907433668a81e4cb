#!/usr/bin/env python3
"""Where does the native reader's time go on compressed chunks? (issue 7, restore of LZ4 prologues)

    python benchmarks/gpu/probes/lz4_decode_probe.py [--mib 1024] [--json out.json]

For the GPU memory benchmark's float field written as raw, zstd, LZ4 (byte-shuffled, 4 MiB and
1 MiB chunks) and LZ4 without the shuffle (encoding 4 forced), the native decoder's host-only
throughput (no device copy) into pageable memory and into pinned memory, at 1, 4, 8 and 16
threads. Best of 3 each. Says whether decoding scales with threads (compute bound) or flattens
(memory bound), and what the shuffle and the pinned destination cost. No assertion.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_cuda_memory import best_seconds, float_field  # noqa: E402

MiB = 1 << 20
ADDR = 0x200000000000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    from mneme_cuda import snapio
    from mneme_cuda.backend import CudaBackend

    from mneme.core.snapshot import Snapshot, SnapshotWriter, writer

    size = opts.mib * MiB
    data = float_field(size)
    backend = CudaBackend()
    figures: dict = {}
    with backend.open_device(0) as device, tempfile.TemporaryDirectory() as tmp:
        pinned = device.pinned(size)
        pageable = np.empty(size, np.uint8)
        pageable[:] = 0
        kinds = {
            "raw": ("raw", 4 * MiB),
            "zstd": ("zstd", 4 * MiB),
            "lz4": ("lz4", 4 * MiB),
            "lz4_1m": ("lz4", MiB),
            "lz4_noshuffle": ("lz4", 4 * MiB),
        }
        for name, (encoding, chunk) in kinds.items():
            path = Path(tmp) / f"{name}.mneme"
            if name == "lz4_noshuffle":  # force plain LZ4: compare the first chunk's options as the writer does
                original = writer._encode
                writer._encode = lambda piece, element, level: original(piece, 0, level)
            try:
                with SnapshotWriter(path, "prologue", chunk_size=chunk) as w:
                    w.add_region(ADDR, data, encoding=encoding)
            finally:
                if name == "lz4_noshuffle":
                    writer._encode = original
            row = {}
            with Snapshot.open(path) as snap:
                row["stored"] = snap.region(ADDR).stored_size / size
                row["encodings"] = sorted({c.encoding for c in snap.chunk_index(ADDR).chunks})
                for threads in (1, 4, 8, 16):
                    with snapio.NativeDecoder(threads) as dec:
                        for where, out in (("pageable", pageable), ("pinned", pinned.array)):
                            if threads == 1 and size > 256 * MiB:
                                n = 256 * MiB  # one thread: a quarter GiB is enough
                            else:
                                n = size
                            t = best_seconds(lambda: dec.read_range_into(snap, ADDR, 0, out[:n]), repeat=3)
                            row[f"{where}_{threads}t_GBps"] = n / t / 1e9
                assert bytes(pageable[:4096]) == data[:4096].tobytes()
            figures[name] = row
            print(name, json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
            path.unlink()
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
