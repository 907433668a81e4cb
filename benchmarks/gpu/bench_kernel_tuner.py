"""Throughput side by side with Kernel Tuner 1.5 (issue 39, point 5): configurations per minute.

    python benchmarks/gpu/bench_kernel_tuner.py --json results.json
    python benchmarks/gpu/bench_kernel_tuner.py --dry-run          # the plan and the imports, no device

The same kernel (our corpus vector_add, 2^24 floats), the same 12 block sizes, the same 7
timed iterations per configuration, every configuration verified against the expected output,
on one GPU:

- Kernel Tuner: `tune_kernel` with brute force through its CuPy backend (NVRTC compiles each
  configuration; `answer` verifies it), `block_size_x` over the 12 sizes.
- Mneme: `mneme tune` (the session, as the CLI runs it) on a recording of the same launch, a
  space over the same 12 `block_x` values, exhaustive, `--iterations 7`, `--retime-top 0`
  (search only: Kernel Tuner has no interleaved comparison either), each experiment verified
  against the recorded output.

Per tool: wall seconds of the whole call (start-up included) and of the search alone (first
configuration started to last finished, from each tool's own timestamps where it has them),
and configurations per minute of each; then Mneme's ratio over Kernel Tuner. Kernel Tuner and
its dependencies come as wheels carried by scripts/gpu-suite (.whl); when it cannot be imported
its side is skipped with the reason and Mneme's figures are still written.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_kernel_tuner")
sys.path[:0] = [str(ROOT / "benchmarks" / "gpu"), str(ROOT / "tests" / "gpu"), str(ROOT / "tests")]
import report as gpu_report  # benchmarks/gpu/report.py: the commit and machine of a GPU result

N = 1 << 24
BLOCK_SIZES = (32, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024)
ITERATIONS = 7
RECORDED_BLOCK = 256
SOURCE = ROOT / "tests" / "data" / "kernels" / "vector_add.cu"


def space_text(sizes=BLOCK_SIZES) -> str:
    """Mneme's space: the 12 block sizes, the grid derived to cover the same n (as Kernel Tuner's grid_div_x)."""
    return "name: kt-vector-add\nparameters:\n  block_x: {ordinal: [" + ", ".join(map(str, sizes)) + "]}\n"


def inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def kernel_tuner_side(n: int, iterations: int) -> dict:
    """Kernel Tuner's brute force over the block sizes; its wall time and its own per-configuration times."""
    try:
        import kernel_tuner
        from kernel_tuner import tune_kernel
    except Exception as exc:  # noqa: BLE001 - not carried, or a dependency missing on this machine
        return {"skipped": f"kernel_tuner cannot be imported: {exc!r}"[:300]}
    a, b = inputs(n)
    c = np.zeros_like(a)
    args = [a, b, c, np.int32(n)]
    answer = [None, None, a + b, None]
    # Kernel Tuner's CuPy backend reads the device's UUID through CuPy, which cuts it at a zero byte on some
    # devices ("bytes is not a 16-char string", H100, 2026-12-06); its own CUDA-Python backend then runs the
    # same search, and where that cannot either, the CuPy backend again with the UUID padded back to 16 bytes
    # (`uuid_padded`: the UUID only labels Kernel Tuner's environment record, no measurement reads it). Each
    # retry starts its clock afresh, with CuPy's context already made (in Kernel Tuner's favour).
    errors = []
    for lang, padded in (("cupy", False), ("nvcuda", False), ("cupy", True)):
        started = time.perf_counter()
        try:
            with cupy_uuid_padded(padded):
                results, env = tune_kernel(
                    "vector_add",
                    SOURCE.read_text(),
                    n,
                    args,
                    {"block_size_x": list(BLOCK_SIZES)},
                    lang=lang,
                    iterations=iterations,
                    answer=answer,
                    strategy="brute_force",
                    verbose=False,
                    quiet=True,
                )
            break
        except Exception as exc:  # noqa: BLE001 - whatever Kernel Tuner raises is its side's result
            errors.append(f"lang={lang}{' (UUID padded)' if padded else ''}: {exc!r}"[:300])
    else:
        return {"error": "tune_kernel failed: " + "; ".join(errors), "version": kernel_tuner.__version__}
    wall = time.perf_counter() - started
    configs = [r for r in results if isinstance(r.get("time"), float)]
    # Kernel Tuner's own accounting per configuration (ms): compile, verification, benchmark, framework.
    parts = ("compile_time", "verification_time", "benchmark_time", "framework_time", "strategy_time")
    search_ms = sum(sum(float(r.get(p) or 0.0) for p in parts) for r in results)
    best = min(configs, key=lambda r: r["time"]) if configs else None
    return {
        "version": kernel_tuner.__version__,
        "lang": lang,
        "uuid_padded": padded,
        "earlier_errors": errors,
        "configurations": len(results),
        "valid": len(configs),
        "wall_s": wall,
        "search_s": search_ms / 1e3,
        "per_minute_wall": 60.0 * len(results) / wall if wall else None,
        "per_minute_search": 60.0 * len(results) / (search_ms / 1e3) if search_ms else None,
        "best": {"block_size_x": best["block_size_x"], "time_ms": best["time"]} if best else None,
        "device": env.get("device_name"),
    }


@contextlib.contextmanager
def cupy_uuid_padded(padded: bool):
    """CuPy's device properties with the UUID back at its 16 bytes (zero-filled after a cut), while in the block."""
    if not padded:
        yield
        return
    import cupy

    runtime = cupy.cuda.runtime
    original = runtime.getDeviceProperties

    def properties(device):
        props = dict(original(device))
        uuid = props.get("uuid")
        if isinstance(uuid, bytes) and len(uuid) < 16:
            props["uuid"] = uuid.ljust(16, b"\0")
        return props

    runtime.getDeviceProperties = properties
    try:
        yield
    finally:
        runtime.getDeviceProperties = original


def capture_vector_add(out: Path, n: int, backend: str) -> Path:
    from gpu_corpus import cuda_ir

    from mneme import capture as cap

    a, b = inputs(n)
    grid = -(-n // RECORDED_BLOCK)
    return cap.capture(
        ir=cuda_ir("vector_add"),
        kernel="vector_add",
        grid=(grid,),
        block=(RECORDED_BLOCK,),
        args=[a, b, np.zeros_like(a), np.int32(n)],
        out=out,
        backend=backend,
    )


def mneme_side(work: Path, n: int, iterations: int, backend: str, cache: str) -> dict:
    """`mneme tune` over the same block sizes: wall time of the session, and of its trials by their timestamps."""
    import datetime

    from mneme.core.tuning import report
    from mneme.core.tuning.session import TuneOptions, TuningSession

    captured_at = time.perf_counter()
    db = capture_vector_add(work / "db", n, backend)
    capture_s = time.perf_counter() - captured_at
    space = work / "space.yaml"
    space.write_text(space_text())
    options = TuneOptions(
        record_db=str(db),
        space=str(space),
        sampler="exhaustive",
        trials=len(BLOCK_SIZES),
        results=str(work / "results"),
        iterations=iterations,
        retime_top=0,
        backend=backend,
        cache=cache,
    )
    started = time.perf_counter()
    summary = TuningSession(options).run()
    wall = time.perf_counter() - started
    store, _ = report.open_results(work / "results")
    records = [r for r in store.records() if r.status in ("ok", "failed", "unverified") and r.start and r.end]
    stamps = [(datetime.datetime.fromisoformat(r.start), datetime.datetime.fromisoformat(r.end)) for r in records]
    search = (max(e for _, e in stamps) - min(s for s, _ in stamps)).total_seconds() if stamps else None
    counts = summary["counts"]
    fastest = summary.get("fastest") or {}
    return {
        "configurations": counts["trials"],
        "valid": counts["ok"],
        "failures": counts["failures"],
        "capture_s": capture_s,
        "wall_s": wall,
        "search_s": search,
        "per_minute_wall": 60.0 * counts["trials"] / wall if wall else None,
        "per_minute_search": 60.0 * len(records) / search if search else None,
        "best": {"changes": fastest.get("changes"), "time_s": fastest.get("time")},
        "cache": cache,
        # The store opens a study.db through sqlite3 (mneme/plugins/samplers/sqlite_store.py): none of these
        # should be imported on the tuning path (Kernel Tuner's side ran first, in this process).
        "loaded_after": sorted(m for m in ("optuna", "sqlalchemy", "alembic", "nevergrad") if m in sys.modules),
    }


def summarize(figures: dict) -> list[str]:
    lines = [
        (
            f"vector_add, {figures['n']} floats, {len(BLOCK_SIZES)} block sizes, {figures['iterations']} iterations, "
            "verified, one GPU (configurations per minute: whole call / search alone)"
        )
    ]
    for tool in ("kernel_tuner", "mneme"):
        side = figures.get(tool) or {}
        if "skipped" in side or "error" in side:
            lines.append(f"{tool}: {side.get('skipped') or side.get('error')}")
            continue
        if not side:
            continue
        rate = lambda v: "-" if v is None else f"{v:.0f}/min"
        lines.append(
            f"{tool}: {side['configurations']} configurations ({side['valid']} valid) in "
            f"{side['wall_s']:.1f} s: {rate(side['per_minute_wall'])} whole call, "
            f"{rate(side['per_minute_search'])} search alone"
        )
    kt, mn = figures.get("kernel_tuner") or {}, figures.get("mneme") or {}
    if kt.get("per_minute_wall") and mn.get("per_minute_wall"):
        figures["ratio_wall"] = mn["per_minute_wall"] / kt["per_minute_wall"]
        figures["ratio_search"] = (
            (mn["per_minute_search"] or 0) / kt["per_minute_search"] if kt.get("per_minute_search") else None
        )
        lines.append(
            f"Mneme / Kernel Tuner: {figures['ratio_wall']:.2f}x (whole call)"
            + (f", {figures['ratio_search']:.2f}x (search alone)" if figures.get("ratio_search") else "")
        )
    if len(figures.get("ratios_wall") or []) > 1:
        each = ", ".join("-" if r is None else f"{r:.2f}x" for r in figures["ratios_wall"])
        lines.append(f"whole-call ratio of each round: {each} (the figure above: the median round)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--n", type=int, default=N, help="floats per vector (default 2^24)")
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--backend", default="cuda", help="Mneme's backend (host runs its side on the CPU)")
    parser.add_argument("--cache", default="warm", help="Mneme's --cache (Kernel Tuner does not flush between runs)")
    parser.add_argument("--skip-kernel-tuner", action="store_true")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate the two tools this many times; the ratios' median is the figure",
    )
    parser.add_argument("--dry-run", action="store_true", help="check the plan and the imports; touch no device")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    figures: dict = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": gpu_report.commit(),
        "n": opts.n,
        "iterations": opts.iterations,
        "block_sizes": list(BLOCK_SIZES),
        "summary": [],
    }
    if opts.dry_run:
        import yaml

        from mneme.core.tuning.space import DescribedSpace

        space = DescribedSpace(None, None, yaml.safe_load(space_text()), "kt-vector-add.yaml")
        figures["mneme_space_points"] = len(space.dims()["block_x"].values)
        try:
            import kernel_tuner  # noqa: F401

            figures["kernel_tuner"] = {"importable": True}
        except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
            figures["kernel_tuner"] = {"skipped": f"kernel_tuner cannot be imported: {exc!r}"[:300]}
        print(json.dumps(figures, indent=2))
        return 0

    def save() -> None:
        figures["summary"] = summarize(figures)
        if opts.json:
            opts.json.write_text(json.dumps(figures, indent=2, default=str))

    from mneme.core.backend import get_backend

    chosen = get_backend(opts.backend)
    if not chosen.availability().usable:
        figures["skipped"] = chosen.availability().reason
        print(f"skipped: {figures['skipped']}")
        save()
        return 0
    figures["machine"] = gpu_report.machine() if opts.backend == "cuda" else {}
    rounds: list[dict] = []
    for _ in range(max(1, opts.rounds)):  # the tools in turn, so that a drift of the machine reaches both
        one: dict = {"n": opts.n, "iterations": opts.iterations}
        if not opts.skip_kernel_tuner:
            one["kernel_tuner"] = kernel_tuner_side(opts.n, opts.iterations)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                one["mneme"] = mneme_side(Path(tmp), opts.n, opts.iterations, opts.backend, opts.cache)
            except Exception as exc:
                log.exception("mneme's side failed")
                one["mneme"] = {"error": repr(exc)[:300]}
        summarize(one)  # sets the round's ratios
        rounds.append(one)
        # the figure: the round whose whole-call ratio is the median (the first where none has one)
        ranked = sorted((r for r in rounds if r.get("ratio_wall")), key=lambda r: r["ratio_wall"])
        middle = ranked[(len(ranked) - 1) // 2] if ranked else rounds[0]
        figures.update({k: v for k, v in middle.items() if k in ("kernel_tuner", "mneme")})
        figures["rounds"] = [{k: v for k, v in r.items() if k not in ("n", "iterations", "summary")} for r in rounds]
        figures["ratios_wall"] = [r.get("ratio_wall") for r in rounds]
        save()
    print("\n".join(figures["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
