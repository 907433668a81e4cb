"""Probe (issue 7 fidelity): why a replayed saxpy runs slower than inside the application.

Records the programs below, then replays each instance's recorded cubin in several ways: with
the reset between runs or without, primed (one untimed run after the reset), the reset's copies
sent to other memory, a reset through the SMs, a read of the reset regions after the reset, an
idle pause after it. Prints medians against the in-application median. A probe: its findings
go to docs/design/investigations/, not to a results file.

    python benchmarks/gpu/probes/fidelity_probe.py [--iterations 64] [programs...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_recorder_fidelity as bench  # noqa: E402


def variants(ex) -> dict:
    """label -> the device's `time` options, over this executor's written regions."""
    import time as clock

    from mneme_cuda import compare as cmp

    dev = ex.device
    written = list(ex._pristine_dev.items())  # noqa: SLF001 - a probe looks inside
    scratch = {addr: dev.alloc(buf.size) for addr, buf in written}

    def reset_then_touch():
        ex.reset()
        dev.compare_regions(
            [cmp.CompareRequest(expected=buf.addr, actual=addr, size=buf.size) for addr, buf in written]
        )

    def reset_then_idle():
        ex.reset()
        dev.synchronize()
        clock.sleep(0.002)

    def same_traffic_elsewhere():  # the reset's reads and writes, but not into the kernel's regions
        for addr, buf in written:
            dev.copy(scratch[addr].addr, buf.addr, buf.size)

    def reset_sm():
        dev.copy_through = "sm"
        try:
            ex.reset()
        finally:
            dev.copy_through = "engine"

    return {
        "warm": {"cache": "warm"},
        "noreset": {"cache": "warm", "before_each": None},
        "primed": {"cache": "primed"},
        "primed_sm": {"cache": "primed", "before_each": reset_sm},
        "flushed": {"cache": "flushed"},
        "elsewhere": {"cache": "warm", "before_each": same_traffic_elsewhere},
        "sm": {"cache": "warm", "before_each": reset_sm},
        "touch": {"cache": "warm", "before_each": reset_then_touch},
        "idle": {"cache": "warm", "before_each": reset_then_idle},
        "warm_again": {"cache": "warm"},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=64)
    parser.add_argument("programs", nargs="*", default=["saxpy_app", "async_app", "streams_app", "stencil_app"])
    opts = parser.parse_args()
    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import application_median

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in opts.programs:
            kernel = bench.PROGRAMS[name]
            db_dir = Path(tmp) / name
            recorder.main_record(
                db_dir,
                [str(bench.BIN / name)],
                [],
                kernel=kernel,
                library=bench.library(),
                progress=False,
                timer="events",
            )
            for db in sorted(db_dir.glob("*.json")):
                rec = RecordedExecution.from_json(db)
                for dynamic_hash, inst in rec.kernel_instances.items():
                    app = list(inst.app_times)
                    ref = application_median(app)[0]
                    row = {
                        "program": name,
                        "instance": dynamic_hash[:8],
                        "n_app": len(app),
                        "app_us": ref * 1e6,
                        "app_all_us": [round(t * 1e6, 2) for t in app],
                    }
                    with BaseExecutor(
                        db,
                        record_id=dynamic_hash,
                        backend="cuda",
                        iterations=opts.iterations,
                        mode="cubin",
                        timer="events",
                    ) as ex:
                        timer = ex.device.time
                        ex.execute(ex.default_config())  # restores, uploads the pristine copies
                        chosen = variants(ex)
                        for label, options in chosen.items():
                            ex.device.time = lambda *a, _o=options, **k: timer(*a, **{**k, **_o})
                            result = ex.execute(ex.default_config())
                            times = sorted(result.exec_time)
                            row[label] = {
                                "median_us": statistics.median(times) * 1e6,
                                "min_us": times[0] * 1e6,
                                "p90_us": times[int(0.9 * len(times))] * 1e6,
                                "ratio": statistics.median(times) / ref,
                                "ok": result.ok,
                            }
                    out.append(row)
                    print(
                        f"{name:<12} {row['instance']} n={row['n_app']:>2} app {row['app_us']:7.2f} us  "
                        + "  ".join(f"{k} {row[k]['median_us']:6.2f} ({row[k]['ratio']:.3f})" for k in chosen),
                        flush=True,
                    )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
