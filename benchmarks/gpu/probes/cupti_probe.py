"""Probe (issue 7 fidelity): where do streams_app's 4-5% between the application and the replay go?

Before the kernel timer (section 8 of the session log), the recorder and the replay both timed a
launch with CUDA events behind the launch gate, and this probe keeps them on events. The
window between the two events holds the kernel and the front end's work around it (the
launch's fetch and dispatch on the stream's hardware channel). The stream probe showed that a
short kernel keeps one level per stream. This probe runs everything under a CUPTI injection
library (cupti_trace.cpp) that logs each kernel's start and end as the GPU saw them, and the
channel it ran on. It sets three things beside each other for each of streams_app's saxpy
instances (`both` mode):
- the application under the recorder, `--runs` processes: the event times (AppTimes) and
  the CUPTI durations of the same launches;
- the replay of the recorded cubin, primed, in `--runs` fresh processes: the event median and
  the CUPTI durations;
- one executor timing it on its own stream and `--streams` new ones, round after round: the
  event median and the CUPTI median per stream, and each stream's channel.
The application also runs twice without CUPTI, to show what CUPTI itself changes.
A probe: its findings go to docs/design/investigations/, not to a results file.

    scripts/gpu-suite --run python3 benchmarks/gpu/probes/cupti_probe.py \
        --tracer .gpu/lib/probes/libmneme_cupti_trace.so [--runs 5] [--json out.json]

`scripts/gpu-suite --prepare` builds the tracer into .gpu/lib/probes, beside the copy of libcupti it
loads from .gpu/lib/cupti.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import bench_recorder_fidelity as bench  # noqa: E402

KERNEL = "saxpy"


def kernels(trace_dir: Path) -> list[dict]:
    """The saxpy activity records of every process that wrote into `trace_dir`, in launch order per process."""
    rows = []
    for path in sorted(trace_dir.glob("kernels-*.tsv")):
        mine = []
        for line in path.read_text().splitlines():
            f = line.split("\t")
            if len(f) < 11 or KERNEL not in f[0]:
                continue
            mine.append(
                {
                    "grid": int(f[1]),
                    "stream": int(f[3]),
                    "channel": int(f[4]),
                    "channel_type": int(f[5]),
                    "correlation": int(f[6]),
                    "us": (int(f[8]) - int(f[7])) / 1e3,
                }
            )
        rows.extend(sorted(mine, key=lambda r: r["correlation"]))
    return rows


def traced(tracer: Path, trace_dir: Path) -> dict[str, str]:
    """The environment that injects the tracer, writing into `trace_dir`."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    return {"CUDA_INJECTION64_PATH": str(tracer), "MNEME_CUPTI_TRACE_DIR": str(trace_dir)}


def med(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tracer", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--mode", default="both")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import application_median

    tracer = opts.tracer.resolve()
    argv = [str(bench.BIN / "streams_app"), opts.mode]
    out: dict = {"mode": opts.mode, "instances": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        db_dir = tmp / "db"
        recorder.main_record(
            db_dir, argv, [], kernel=f"^{KERNEL}$", library=bench.library(), progress=False, timer="events"
        )
        keys = bench.instance_keys(db_dir / "raw")

        def app_run(label: str, env_extra: dict | None = None) -> dict:
            return bench.app_times_of_run(
                "streams_app", f"^{KERNEL}$", tmp, label, args=(opts.mode,), env_extra=env_extra, timer="events"
            )

        # (in-application times by key, CUPTI rows), one per traced process; and two without CUPTI
        app_runs = [
            (app_run(f"app{k}", traced(tracer, tmp / f"app{k}-trace")), kernels(tmp / f"app{k}-trace"))
            for k in range(opts.runs)
        ]
        plain_runs = [app_run(f"plain{k}") for k in range(2)]
        for db in sorted(db_dir.glob("*.json")):
            rec = RecordedExecution.from_json(db)
            for dynamic_hash, inst in rec.kernel_instances.items():
                key = (rec.kernel_name, keys.get(dynamic_hash, ""))
                grid = inst.grid_dim.x
                row: dict = {
                    "instance": dynamic_hash[:8],
                    "grid": grid,
                    "app": [],
                    "app_plain_event_us": [],
                    "replay": [],
                }
                for times, rows in app_runs:
                    mine = [r for r in rows if r["grid"] == grid]
                    row["app"].append(
                        {
                            "event_us": med(t * 1e6 for t in times.get(key, [])[1:]),
                            "cupti_us": med(r["us"] for r in mine[1:]),
                            "channels": sorted({(r["channel_type"], r["channel"]) for r in mine}),
                            "launches": len(mine),
                        }
                    )
                row["app_plain_event_us"] = [med(t * 1e6 for t in r.get(key, [])[1:]) for r in plain_runs]
                for k in range(opts.runs):  # fresh replay processes
                    trace = tmp / f"replay-{dynamic_hash[:8]}-{k}"
                    cmd = [
                        sys.executable,
                        "-m",
                        "mneme",
                        "replay",
                        "-rdb",
                        str(db),
                        "-rid",
                        dynamic_hash,
                        "--mode",
                        "cubin",
                        "--cache",
                        "primed",
                        "--iterations",
                        str(opts.iterations),
                        "--json",
                        "--timer",
                        "events",
                    ]
                    proc = subprocess.run(
                        cmd,
                        env={**os.environ, **traced(tracer, trace)},
                        capture_output=True,
                        text=True,
                        timeout=300,
                        check=False,
                    )
                    try:
                        event = json.loads(proc.stdout)["median_time"] * 1e6
                    except (ValueError, KeyError, TypeError):
                        print(f"replay failed: {proc.stderr[-400:]}")
                        event = None
                    mine = kernels(trace)
                    row["replay"].append(
                        {
                            "event_us": event,
                            "cupti_us": med(r["us"] for r in mine[2:]),
                            "channels": sorted({(r["channel_type"], r["channel"]) for r in mine}),
                            "launches": len(mine),
                        }
                    )
                # one executor, several streams, in a traced child (its own trace)
                trace = tmp / f"streams-{dynamic_hash[:8]}"
                code = (
                    "import json,sys; sys.path[:0]=%r; import stream_probe as p; from pathlib import Path; "
                    "print(json.dumps(p.per_stream(Path(%r), %r, %d, %d, %d)))"
                    % ([str(HERE), str(HERE.parent)], str(db), dynamic_hash, opts.rounds, opts.iterations, opts.streams)
                )
                proc = subprocess.run(
                    [sys.executable, "-c", code],
                    env={**os.environ, **traced(tracer, trace)},
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
                try:
                    per = json.loads(proc.stdout.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    print(f"per-stream child failed: {proc.stderr[-600:]}")
                    per = {"streams": []}
                mine = kernels(trace)
                order = list(dict.fromkeys(r["stream"] for r in mine))  # streams in the order first used
                row["streams"] = []
                for k, s in enumerate(per["streams"]):
                    on = [r for r in mine if k < len(order) and r["stream"] == order[k]]
                    row["streams"].append(
                        {
                            "event_us": round(s["median_us"], 3),
                            "cupti_us": med(r["us"] for r in on),
                            "channels": sorted({(r["channel_type"], r["channel"]) for r in on}),
                        }
                    )
                a_ev = med(r["event_us"] for r in row["app"])
                a_cu = med(r["cupti_us"] for r in row["app"])
                r_ev = med(r["event_us"] for r in row["replay"])
                r_cu = med(r["cupti_us"] for r in row["replay"])
                row["summary"] = {
                    "app_event_us": a_ev,
                    "app_cupti_us": a_cu,
                    "replay_event_us": r_ev,
                    "replay_cupti_us": r_cu,
                    "app_plain_event_us": med(row["app_plain_event_us"]),
                    "event_ratio": round(r_ev / a_ev, 4) if a_ev and r_ev else None,
                    "cupti_ratio": round(r_cu / a_cu, 4) if a_cu and r_cu else None,
                }
                out["instances"].append(row)
                s = row["summary"]
                print(
                    f"{opts.mode} {row['instance']} grid {grid}: app event {s['app_event_us']} cupti {s['app_cupti_us']} "
                    f"(no CUPTI: event {s['app_plain_event_us']}); replay event {s['replay_event_us']} cupti "
                    f"{s['replay_cupti_us']}; ratios event {s['event_ratio']} cupti {s['cupti_ratio']}",
                    flush=True,
                )
                for label, part in (("app runs", "app"), ("replays", "replay"), ("streams", "streams")):
                    print(
                        f"   {label:<9} "
                        + "; ".join(f"ev {r['event_us']} cu {r['cupti_us']} ch {r['channels']}" for r in row[part])
                    )
    if opts.json:
        opts.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
