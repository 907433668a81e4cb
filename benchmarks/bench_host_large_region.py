"""Capture, verify and replay on the host backend a launch whose one buffer is 3 GiB (issue 36).

Before, a region over 2 GiB could not be read back (ctypes.string_at takes a C int: "unexpected
SystemError: Negative size"), so no such recording verified. saxpy runs with x and y pointing into
the same buffer (y = a*y + y): one 3 GiB region, ~12 GB of memory at the peak (the captured array,
the device's copy, the snapshots' chunks, the expected and the read epilogue). Needs that much free:
run it on a machine with 32 GB or more, not in CI.

Run: python benchmarks/bench_host_large_region.py [--gib 3] [--json out.json]
Prints the time of each step and whether the replay verified.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"


def _mneme(*args: str) -> tuple[int, str, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
    )
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=3.0, help="Size of the buffer in GiB (default 3).")
    parser.add_argument("--json", help="Write the figures to this file.")
    opts = parser.parse_args()
    n = int(opts.gib * (1 << 30)) // 4
    block = 256
    figures: dict = {"buffer_bytes": n * 4, "elements": n}
    with tempfile.TemporaryDirectory(prefix="mneme-large-") as tmp:
        spec = Path(tmp) / "spec.yaml"
        shutil.copyfile(SAXPY_IR, Path(tmp) / "saxpy.ll")  # a description's IR lies in its folder
        spec.write_text(
            f"ir: saxpy.ll\nkernel: saxpy\ngrid: {-(-n // block)}\nblock: {block}\n"
            f"buffers:\n  ys: {{full: {{dtype: float32, shape: [{n}], value: 1.0}}, output: true}}\n"
            f"args:\n  - {n}\n  - 2.0\n  - {{ptr: ys}}\n  - {{ptr: ys}}\n"
        )
        limits = {"MNEME_LIMIT_BUFFER_BYTES": str(max(n * 4, 4 << 30))}
        os.environ.update(limits)
        code, out, took = _mneme("capture", str(spec), "-o", str(Path(tmp) / "rec"), "--backend", "host")
        figures["capture_s"], figures["capture_exit"] = round(took, 2), code
        print(f"capture of a {n * 4 / (1 << 30):.2f} GiB buffer: exit {code}, {took:.1f} s")
        if code != 0:
            print(out[-3000:])
            return 1
        db = next((Path(tmp) / "rec").glob("*.json"))
        snaps = sorted((Path(tmp) / "rec").glob("DeviceState.*.mneme"))
        figures["snapshot_bytes"] = {p.name.split(".")[1]: p.stat().st_size for p in snaps}
        code, out, took = _mneme("snapshot", "verify", *map(str, snaps))
        figures["verify_s"], figures["verify_exit"] = round(took, 2), code
        print(f"snapshot verify: exit {code}, {took:.1f} s")
        code, out, took = _mneme("replay", "-rdb", str(db), "--json")
        try:
            result = json.loads(out[out.index("{") :])["result"]
            verified = code == 0 and result["verified"] is True
            figures["kernel_median_s"] = json.loads(out[out.index("{") :]).get("median_time")
        except (ValueError, KeyError):
            verified = False
        figures["replay_s"], figures["replay_exit"], figures["replay_verified"] = round(took, 2), code, verified
        print(f"replay: exit {code}, verified {'yes' if verified else 'NO'}, {took:.1f} s")
        if code != 0 or not verified:
            print(out[-3000:])
    figures["max_rss_children_gib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20), 2)
    print(f"largest child process: {figures['max_rss_children_gib']} GiB resident")
    if opts.json:
        Path(opts.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures.get("replay_verified") else 1


if __name__ == "__main__":
    sys.exit(main())
