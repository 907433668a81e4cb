"""Replay fidelity (issue 7): the replayed recorded binary's time against the same kernel's time
inside the application, for each recorder test program, in one run (target: within 5%).

    python benchmarks/gpu/bench_recorder_fidelity.py [--iterations 20] [--json results.json]

The recorder times each recorded launch and the next MNEME_RECORD_TIMED (16) launches with the
same arguments inside the application (CUDA events on the application's stream, no
synchronization), into the database's `AppTimes`. Each instance is then replayed from its
recorded cubin (`--mode cubin`) twice: as `mneme replay` does (L2 flushed before each timed
run), and without the flush, because an application that repeats a launch runs it with the L2
holding what the previous launch touched. The figure is replay median / application median;
both columns are reported, and the instance's number of in-application samples with them.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".gpu" / "bin"
# program -> kernel regex; the programs of tests/gpu/programs built by `scripts/gpu-suite --prepare`
PROGRAMS = {"saxpy_app": "^saxpy$", "stencil_app": "stencil2d", "reduce_app": "reduce_sum", "global_app": "add_bias",
            "list_app": "walk_lists", "streams_app": "^saxpy$", "pitch_app": "scale_add_2d",
            "async_app": "^saxpy$", "graph_app": "^saxpy$"}  # fmt: skip


def library() -> Path:
    from mneme_cuda import recorder

    prebuilt = ROOT / ".gpu" / "lib" / recorder.LIBRARY
    return prebuilt if prebuilt.exists() else recorder.build()


def replay_median(db: Path, dynamic_hash: str, iterations: int, flush_l2: bool) -> float:
    from mneme.core.executor import BaseExecutor

    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode="cubin") as ex:
        if not flush_l2:  # the same timer, asked to leave the L2 as the previous run left it
            timer = ex.device.time
            ex.device.time = lambda *args, **kwargs: timer(*args, **{**kwargs, "flush_l2": False})
        result = ex.execute(ex.default_config())
    if not result.ok:
        raise RuntimeError(f"{db.name} [{dynamic_hash}] did not replay: {result.error}")
    return result.median_time


def fidelity(iterations: int) -> dict:
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution

    rows = []
    with tempfile.TemporaryDirectory(prefix="mneme-bench-fidelity-") as tmp:
        for name, kernel in PROGRAMS.items():
            if not (BIN / name).exists():
                rows.append({"program": name, "error": "not built (scripts/gpu-suite --prepare)"})
                continue
            db_dir = Path(tmp) / name
            code = recorder.main_record(db_dir, [str(BIN / name)], [], kernel=kernel, library=library())
            for db in sorted(db_dir.glob("*.json")):
                rec = RecordedExecution.from_json(db)
                for dynamic_hash, inst in rec.kernel_instances.items():
                    row = {"program": name, "exit": code, "kernel": rec.kernel_name, "instance": dynamic_hash,
                           "app_samples": len(inst.app_times)}  # fmt: skip
                    if not inst.app_times:
                        row["error"] = "no in-application times"
                        rows.append(row)
                        continue
                    row["app_median_s"] = statistics.median(inst.app_times)
                    try:
                        row["replay_flushed_s"] = replay_median(db, dynamic_hash, iterations, True)
                        row["replay_warm_s"] = replay_median(db, dynamic_hash, iterations, False)
                    except Exception as exc:  # noqa: BLE001 - a figure, not a crash: report what failed
                        row["error"] = f"{type(exc).__name__}: {exc}"
                        rows.append(row)
                        continue
                    row["ratio_flushed"] = row["replay_flushed_s"] / row["app_median_s"]
                    row["ratio_warm"] = row["replay_warm_s"] / row["app_median_s"]
                    rows.append(row)
    measured = [r for r in rows if "ratio_warm" in r]
    return {
        "iterations": iterations, "instances": len(measured),
        "within_5pct_warm": sum(abs(r["ratio_warm"] - 1) <= 0.05 for r in measured),
        "within_5pct_flushed": sum(abs(r["ratio_flushed"] - 1) <= 0.05 for r in measured),
        "rows": rows,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    figures = fidelity(opts.iterations)
    for r in figures["rows"]:
        if "ratio_warm" in r:
            print(f"{r['program']:<12} {r['kernel'][:28]:<28} {r['instance'][:8]}  "
                  f"app {r['app_median_s'] * 1e6:9.2f} us "
                  f"(n={r['app_samples']:>2})  replay warm {r['replay_warm_s'] * 1e6:9.2f} us ({r['ratio_warm']:.3f})  "
                  f"flushed {r['replay_flushed_s'] * 1e6:9.2f} us ({r['ratio_flushed']:.3f})")  # fmt: skip
        else:
            print(f"{r['program']:<12} {r.get('kernel', '')[:28]:<28} {r.get('error', '')}")
    print(f"within 5%: {figures['within_5pct_warm']}/{figures['instances']} warm, "
          f"{figures['within_5pct_flushed']}/{figures['instances']} flushed")  # fmt: skip
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
