#!/usr/bin/env python3
"""Which chunk codec could let a compressed prologue restore at >= 0.7 of a pinned host-to-device copy (issue 7)?

    python benchmarks/bench_restore_codecs.py [--json out.json]

On one core, for one 4 MiB chunk of the GPU memory benchmark's float field (a smooth float32
field with noise in the low mantissa bits, byte-shuffled as the snapshot writer stores floats):
the decode speed of zstd (levels 1 and 3, as `zstandard` binds it) and of LZ4 (the system's
liblz4.so.1 through Mneme's codec), each codec's stored fraction, the native reader's other passes
(unshuffle and the XXH3 checksum) and memcpy, all as GB/s of decoded bytes. The restore on the
H200 runs one such decode per host thread (16 there), so a codec's per-core speed against
the per-core share of the pinned copy's bandwidth says whether it can keep up. No assertion.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import xxhash
import zstandard

from mneme.core.snapshot import codec

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
from bench_cuda_memory import float_field  # noqa: E402 - the GPU restore benchmark's data, byte for byte

MiB = 1 << 20
CHUNK = 4 * MiB


def best_rate(fn, nbytes: int, rounds: int = 20) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def measure() -> dict:
    plain = float_field(CHUNK).tobytes()
    shuffled = bytes(codec.shuffle(plain, 4))
    out = ctypes.create_string_buffer(CHUNK)
    rows = {}
    for level in (1, 3):
        packed = zstandard.ZstdCompressor(level=level).compress(shuffled)
        dctx = zstandard.ZstdDecompressor()
        rows[f"zstd-{level}"] = {
            "stored": len(packed) / CHUNK,
            "decode_GBps": best_rate(lambda p=packed: dctx.decompress(p), CHUNK),
        }
    if codec.lz4_available():
        packed = codec.lz4_compress(shuffled)
        codec.lz4_decompress_into(packed, out)
        assert out.raw == shuffled
        rows["lz4"] = {
            "stored": len(packed) / CHUNK,
            "decode_GBps": best_rate(lambda: codec.lz4_decompress_into(packed, out), CHUNK),
        }
    else:
        rows["lz4"] = {"error": "liblz4.so.1 not found"}
    target = np.empty(CHUNK, np.uint8)
    passes = {
        "unshuffle_numpy_GBps": best_rate(lambda: codec.unshuffle(shuffled, 4, memoryview(target)), CHUNK),
        "xxh3_GBps": best_rate(lambda: xxhash.xxh3_64_intdigest(shuffled), CHUNK),
        "memcpy_GBps": best_rate(lambda: ctypes.memmove(out, shuffled, CHUNK), CHUNK),
    }
    return {
        "chunk_bytes": CHUNK,
        "machine": platform.processor() or platform.machine(),
        "codecs": rows,
        "passes": passes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    figures = measure()
    lines = [
        f"{name:8} stored {r['stored']:.2f}  decode {r['decode_GBps']:.2f} GB/s per core"
        if "error" not in r
        else f"{name:8} {r['error']}"
        for name, r in figures["codecs"].items()
    ]
    lines += [f"{name.removesuffix('_GBps'):16} {v:.2f} GB/s" for name, v in figures["passes"].items()]
    z, l4 = figures["codecs"]["zstd-3"], figures["codecs"]["lz4"]
    if "error" not in l4:
        lines.append(
            f"lz4 decodes {l4['decode_GBps'] / z['decode_GBps']:.2f}x as fast as zstd-3 and stores "
            f"{l4['stored'] / z['stored']:.2f}x its bytes"
        )
    figures["summary"] = lines
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
