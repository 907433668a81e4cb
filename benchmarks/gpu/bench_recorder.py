"""CUDA recorder performance (issue 6), as ratios measured in one run.

    python benchmarks/gpu/bench_recorder.py [--size-mib 1024] [--json results.json]

- snapshot: cost of recording one launch against a pinned device-to-host copy of the same
  bytes (target >= 0.7 of that bandwidth with compression on): the application's stall at the
  launch (device shadow copies), the background writer's drain, and end to end (the
  application's extra wall time, its exit waiting for the writer, plus `finalize`);
- overhead: wall time of an application running under the recorder with no kernel selected
  against the same application without it, median of several runs (target <= 5%), split into
  the fixed cost (the same program launching once) and the cost per launch; and, with
  its kernel selected (one instance recorded, its next 16 launches timed, the other 2983 run
  through), the kernel timer's cost to the application: CUPTI's kernel records stay on until
  MNEME_RECORD_TIMER_PARK (64) launches went untimed (docs/design/recording.md), CUDA events cost
  nothing after the last;
- graph: a CUDA graph of 32 kernel nodes launched 5000 times (graph_loop_app): the launch loop's
  time under the recorder, its kernel recorded at the graph's first launch (run node by node) and
  the later launches the driver's, against the same loop without the recorder (target <= 5%); beside
  it the same with the kernel timer's records never parked, and with events as the timer;
- replay: every C++ test program (.gpu/bin, built by `scripts/gpu-suite --prepare`) recorded,
  then every recorded launch replayed: how often replay could reserve every recorded range
  (target: every time), and how often it verified.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".gpu" / "bin"
MiB = 1 << 20
# program -> kernel regex, for the replay figure
PROGRAMS = {
    "saxpy_app": "saxpy",
    "stencil_app": "stencil2d",
    "stencil_app_ir": "stencil2d",
    "reduce_app": "reduce_sum",
    "global_app": "add_bias",
    "list_app": "walk_lists",
    "streams_app": "saxpy",
    "crash_app": "saxpy",
    "graph_record_app": "^(scale|offset|axpy|square)$",  # kernel nodes of CUDA graphs
}
GRAPH_NODES, GRAPH_LAUNCHES = 32, 5000


def library() -> Path:
    from mneme_cuda import recorder

    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    return prebuilt if prebuilt.exists() else recorder.build()


def app(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run scripts/gpu-suite --prepare")
    return path


def pinned_d2h_seconds(size: int) -> float:
    """Best time of one pinned device-to-host copy of `size` bytes (cuMemcpyDtoH, synchronous)."""
    from mneme_cuda.backend import CudaBackend
    from mneme_cuda.driver import check, driver

    cu = driver()
    with CudaBackend().open_device(0) as device:
        source = device.alloc(size)
        device.fill(source.addr, size, 7)
        device.synchronize()
        host = device.pinned(size)
        times = []
        for _ in range(4):
            start = time.perf_counter()
            check(cu.cuMemcpyDtoH(host.ptr, source.addr, size), "pinned D2H copy")
            times.append(time.perf_counter() - start)
        return min(times[1:])


def snapshot_cost(size_mib: int) -> dict:
    """One recorded launch of saxpy_app over `size_mib` MiB of pseudo-random floats (x and y).

    The recorder shadows the regions on the device and writes the snapshots on a background
    thread, so three figures, each against a pinned D2H copy of the same bytes in this run:
    - stall: what the application waited for at the launch (prologue + epilogue capture, from
      the manifest) for both sides' bytes: the target's ratio (>= 0.7);
    - drain: the background writer's throughput (both snapshots, zstd, through pinned staging);
    - end to end: the application's wall time under the recorder (it waits at exit for the
      writer) minus its wall time without it, plus `finalize`, for both sides' bytes.
    """
    from mneme_cuda import recorder

    n = size_mib * MiB // 8  # saxpy_app allocates two float arrays of n elements
    command = [str(app("saxpy_app")), str(n), "1", "random"]
    with tempfile.TemporaryDirectory(prefix="mneme-bench-rec-") as tmp:
        plain = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_RECORD")}
        start = time.perf_counter()
        proc = subprocess.run(command, env=plain, capture_output=True, text=True, timeout=300, check=False)
        plain_s = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"saxpy_app failed: {proc.stderr[-2000:]}")
        raw = Path(tmp) / "raw"
        env = recorder.environment(raw, kernel="^saxpy$", max_recordings=1, library=library())
        start = time.perf_counter()
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
        recorded_s = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"saxpy_app under the recorder failed: {proc.stderr[-2000:]}")
        ((_, manifest),) = recorder.launches(raw)
        start = time.perf_counter()
        recorder.finalize(raw, Path(tmp) / "db", arch="sm_90")
        finalize_s = time.perf_counter() - start
        stored = sum(p.stat().st_size for p in (Path(tmp) / "db").glob("DeviceState.*.mneme"))
    size = manifest["bytes"]
    pinned_s = pinned_d2h_seconds(size)
    prologue_s, epilogue_s = manifest["prologue_seconds"], manifest["epilogue_seconds"]
    stall_s = prologue_s + epilogue_s
    write_s = manifest.get("write_seconds", 0.0)
    end_to_end_s = max(recorded_s - plain_s, 0.0) + finalize_s
    return {
        "bytes": size,
        "capture": manifest.get("capture", "raw dump"),
        "pinned_d2h_GBps": size / pinned_s / 1e9,
        "prologue_s": prologue_s,
        "epilogue_s": epilogue_s,
        "stall_GBps": 2 * size / stall_s / 1e9,
        "ratio_stall_vs_pinned": 2 * pinned_s / stall_s,
        "write_s": write_s,
        "drain_GBps": 2 * size / write_s / 1e9 if write_s else 0.0,
        "app_plain_s": plain_s,
        "app_recorded_s": recorded_s,
        "finalize_s": finalize_s,
        "end_to_end_GBps": 2 * size / end_to_end_s / 1e9 if end_to_end_s else 0.0,
        "ratio_end_to_end_vs_pinned": 2 * pinned_s / end_to_end_s if end_to_end_s else 0.0,
        "stored_bytes": stored,
        "ratio_stored": 2 * size / stored if stored else 0.0,
    }


def _wall_seconds(command: list[str], env: dict[str, str], label: str) -> float:
    """Seconds one run of `command` takes; an error naming `label` when it fails."""
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, timeout=300, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{command[0]} ({label}) failed: {proc.stderr[-2000:]!r}")
    return elapsed


def _spread(seconds: list[float]) -> str:
    return f"{min(seconds):.3f}-{max(seconds):.3f}"


def overhead(repeat: int) -> dict:
    from mneme_cuda import recorder

    command = [str(app("saxpy_app")), str(1 << 16), "3000"]  # many small launches: the launch path matters
    once = [str(app("saxpy_app")), str(1 << 16), "1"]  # the same program launching once: the fixed cost
    times: dict[str, list[float]] = {
        "plain": [],
        "recorder": [],
        "events": [],
        "cupti": [],
        "plain1": [],
        "recorder1": [],
    }
    with tempfile.TemporaryDirectory(prefix="mneme-bench-rec-") as tmp:
        under = recorder.environment(Path(tmp) / "raw", kernel="^no_kernel_has_this_name$", library=library())
        plain = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_RECORD")}
        for i in range(4 * repeat + 4):  # alternating; the first round warms the caches (driver, page cache, JIT)
            label = ("plain", "recorder", "plain1", "recorder1")[i % 4]
            elapsed = _wall_seconds(
                once if label.endswith("1") else command, plain if label.startswith("plain") else under, label
            )
            if i >= 4:
                times[label].append(elapsed)
        for i in range(2 * repeat + 2):  # the kernel selected: CUPTI's records against events
            timer = "events" if i % 2 == 0 else "cupti"
            raw = Path(tmp) / f"raw-{i}"
            env = recorder.environment(raw, kernel="^saxpy$", max_recordings=1, timer=timer, library=library())
            elapsed = _wall_seconds(command, env, f"recorded, {timer}")
            timing = json.loads(next(raw.glob("counts-*.json")).read_text())["app_timing"]
            if timer == "cupti" and timing.get("cupti", 0) == 0:
                raise RuntimeError(f"saxpy_app was not timed by CUPTI: {timing.get('events_because')}")
            if i >= 2:
                times[timer].append(elapsed)
    return overhead_figures(times, repeat)


def overhead_figures(times: dict[str, list[float]], repeat: int) -> dict:
    """The overhead figures of `overhead`'s runs (each list in the order the alternating rounds ran)."""
    # The machine's speed drifts between rounds (one H100 host: plain runs from 1.76 to 2.41 s in one call)
    # while the two runs of a round track each other, so each figure is the median of the rounds' own
    # ratios or differences, not a ratio of the two medians.
    plain_s, rec_s = statistics.median(times["plain"]), statistics.median(times["recorder"])
    events_s, cupti_s = statistics.median(times["events"]), statistics.median(times["cupti"])
    paired = lambda a, b, f: statistics.median(f(x, y) for x, y in zip(times[a], times[b]))
    fixed = paired("recorder1", "plain1", lambda r, p: r - p)  # start-up and exit
    extra = [
        (r - p) - (r1 - p1)
        for r, p, r1, p1 in zip(times["recorder"], times["plain"], times["recorder1"], times["plain1"])
    ]
    slowdown = paired("recorder", "plain", lambda r, p: r / p) - 1
    return {
        "plain_median_s": plain_s,
        "recorder_median_s": rec_s,
        "slowdown": slowdown,
        "fixed_s": fixed,
        "per_launch_s": statistics.median(extra) / 2999,
        "plain_once_median_s": statistics.median(times["plain1"]),
        "runs": repeat,
        "launches": 3000,
        "recorded_events_median_s": events_s,
        "recorded_cupti_median_s": cupti_s,
        "cupti_vs_events": paired("cupti", "events", lambda c, e: c / e) - 1,
        "runs_s": times,
    }  # every run's seconds, in the order they ran: the spread beside the medians


def graph_overhead(repeat: int) -> dict:
    """graph_loop_app's launch loop (after the graph's first launch) plain and under the recorder, rotating.

    Besides the recorder as it runs by default (the kernel timer parked after its timings), the same
    with the timer's records left on (MNEME_RECORD_TIMER_PARK=0) and with CUDA events as the timer:
    what the kernel records cost the application once there is nothing left to time.
    """
    from mneme_cuda import recorder

    command = [str(app("graph_loop_app")), str(GRAPH_NODES), str(GRAPH_LAUNCHES)]
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_RECORD")}
    variants = {"plain": None, "recorded": {}, "unparked": {"MNEME_RECORD_TIMER_PARK": "0"}, "events": "events"}
    loops: dict[str, list[float]] = {label: [] for label in variants}
    with tempfile.TemporaryDirectory(prefix="mneme-bench-graph-") as tmp:
        for i in range(len(variants) * (repeat + 1)):  # the first round warms the caches
            label = list(variants)[i % len(variants)]
            variant = variants[label]
            raw = Path(tmp) / f"raw-{i}"
            if variant is None:
                env = plain
            else:
                timer = "events" if variant == "events" else "auto"
                env = recorder.environment(raw, kernel="^tick$", library=library(), timer=timer)
                env.update(variant if isinstance(variant, dict) else {})
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode != 0 or "graph_loop_app OK" not in proc.stdout:
                raise RuntimeError(f"graph_loop_app ({label}) failed: {proc.stderr[-2000:]!r}")
            if variant is not None and not recorder.launches(raw):
                raise RuntimeError(f"graph_loop_app's tick node was not recorded ({label}): {proc.stderr[-2000:]!r}")
            if i >= len(variants):
                loops[label].append(float(proc.stdout.split()[-1]))

    def against_plain(label: str) -> tuple[float, float]:
        """The rounds' median ratio to the plain loop, minus one (drift cancels), and seconds per graph launch."""
        pairs = list(zip(loops[label], loops["plain"]))
        return (
            statistics.median(r / p for r, p in pairs) - 1,
            statistics.median(r - p for r, p in pairs) / (GRAPH_LAUNCHES - 1),
        )

    slowdown, per_launch = against_plain("recorded")
    return {
        "nodes": GRAPH_NODES,
        "launches": GRAPH_LAUNCHES - 1,
        "plain_median_s": statistics.median(loops["plain"]),
        "recorded_median_s": statistics.median(loops["recorded"]),
        "slowdown": slowdown,
        "per_launch_s": per_launch,
        "unparked_slowdown": against_plain("unparked")[0],
        "events_slowdown": against_plain("events")[0],
        "runs": repeat,
        "runs_s": loops,
    }


def replay_rate() -> dict:
    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    rows = []
    with tempfile.TemporaryDirectory(prefix="mneme-bench-rec-") as tmp:
        for name, kernel in PROGRAMS.items():
            if not (BIN / name).exists():
                rows.append({"program": name, "error": "not built"})
                continue
            db_dir = Path(tmp) / name
            code = recorder.main_record(db_dir, [str(BIN / name)], [], kernel=kernel, library=library())
            if not list(db_dir.glob("*.json")):
                rows.append({"program": name, "error": f"exit code {code}, no database written"})
            for db in sorted(db_dir.glob("*.json")):
                rec = RecordedExecution.from_json(db)
                mode = "ir" if rec.llvm_files else "cubin"
                for dynamic_hash in rec.kernel_instances:
                    row = {
                        "program": name,
                        "exit": code,
                        "kernel": rec.kernel_name,
                        "mode": mode,
                        "instance": dynamic_hash,
                        "reserved": False,
                        "verified": False,
                    }
                    try:
                        with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=1, mode=mode) as ex:
                            row["reserved"] = True
                            result = ex.execute(ex.default_config())
                            row["verified"] = bool(result.ok)
                            row["error"] = result.error or ""
                    except Exception as exc:  # noqa: BLE001 - a figure, not a crash: report what failed
                        row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
    instances = [r for r in rows if "instance" in r]
    return {
        "instances": len(instances),
        "reserved": sum(r["reserved"] for r in instances),
        "verified": sum(r["verified"] for r in instances),
        "programs": sorted({r["program"] for r in instances}),
        "rows": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", help="comma-separated figures to measure (snapshot, overhead, graph, replay)")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    figures: dict = {}
    wanted = set(opts.only.split(",")) if opts.only else None
    for name, run in (
        ("snapshot", lambda: snapshot_cost(opts.size_mib)),
        ("overhead", lambda: overhead(opts.repeat)),
        ("graph", lambda: graph_overhead(opts.repeat)),
        ("replay", replay_rate),
    ):
        if wanted is not None and name not in wanted:
            figures[name] = {"error": "not measured (--only)"}
            continue
        try:
            figures[name] = run()
        except Exception as exc:  # noqa: BLE001 - the other figures are still worth writing
            figures[name] = {"error": f"{type(exc).__name__}: {exc}"}
    lines = []
    s, o, r = figures["snapshot"], figures["overhead"], figures["replay"]
    if "error" not in s:
        lines.append(
            f"snapshot  {s['bytes'] >> 20} MiB per side ({s['capture']}); pinned D2H "
            f"{s['pinned_d2h_GBps']:.1f} GB/s; application stall (prologue {s['prologue_s'] * 1e3:.1f} ms + "
            f"epilogue {s['epilogue_s'] * 1e3:.1f} ms) {s['stall_GBps']:.1f} GB/s = "
            f"{s['ratio_stall_vs_pinned']:.2f}x of pinned D2H (target >= 0.7)"
        )
        lines.append(
            f"snapshot  background drain (both snapshots, zstd) {s['write_s']:.2f} s = {s['drain_GBps']:.2f} "
            f"GB/s; end to end (app {s['app_recorded_s']:.2f} s recorded vs {s['app_plain_s']:.2f} s plain, "
            f"+ finalize {s['finalize_s']:.2f} s) {s['end_to_end_GBps']:.2f} GB/s = "
            f"{s['ratio_end_to_end_vs_pinned']:.2f}x; stored {s['stored_bytes'] >> 20} MiB "
            f"(ratio {s['ratio_stored']:.2f})"
        )
    if "error" not in o:
        lines.append(
            f"overhead  no kernel selected, {o['launches']} launches: {o['recorder_median_s']:.3f} s vs "
            f"{o['plain_median_s']:.3f} s plain (medians of {o['runs']} alternating rounds); the rounds' "
            f"median ratio {100 * o['slowdown']:+.1f}% "
            f"(target <= 5%); of it, fixed (the program launching once: start-up and exit) "
            f"{o['fixed_s'] * 1e3:+.1f} ms on {o['plain_once_median_s']:.3f} s, per launch "
            f"{o['per_launch_s'] * 1e6:+.2f} us; runs {_spread(o['runs_s']['recorder'])} s recorder, "
            f"{_spread(o['runs_s']['plain'])} s plain"
        )
        lines.append(
            f"overhead  saxpy recorded once and timed 17 times, {o['launches']} launches: timed by CUPTI "
            f"{o['recorded_cupti_median_s']:.3f} s vs by events {o['recorded_events_median_s']:.3f} s "
            f"(medians of {o['runs']} alternating rounds); the rounds' median ratio "
            f"{100 * o['cupti_vs_events']:+.1f}%: the kernel records' cost to the application"
        )
    g = figures["graph"]
    if "error" not in g:
        lines.append(
            f"graph     {g['nodes']} kernel nodes, {g['launches']} launches after the recorded one: "
            f"{g['recorded_median_s']:.3f} s under the recorder vs {g['plain_median_s']:.3f} s plain (medians of "
            f"{g['runs']} alternating rounds); the rounds' median ratio {100 * g['slowdown']:+.1f}% (target <= 5%), "
            f"{g['per_launch_s'] * 1e6:+.2f} us per graph launch; with the kernel timer's records left on "
            f"{100 * g['unparked_slowdown']:+.1f}%, timed by events {100 * g['events_slowdown']:+.1f}%"
        )
    if "error" not in r:
        lines.append(
            f"replay    {r['instances']} recorded launches of {len(r['programs'])} programs: every range "
            f"reserved {r['reserved']}/{r['instances']} (target: all), verified {r['verified']}/{r['instances']}"
        )
        lines += [
            f"replay    {row['program']} {row.get('kernel', '')}: {row['error']}"
            for row in r["rows"]
            if row.get("error")
        ]
    lines += [f"{name}: FAILED {f['error']}" for name, f in figures.items() if "error" in f]
    figures["summary"] = lines
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
