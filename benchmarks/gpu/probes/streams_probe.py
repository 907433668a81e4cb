"""Probe (issue 7 fidelity): why streams_app's saxpy runs slower inside the application than replayed.

Runs streams_app under the recorder in each of its modes (both threads at once, one after the
other, one thread alone, both in lockstep before each launch), `--runs` times each, and replays
each recorded instance from its cubin: primed (as the fidelity bench compares), and "idle": the
kernel run on its data, then the GPU left idle for a gap before the gated timed launch, which is
what the application does between its launches (its host loop). An nvidia-smi sampler logs SM
clock, power and temperature for each phase. A probe: its findings go to
docs/design/investigations/, not to a results file.

    python benchmarks/gpu/probes/streams_probe.py [--runs 3] [--iterations 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_recorder_fidelity as bench  # noqa: E402

MODES = ("both", "seq", "only0", "only1", "lockstep")
GAPS_US = (0, 50, 500, 5000)


class Sampler:
    """nvidia-smi every 20 ms in the background; `phase(label)` marks what runs from now on."""

    def __init__(self):
        self.samples: list[tuple[str, float, float, float]] = []  # phase, sm MHz, power W, temp C
        self.label = "start"
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "20",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                sm, power, temp = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.samples.append((self.label, sm, power, temp))

    def phase(self, label: str) -> None:
        self.label = label

    def summary(self) -> dict:
        out: dict = {}
        for label in dict.fromkeys(s[0] for s in self.samples):
            rows = [s for s in self.samples if s[0] == label]
            out[label] = {
                "n": len(rows),
                "sm_mhz_median": statistics.median(r[1] for r in rows),
                "sm_mhz_min": min(r[1] for r in rows),
                "sm_mhz_max": max(r[1] for r in rows),
                "power_w_median": statistics.median(r[2] for r in rows),
                "temp_c_max": max(r[3] for r in rows),
            }
        return out

    def stop(self):
        if self.proc:
            self.proc.terminate()


def timers(ex) -> dict:
    """label -> a replacement for the device's `time` with that way of timing."""
    dev = ex.device
    time_fn = dev.time

    def primed(*args, **kwargs):
        return time_fn(*args, **{**kwargs, "cache": "primed"})

    def idle(gap_s: float):
        def timed(
            kernel,
            grid,
            block,
            shared_mem,
            args,
            iterations,
            before_each=None,
            cache="flushed",
            gate=True,
            timer="events",
        ):  # noqa: ARG001 - the executor passes its timer; this probe studies events
            keep: list = []

            def prepare():  # the kernel's previous launch on this data, then the GPU idle for the gap
                if before_each is not None:
                    before_each()
                dev._launch_async(kernel, grid, block, shared_mem, args, keep)  # noqa: SLF001 - a probe
                dev.synchronize()
                end = time.perf_counter() + gap_s
                while time.perf_counter() < end:
                    pass

            return time_fn(
                kernel,
                grid,
                block,
                shared_mem,
                args,
                iterations,
                before_each=prepare,
                cache="warm",
                gate=gate,
                timer="events",
            )

        return timed

    return {"primed": primed, **{f"idle{gap}us": idle(gap * 1e-6) for gap in GAPS_US}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import application_median

    app = bench.BIN / "streams_app"
    sampler = Sampler()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            db_dir = Path(tmp) / mode
            sampler.phase(f"app-{mode}")
            code = recorder.main_record(
                db_dir, [str(app), mode], [], kernel="^saxpy$", library=bench.library(), progress=False, timer="events"
            )
            runs = []  # each further run: (kernel, key) -> seconds
            for k in range(1, opts.runs):
                raw = Path(tmp) / f"{mode}-run{k}"
                env = recorder.environment(raw, kernel="^saxpy$", library=bench.library(), timer="events")
                subprocess.run([str(app), mode], env=env, capture_output=True, timeout=120, check=False)
                runs.append(recorder.in_application(raw)[0])
            keys = bench.instance_keys(db_dir / "raw")
            for db in sorted(db_dir.glob("*.json")):
                rec = RecordedExecution.from_json(db)
                for dynamic_hash, inst in rec.kernel_instances.items():
                    key = (rec.kernel_name, keys.get(dynamic_hash, ""))
                    app_runs = [list(inst.app_times)] + [r.get(key, []) for r in runs]
                    medians = [application_median(t)[0] for t in app_runs if len(t) > 1]
                    row = {
                        "mode": mode,
                        "exit": code,
                        "instance": dynamic_hash[:8],
                        "grid": inst.grid_dim.x,
                        "app_run_medians_us": [round(m * 1e6, 3) for m in medians],
                        "app_us": statistics.median(medians) * 1e6,
                        "app_first_run_us": [round(t * 1e6, 2) for t in inst.app_times],
                    }
                    sampler.phase(f"replay-{mode}")
                    with BaseExecutor(
                        db,
                        record_id=dynamic_hash,
                        backend="cuda",
                        iterations=opts.iterations,
                        mode="cubin",
                        timer="events",
                    ) as ex:
                        for label, timed in timers(ex).items():
                            ex.device.time = timed
                            result = ex.execute(ex.default_config())
                            row[f"{label}_us"] = result.median_time * 1e6 if result.ok else None
                            row[f"{label}_ratio"] = result.median_time * 1e6 / row["app_us"] if result.ok else None
                    rows.append(row)
                    ways = "  ".join(
                        f"{k[:-3]} {row[k]:6.2f}"
                        for k in row
                        if k.endswith("_us") and k != "app_us" and isinstance(row[k], float)
                    )
                    print(
                        f"{mode:<9} {row['instance']} grid {row['grid']:>4} app {row['app_us']:6.2f} us "
                        f"{row['app_run_medians_us']}  {ways}",
                        flush=True,
                    )
    sampler.stop()
    clocks = sampler.summary()
    for label, c in clocks.items():
        print(
            f"{label:<16} n={c['n']:>3} sm {c['sm_mhz_median']:.0f} MHz ({c['sm_mhz_min']:.0f}-{c['sm_mhz_max']:.0f}) "
            f"power {c['power_w_median']:.0f} W temp max {c['temp_c_max']:.0f} C"
        )
    if opts.json:
        opts.json.write_text(json.dumps({"rows": rows, "clocks": clocks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
