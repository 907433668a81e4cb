"""Probe (issue 7 fidelity): does an instance the application launches once see the same L2 and
device state in the application as in `mneme replay --cache flushed`?

reduce_app's 4-block reduce_sum (1.5 us) came out at 1.47-1.95 us in the application, one sample
per process, against a flushed replay steady at 1.63-1.66 us. Two differences in what comes
right before the timed launch:

- in the application the recorder flushes the L2, then synchronizes (alone on the device), then
  launches: the device idles between the flush and the kernel; a replay's flushed run queues the
  launch right behind the flush;
- the recorder's snapshot writer may submit a drain of the last recording's shadows beside it.

So it runs the programs under each recorder of `--recorders` (label=path; "main" is the prebuilt
.gpu/lib one; another is built here from a branch with
`python3 -c "from pathlib import Path; from mneme_cuda import recorder; recorder.build(Path('.gpu/lib/alt'), force=True)"`)
`--runs` times, and replays each launched-once instance (recorded by the first
recorder) flushed as it is, and flushed with a synchronize after the flush. A probe: its findings
go to docs/design/investigations/.

    scripts/gpu-suite --run python3 benchmarks/gpu/probes/flush_order_probe.py --runs 25 \
        --recorders "writer=.gpu/lib/alt-writer/libmneme_cuda_recorder-<hash>.so,..." [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import bench_recorder_fidelity as bench  # noqa: E402
from once_probe import labelled, launched_once_times  # noqa: E402


def app_side(name: str, recorders: dict[str, Path], runs: int, tmp: Path) -> dict:
    """recorder label -> instance key -> the one in-application time (us) of each run."""
    out: dict = {}
    for label, library in recorders.items():
        once = launched_once_times(name, tmp, label, runs, {"LD_PRELOAD": str(library.resolve())})
        out[label] = once
        for key, times in once.items():
            print(
                f"app {name} {label:8s} {key[:12]}: median {statistics.median(times):.3f} us, "
                f"{sorted(round(t, 2) for t in times)}",
                flush=True,
            )
    return out


def replay_side(name: str, library: Path, iterations: int, repeats: int, tmp: Path) -> dict:
    """instance key -> way -> medians (us) of `repeats` executions of `iterations` flushed runs."""
    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    db_dir = tmp / f"{name}-db"
    recorder.main_record(
        db_dir, [str(bench.BIN / name)], [], kernel=bench.PROGRAMS[name], library=library, progress=False
    )
    keys = bench.instance_keys(db_dir / "raw")
    out: dict = {}
    for db in sorted(db_dir.glob("*.json")):
        rec = RecordedExecution.from_json(db)
        for dynamic_hash, inst in rec.kernel_instances.items():
            if len(inst.app_times) != 1:
                continue
            ways: dict[str, list[float]] = {"flushed": [], "flushed+sync": []}
            with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode="cubin") as ex:
                ex.cache, ex.timer = "flushed", inst.app_timer
                device = ex.device
                plain = device.flush_l2

                def synced(device=device, plain=plain) -> None:  # the flush, then the host waits for it
                    plain()
                    device.synchronize()

                for _ in range(repeats):
                    for way in ways:
                        device.flush_l2 = synced if way == "flushed+sync" else plain  # what time() calls
                        result = ex.execute(ex.default_config())
                        if not result.ok:
                            raise RuntimeError(f"{db.name} [{dynamic_hash}] did not replay: {result.error}")
                        ways[way].append(result.median_time * 1e6)
            key = keys.get(dynamic_hash, dynamic_hash)
            out[key] = ways
            print(
                f"replay {name} {key[:12]}: "
                + ", ".join(
                    f"{way} {statistics.median(v):.3f} us {[round(t, 2) for t in v]}" for way, v in ways.items()
                ),
                flush=True,
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--programs", default="reduce_app,graph_app")
    parser.add_argument("--recorders", default="", help="label=path,... beside main's prebuilt recorder")
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    recorders = {"main": bench.library()}
    for label, path in labelled(args.recorders):
        recorders[label] = Path(path)
    out: dict = {"recorders": {k: str(v) for k, v in recorders.items()}, "programs": {}}
    with tempfile.TemporaryDirectory(prefix="mneme-flush-order-") as tmp:
        for name in args.programs.split(","):
            out["programs"][name] = {
                "replay": replay_side(name, recorders["main"], args.iterations, args.repeats, Path(tmp)),
                "app": app_side(name, recorders, args.runs, Path(tmp)),
            }
            if args.json:
                args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
