"""Launch latency of the host backend on examples/saxpy: one block, and 1M elements; and a kernel's load.

Run: python benchmarks/bench_host_launch.py [--launches 2000]
Prints the median and the minimum wall time of one `Device.launch` (what a caller waits for:
with the sandbox, the round trip to the sandbox process included) for saxpy over 256 elements
(one block of 256 threads) and over 1M elements (4096 blocks), with the sandbox process
(the default) and without it (``MNEME_HOST_SANDBOX=0``, unsafe), each in a fresh process; and the
time `Device.load` takes (with the sandbox: the sandbox process's start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = 0x2E0000000000


def measure(launches: int) -> dict[str, list[float]]:
    import numpy as np

    from mneme.core import ir
    from mneme.core.backend import get_backend
    from mneme.core.types import ExperimentConfiguration

    backend = get_backend("host")
    module = ir.load((ROOT / "examples" / "saxpy" / "saxpy.ll").read_text())
    binary = backend.compile(module, "saxpy", ExperimentConfiguration(grid=1, block=256), backend.arch())
    n = 1 << 20
    found = {}
    with backend.open_device() as dev:
        dev.reserve(BASE, 1 << 30)
        x, y = BASE, BASE + (1 << 28)
        for p in (x, y):
            dev.map(p, 4 * n)
            dev.write(p, np.ones(n, np.float32).tobytes())
        loads = []
        for _ in range(20):  # with the sandbox: a fork, the object linked there, helpers, the filter
            start = time.perf_counter()
            dev.load(binary).close()
            loads.append(time.perf_counter() - start)
        found["load (a sandbox's start)"] = loads
        kernel = dev.load(binary)
        for label, count, grid in (("1 block (256 elements)", 256, 1), ("1M elements (4096 blocks)", n, n // 256)):
            args = struct.pack("<ifQQ", count, 2.0, x, y)
            dev.launch(kernel, (grid,), (256,), 0, args)  # the checked first launch, the sandbox's start
            times = []
            for _ in range(launches if grid == 1 else max(launches // 10, 20)):
                start = time.perf_counter()
                dev.launch(kernel, (grid,), (256,), 0, args)
                times.append(time.perf_counter() - start)
            found[label] = times
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=2000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(measure(opts.launches)))
        return
    for threads in ("1", ""):
        for sandbox in ("1", "0"):
            env = {**os.environ, "MNEME_HOST_SANDBOX": sandbox}
            env.pop("MNEME_HOST_THREADS", None)
            if threads:
                env["MNEME_HOST_THREADS"] = threads
            out = subprocess.run(
                [sys.executable, __file__, "--child", "--launches", str(opts.launches)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for label, times in json.loads(out.splitlines()[-1]).items():
                print(
                    f"threads={threads or os.cpu_count()} sandbox={sandbox} {label}: median "
                    f"{statistics.median(times) * 1e6:.1f} us, min {min(times) * 1e6:.1f} us ({len(times)} launches)"
                )


if __name__ == "__main__":
    main()
