"""Issue 38's application corpus: GPU programs we did not write the kernels of, recorded and replayed.

    python benchmarks/gpu/bench_app_corpus.py [--programs cupy,numba,torch,triton] [--iterations 10] [--json out.json]

Each program launches kernels through a framework on the GPU machine's image: a CuPy `RawKernel`
(NVRTC), a Numba CUDA kernel, PyTorch operators (ATen's kernels, cuBLAS), Triton kernels. Each runs
under the recorder as `mneme record` runs it (LD_PRELOAD into python3); where the program can name
its kernels it writes how often it launched each (`APP_LAUNCHES`), which is set against the
recorder's count. Every recorded instance then replays from the recorded binary (`--mode cubin`,
else `ptx`) and, where the recording has IR (Triton's, from its cache), from the IR: verified or
not, the replay's median against the recorded launch's own in-application time (`RecordedTime`, both
from a flushed L2), and the IR variant against the binary. An instance that does not verify from its
binary is handed to `mneme nondeterminism`'s analysis: when its outputs are order-dependent, the
derived policy is applied and the replay run again. A program whose framework is missing is listed
as skipped, with why. Nothing is fetched: the frameworks are the image's.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench_app_corpus")

# Each program: the modules it needs, and its source. APP_LAUNCHES names a JSON file the program writes
# {kernel name: launches} into, for the kernels it launches by name.
PROGRAMS = {
    "cupy": (("cupy",), '''
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
    '''),
    "numba": (("numba.cuda",), '''
        import json, os
        import numpy as np
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
    '''),
    "torch": (("torch",), '''
        import torch
        torch.manual_seed(0)
        x = torch.randn(512, 512, device="cuda")
        w = torch.randn(512, 512, device="cuda")
        for _ in range(2):
            y = torch.softmax(x @ w, dim=1) * 2.0 + x
            z = y.sum(dim=0)
        torch.cuda.synchronize()
        print(float(z.sum()))
    '''),
    "triton": (("torch", "triton"), '''
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
    '''),
}


def available(modules: tuple[str, ...]) -> str:
    """"" when every module imports in a fresh interpreter, else why not."""
    proc = subprocess.run([sys.executable, "-c", "; ".join(f"import {m}" for m in modules)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1][:200]


def record(name: str, source: str, tmp: Path, library: Path) -> tuple[dict, list[Path], str, int]:
    """Run one program under the recorder; (its own launch counts, databases, warnings, exit code)."""
    from mneme_cuda import recorder

    from mneme.core.recorder.finalize import unrecorded_warnings

    program = tmp / f"{name}_app.py"
    program.write_text(textwrap.dedent(source))
    raw, db, launches = tmp / "raw", tmp / "db", tmp / "launches.json"
    env = {**recorder.environment(raw, library=library, max_recordings=4), "APP_LAUNCHES": str(launches)}
    raw.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        log.warning("%s exited %d: %s", name, proc.returncode, proc.stderr[-2000:])
    databases = recorder.finalize(raw, db, arch=_arch())
    warnings = "; ".join(unrecorded_warnings(recorder.FORMAT, raw, databases))
    counted = json.loads(launches.read_text()) if launches.exists() else {}
    return counted, databases, warnings, proc.returncode


def _arch() -> str:
    from mneme_cuda.backend import CudaBackend

    return CudaBackend().arch(0)


def replay(db: Path, dynamic_hash: str, mode: str, iterations: int):
    from mneme.core.executor import BaseExecutor

    with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=iterations, mode=mode) as ex:
        return ex.execute(ex.default_config())


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
    text = "; ".join(f"{'arg %d' % f.arg if f.arg is not None else hex(f.addr)}: "
                     f"{(f.reasons or ('replays differ',))[0][:60]} -> {f.policy or f.note}" for f in findings)  # fmt: skip
    return text, replay(db, dynamic_hash, mode, 1).verified


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the table as markdown here")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution

    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    library = prebuilt if prebuilt.exists() else recorder.build()
    rows, programs = [], []
    for name in opts.programs.split(","):
        modules, source = PROGRAMS[name]
        why = available(modules)
        if why:
            programs.append({"program": name, "skipped": why})
            continue
        with tempfile.TemporaryDirectory(prefix=f"app-corpus-{name}-") as tmp:
            counted, databases, warnings, code = record(name, source, Path(tmp), library)
            recorded: dict[str, int] = {}
            for db in databases:
                rec = RecordedExecution.from_json(db)
                short = rec.demangled_name or rec.kernel_name
                recorded[rec.kernel_name] = sum(i.occ for i in rec.kernel_instances.values())
                binary = "cubin" if any(b.kind == "cubin" for b in rec.binary_blobs) else "ptx"
                for dynamic_hash, inst in rec.kernel_instances.items():
                    row = {"program": name, "kernel": short[:60], "instance": dynamic_hash, "occurrences": inst.occ,
                           "ir": bool(rec.llvm_files), "recorded_time_s": inst.recorded_time}  # fmt: skip
                    bin_result = replay(db, dynamic_hash, binary, opts.iterations)
                    row.update(binary=binary, binary_verified=bin_result.verified,
                               binary_median_s=bin_result.median_time or None)  # fmt: skip
                    if not bin_result.verified and bin_result.executed:
                        row["nondeterminism"], row["verified_under_policy"] = explain_nondeterminism(
                            db, dynamic_hash, binary)
                    if inst.recorded_time and bin_result.median_time:
                        row["replay_vs_recorded"] = bin_result.median_time / inst.recorded_time
                    if rec.llvm_files:
                        ir_result = replay(db, dynamic_hash, "ir", opts.iterations)
                        row.update(ir_verified=ir_result.verified, ir_median_s=ir_result.median_time or None,
                                   ir_error=(ir_result.mismatches or [ir_result.error])[0][:300] if not ir_result.verified else "")  # fmt: skip
                        if ir_result.median_time and bin_result.median_time:
                            row["ir_vs_binary"] = ir_result.median_time / bin_result.median_time
                    rows.append(row)
            # A program names its kernels as written; the recorder's names are mangled (Numba's) or exact.
            launched_ok = all(sum(v for kernel, v in recorded.items() if k == kernel or k in kernel) == n
                              for k, n in counted.items())  # fmt: skip
            programs.append({"program": name, "exit": code, "launched": counted, "recorded": recorded,
                             "all_launches_recorded": launched_ok if counted else None, "warnings": warnings})  # fmt: skip
    summary = summarize(rows, programs)
    figures = {"programs": programs, "rows": rows, "summary": summary}
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
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
        else:
            lines.append(f"app-corpus {p['program']}: exit {p['exit']}, launches recorded as the program made them: "
                         f"{p['all_launches_recorded']}" + (f"; {p['warnings']}" if p["warnings"] else ""))  # fmt: skip
    if rows:
        verified = sum(1 for r in rows if r["binary_verified"] or r.get("verified_under_policy"))
        ratios = [r["replay_vs_recorded"] for r in rows if r.get("replay_vs_recorded")]
        within = sum(1 for x in ratios if abs(x - 1) <= 0.05)
        ir_rows = [r for r in rows if r["ir"]]
        lines.append(f"app-corpus: {len(rows)} instances; verified from the binary {verified} (nondeterministic ones "
                     f"under their derived policy); replay vs the recorded launch within 5%: {within}/{len(ratios)}"
                     + (f", median {statistics.median(ratios):.3f}x" if ratios else ""))  # fmt: skip
        if ir_rows:
            exact = sum(1 for r in ir_rows if r.get("ir_verified"))
            speed = [r["ir_vs_binary"] for r in ir_rows if r.get("ir_vs_binary")]
            lines.append(f"app-corpus IR: {exact}/{len(ir_rows)} verified bit for bit; IR/binary time within 5%: "
                         f"{sum(1 for x in speed if x <= 1.05)}/{len(speed)}")  # fmt: skip
    return lines


def markdown(rows: list[dict], programs: list[dict]) -> list[str]:
    def us(seconds):
        return f"{seconds * 1e6:.1f}" if seconds else "-"

    def x(value):
        return f"{value:.3f}" if value else "-"

    lines = ["| program | kernel | occ | binary | verified | replay us | recorded us | replay/recorded | IR verified | IR/binary | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in rows:
        note = r.get("nondeterminism", "") or r.get("ir_error", "")
        lines.append(f"| {r['program']} | `{r['kernel']}` | {r['occurrences']} | {r['binary']} | "
                     f"{'yes' if r['binary_verified'] else ('under policy' if r.get('verified_under_policy') else 'NO')} | "
                     f"{us(r['binary_median_s'])} | {us(r['recorded_time_s'])} | {x(r.get('replay_vs_recorded'))} | "
                     f"{('yes' if r.get('ir_verified') else 'NO') if r['ir'] else '-'} | {x(r.get('ir_vs_binary'))} | "
                     f"{note[:120].replace('|', '/')} |")  # fmt: skip
    for p in programs:
        if "skipped" in p:
            lines.append(f"| {p['program']} | (skipped: {p['skipped'][:80]}) | | | | | | | | | |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
