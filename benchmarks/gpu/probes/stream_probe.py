"""Probe (issue 7 fidelity): does a short kernel's time depend on which stream it runs on?

streams_app's saxpy, with both threads, runs 4-5% slower in the application than replayed, over
9 runs each, with each timed launch alone on the device (benchmarks/results/gpu-results.md);
with one thread the two agree. The placement probe saw the level move when the replay moved to
new streams. This probe records streams_app (`both`, then `only1`), runs it `--runs` times
under the recorder for one median per process, then, in one executor, creates `--streams` more
streams up front and times the recorded cubin (primed) on each in turn, round after round, so a
level that belongs to a stream shows as the same median for it in every round.
A probe: its findings go to docs/design/investigations/, not to a results file.

    python benchmarks/gpu/probes/stream_probe.py [--runs 6] [--rounds 8] [--streams 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_recorder_fidelity as bench  # noqa: E402

MODES = ("both", "only1")


def per_stream(db: Path, dynamic_hash: str, rounds: int, iterations: int, extra: int) -> dict:
    """Median of each round of primed timed runs on each stream: the executor's own, then `extra` new ones."""
    from mneme_cuda.driver import check, driver

    from mneme.core.executor import BaseExecutor

    cu = driver()
    with BaseExecutor(
        db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode="cubin", timer="events"
    ) as ex:
        ex.cache = "primed"
        config = ex.default_config()
        own = ex.device.stream
        flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        streams = [own, *(check(cu.cuStreamCreate(flags), "cuStreamCreate") for _ in range(extra))]
        medians: list[list[float]] = [[] for _ in streams]
        verified = True
        try:
            for _ in range(rounds):
                for k, stream in enumerate(streams):
                    ex.device.synchronize()
                    ex.device.stream = stream
                    result = ex.execute(config)
                    verified &= result.ok
                    medians[k].append(result.median_time * 1e6 if result.ok else float("nan"))
        finally:
            ex.device.synchronize()
            ex.device.stream = own
            for stream in streams[1:]:
                cu.cuStreamDestroy(stream)
    return {
        "verified": verified,
        "streams": [{"medians_us": [round(m, 3) for m in ms], "median_us": statistics.median(ms)} for ms in medians],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import application_median

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            argv = [str(bench.BIN / "streams_app"), mode]
            db_dir = Path(tmp) / mode
            recorder.main_record(
                db_dir, argv, [], kernel="^saxpy$", library=bench.library(), progress=False, timer="events"
            )
            keys = bench.instance_keys(db_dir / "raw")
            runs = []
            for k in range(opts.runs):
                raw = Path(tmp) / f"{mode}-run{k}"
                env = recorder.environment(raw, kernel="^saxpy$", library=bench.library(), timer="events")
                subprocess.run(argv, env=env, capture_output=True, timeout=120, check=False)
                runs.append(recorder.in_application(raw)[0])
            for db in sorted(db_dir.glob("*.json")):
                rec = RecordedExecution.from_json(db)
                for dynamic_hash in rec.kernel_instances:
                    key = (rec.kernel_name, keys.get(dynamic_hash, ""))
                    app = [application_median(r[key])[0] * 1e6 for r in runs if len(r.get(key, [])) > 1]
                    if not app:
                        continue
                    row = {
                        "mode": mode,
                        "instance": dynamic_hash[:8],
                        "app_run_medians_us": [round(a, 3) for a in app],
                        "app_median_us": statistics.median(app),
                        **per_stream(db, dynamic_hash, opts.rounds, opts.iterations, opts.streams),
                    }
                    rows.append(row)
                    print(
                        f"{mode:<6} {row['instance']} app {row['app_median_us']:.2f} us "
                        f"({min(app):.2f}-{max(app):.2f}); per stream: "
                        + "  ".join(
                            f"s{k} {s['median_us']:.2f} ({min(s['medians_us']):.2f}-{max(s['medians_us']):.2f})"
                            for k, s in enumerate(row["streams"])
                        ),
                        flush=True,
                    )
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
