"""Issue 38's application corpus: GPU programs we did not write the kernels of, recorded and replayed.

    python benchmarks/gpu/bench_app_corpus.py [--programs cupy,numba,torch,triton,llama.cpp] [--iterations 10]
        [--app-runs 3] [--seconds 130] [--ir-variant NAME:FIELD=VALUE[,...]]... [--no-diagnosis] [--json out.json]

Each program launches kernels through a framework on the GPU machine's image: a CuPy `RawKernel`
(NVRTC), a Numba CUDA kernel, PyTorch operators (ATen's kernels, cuBLAS), Triton kernels; and
llama.cpp's CUDA operators (ggml-cuda), built with `mneme-cc nvcc` from the llama-cpp-python sdist by
`scripts/gpu-suite --prepare` into .gpu/bin (benchmarks/gpu/apps/llama_build.py). Each runs under the
recorder as `mneme record` runs it (LD_PRELOAD). Its launches are counted three ways: by the program
itself where it can name its kernels (`APP_LAUNCHES`), by the recorder (counts-<pid>.json: every launch
it saw, graphs included) and by CUPTI (one more run under the CUPTI tracer of benchmarks/gpu/probes,
where --prepare built it): every kernel's recorder count must equal CUPTI's. Every recorded instance
then replays from the recorded binary (`--mode cubin`, else `ptx`) and, where the recording has IR
(Triton's from its cache, llama.cpp's embedded by mneme-cc), from the IR: verified or not, and the
replay's median against the recorded launch's own in-application time (`RecordedTime`, both from a
flushed L2). A launch recorded once is one sample per process, which spreads by 20-30% for a kernel of
a few microseconds (docs/design/recording.md, "The L2 before a recorded launch"), so the program runs
`--app-runs` times under the recorder and the reference is the median of its recorded times. Where an
instance misses 5%, the replay is timed again with its method changed one way at a time (no reset of the
written regions, no synchronize after the flush, a new mapping right before, a warm or primed L2:
`diagnosis`; and in fresh processes, as `mneme replay` runs, with the recorded ranges mapped at the
driver's recommended granularity instead of the minimum, where the two differ: `fresh-recommended` beside
`fresh-processes`), so a suite run tells which difference of method it is. The further runs record with
MNEME_RECORD_RETIME=1: the recorder runs each recorded launch a second time, from its prologue restored
and the L2 flushed again, then restores what the launch left (the application's results are its own);
their median is the `retimed` column. Where it matches the replay and not the recorded time, the
application's first flushed launch is the outlier
(docs/design/investigations/replay-timing-2026-12-06.md). An instance that does not verify from its
binary is handed to `mneme nondeterminism`'s analysis: when its outputs are order-dependent, the derived
policy is applied and the replay run again. A program whose framework or build is missing is listed as
skipped, with why. Nothing is fetched here: the frameworks are the image's, llama.cpp's build is carried.
The optional work (more runs, CUPTI's count, the diagnosis) stops when `--seconds` are used up; the JSON
is written after each program.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench_ir_vs_binary import parse_variant  # beside this file: --ir-variant takes its NAME:FIELD=VALUE

log = logging.getLogger("bench_app_corpus")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_corpus_diagnosis import diagnose, map_granularities  # beside this file

# Each program: the modules it needs, and its source. APP_LAUNCHES names a JSON file the program writes
# {kernel name: launches} into, for the kernels it launches by name.
PROGRAMS = {
    "cupy": (
        ("cupy",),
        '''
        import json, os, cupy as cp
        saxpy = cp.RawKernel(r"""
        extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) y[i] = a * x[i] + y[i];
        }""", "saxpy")
        total = cp.RawKernel(r"""
        extern "C" __global__ void total(int n, const float *x, float *sum) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) atomicAdd(sum, x[i]);
        }""", "total")
        n = 1 << 20
        x = cp.random.default_rng(1).random(n, dtype=cp.float32)
        y = cp.ones(n, dtype=cp.float32)
        s = cp.zeros(1, dtype=cp.float32)
        for _ in range(3):
            saxpy(((n + 255) // 256,), (256,), (cp.int32(n), cp.float32(2.0), x, y))
        total(((n + 255) // 256,), (256,), (cp.int32(n), x, s))
        cp.cuda.runtime.deviceSynchronize()
        json.dump({"saxpy": 3, "total": 1}, open(os.environ["APP_LAUNCHES"], "w"))
    ''',
    ),
    "numba": (
        ("numba.cuda",),
        """
        import json, os
        import numpy as np
        if not hasattr(np, "row_stack"):  # NumPy 2.5 dropped this alias of vstack; numba-cuda's arrayobj still names it
            np.row_stack = np.vstack
        from numba import cuda

        @cuda.jit
        def blur(src, dst):
            i = cuda.grid(1)
            if 0 < i < src.size - 1:
                dst[i] = (src[i - 1] + src[i] + src[i + 1]) / 3.0

        n = 1 << 20
        a = cuda.to_device(np.random.default_rng(2).random(n).astype(np.float32))
        b = cuda.device_array_like(a)
        for _ in range(4):
            blur[(n + 255) // 256, 256](a, b)
            a, b = b, a
        cuda.synchronize()
        json.dump({"blur": 4}, open(os.environ["APP_LAUNCHES"], "w"))
    """,
    ),
    "torch": (
        ("torch",),
        """
        import torch
        torch.manual_seed(0)
        x = torch.randn(512, 512, device="cuda")
        w = torch.randn(512, 512, device="cuda")
        for _ in range(2):
            y = torch.softmax(x @ w, dim=1) * 2.0 + x
            z = y.sum(dim=0)
        torch.cuda.synchronize()
        print(float(z.sum()))
    """,
    ),
    "triton": (
        ("torch", "triton"),
        """
        import json, os
        import torch, triton, triton.language as tl

        @triton.jit
        def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
            tl.store(out_ptr + offs, alpha * x + tl.load(y_ptr + offs, mask=mask), mask=mask)

        @triton.jit
        def row_softmax(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            offs = tl.arange(0, BLOCK)
            mask = offs < cols
            v = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
            e = tl.exp(v - tl.max(v, axis=0))
            tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)

        n = 1 << 20
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        for _ in range(3):
            scale_add[(triton.cdiv(n, 1024),)](x, y, out, n, 0.5, BLOCK=1024)
        m = torch.randn(256, 1000, device="cuda")
        s = torch.empty_like(m)
        row_softmax[(256,)](m, s, 1000, BLOCK=1024)
        torch.cuda.synchronize()
        json.dump({"scale_add": 3, "row_softmax": 1}, open(os.environ["APP_LAUNCHES"], "w"))
    """,
    ),
}

# Programs built by `scripts/gpu-suite --prepare` (carried in .gpu/bin): name -> (binary, what builds it).
EXECUTABLES = {
    "llama.cpp": (ROOT / ".gpu" / "bin" / "ggml_ops_app", "benchmarks/gpu/apps/llama_build.py"),
}
TRACER = ROOT / ".gpu" / "lib" / "probes" / "libmneme_cupti_trace.so"


def available(modules: tuple[str, ...]) -> str:
    """ "" when every module imports in a fresh interpreter, else why not."""
    proc = subprocess.run(
        [sys.executable, "-c", "; ".join(f"import {m}" for m in modules)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1][:200]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def program_command(name: str, tmp: Path) -> tuple[list[str], str]:
    """(the command that runs program `name`, "") or ([], why it cannot run here)."""
    if name in EXECUTABLES:
        binary, builder = EXECUTABLES[name]
        if not binary.is_file():
            return [], f"{_shown(binary)} is not built (scripts/gpu-suite --prepare builds it with {builder})"
        return [str(binary)], ""
    modules, source = PROGRAMS[name]
    why = available(modules)
    if why:
        return [], why
    program = tmp / f"{name}_app.py"
    program.write_text(textwrap.dedent(source))
    return [sys.executable, str(program)], ""


def record(name: str, command: list[str], tmp: Path, library: Path, finalize: bool = True, retime: bool = False):
    """Run one program under the recorder: (its own launch counts, databases, warnings, exit code, raw folder,
    the recorded launches as `raw_recorded_launches` reads them). With `finalize` False no database is written (a
    further run, for its times). `retime`: MNEME_RECORD_RETIME=image (each recorded launch timed a second time,
    and a third through its recorded code image loaded as a replay loads it)."""
    from mneme_cuda import recorder

    from mneme.core.recorder.finalize import unrecorded_warnings

    raw, db, launches = tmp / "raw", tmp / "db", tmp / "launches.json"
    env = {**recorder.environment(raw, library=library, max_recordings=4), "APP_LAUNCHES": str(launches)}
    if retime:
        env["MNEME_RECORD_RETIME"] = "image"
    raw.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        log.warning("%s exited %d: %s", name, proc.returncode, (proc.stderr or proc.stdout)[-2000:])
    launched = raw_recorded_launches(raw)  # before finalize, which moves the launch folders' snapshots
    if not finalize:
        return {}, [], "", proc.returncode, raw, launched
    databases = recorder.finalize(raw, db, arch=_arch())
    warnings = "; ".join(unrecorded_warnings(recorder.FORMAT, raw, databases))
    counted = json.loads(launches.read_text()) if launches.exists() else {}
    return counted, databases, warnings, proc.returncode, raw, launched


def recorder_launches(raw: Path) -> dict[str, int]:
    """Launches of each kernel the recorder saw (directly and inside graphs), from its counts-<pid>.json."""
    total: Counter = Counter()
    for path in raw.glob("counts-*.json"):
        for kernel, entry in json.loads(path.read_text()).get("kernels", {}).items():
            total[kernel] += int(entry.get("seen", 0)) + int(entry.get("graph_launches", 0))
    return {k: n for k, n in total.items() if n}


def cupti_launches(command: list[str], tmp: Path) -> tuple[dict[str, int] | None, str]:
    """Launches of each kernel by CUPTI's own kernel records, in a run without the recorder; (None, why) when
    the tracer is not built."""
    if not TRACER.is_file():
        return None, f"no CUPTI tracer ({_shown(TRACER)}: scripts/gpu-suite --prepare builds it where CUPTI is)"
    trace = tmp / "cupti-trace"
    trace.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "CUDA_INJECTION64_PATH": str(TRACER),
        "MNEME_CUPTI_TRACE_DIR": str(trace),
        "APP_LAUNCHES": str(tmp / "traced-launches.json"),
    }
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        log.warning("traced run exited %d: %s", proc.returncode, (proc.stderr or proc.stdout)[-1000:])
    counts: Counter = Counter()
    for path in trace.glob("kernels-*.tsv"):
        for line in path.read_text(errors="replace").splitlines():
            if line.strip():
                counts[line.split("\t", 1)[0]] += 1
    if not counts:
        return None, f"the CUPTI tracer wrote no kernel record (exit {proc.returncode})"
    return dict(counts), ""


def raw_recorded_launches(raw: Path, which: str = "recorded") -> list[tuple[tuple[str, str], tuple, float]]:
    """The recorded launches timed from a flushed L2 in a raw folder (no finalize), in the order the recorder wrote
    them (a process's launch folders by sequence number): ((kernel, dynamic hash), (kernel, grid, block, shared
    memory, how many such launches of the kernel came before it), in-application seconds). `which`: "recorded" for
    the recorded launch's own time, "retimed" for its second (MNEME_RECORD_RETIME), "image" for its third, through
    the recorded code image loaded anew (MNEME_RECORD_RETIME=image)."""
    from mneme_cuda import recorder

    from mneme.core.recorder.rawdir import launches, recorded_times, retimed_image_times, retimed_times
    from mneme.core.records.model import dynamic_hash_of

    first = {"recorded": recorded_times, "retimed": retimed_times, "image": retimed_image_times}[which](raw)
    out, seen = [], Counter()
    for _, m in launches(recorder.FORMAT, raw):
        shape = (m["kernel"], tuple(m["grid"]), tuple(m["block"]), m["shared_mem"])
        nth = seen[shape]
        seen[shape] += 1
        key = (m["kernel"], m.get("instance_key", ""))
        if key in first and first[key][1] == "flushed":
            digest = dynamic_hash_of(m["grid"], m["block"], m["shared_mem"], bytes.fromhex(m["args"]))
            out.append(((m["kernel"], digest), (*shape, nth), first[key][0]))
    return out


def times_of_the_first_runs_instances(
    first: list[tuple[tuple[str, str], tuple]], further: list[tuple[tuple[str, str], tuple, float]]
) -> dict[tuple[str, str], float]:
    """A further run's recorded times, keyed by the first run's instances: by the instance's own key (kernel,
    dynamic hash) where the run recorded it, else by its place (the same kernel and shape, as many such launches
    before it), so an instance whose arguments hold other addresses in each run (a framework's allocator) still
    gets one sample a run. Each first-run instance takes at most one time per run."""
    keys = {key for key, _ in first}
    by_place = {place: key for key, place in first}
    out: dict[tuple[str, str], float] = {}
    for key, _, seconds in further:  # the exact keys first, so a place never takes an instance they hold
        if key in keys:
            out.setdefault(key, seconds)
    for key, place, seconds in further:
        target = by_place.get(place)
        if key not in keys and target is not None and target not in out:
            out[target] = seconds
    return out


def _arch() -> str:
    from mneme_cuda.backend import CudaBackend

    return CudaBackend().arch(0)


def replay(
    db: Path,
    dynamic_hash: str,
    mode: str,
    iterations: int,
    before_flush: str | None = None,
    extra_streams: int | None = None,
):
    """The recorded configuration replayed as `mneme replay` does; `before_flush` ("", "read", "rewrite"): what
    the SMs do to every recorded range before each flush, as $MNEME_CUDA_BEFORE_FLUSH asks, and `extra_streams`:
    how many more streams the device holds while it times, as $MNEME_CUDA_EXTRA_STREAMS asks, each set on this
    executor's device only (None: as the environment says)."""
    from mneme.core.executor import BaseExecutor

    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode=mode) as ex:
        if before_flush is not None:
            ex.device.before_flush = before_flush
        if extra_streams is not None:
            ex.device.extra_streams = extra_streams
        return ex.execute(ex.default_config())


def ir_variants(db: Path, dynamic_hash: str, variants: list[tuple[str, dict]], iterations: int, binary_s: float):
    """`--ir-variant`: the IR variant with configuration fields changed (bench_ir_vs_binary's NAME:FIELD=VALUE),
    each verified and timed as the recorded configuration's IR variant is, in one executor (one link of the IR)."""
    from mneme.core.executor import BaseExecutor

    found = {}
    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode="ir") as ex:
        for name, fields in variants:
            try:
                result = ex.execute(ex.default_config().replace(**fields))
            except Exception as exc:  # noqa: BLE001 - a field this configuration does not take: the others still run
                found[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                continue
            found[name] = {
                "verified": result.verified,
                "median_s": result.median_time or None,
                "registers": result.reg_usage,
                "ir_vs_binary": result.median_time / binary_s if result.median_time and binary_s else None,
            }
    return found


def explain_nondeterminism(db: Path, dynamic_hash: str, mode: str) -> tuple[str, bool]:
    """Whether a failed instance's outputs are order-dependent: (what was found, verified under its policy)."""
    from mneme.core.executor import BaseExecutor
    from mneme.core.nondeterminism import analyze
    from mneme.plugins.replay_commands import annotate

    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=1, mode=mode, cache="warm") as ex:
        findings = [f for f in analyze(ex, runs=3) if f.order_dependent]
    if not findings:
        return "not order-dependent (a wrong replay)", False
    for f in findings:
        if f.policy is not None:
            annotate(db, f.policy, record_id=dynamic_hash, address=f.addr)
    text = "; ".join(
        f"{f'arg {f.arg}' if f.arg is not None else hex(f.addr)}: "
        f"{(f.reasons or ('replays differ',))[0][:60]} -> {f.policy or f.note}"
        for f in findings
    )
    return text, replay(db, dynamic_hash, mode, 1).verified


def run_program(name: str, command: list[str], tmp: Path, library: Path, opts, time_left, rows: list[dict]) -> dict:
    """Record one program (`--app-runs` times), count its launches, replay every instance; its summary entry.

    Each instance's row is appended to `rows` as it is measured."""
    from mneme.core.recorder.rawdir import retime_facts
    from mneme.core.records import RecordedExecution

    counted, databases, warnings, code, raw, launched = record(name, command, tmp, library)
    first_launches = [(key, place) for key, place, _ in launched]
    entry = {"program": name, "exit": code, "launched": counted, "recorded": {}, "warnings": warnings}
    # The recorded launch's time in each run (one sample per process).
    samples: dict[tuple[str, str], list[float]] = {key: [seconds] for key, _, seconds in launched}
    retimed: dict[tuple[str, str], list[float]] = {}  # the further runs' second time of each recorded launch
    image: dict[tuple[str, str], list[float]] = {}  # and its third, through the recorded image loaded anew
    facts: dict[str, dict[str, str]] = {}
    runs = 1
    for run in range(1, opts.app_runs):
        if not time_left():
            break
        further = tmp / f"run{run}"
        further.mkdir()
        *_, further_raw, further_launched = record(name, command, further, library, finalize=False, retime=True)
        for into, timed in (
            (samples, further_launched),
            (retimed, raw_recorded_launches(further_raw, "retimed")),
            (image, raw_recorded_launches(further_raw, "image")),
        ):
            for k, seconds in times_of_the_first_runs_instances(first_launches, timed).items():
                into.setdefault(k, []).append(seconds)
        for kernel, noted in retime_facts(further_raw).items():
            facts.setdefault(kernel, {}).update(noted)
        shutil.rmtree(further, ignore_errors=True)  # its snapshots: only the times were wanted
        runs += 1
    entry["app_runs"] = runs
    seen = recorder_launches(raw)
    entry["recorder_launches"] = seen
    cupti, why_not = cupti_launches(command, tmp) if time_left() else (None, "no time left")
    if cupti is None:
        entry["cupti_launches"], entry["cupti_skipped"] = None, why_not
    else:
        entry["cupti_launches"] = cupti
        entry["launch_count_differs"] = {
            k: [cupti.get(k, 0), seen.get(k, 0)]
            for k in sorted(set(cupti) | set(seen))
            if cupti.get(k, 0) != seen.get(k, 0)
        }
        entry["all_launches_recorded"] = not entry["launch_count_differs"]
    recorded: dict[str, int] = {}
    for db in databases:
        rec = RecordedExecution.from_json(db)
        short = rec.demangled_name or rec.kernel_name
        recorded[rec.kernel_name] = sum(i.occ for i in rec.kernel_instances.values())
        binary = "cubin" if any(b.kind == "cubin" for b in rec.binary_blobs) else "ptx"
        for dynamic_hash, inst in rec.kernel_instances.items():
            app_samples = samples.get((rec.kernel_name, dynamic_hash)) or (
                [inst.recorded_time] if inst.recorded_time else []
            )
            reference = statistics.median(app_samples) if app_samples else None
            retimed_samples = retimed.get((rec.kernel_name, dynamic_hash), [])
            retimed_median = statistics.median(retimed_samples) if retimed_samples else None
            image_samples = image.get((rec.kernel_name, dynamic_hash), [])
            image_median = statistics.median(image_samples) if image_samples else None
            row = {
                "program": name,
                "kernel": short[:60],
                "instance": dynamic_hash,
                "occurrences": inst.occ,
                "ir": bool(rec.llvm_files),
                "recorded_time_s": inst.recorded_time,
                "recorded_cache": inst.recorded_cache,
                "app_timer": inst.app_timer,
                "recorded_samples_s": app_samples,
                "recorded_median_s": reference,
                "retimed_samples_s": retimed_samples,
                "retimed_median_s": retimed_median,
                "retimed_vs_recorded": retimed_median / reference if retimed_median and reference else None,
                "image_samples_s": image_samples,
                "image_median_s": image_median,
                "image_vs_recorded": image_median / reference if image_median and reference else None,
                "retime_facts": facts.get(rec.kernel_name, {}),
                "later_launches_median_s": statistics.median(inst.app_times) if inst.app_times else None,
            }
            bin_result = replay(db, dynamic_hash, binary, opts.iterations)
            row.update(
                binary=binary,
                binary_verified=bin_result.verified,
                binary_median_s=bin_result.median_time or None,
                replay_timer=bin_result.timer,
                binary_times_s=list(bin_result.exec_time),
            )
            if not bin_result.verified and bin_result.executed:
                row["nondeterminism"], row["verified_under_policy"] = explain_nondeterminism(db, dynamic_hash, binary)
            if retimed_median and bin_result.median_time:
                row["replay_vs_retimed"] = bin_result.median_time / retimed_median
            if image_median and bin_result.median_time:
                row["replay_vs_image"] = bin_result.median_time / image_median
            if reference and bin_result.median_time:
                row["replay_vs_recorded"] = bin_result.median_time / reference
                for how in opts.before_flush:
                    touched = replay(db, dynamic_hash, binary, opts.iterations, before_flush=how)
                    if touched.median_time:
                        row.setdefault("before_flush_vs_recorded", {})[how or "none"] = touched.median_time / reference
                for count in opts.extra_streams:
                    streamed = replay(db, dynamic_hash, binary, opts.iterations, extra_streams=count)
                    if streamed.median_time:
                        row.setdefault("extra_streams_vs_recorded", {})[str(count)] = streamed.median_time / reference
                if abs(row["replay_vs_recorded"] - 1) > 0.05 and opts.diagnosis and time_left():
                    row["diagnosis_s"] = diagnose(db, dynamic_hash, binary, opts.iterations)
                    row["map_granularity_bytes"] = map_granularities()
            if rec.llvm_files:
                ir_result = replay(db, dynamic_hash, "ir", opts.iterations)
                row.update(
                    ir_verified=ir_result.verified,
                    ir_median_s=ir_result.median_time or None,
                    ir_error=(ir_result.mismatches or [ir_result.error])[0][:300] if not ir_result.verified else "",
                )
                if ir_result.median_time and bin_result.median_time:
                    row["ir_vs_binary"] = ir_result.median_time / bin_result.median_time
                if opts.ir_variant:
                    row["ir_variants"] = ir_variants(
                        db, dynamic_hash, opts.ir_variant, opts.iterations, bin_result.median_time
                    )
            rows.append(row)
    entry["recorded"] = recorded
    if "all_launches_recorded" not in entry:
        # Without CUPTI's count, the program's own (a program names its kernels as written; the
        # recorder's names are mangled (Numba's) or exact).
        entry["all_launches_recorded"] = (
            all(sum(v for kernel, v in seen.items() if k == kernel or k in kernel) == n for k, n in counted.items())
            if counted
            else None
        )
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default=",".join([*EXECUTABLES, *PROGRAMS]))
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument(
        "--app-runs",
        type=int,
        default=3,
        help="runs of each program under the recorder; the reference is the median of their recorded times (a "
        "further run's launch joins the first run's instance by its key, else by its place: kernel, shape, order)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=130.0,
        help="after this, no optional work (more runs, CUPTI's count, the diagnosis) is started",
    )
    parser.add_argument(
        "--ir-variant",
        action="append",
        default=[],
        type=parse_variant,
        metavar="NAME:FIELD=VALUE[,...]",
        help="also replay every IR instance with these configuration fields changed (repeatable; "
        "e.g. sched4reg:nvptx_sched4reg=true); run whatever --seconds says",
    )
    parser.add_argument(
        "--before-flush",
        type=lambda text: [] if not text else ["" if h == "none" else h for h in text.split(",")],
        default=[],
        metavar="HOW[,HOW...]",
        help="also replay every instance's binary with what the SMs do to its recorded ranges before each flush "
        "set to each HOW (none, read, rewrite: $MNEME_CUDA_BEFORE_FLUSH), each in its own executor",
    )
    parser.add_argument(
        "--extra-streams",
        type=lambda text: [int(n) for n in text.split(",") if n],
        default=[],
        metavar="N[,N...]",
        help="also replay every instance's binary with N more streams on the device while it times "
        "($MNEME_CUDA_EXTRA_STREAMS), each N in its own executor",
    )
    parser.add_argument(
        "--no-diagnosis",
        dest="diagnosis",
        action="store_false",
        help="time a missing instance's replay only as by default (no method changed one way at a time)",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the table as markdown here")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from mneme_cuda import recorder

    started = time.monotonic()

    def time_left() -> bool:
        return time.monotonic() - started < opts.seconds

    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    library = prebuilt if prebuilt.exists() else recorder.build()
    rows, programs = [], []

    def write() -> None:
        if opts.json:
            opts.json.write_text(
                json.dumps({"programs": programs, "rows": rows, "summary": summarize(rows, programs)}, indent=2)
            )

    for name in opts.programs.split(","):
        with tempfile.TemporaryDirectory(prefix=f"app-corpus-{name}-") as tmp:
            command, why = program_command(name, Path(tmp))
            if why:
                programs.append({"program": name, "skipped": why})
                write()
                continue
            try:
                entry = run_program(name, command, Path(tmp), library, opts, time_left, rows)
            except Exception as exc:  # one program's failure is reported, the others still run
                log.exception("app-corpus %s failed", name)
                entry = {"program": name, "error": f"{type(exc).__name__}: {exc}"[:500]}
            programs.append(entry)
            write()
    summary = summarize(rows, programs)
    write()
    table = markdown(rows, programs)
    if opts.out:
        opts.out.write_text("\n".join(table) + "\n")
    print("\n".join(summary + [""] + table))
    return 0


def summarize(rows: list[dict], programs: list[dict]) -> list[str]:
    lines = []
    for p in programs:
        if "skipped" in p:
            lines.append(f"app-corpus {p['program']}: skipped ({p['skipped']})")
        elif "error" in p:
            lines.append(f"app-corpus {p['program']}: FAILED ({p['error']})")
        else:
            if p.get("cupti_launches") is not None:
                counts = (
                    f"every kernel's launches as CUPTI counted them ({sum(p['cupti_launches'].values())} "
                    f"launches of {len(p['cupti_launches'])} kernels): {p['all_launches_recorded']}"
                )
                if p.get("launch_count_differs"):
                    counts += (
                        " (CUPTI, recorder: "
                        + ", ".join(f"{k[:50]} {a}, {b}" for k, (a, b) in list(p["launch_count_differs"].items())[:4])
                        + ")"
                    )
            else:
                counts = (
                    f"launches recorded as the program made them: {p['all_launches_recorded']} (no CUPTI count: "
                    f"{p.get('cupti_skipped', '')})"
                )
            lines.append(
                f"app-corpus {p['program']}: exit {p['exit']}, {p.get('app_runs', 1)} run(s) under the "
                f"recorder; {counts}" + (f"; {p['warnings']}" if p["warnings"] else "")
            )
    if rows:
        verified = sum(1 for r in rows if r["binary_verified"] or r.get("verified_under_policy"))
        ratios = [r["replay_vs_recorded"] for r in rows if r.get("replay_vs_recorded")]
        within = sum(1 for x in ratios if abs(x - 1) <= 0.05)
        ir_rows = [r for r in rows if r["ir"]]
        lines.append(
            f"app-corpus: {len(rows)} instances; verified from the binary {verified} (nondeterministic ones "
            f"under their derived policy); replay vs the recorded launch (median of the runs' recorded "
            f"times) within 5%: {within}/{len(ratios)}"
            + (f", median {statistics.median(ratios):.3f}x" if ratios else "")
        )
        for how in dict.fromkeys(h for r in rows for h in r.get("before_flush_vs_recorded", {})):
            got = [r["before_flush_vs_recorded"][how] for r in rows if how in r.get("before_flush_vs_recorded", {})]
            lines.append(
                f"app-corpus replay, recorded ranges before each flush: {how} (--before-flush; its own executor): "
                f"within 5% {sum(1 for x in got if abs(x - 1) <= 0.05)}/{len(got)}, median {statistics.median(got):.3f}x"
            )
        for count in dict.fromkeys(c for r in rows for c in r.get("extra_streams_vs_recorded", {})):
            got = [
                r["extra_streams_vs_recorded"][count] for r in rows if count in r.get("extra_streams_vs_recorded", {})
            ]
            lines.append(
                f"app-corpus replay with {count} more streams (--extra-streams; its own executor): "
                f"within 5% {sum(1 for x in got if abs(x - 1) <= 0.05)}/{len(got)}, median {statistics.median(got):.3f}x"
            )
        for name, label in (
            ("retimed", "recorded launch timed again (MNEME_RECORD_RETIME)"),
            ("image", "recorded launch through its recorded image in the application (MNEME_RECORD_RETIME=image)"),
        ):
            line = later_time_line(rows, name, label)
            if line:
                lines.append(line)
        noted = {f"{k}: {v}" for r in rows for k, v in r.get("retime_facts", {}).items() if "attribute" in k}
        if noted:
            lines.append("app-corpus function attributes, application / image: " + "; ".join(sorted(noted))[:600])
        # Of the instances that missed, how many each changed method would have brought within 5%.
        diagnosed = [r for r in rows if r.get("diagnosis_s") and r.get("recorded_median_s")]
        if diagnosed:
            fixes = Counter(
                name
                for r in diagnosed
                for name, t in r["diagnosis_s"].items()
                if abs(t / r["recorded_median_s"] - 1) <= 0.05
            )
            lines.append(
                f"app-corpus diagnosis of the {len(diagnosed)} that missed: within 5% when timed "
                + ", ".join(f"{name} {fixes.get(name, 0)}" for name in diagnosed[0]["diagnosis_s"])
            )
        if ir_rows:
            exact = sum(1 for r in ir_rows if r.get("ir_verified"))
            speed = [r["ir_vs_binary"] for r in ir_rows if r.get("ir_vs_binary")]
            lines.append(
                f"app-corpus IR: {exact}/{len(ir_rows)} verified bit for bit; IR/binary time within 5%: "
                f"{sum(1 for x in speed if x <= 1.05)}/{len(speed)}"
            )
            for name in dict.fromkeys(n for r in ir_rows for n in r.get("ir_variants", {})):
                got = [r["ir_variants"][name] for r in ir_rows if name in r.get("ir_variants", {})]
                speed = [g["ir_vs_binary"] for g in got if g.get("ir_vs_binary")]
                lines.append(
                    f"app-corpus IR variant {name}: {sum(1 for g in got if g.get('verified'))}/{len(got)} verified "
                    f"bit for bit; IR/binary time within 5%: {sum(1 for x in speed if x <= 1.05)}/{len(speed)}"
                    + (f", median {statistics.median(speed):.3f}x" if speed else "")
                )
    return lines


def later_time_line(rows: list[dict], name: str, label: str) -> str:
    """The summary of a later time of the recorded launch (`name`: "retimed", "image") against the first and the
    replay, with the instances whose replay missed the recorded time apart; "" when no row has it."""
    got = [r for r in rows if r.get(f"replay_vs_{name}") and r.get(f"{name}_vs_recorded")]
    if not got:
        return ""
    missed = [r for r in got if abs(r.get("replay_vs_recorded", 1) - 1) > 0.05]

    def within(of: list[dict], key: str) -> int:
        return sum(abs(r[key] - 1) <= 0.05 for r in of)

    return (
        f"app-corpus {label}, {len(got)} instances: {name}/recorded median "
        f"{statistics.median(r[f'{name}_vs_recorded'] for r in got):.3f}x; replay within 5% of it "
        f"{within(got, f'replay_vs_{name}')}/{len(got)}; of the {len(missed)} whose replay missed the recorded time, "
        f"{name}/recorded within 5% {within(missed, f'{name}_vs_recorded')}, replay/{name} within 5% "
        f"{within(missed, f'replay_vs_{name}')}"
    )


def markdown(rows: list[dict], programs: list[dict]) -> list[str]:
    def us(seconds):
        return f"{seconds * 1e6:.1f}" if seconds else "-"

    def x(value):
        return f"{value:.3f}" if value else "-"

    lines = [
        (
            "| program | kernel | occ | binary | verified | replay us | recorded us (median of runs) | replay/recorded | "
            "retimed us | replay/retimed | image us | replay/image | IR verified | IR/binary | note |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        note = r.get("nondeterminism", "") or r.get("ir_error", "")
        if r.get("ir_variants"):
            note = ", ".join(
                f"IR {k} {v['ir_vs_binary']:.2f}" if v.get("ir_vs_binary") else f"IR {k} failed"
                for k, v in r["ir_variants"].items()
            ) + (f"; {note}" if note else "")
        if r.get("diagnosis_s") and r.get("recorded_median_s"):
            note = (
                "replay/recorded "
                + ", ".join(f"{k} {t / r['recorded_median_s']:.2f}" for k, t in r["diagnosis_s"].items())
                + (f"; {note}" if note else "")
            )
        lines.append(
            f"| {r['program']} | `{r['kernel']}` | {r['occurrences']} | {r['binary']} | "
            f"{'yes' if r['binary_verified'] else ('under policy' if r.get('verified_under_policy') else 'NO')} | "
            f"{us(r['binary_median_s'])} | {us(r.get('recorded_median_s'))} | {x(r.get('replay_vs_recorded'))} | "
            f"{us(r.get('retimed_median_s'))} | {x(r.get('replay_vs_retimed'))} | "
            f"{us(r.get('image_median_s'))} | {x(r.get('replay_vs_image'))} | "
            f"{('yes' if r.get('ir_verified') else 'NO') if r['ir'] else '-'} | {x(r.get('ir_vs_binary'))} | "
            f"{note[:160].replace('|', '/')} |"
        )
    for p in programs:
        if "skipped" in p or "error" in p:
            what = f"skipped: {p['skipped']}" if "skipped" in p else f"FAILED: {p['error']}"
            lines.append(f"| {p['program']} | ({what[:100].replace('|', '/')}) | | | | | | | | | | | | | |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
