"""IR variant against the application's binary, for every recorded instance (issue 38, point 6).

    python benchmarks/gpu/bench_ir_vs_binary.py RECORDINGS... [--iterations 20] [--variant NAME:FIELD=VALUE,...]
                                                [--json out.json]

    python benchmarks/gpu/bench_ir_vs_binary.py --prebuild sm_90   # here, with clang: what the GPU machine needs

RECORDINGS are recording databases or folders of them (searched recursively), e.g. what
`mneme record` wrote for the GPU suite's application corpus. Without any (as the GPU suite runs
it), the corpus kernels (tests/data/kernels) are recorded here as an application has them: IR and
cubin from one `mneme-cc nvcc -O3` build (`bench_cuda_replay.py --ir-from mneme-cc`; prebuilt by
`--prebuild` where the GPU machine has no clang), and, unless
variants are given, with `--match-registers` and the variants `unroll1200:unroll_threshold=1200`,
`sched4reg:nvptx_sched4reg=true` and `whole:ptxas_whole_program=true` (`DEFAULT_VARIANTS`): the open
hypotheses of docs/design/investigations/ir-vs-nvcc-2026-12-06.md measured by the suite itself. Every instance of every database that
carries both IR and the application's own image is replayed, in one process and on one device, as
`mneme replay` would: the application's binary (`--mode cubin`, else `ptx`) and the IR variant of
the recorded configuration (`--mode ir`), each `--iterations` timed runs after 2 warm-ups from a
flushed L2, and the ratio binary/IR of the medians (above 1: the IR variant is faster). Each
`--variant` adds IR builds with configuration fields changed (for example
`unroll4:loop_unrolling=true` or `o2:passes=default<O2>`), so the effect of a pipeline setting
is measured per instance on the GPU. `--match-registers` adds, where the IR variant needs more
registers than the binary, a build capped at the binary's count (`max_registers`): the occupancy
of the application's build, at the price of the spills the assembler reports (clang's IR can hold
more values live, e.g. math-library reductions hoisted out of loops). Registers of each build are
reported beside the times.
A database without IR, or without an application image, is listed with the reason.
The static side of the same comparison (PTX and SASS per kernel, no GPU) is benchmarks/ir_vs_nvcc.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench_ir_vs_binary")
TARGET = 0.05  # issue 38: the IR variant within 5% of the binary's time
# Without recordings or variants (the GPU suite's run): the open hypotheses of
# docs/design/investigations/ir-vs-nvcc-2026-12-06.md, each a configuration knob.
DEFAULT_VARIANTS = (
    ("unroll1200", {"unroll_threshold": 1200}),
    ("sched4reg", {"nvptx_sched4reg": True}),
    ("whole", {"ptxas_whole_program": True}),
)


def databases(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths):
        found += sorted(q for q in p.rglob("*.json") if ".mneme-import" not in q.parts) if p.is_dir() else [p]
    return found


def corpus_recordings(out: Path) -> list[str]:
    """The corpus kernels recorded with the IR and cubin of one mneme-cc build each (a GPU is needed)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    import bench_cuda_replay as replay
    import test_cuda_replay as corpus_launches
    from mneme_cuda.backend import CudaBackend

    arch = CudaBackend().arch(0)
    found = []
    for source in corpus_launches.SOURCES:
        try:
            ir, cubin, _how = replay.mneme_cc_build(source, arch, out / "build")
            db, _kernel = replay.capture_source(source, 1 << 22, out / source, ir)
            replay.attach_cubin(db, cubin)
            found.append(str(db))
        except Exception:  # one kernel that does not build or capture must not hide the others
            log.exception("recording %s failed", source)
    return found


def parse_variant(text: str) -> tuple[str, dict]:
    """`NAME:FIELD=VALUE,FIELD=VALUE` -> (NAME, {FIELD: value}); values are JSON where they parse."""
    name, _, fields = text.partition(":")
    if not name or not fields:
        raise SystemExit(f"--variant takes NAME:FIELD=VALUE[,FIELD=VALUE...], not {text!r}")
    out = {}
    for item in fields.split(","):
        key, _, raw = item.partition("=")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return name, out


def timed(ex, config) -> dict:
    result = ex.execute(config)
    return {
        "median_s": statistics.median(result.exec_time) if result.exec_time else None,
        "verified": bool(result.ok),
        "registers": result.reg_usage,
        "error": (result.error or "")[:300],
    }


def measure_instance(
    db: Path, record_id: str, iterations: int, variants: list[tuple[str, dict]], match_registers: bool = False
) -> dict:
    from mneme.core.executor import BaseExecutor

    row: dict = {"database": str(db), "record_id": record_id}
    binary_mode = None
    for mode in ("cubin", "ptx"):
        try:
            with BaseExecutor(db, record_id, iterations=iterations, mode=mode, warmup=2) as ex:
                row["kernel"] = ex.rec.kernel_name
                row["binary"] = {"mode": mode, **timed(ex, ex.default_config())}
                binary_mode = mode
                break
        except Exception as exc:  # noqa: BLE001 - no such image in this recording: try the next mode
            row.setdefault("binary_errors", []).append(f"{mode}: {exc}"[:200])
    with BaseExecutor(db, record_id, iterations=iterations, mode="ir", warmup=2) as ex:
        base = ex.default_config()
        row["ir"] = timed(ex, base)
        wanted = row.get("binary", {}).get("registers") or 0
        if match_registers and 0 < wanted < (row["ir"].get("registers") or 0):
            variants = [*variants, ("match-registers", {"max_registers": max(wanted, 24)})]
        for name, fields in variants:
            try:
                row[f"ir:{name}"] = timed(ex, base.replace(**fields))
            except Exception as exc:  # noqa: BLE001 - a field this configuration does not take
                row[f"ir:{name}"] = {"error": f"{exc}"[:300]}
    if binary_mode and row["binary"]["median_s"]:
        for key in [k for k in row if k == "ir" or k.startswith("ir:")]:
            if row[key].get("median_s"):
                row[key]["binary_over_ir"] = row["binary"]["median_s"] / row[key]["median_s"]
    return row


def summary(rows: list[dict], variants: list[str]) -> list[str]:
    lines = []
    for key in ["ir", *[f"ir:{v}" for v in variants]]:
        ratios = [r[key]["binary_over_ir"] for r in rows if r.get(key, {}).get("binary_over_ir")]
        if not ratios:
            continue
        within = sum(q >= 1 - TARGET for q in ratios)
        slow = sorted(
            (r[key]["binary_over_ir"], r.get("kernel", "?")[:60]) for r in rows if r.get(key, {}).get("binary_over_ir")
        )[:5]
        geo = statistics.geometric_mean(ratios)
        lines.append(
            f"{key}: {within}/{len(ratios)} instances within {TARGET:.0%} of the binary's time or faster; "
            f"binary/IR geometric mean {geo:.3f}, median {statistics.median(ratios):.3f}; slowest: "
            + ", ".join(f"{k} {q:.2f}" for q, k in slow)
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="*")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--variant", action="append", default=[], help="NAME:FIELD=VALUE[,...] (repeatable).")
    parser.add_argument(
        "--match-registers",
        action="store_true",
        help="Also build the IR variant capped at the binary's register count where it needs more.",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--prebuild",
        metavar="ARCH",
        help="Only build the corpus kernels' IR and cubin here (mneme-cc: clang and nvcc, no GPU) into "
        ".gpu/ir-vs-binary/ARCH, where a run on a machine without clang takes them (scripts/gpu-suite --prepare).",
    )
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if opts.prebuild:
        sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
        import bench_cuda_replay as replay

        made = replay.prebuild(opts.prebuild)
        print(f"{len(made)} corpus kernels' IR and cubin in {replay.PREBUILT / opts.prebuild}")
        return 0
    from mneme.core.records import RecordedExecution

    variants = [parse_variant(v) for v in opts.variant]
    if not opts.recordings and not variants:
        variants, opts.match_registers = list(DEFAULT_VARIANTS), True
    if not opts.recordings:
        from mneme_cuda.backend import CudaBackend

        found = CudaBackend().availability()
        if not found.usable:
            print(f"skipped: {found.reason}")
            if opts.json:
                opts.json.write_text(json.dumps({"skipped": found.reason, "summary": []}))
            return 0
    rows: list[dict] = []
    skipped: list[dict] = []
    tmp = tempfile.TemporaryDirectory()
    recordings = opts.recordings or corpus_recordings(Path(tmp.name))
    for db in databases(recordings):
        try:
            rec = RecordedExecution.from_json(db)
        except Exception as exc:  # noqa: BLE001 - not a recording database
            log.debug("skipping %s: %s", db, exc)
            continue
        if not rec.llvm_files:
            skipped.append({"database": str(db), "kernel": rec.kernel_name, "reason": "no IR in the recording"})
            continue
        for record_id in rec.kernel_instances:
            try:
                rows.append(measure_instance(db, record_id, opts.iterations, variants, opts.match_registers))
            except Exception as exc:  # one instance that fails must not hide the others (logged)
                log.exception("instance %s of %s failed", record_id, db)
                rows.append({"database": str(db), "record_id": record_id, "error": repr(exc)[:300]})
    lines = summary(rows, [name for name, _ in variants] + (["match-registers"] if opts.match_registers else []))
    lines += [f"skipped {s['kernel'][:60]}: {s['reason']}" for s in skipped]
    if opts.json:
        opts.json.write_text(
            json.dumps({"instances": rows, "skipped": skipped, "summary": lines}, indent=2, default=str)
        )
    print("\n".join(lines) or "no instance with both IR and an application image")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
