"""CUDA replay baselines and fidelity (issue 7), for every corpus kernel captured on the GPU.

    python benchmarks/gpu/bench_cuda_replay.py [--n 4194304] [--iterations 20] [--json results.json]

For each kernel, in one run:
- IR variant vs the application's own binary: the median time of the kernel compiled from its
  IR at the recorded configuration (`--mode ir`) against the same `.cu` compiled by nvcc
  (`nvcc -cubin -O3`), attached to the recording as an application image (`--mode cubin`);
- fidelity proxy: the replayed nvcc cubin's median against the same cubin launched directly
  (ordinary `cuMemAlloc` buffers holding the prologue, `kernelParams`, CUDA events behind the same
  launch gate, the same L2 flush before each run, no reset machinery): within 5% is the target;
- per-experiment overhead (wall time of `execute` minus kernel time, binary prebuilt) for a
  small kernel (vector_add over 64K floats).
nvcc is looked up on PATH and in /usr/local/cuda/bin; prebuilt cubins in .gpu/cubin/<source>.cubin
are used when there is no nvcc. Kernels without a cubin report the IR figures only.

`--ir-from mneme-cc` takes both sides from one application build instead (issue 38, point 6):
`mneme-cc nvcc -arch=sm_XX -O3 -c`, whose object holds nvcc's cubin and the device IR mneme-cc
embeds; the IR is given the numerics nvcc applied, as a recording's finalize does. The IR variant
is then exactly what `mneme replay --mode ir` compiles for a recorded application (clang's -O3 IR,
not the corpus' unoptimized IR), against the very binary the application ran.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "data" / "kernels"
PREBUILT_CUBINS = ROOT / ".gpu" / "cubin"
FIDELITY_TARGET = 0.05

sys.path[:0] = [str(ROOT / "tests" / "gpu"), str(ROOT / "tests")]


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path(os.environ.get("CUDA_PATH", "/usr/local/cuda")) / "bin" / "nvcc"
    return str(default) if default.exists() else None


def nvcc_cubin(source: str, arch: str, out_dir: Path) -> tuple[Path | None, str]:
    """The nvcc-built cubin of a corpus source (built now, else prebuilt), and how it was had or why not."""
    nvcc = nvcc_path()
    if nvcc:
        out = out_dir / f"{source}.nvcc.cubin"
        done = subprocess.run(
            [nvcc, "-cubin", f"-arch={arch}", "-O3", "-o", str(out), str(KERNELS / f"{source}.cu")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode == 0 and out.exists():
            return out, f"nvcc {arch} -O3"
        return None, f"nvcc failed: {(done.stderr or done.stdout).strip()[:200]}"
    prebuilt = PREBUILT_CUBINS / f"{source}.cubin"
    if prebuilt.exists():
        return prebuilt, "prebuilt .gpu/cubin"
    return None, "no nvcc and no prebuilt cubin"


def launch_of(source: str, n: int, rng: np.random.Generator):
    """(kernel, grid, block, args, tolerances): the GPU tests' launch of a corpus kernel, at `n` elements."""
    import test_cuda_replay as corpus_launches

    if source == "stencil2d":  # the tests' grid is tiny; a realistic one
        side = 2048
        f32 = rng.standard_normal(side * side).astype(np.float32)
        return (
            "stencil2d",
            (side // 16, side // 16),
            (16, 16),
            [f32, np.zeros(side * side, np.float32), np.int32(side), np.int32(side)],
            None,
        )
    # warp_reduce sums with float atomics in a varying order: keep the tests' size, whose rounding
    # differences stay inside the recorded 1e-4 tolerance.
    corpus_launches.N = min(n, 1 << 16) if source == "warp_reduce" else n
    return corpus_launches._inputs(source, rng)


def capture_source(source: str, n: int, out: Path, ir: Path | None = None) -> tuple[Path, str]:
    from gpu_corpus import cuda_ir

    from mneme import capture

    kernel, grid, block, args, tolerances = launch_of(source, n, np.random.default_rng(sum(map(ord, source))))
    db = capture.capture(
        ir=ir or cuda_ir(source),
        kernel=kernel,
        grid=grid,
        block=block,
        args=args,
        out=out,
        backend="cuda",
        tolerances=tolerances,
    )
    return db, kernel


#: Where `scripts/gpu-suite --prepare` leaves mneme_cc_build's products for the GPU machine, which has no clang.
PREBUILT = ROOT / ".gpu" / "ir-vs-binary"


def _prebuilt_key(source: str) -> str:
    """What a prebuilt pair was made from: the source, mneme-cc's translation and finalize's numerics."""
    import hashlib

    digest = hashlib.sha256((KERNELS / f"{source}.cu").read_bytes())
    for path in (ROOT / "mneme" / "instrument" / "flags.py", ROOT / "backends" / "cuda" / "mneme_cuda" / "numerics.py"):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def prebuild(arch: str, out: Path = PREBUILT, sources: list[str] | None = None) -> list[Path]:
    """Build mneme_cc_build's pair of every corpus source (or of `sources`) here (clang and nvcc, no GPU)
    into `out`/`arch`."""
    if sources is None:
        sys.path.insert(0, str(ROOT / "tests" / "gpu"))
        import test_cuda_replay as corpus_launches

        sources = corpus_launches.SOURCES
    folder = out / arch
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            ir_path, cubin_path, _how = mneme_cc_build(source, arch, Path(tmp), prebuilt=False)
            shutil.copyfile(ir_path, folder / ir_path.name)
            shutil.copyfile(cubin_path, folder / cubin_path.name)
            (folder / f"{source}.key").write_text(_prebuilt_key(source) + "\n")
            made.append(folder / ir_path.name)
    return made


def mneme_cc_build(source: str, arch: str, out_dir: Path, prebuilt: Path | bool = True) -> tuple[Path, Path, str]:
    """(IR as a recording holds it, nvcc's cubin, how) from one `mneme-cc nvcc -O3 -c` build of a corpus source.

    Where `prebuild` left the pair for this source, `arch` and these sources (in PREBUILT, or the folder
    `prebuilt` names), it is taken from there; `prebuilt=False` always builds.
    """
    folder = (PREBUILT if prebuilt is True else Path(prebuilt or ".")) / arch
    key = folder / f"{source}.key"
    if prebuilt and key.exists() and key.read_text().strip() == _prebuilt_key(source):
        how = f"mneme-cc nvcc {arch} -O3 (IR and cubin of one build, prebuilt in {folder})"
        return folder / f"{source}.recorded.ll", folder / f"{source}.mneme-cc.cubin", how
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ir_vs_nvcc

    ir_vs_nvcc.ARCH = arch
    obj = ir_vs_nvcc.build_object(KERNELS / f"{source}.cu", out_dir)
    cubin, _ptx, fatbin = ir_vs_nvcc.nvcc_side(obj)
    module, _kernels = ir_vs_nvcc.recorded_ir(obj, fatbin)
    ir_path, cubin_path = out_dir / f"{source}.recorded.ll", out_dir / f"{source}.mneme-cc.cubin"
    ir_path.write_text(str(module))
    cubin_path.write_bytes(cubin)
    return ir_path, cubin_path, f"mneme-cc nvcc {arch} -O3 (IR and cubin of one build)"


def attach_cubin(db: Path, cubin: Path) -> None:
    """Store the nvcc cubin in the recording as the application's own image (what `--mode cubin` replays)."""
    from mneme.core.records import ImageInfo, RecordedExecution

    rec = RecordedExecution.from_json(db)
    name = f"{rec.kernel_name[:40]}.nvcc.cubin"
    shutil.copyfile(cubin, rec.folder / name)
    rec.images.append(ImageInfo(name, "cubin"))
    rec.save()


def direct_seconds(ex, iterations: int) -> list[float]:
    """The recording's cubin launched as an application would: ordinary buffers, kernelParams, events.

    Each pointer argument is moved into a `cuMemAlloc` copy of its region; device globals get
    their recorded values; an L2 flush precedes each run, and the stream is held until both events
    and the launch are queued, as in replay (ungated, a run that finds the stream idle would also
    time the host's submission of the launch).
    """
    from mneme_cuda.driver import check, driver

    from mneme.core.executor import pointer_args

    cu = driver()
    device, prologue = ex.device, ex.prologue
    kernel = device.load(ex.builder.recorded_binary("cubin"))
    buffers = []
    try:
        for name, data in prologue.globals.items():
            device.write_global(kernel, name, data)
        args = bytearray(kernel.packed_args(ex.args))
        for index, value in pointer_args(ex.rec, ex.args).items():
            for region in prologue.regions:
                if region.addr <= value < region.addr + region.size:
                    buffer = device.alloc(region.size)
                    buffers.append(buffer)
                    device.write_snapshot_region(prologue, region.addr, dst=buffer.addr)
                    struct.pack_into("<Q", args, ex.rec.args[index].offset, buffer.addr + value - region.addr)
                    break
        layout = kernel.param_layout()
        values = [ctypes.create_string_buffer(bytes(args[o : o + s]), max(s, 1)) for o, s in layout]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        config = ex.default_config()
        grid, block = config.grid, config.block
        events = [check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2 * (iterations + 1))]
        gate = device.launch_gate
        for i in range(iterations + 1):  # the first run is a warm-up, never held (it may synchronize)
            device.flush_l2()
            ticket = gate.hold(device.stream) if i else 0
            try:
                check(cu.cuEventRecord(events[2 * i], device.stream), "cuEventRecord")
                check(
                    cu.cuLaunchKernel(
                        kernel.function,
                        grid.x,
                        grid.y,
                        grid.z,
                        block.x,
                        block.y,
                        block.z,
                        config.shared_mem,
                        device.stream,
                        ctypes.addressof(params),
                        0,
                    ),
                    "launching the cubin directly",
                )
                check(cu.cuEventRecord(events[2 * i + 1], device.stream), "cuEventRecord")
            finally:
                gate.release(ticket)
        device.synchronize()
        times = [
            check(cu.cuEventElapsedTime(events[2 * i], events[2 * i + 1]), "cuEventElapsedTime") / 1e3
            for i in range(1, iterations + 1)
        ]
        for event in events:
            cu.cuEventDestroy(event)
        return times
    finally:
        for buffer in buffers:
            device.free(buffer)
        kernel.close()


def replay(db: Path, mode: str, iterations: int, direct: bool = False) -> dict:
    from mneme.core.executor import BaseExecutor

    # Beside the direct launch, timed with events as an application would, the replay times with events too.
    with BaseExecutor(
        db, backend="cuda", iterations=iterations, mode=mode, warmup=2, timer="events" if direct else "auto"
    ) as ex:
        result = ex.execute(ex.default_config())
        out = {
            "median_s": result.median_time if result.exec_time else None,
            "verified": bool(result.ok),
            "error": result.error,
            "registers": result.reg_usage,
        }
        if direct:
            times = direct_seconds(ex, iterations)
            out["direct_median_s"] = statistics.median(times)
            # Replay again after the direct runs, so both are measured at the same clocks.
            again = ex.execute(ex.default_config())
            if again.exec_time:
                out["median_s"] = statistics.median([*result.exec_time, *again.exec_time])
    return out


def measure_kernel(
    source: str, n: int, iterations: int, arch: str, cubin: Path | None, how: str, tmp: Path, ir: Path | None = None
) -> dict:
    folder = tmp / source
    db, kernel = capture_source(source, n, folder, ir)
    figures: dict = {"kernel": kernel, "cubin": how}
    ir = replay(db, "ir", iterations)
    figures.update({"ir_median_s": ir["median_s"], "ir_verified": ir["verified"], "ir_registers": ir["registers"]})
    if ir["error"]:
        figures["ir_error"] = ir["error"][:300]
    if cubin is not None:
        attach_cubin(db, cubin)
        app = replay(db, "cubin", iterations, direct=True)
        figures.update(
            {
                "nvcc_median_s": app["median_s"],
                "nvcc_verified": app["verified"],
                "nvcc_registers": app["registers"],
                "direct_median_s": app.get("direct_median_s"),
            }
        )
        if app["error"]:
            figures["nvcc_error"] = app["error"][:300]
        if ir["median_s"] and app["median_s"]:
            figures["ir_speedup_vs_nvcc"] = app["median_s"] / ir["median_s"]
        if app["median_s"] and app.get("direct_median_s"):
            figures["replay_vs_direct"] = app["median_s"] / app["direct_median_s"]
            figures["fidelity_ok"] = abs(figures["replay_vs_direct"] - 1) <= FIDELITY_TARGET
    return figures


def overhead(tmp: Path, runs: int = 20) -> dict:
    """Per-experiment time outside compile and kernel time, for vector_add over 64K floats."""
    from mneme.core.executor import BaseExecutor

    db, _ = capture_source("vector_add", 1 << 16, tmp / "overhead")
    with BaseExecutor(db, backend="cuda", iterations=3) as ex:
        config = ex.default_config()
        binary = ex.build(config)
        ex.execute(config, binary)  # warm: module loaded, compare kernels loaded
        per, ok = [], True
        for _ in range(runs):
            start = time.perf_counter()
            result = ex.execute(config, binary)
            wall = time.perf_counter() - start
            timed = result.exec_time + result.warmup_time
            per.append(wall - sum(timed) - statistics.median(timed))  # and the verification launch
            ok = ok and result.ok
    return {
        "experiments": runs,
        "verified": ok,
        "overhead_ms_median": 1e3 * statistics.median(per),
        "overhead_ms_max": 1e3 * max(per),
    }


def summarize(figures: dict) -> list[str]:
    us = lambda s: "-" if not s else f"{s * 1e6:.1f} us"
    lines = []
    for source, k in figures["kernels"].items():
        if "error" in k:
            lines.append(f"{source}: FAILED {k['error']}")
            continue
        parts = [f"{source}: IR {us(k.get('ir_median_s'))} (verified={k.get('ir_verified')})"]
        if "nvcc_median_s" in k:
            speed = k.get("ir_speedup_vs_nvcc")
            parts.append(
                f"nvcc cubin {us(k['nvcc_median_s'])} (verified={k.get('nvcc_verified')}); IR variant "
                + (f"{speed:.2f}x the speed of the application's binary" if speed else "not comparable")
            )
            ratio = k.get("replay_vs_direct")
            if ratio:
                parts.append(
                    f"replayed cubin / direct launch {ratio:.3f} ({'within' if k['fidelity_ok'] else 'OUTSIDE'} "
                    f"{FIDELITY_TARGET:.0%})"
                )
        else:
            parts.append(f"no nvcc figure ({k.get('cubin')})")
        lines.append("; ".join(parts))
    o = figures.get("overhead", {})
    if o and "error" not in o:
        lines.append(
            f"overhead: per experiment {o['overhead_ms_median']:.2f} ms median, {o['overhead_ms_max']:.2f} ms max "
            f"(vector_add 64K, target < 5 ms), verified={o['verified']}"
        )
    elif o:
        lines.append(f"overhead: FAILED {o['error']}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 22, help="Elements of the 1D kernels (stencil2d: 2048x2048).")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--sources", default="", help="Comma-separated corpus sources (default: all).")
    parser.add_argument(
        "--ir-from",
        choices=("corpus", "mneme-cc"),
        default="corpus",
        help="corpus: the corpus' unoptimized IR against `nvcc -cubin -O3`; mneme-cc: IR and cubin "
        "of one mneme-cc build, as a recorded application has them.",
    )
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from mneme_cuda.backend import CudaBackend

    backend = CudaBackend()
    if not backend.availability().usable:
        print(f"skipped: {backend.availability().reason}")
        if opts.json:
            opts.json.write_text(json.dumps({"skipped": backend.availability().reason, "summary": []}))
        return 0
    import test_cuda_replay as corpus_launches

    sources = [s for s in opts.sources.split(",") if s] or list(corpus_launches.SOURCES)
    arch = backend.arch(0)
    figures: dict = {"arch": arch, "n": opts.n, "iterations": opts.iterations, "ir_from": opts.ir_from, "kernels": {}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "cubin").mkdir()
        with ThreadPoolExecutor(max_workers=4) as pool:  # nvcc runs while the first kernels are measured
            if opts.ir_from == "mneme-cc":
                builds = {s: pool.submit(mneme_cc_build, s, arch, tmp / "cubin") for s in sources}
            else:
                builds = {s: pool.submit(lambda s: (None, *nvcc_cubin(s, arch, tmp / "cubin")), s) for s in sources}
            for source in sources:
                start = time.perf_counter()
                try:
                    ir, cubin, how = builds[source].result()
                    figures["kernels"][source] = measure_kernel(
                        source, opts.n, opts.iterations, arch, cubin, how, tmp, ir
                    )
                except Exception as exc:  # one broken kernel must not hide the others
                    logging.exception("kernel %s failed", source)
                    figures["kernels"][source] = {"error": repr(exc)[:300]}
                figures["kernels"][source]["seconds"] = time.perf_counter() - start
        try:
            figures["overhead"] = overhead(tmp)
        except Exception as exc:
            logging.exception("overhead failed")
            figures["overhead"] = {"error": repr(exc)[:300]}
    ratios = [k["replay_vs_direct"] for k in figures["kernels"].values() if k.get("replay_vs_direct")]
    speeds = [k["ir_speedup_vs_nvcc"] for k in figures["kernels"].values() if k.get("ir_speedup_vs_nvcc")]
    lines = summarize(figures)
    if ratios:
        within = sum(abs(r - 1) <= FIDELITY_TARGET for r in ratios)
        lines.append(
            f"fidelity: {within}/{len(ratios)} kernels' replayed time within {FIDELITY_TARGET:.0%} of a direct "
            f"launch (median ratio {statistics.median(ratios):.3f})"
        )
    if speeds:
        lines.append(
            f"IR vs nvcc: geometric mean {float(np.exp(np.mean(np.log(speeds)))):.2f}x the speed of the "
            f"nvcc binary over {len(speeds)} kernels"
        )
    figures["summary"] = lines
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
