"""Probe (issue 7 fidelity): does a short kernel's time depend on where its memory physically lies?

A 3.5 us saxpy keeps one time within a process (its 16 in-application repeats agree to 32 ns)
but takes another in the next process, up to 5% away, inside the application and replayed alike
(docs/design/investigations/gpu-2026-12-04.md). This probe runs each program `--runs` times
under the recorder (one median per process), then, in one executor, times the recorded cubin
(primed) over and over, changing one thing between rounds:
- "same": nothing (the spread of one placement);
- "reload": the module loaded anew (the code at another address);
- "remap": every recorded range unmapped and mapped again onto fresh physical memory at the same
  virtual addresses (the old pages held meanwhile, so the new ones are others), then restored;
- "restream": the experiment's stream replaced by a new one (the old ones kept meanwhile);
and finally replays the instance in `--runs` fresh processes (`mneme replay --mode cubin --cache
primed --json`), one median per process, like the application's.
A probe: its findings go to docs/design/investigations/, not to a results file.

    python benchmarks/gpu/probes/placement_probe.py [--runs 12] [--rounds 12] [--json out.json]
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

# label -> (program and arguments, kernel regex)
PROGRAMS = {
    "streams_only1": (["streams_app", "only1"], "^saxpy$"),
    "stencil_app": (["stencil_app"], "stencil2d"),
    "global_app": (["global_app"], "add_bias"),
}
WAYS = ("same", "reload", "remap", "restream", "same_after")


def remap(dev, held: list) -> int:
    """Map fresh physical memory under every mapped chunk of the device's reservations; the old
    handles go to `held` (released by the caller). Returns the bytes remapped."""
    from mneme_cuda.driver import check, driver
    from mneme_cuda.memory import _allocation_prop

    cu = driver()
    dev.synchronize()
    moved = 0
    for r in dev._reservations:  # noqa: SLF001 - a probe looks inside
        for start in list(r._starts):  # noqa: SLF001
            length, old = r._chunks[start]  # noqa: SLF001
            check(cu.cuMemUnmap(start, length), "cuMemUnmap")
            handle = check(cu.cuMemCreate(length, _allocation_prop(r.device_ordinal), 0), "cuMemCreate")
            check(cu.cuMemMap(start, length, 0, handle, 0), "cuMemMap")
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = r.device_ordinal
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            check(cu.cuMemSetAccess(start, length, [access], 1), "cuMemSetAccess")
            r._chunks[start] = (length, handle)  # noqa: SLF001
            held.append(old)
            moved += length
    return moved


def placements(db: Path, dynamic_hash: str, rounds: int, iterations: int) -> dict:
    """Median of each round of primed timed runs, for each way of changing things between rounds."""
    from mneme_cuda.driver import check, driver

    from mneme.core.executor import BaseExecutor

    out: dict = {}
    held: list = []
    streams: list = []
    with BaseExecutor(
        db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode="cubin", timer="events"
    ) as ex:
        ex.cache = "primed"
        config = ex.default_config()
        original = ex.device.stream
        for way in WAYS:
            medians, verified = [], True
            for _ in range(rounds):
                if way == "reload":
                    for kernel in ex._loaded.values():  # noqa: SLF001
                        kernel.close()
                    ex._loaded.clear()  # noqa: SLF001
                elif way == "remap":
                    out["remapped_bytes"] = remap(ex.device, held)
                    ex._restore_all = True  # noqa: SLF001 - the new pages hold nothing yet
                elif way == "restream":
                    ex.device.synchronize()
                    flags = driver().CUstream_flags.CU_STREAM_NON_BLOCKING
                    ex.device.stream = check(driver().cuStreamCreate(flags), "cuStreamCreate")
                    streams.append(ex.device.stream)
                result = ex.execute(config)
                verified &= result.ok
                medians.append(result.median_time * 1e6 if result.ok else float("nan"))
            if streams:  # the executor's own stream back; the others destroyed while the context lives
                ex.device.synchronize()
                ex.device.stream = original
                for stream in streams:
                    check(driver().cuStreamDestroy(stream), "cuStreamDestroy")
                streams.clear()
            print(f"  {way}: {statistics.median(medians):.2f} us", file=sys.stderr, flush=True)
            out[way] = {
                "medians_us": [round(m, 3) for m in medians],
                "verified": verified,
                "median_us": statistics.median(medians),
                "min_us": min(medians),
                "max_us": max(medians),
            }
        ex.device.synchronize()
    cu = driver()
    for handle in held:
        cu.cuMemRelease(handle)
    return out


def processes(db: Path, dynamic_hash: str, runs: int, iterations: int) -> dict:
    """The median of a primed replay in each of `runs` fresh processes."""
    medians = []
    for _ in range(runs):
        proc = subprocess.run(
            [
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
                str(iterations),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        try:
            medians.append(json.loads(proc.stdout)["median_time"] * 1e6)
        except (ValueError, KeyError, TypeError):
            print(f"replay process failed ({proc.returncode}): {proc.stderr[-300:]}", file=sys.stderr)
    if not medians:
        return {"medians_us": [], "median_us": float("nan"), "min_us": float("nan"), "max_us": float("nan")}
    return {
        "medians_us": [round(m, 3) for m in medians],
        "median_us": statistics.median(medians),
        "min_us": min(medians),
        "max_us": max(medians),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("programs", nargs="*", default=list(PROGRAMS))
    opts = parser.parse_args()
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import application_median

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label in opts.programs:
            command, kernel = PROGRAMS[label]
            argv = [str(bench.BIN / command[0]), *command[1:]]
            db_dir = Path(tmp) / label
            recorder.main_record(
                db_dir, argv, [], kernel=kernel, library=bench.library(), progress=False, timer="events"
            )
            keys = bench.instance_keys(db_dir / "raw")
            runs = []
            for k in range(opts.runs):
                raw = Path(tmp) / f"{label}-run{k}"
                env = recorder.environment(raw, kernel=kernel, library=bench.library(), timer="events")
                subprocess.run(argv, env=env, capture_output=True, timeout=120, check=False)
                runs.append(recorder.in_application(raw)[0])
            for db in sorted(db_dir.glob("*.json")):
                rec = RecordedExecution.from_json(db)
                for dynamic_hash, inst in rec.kernel_instances.items():
                    key = (rec.kernel_name, keys.get(dynamic_hash, ""))
                    app = [application_median(r[key])[0] * 1e6 for r in runs if len(r.get(key, [])) > 1]
                    if not app:
                        continue
                    row = {
                        "program": label,
                        "instance": dynamic_hash[:8],
                        "app_run_medians_us": [round(a, 3) for a in app],
                        "app_median_us": statistics.median(app),
                        "app_min_us": min(app),
                        "app_max_us": max(app),
                        **placements(db, dynamic_hash, opts.rounds, opts.iterations),
                        "processes": processes(db, dynamic_hash, opts.runs, opts.iterations),
                    }
                    rows.append(row)
                    print(
                        f"{label:<14} {row['instance']} app {row['app_median_us']:.2f} us "
                        f"({row['app_min_us']:.2f}-{row['app_max_us']:.2f}) "
                        + "  ".join(
                            f"{w} {row[w]['median_us']:.2f} ({row[w]['min_us']:.2f}-{row[w]['max_us']:.2f})"
                            for w in (*WAYS, "processes")
                        ),
                        flush=True,
                    )
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
