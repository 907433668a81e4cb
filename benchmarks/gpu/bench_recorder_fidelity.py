"""Replay fidelity (issue 7): the replayed recorded binary's time against the same kernel's time
inside the application, for each recorder test program, in one run (target: within 5%).

    python benchmarks/gpu/bench_recorder_fidelity.py [--iterations 20] [--runs 9] [--once-runs 25] [--json results.json]

Both sides time a launch by the same timer, the record's `AppTimer`: where libcupti opens (the
GPU machine) the kernel's own start and end timestamps from CUPTI's activity records ("cupti"),
else CUDA events on its stream behind the launch gate ("events": the stream waits on a mapped
counter until start event, launch and stop event are queued, so neither includes the host's
submission of the kernel). The recorder times the recorded launch and the next
MNEME_RECORD_TIMED (16) launches with the same arguments (the database's `AppTimes`; the first is
the recorded launch), each alone on the device: the context drains first and other threads'
launches wait until it has run (streams_app's two threads would otherwise share the GPU with it).
Why the kernel timestamps: a 3.5 us event window around a ~1.1 us saxpy is two thirds front end
(the work between the start event, the launch and the stop event), and that part takes another
level in each process: over 10 processes the application's per-process event medians of one
saxpy spread over 3.46-3.68 us, its replays' over 3.46-3.66 us, and streams_app's event ratio
missed 5% in two of three suites, while the kernel's own timestamps gave 1.120 us in every
application process and every replay alike (H200, docs/design/investigations/gpu-2026-12-04.md,
section 7; benchmarks/gpu/probes/cupti_probe.py). So each program still runs `--runs` times
(default 9) under the recorder and each instance is replayed as often, each replay its own
executor (a new stream), and the medians over the runs are compared. Each program is also run
once under the recorder timing with events (MNEME_RECORD_TIMER=events, gated), replayed primed by
events too (the event figure beside the kernel one), and once with its timed launches beside the
rest of the application (MNEME_RECORD_TIMING_EXCLUSIVE=0: what concurrency costs the kernel
there); each instance is replayed from its recorded cubin (`--mode cubin`) three ways
(`mneme replay --cache`): primed (the kernel run once more, untimed, after the reset between
timed runs), warm (the L2 as the reset left it) and flushed (as `mneme replay` does by default).

Which comparison is like for like:
- an instance the application launched again (repeats): each repeat ran right after the same
  kernel's previous launch, on the data that launch left, so the primed replay against the median
  of the repeats (AppTimes after the first) is the fidelity figure. Warm is reported beside it: a
  reset by the copy engine or by a copy kernel leaves the written region in L2 differently from the
  kernel's own writes, which costs a 1M-element saxpy about 1 us of its 9 (measured on the H200,
  docs/design/investigations/gpu-2026-12-03.md; the same copies into other memory cost nothing);
- an instance launched once: only the recorded launch was timed, right after the prologue
  capture copied every live allocation on another stream. The L2 then held part of that copy,
  neither the warm nor the flushed state, so the recorder now evicts the L2 before timing a
  recorded launch (`app_timing.flushed`; MNEME_RECORD_TIMING_FLUSH=0 does not): the flushed
  replay against the median over the runs of that one time is its figure. That time is one
  sample per process, and it spreads: reduce_app's 4-block reduce_sum took 1.47-1.76 us over 25
  processes, and a median of 9 moved by 4% from suite to suite; so a program that launches an
  instance once runs `--once-runs` (25) times. (Its flush buffer is
  allocated before the prologue capture: a mapping made right before the launch put a short
  kernel's first launch on one of two levels ~20% apart from process to process; section 9 of
  docs/design/investigations/gpu-2026-12-04.md.) Without the flush (an older recorder) both
  ratios are reported and neither counts.
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
# program -> kernel regex; the programs of tests/gpu/programs built by `scripts/gpu-suite --prepare`
PROGRAMS = {
    "saxpy_app": "^saxpy$",
    "stencil_app": "stencil2d",
    "reduce_app": "reduce_sum",
    "global_app": "add_bias",
    "list_app": "walk_lists",
    "streams_app": "^saxpy$",
    "pitch_app": "scale_add_2d",
    "async_app": "^saxpy$",
    "graph_app": "^saxpy$",
}
# How each replay times the kernel: the executor's cache state and timer (None: the record's AppTimer).
REPLAYS = {
    "replay_primed_s": {"cache": "primed"},
    "replay_warm_s": {"cache": "warm"},
    "replay_flushed_s": {"cache": "flushed"},
    "replay_primed_events_s": {"cache": "primed", "timer": "events"},
}

log = logging.getLogger("bench_recorder_fidelity")


def library() -> Path:
    from mneme_cuda import recorder

    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    return prebuilt if prebuilt.exists() else recorder.build()


def replay_medians(db: Path, dynamic_hash: str, iterations: int, app_timer: str) -> dict:
    """Median seconds of each REPLAYS way, one executor (one restore) for all of them."""
    from mneme.core.executor import BaseExecutor

    medians: dict = {}
    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode="cubin") as ex:
        for label, options in REPLAYS.items():
            ex.cache, ex.timer = options["cache"], options.get("timer") or app_timer
            result = ex.execute(ex.default_config())
            if not result.ok:
                raise RuntimeError(f"{db.name} [{dynamic_hash}] did not replay ({label}): {result.error}")
            if result.timer != ex.timer:
                raise RuntimeError(f"{db.name} [{dynamic_hash}] was timed by {result.timer}, not {ex.timer} ({label})")
            medians[label] = result.median_time
        medians["replay_gate"] = ex.device.launch_gate.unavailable or "gated"
    return medians


def instance_keys(raw: Path) -> dict[str, str]:
    """The recorder's instance key of each recorded dynamic hash (from the launch manifests)."""
    from mneme_cuda import recorder

    from mneme.core.records import dynamic_hash_of

    return {
        dynamic_hash_of(m["grid"], m["block"], m["shared_mem"], bytes.fromhex(m["args"])): m.get("instance_key", "")
        for _, m in recorder.launches(raw)
    }


def app_timing(raw: Path) -> dict:
    """The recorder's "app_timing" record (launches by kernel timestamps, gated and ungated by events,
    alone or shared, why events or ungated), over its processes."""
    counted = ("cupti", "cupti_missed", "gated", "ungated", "exclusive", "shared", "flushed")
    total = {**dict.fromkeys(counted, 0), "ungated_because": "", "events_because": ""}
    for path in sorted(raw.glob("counts-*.json")):
        timing = json.loads(path.read_text()).get("app_timing", {})
        for key in counted:
            total[key] += timing.get(key, 0)
        for key in ("ungated_because", "events_because"):
            total[key] = total[key] or timing.get(key, "")
    return total


def app_times_of_run(
    name: str,
    kernel: str,
    tmp: Path,
    label: str,
    exclusive: bool = True,
    args: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
    timer: str = "auto",
) -> dict[tuple[str, str], list[float]]:
    """The program (with `args`) run once more under the recorder (by `timer`, each timed launch alone on
    the device or beside the rest of the application; `env_extra` on top):
    (kernel, key) -> seconds.

    The recorder places allocations at the same addresses in every run, so instance keys match."""
    from mneme_cuda import recorder

    raw = tmp / f"{name}-{label}"
    env = {**recorder.environment(raw, kernel=kernel, library=library(), timer=timer), **(env_extra or {})}
    if not exclusive:
        env["MNEME_RECORD_TIMING_EXCLUSIVE"] = "0"
    proc = subprocess.run([str(BIN / name), *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        log.warning("%s (%s) exited %d: %s", name, label, proc.returncode, proc.stderr[-500:])
    return recorder.in_application(raw)[0]


def compare(row: dict, times: list[float], other_runs: list[list[float]], flushed: bool = False) -> None:
    """The like-for-like application median and the ratios of `row` (see the module docstring).

    With repeats, the application side is the median over the program's runs of each run's median
    of the repeats (a short process's kernel times move by a few percent from run to run); an
    instance launched once, timed after the recorder's L2 flush (`flushed`), the median over the
    runs of its one time."""
    from mneme.plugins.replay_commands import application_median

    repeated = len(times) > 1
    row["comparison"] = "warm" if repeated else "flushed" if flushed else "neither"
    if row["comparison"] == "neither":
        row["app_median_s"] = application_median(times)[0]
    else:  # each run's median of the repeats, or its one time (runs that launched it as this one did)
        runs = [application_median(t)[0] for t in (times, *other_runs) if t and (len(t) > 1) == repeated]
        row["app_run_medians_s"] = runs
        row["app_median_s"] = statistics.median(runs)
    for label, options in REPLAYS.items():
        if not options.get("timer"):  # by the record's timer, against the application's median by it
            row[label.replace("replay_", "ratio_").removesuffix("_s")] = row[label] / row["app_median_s"]
    if row.get("app_shared_median_s"):  # the rest of the application's cost to the kernel, beside it
        row["shared_vs_alone"] = row["app_shared_median_s"] / row["app_median_s"]
    if row.get("app_events_median_s"):  # the event-timed figure of one run, beside the kernel one
        row["ratio_primed_events"] = row["replay_primed_events_s"] / row["app_events_median_s"]


def tally(rows: list[dict], gates: dict, iterations: int, runs: int = 1) -> dict:
    """The figures of the rows so far (see the module docstring for which rows count)."""
    fair = [r for r in rows if r.get("comparison") == "warm"]
    single = [r for r in rows if r.get("comparison") == "neither"]
    once = [r for r in rows if r.get("comparison") == "flushed"]
    figures = {
        "iterations": iterations,
        "runs": runs,
        "instances": len(fair) + len(single),
        "like_for_like": len(fair),
        "within_5pct": sum(abs(r["ratio_primed"] - 1) <= 0.05 for r in fair),
        "within_5pct_warm": sum(abs(r["ratio_warm"] - 1) <= 0.05 for r in fair),
        "timers": sorted({r["app_timer"] for r in fair}),
        "events_compared": sum("ratio_primed_events" in r for r in fair),
        "events_within_5pct": sum(abs(r.get("ratio_primed_events", 9) - 1) <= 0.05 for r in fair),
        "once_runs": max((r.get("app_runs", runs) for r in once), default=runs),
        "launched_once": len(once),
        "once_within_5pct": sum(abs(r["ratio_flushed"] - 1) <= 0.05 for r in once),
        "single_launch": len(single),
        "single_within_5pct_warm": sum(abs(r["ratio_warm"] - 1) <= 0.05 for r in single),
        "single_within_5pct_flushed": sum(abs(r["ratio_flushed"] - 1) <= 0.05 for r in single),
        "app_timing": gates,
        "rows": rows,
    }
    figures["summary"] = summary(figures)
    return figures


def fidelity(iterations: int, json_path: Path | None = None, runs: int = 1, once_runs: int = 1) -> dict:
    """Record, replay and compare each program; the JSON is rewritten after each (a time limit keeps what was done).

    A program with an instance it launches once runs `once_runs` times (at least `runs`): that
    instance has one in-application time per process."""
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import application_median

    rows = []
    gates = {}
    with tempfile.TemporaryDirectory(prefix="mneme-bench-fidelity-") as tmp:
        for name, kernel in PROGRAMS.items():
            if not (BIN / name).exists():
                rows.append({"program": name, "error": "not built (scripts/gpu-suite --prepare)"})
                continue
            db_dir = Path(tmp) / name
            try:
                code = recorder.main_record(
                    db_dir, [str(BIN / name)], [], kernel=kernel, library=library(), progress=False
                )
                gates[name] = app_timing(db_dir / "raw")
                keys = instance_keys(db_dir / "raw")
                recs = [(db, RecordedExecution.from_json(db)) for db in sorted(db_dir.glob("*.json"))]
                by_events = app_times_of_run(name, kernel, Path(tmp), "events", timer="events")
                shared = app_times_of_run(name, kernel, Path(tmp), "shared", exclusive=False)
                once = any(len(inst.app_times) == 1 for _, rec in recs for inst in rec.kernel_instances.values())
                program_runs = max(runs, once_runs) if once else runs
                more = [app_times_of_run(name, kernel, Path(tmp), f"run{k}") for k in range(1, program_runs)]
            except Exception as exc:  # noqa: BLE001 - one program's failure is a row, the others still run
                rows.append({"program": name, "error": f"recording failed: {type(exc).__name__}: {exc}"})
                continue
            for db, rec in recs:
                for dynamic_hash, inst in rec.kernel_instances.items():
                    row = {
                        "program": name,
                        "exit": code,
                        "kernel": rec.kernel_name,
                        "instance": dynamic_hash,
                        "app_timer": inst.app_timer,
                        "app_samples": len(inst.app_times),
                        "app_times_s": list(inst.app_times),
                    }
                    if not inst.app_times:
                        rows.append({**row, "error": "no in-application times"})
                        continue
                    key = (rec.kernel_name, keys.get(dynamic_hash, ""))
                    evented = by_events.get(key, [])
                    if len(evented) >= 2:  # the same launches timed by events (one run)
                        row["app_events_median_s"] = application_median(evented)[0]
                    beside = shared.get(key, [])
                    if len(beside) >= 2:  # the same launches beside the rest of the application (one run)
                        row["app_shared_median_s"] = application_median(beside)[0]
                    try:  # as many replays (each its own executor: one restore) as program runs
                        replays = [replay_medians(db, dynamic_hash, iterations, inst.app_timer) for _ in range(runs)]
                    except Exception as exc:  # noqa: BLE001 - a figure, not a crash: report what failed
                        rows.append({**row, "error": f"{type(exc).__name__}: {exc}"})
                        continue
                    row.update({label: statistics.median(r[label] for r in replays) for label in REPLAYS})
                    row["replay_gate"] = replays[0]["replay_gate"]
                    if runs > 1:
                        row["replay_primed_runs_s"] = [r["replay_primed_s"] for r in replays]
                    compare(row, inst.app_times, [m.get(key, []) for m in more], gates[name].get("flushed", 0) > 0)
                    row["app_runs"] = 1 + len(more)
                    rows.append(row)
            if json_path:  # what the final write replaces; a time limit leaves this one, so it says so
                partial = tally(rows, gates, iterations, runs)
                partial["summary"] = [f"{partial['summary'][0]} [partial: stopped after {name}]"]
                json_path.write_text(json.dumps({**partial, "partial": True}, indent=2))
    return tally(rows, gates, iterations, runs)


def summary(figures: dict) -> list[str]:
    fair = [r for r in figures["rows"] if r.get("comparison") == "warm"]
    worst = max(fair, key=lambda r: abs(r["ratio_primed"] - 1), default=None)
    once_worst = max(
        (r for r in figures["rows"] if r.get("comparison") == "flushed"),
        key=lambda r: abs(r["ratio_flushed"] - 1),
        default=None,
    )
    ungated = sum(g["ungated"] for g in figures["app_timing"].values())
    shared = sum(g.get("shared", 0) for g in figures["app_timing"].values())
    beside = [r for r in fair if r.get("shared_vs_alone")]
    costliest = max(beside, key=lambda r: r["shared_vs_alone"], default=None)
    replay_ungated = {r["replay_gate"] for r in figures["rows"] if r.get("replay_gate", "gated") != "gated"}
    timers = "/".join(figures.get("timers", [])) or "-"
    return [
        f"fidelity: {figures['within_5pct']}/{figures['like_for_like']} repeated instances within 5% "
        f"(primed replay / in-application median of the repeats, both timed by {timers}, medians of "
        f"{figures.get('runs', 1)} runs"
        + (f"; worst {worst['program']} {worst['ratio_primed']:.3f}" if worst else "")
        + f"; warm after the reset {figures['within_5pct_warm']}/{figures['like_for_like']}"
        + ")"
        + (
            f"; launched-once instances {figures['once_within_5pct']}/{figures['launched_once']} within 5% "
            f"(flushed replay / the recorded launch, timed after the recorder's L2 flush, medians of "
            f"{figures.get('once_runs', figures.get('runs', 1))} runs"
            + (f"; worst {once_worst['program']} {once_worst['ratio_flushed']:.3f}" if once_worst else "")
            + ")"
            if figures.get("launched_once")
            else ""
        )
        + (
            f"; {figures['single_launch']} launched-once instances not comparable (timed right after the "
            f"prologue capture without an L2 flush; {figures['single_within_5pct_warm']} within 5% warm, "
            f"{figures['single_within_5pct_flushed']} flushed)"
            if figures["single_launch"]
            else ""
        )
        + (
            f"; by CUDA events (one run) {figures['events_within_5pct']}/{figures['events_compared']}"
            if figures.get("events_compared") and timers != "events"
            else ""
        )
        + "".join(
            f"; {name} timed by events: {g['events_because'][:80]}"
            for name, g in figures["app_timing"].items()
            if g.get("events_because")
        )
        + (f"; {ungated} in-application launches UNGATED" if ungated else "")
        + (f"; {shared} in-application launches NOT ALONE on the device" if shared else "")
        + (
            f"; timed beside the rest of the application (one run) the kernel took up to "
            f"{costliest['shared_vs_alone']:.3f}x its time alone ({costliest['program']})"
            if costliest
            else ""
        )
        + (f"; replay UNGATED: {sorted(replay_ungated)[0][:80]}" if replay_ungated else "")
    ]


def _us(seconds) -> str:
    return f"{seconds * 1e6:8.2f}" if isinstance(seconds, (int, float)) else "       -"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--runs",
        type=int,
        default=9,
        help="runs of each program, and replays of each instance, whose medians are compared",
    )
    parser.add_argument(
        "--once-runs",
        type=int,
        default=25,
        help="runs of a program that launches an instance once (one time per process)",
    )
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from mneme_cuda.backend import CudaBackend

    availability = CudaBackend().availability()
    if not availability.usable:
        print(f"skipped: {availability.reason}")
        if opts.json:
            opts.json.write_text(json.dumps({"skipped": availability.reason, "summary": []}))
        return 0
    os.environ.pop("MNEME_RECORD_TIMING_GATE", None)  # the gated runs are the reference
    started = time.perf_counter()
    figures = fidelity(opts.iterations, opts.json, max(1, opts.runs), max(1, opts.once_runs))
    figures["seconds"] = time.perf_counter() - started
    print(
        "program      kernel               instance  n  compare timer   app us  app-events  app-shared  warm us  "
        "flushed  primed-events  primed us  primed/app warm/app flushed/app events"
    )
    for r in figures["rows"]:
        if "error" in r:
            print(f"{r['program']:<12} {r.get('kernel', '')[:20]:<20} {r.get('error', '')}")
            continue
        events = r.get("ratio_primed_events")
        print(
            f"{r['program']:<12} {r['kernel'][:20]:<20} {r['instance'][:8]} {r['app_samples']:>2}  "
            f"{r['comparison']:<7} {r['app_timer']:<6} {_us(r['app_median_s'])} {_us(r.get('app_events_median_s'))}"
            f"    {_us(r.get('app_shared_median_s'))}   "
            f"{_us(r['replay_warm_s'])} {_us(r['replay_flushed_s'])}  {_us(r['replay_primed_events_s'])}      "
            f"{_us(r['replay_primed_s'])}   {r['ratio_primed']:6.3f}    {r['ratio_warm']:6.3f}   "
            f"{r['ratio_flushed']:6.3f}  {f'{events:6.3f}' if events else '     -'}"
        )
    for name, gate in figures["app_timing"].items():
        if gate["ungated"]:
            print(f"{name}: {gate['ungated']} launches timed without the gate: {gate['ungated_because']}")
    print("\n".join(figures["summary"]))
    print(f"({figures['seconds']:.1f} s)")
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
