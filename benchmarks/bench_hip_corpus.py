"""Mneme on a third-party HIP corpus fetched from PyPI (tests/hip_corpus.py): llama.cpp's GPU back end in
llama-cpp-python 0.2.56, built by `mneme-cc clang++ -x hip` for gfx90a, gfx942 and gfx1100.

For the unit: whether it builds, and the IR embedded per architecture. For every kernel of every
architecture: whether clang's own build made a code object of it, whether the hip backend builds one
from the embedded IR (`build.compile`, uncached; median ms), and `mneme ir check --backend host`
(accepted, and every refused kernel with the construct refused). With --cross-check, the same release
built for CUDA (clang, sm_90) and the gfx90a build run every kernel whose parameters are float
pointers and scalars on the host backend with the same inputs, and the outputs are compared bit for
bit (`hip_corpus.cross_check`). Writes benchmarks/results/hip-corpus.md.
Run: python benchmarks/bench_hip_corpus.py [--archs gfx90a,gfx942,gfx1100] [--limit N] [--cross-check]
     [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import hip_corpus as hc
import kernel_corpus as kc

from mneme.core import build, ir
from mneme.core.types import ExperimentConfiguration

CONFIG = ExperimentConfiguration(grid=(64, 1, 1), block=(256, 1, 1))


def _short(construct: str) -> str:
    return construct.split(" (used by kernel")[0].replace("not supported on the host backend: ", "")[:120]


def hip_code_objects(entry, arch: str, limit: int | None) -> tuple[int, list[str], list[float]]:
    """(kernels built, failures, seconds per kernel) through the hip backend, uncached."""
    kernels = list(entry.kernels)[:limit]
    built, failed, seconds = 0, [], []
    with tempfile.TemporaryDirectory(prefix="mneme-hip-bench-") as scratch:
        bitcode = Path(scratch, "unit.bc")
        bitcode.write_bytes(entry.bitcode)
        for kernel in kernels:
            try:
                module = ir.link([bitcode], kernel)
                start = time.perf_counter()
                try:
                    binary = build.compile(module, kernel, CONFIG, arch, cache=False)
                finally:
                    module.close()
                seconds.append(time.perf_counter() - start)
                built += binary.kind == "hsaco" and binary.data.startswith(b"\x7fELF")
            except Exception as exc:  # noqa: BLE001 - each failure is named, the run goes on
                failed.append(f"{kernel}: {type(exc).__name__}: {str(exc)[:160]}")
    return built, failed, seconds


def cross_check_table(root: Path, entry) -> list[str]:
    """The CUDA/HIP cross-check (`hip_corpus.cross_check`) as Markdown lines."""
    try:
        cuda_ir = hc.build_cuda_ir(root)
    except Exception as exc:  # noqa: BLE001 - the table says why there is no cross-check
        return ["## CUDA and HIP builds on the host backend", "", f"Not run: {exc}"]
    with tempfile.TemporaryDirectory(prefix="mneme-cross-check-") as scratch:
        hip_ir = Path(scratch, "gfx90a.bc")
        hip_ir.write_bytes(entry.bitcode)
        found = hc.cross_check(cuda_ir, hip_ir, Path(scratch, "captures"))
    counts = collections.Counter(a.status for a in found)
    lines = [
        "## CUDA and HIP builds on the host backend",
        "",
        f"The same release's ggml-cuda.cu built for CUDA (`clang++ -x cuda`, {hc.CUDA_ARCH}) and for HIP (gfx90a): "
        f"each of the {len(found)} kernels both builds share whose parameters are float pointers and int/float "
        f"scalars, captured on the host backend with the same inputs (grid {hc.GRID}, block {hc.BLOCK} or a "
        f"templated kernel's block size, {hc.SHARED} bytes of dynamic shared memory, every int {hc.SIZE}, buffers "
        f"of {hc.BUFFER} floats uniform in [-2, 2]); every buffer compared bit for bit after the launch. Kernels "
        f"calling the vendors' math libraries (libdevice for CUDA, ocml for HIP) may differ by "
        f"{hc.MATH_ULPS} ulp: {', '.join(hc.VENDOR_MATH)}.",
        "",
        "| kernels | bit-identical | differ | not captured |",
        "| --- | --- | --- | --- |",
        f"| {len(found)} | {counts['identical']} | {counts['differs']} | {counts['not captured']} |",
        "",
        "| kernel | result | detail |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{a.kernel[:70]}` | {a.status} | {a.detail} |" for a in found if a.status != "identical"]
    return lines


def quantized_table(root: Path, entry) -> list[str]:
    """The CUDA/HIP cross-check of the kernels on quantized blocks (`hip_corpus.quantized_sample`), as each build's
    code stands and without floating-point contraction, as Markdown lines."""
    cuda_ir = hc.build_cuda_ir(root)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="mneme-cross-check-") as scratch:
        hip_ir = Path(scratch, "gfx90a.bc")
        hip_ir.write_bytes(entry.bitcode)
        for strict in (False, True):
            started = time.perf_counter()
            found = hc.cross_check(
                cuda_ir,
                hip_ir,
                Path(scratch, f"captures-{strict}"),
                quantized=True,
                source=hc.source(root),
                strict=strict,
            )
            runs[strict] = (found, time.perf_counter() - started)
    lines = [
        "## CUDA and HIP builds on the host backend: kernels on quantized blocks",
        "",
        (
            "The same two builds: every tiled quantized matrix product (`mul_mat_q*`: dp4a inline PTX and the SIMD "
            "byte instructions vsub4/vset4 on CUDA, `__builtin_amdgcn_sdot4` on gfx90a), every matrix-vector product "
            "for one column of y (`mul_mat_vec_q<1, ...>`), every block dequantization and dequantizing "
            "matrix-vector product, launched as ggml's launchers shape them on each build (`hip_corpus."
            "quantized_launches`: the tiled products with each build's own tiles), every int "
            f"{hc.QUANTIZED_SIZE}, quantized and half buffers of bytes uniform in [0, {hc.SAFE_BYTE:#x}] (every half and "
            "float they hold finite), float buffers uniform in [-2, 2]. `strict`: both builds with the `contract` flag "
            "of every floating-point operation removed (`hip_corpus.without_contraction`): both builds let the code "
            "generator fuse a multiply into an add, and which product of `a * b - c * d` it fuses follows the code's "
            "shape, which the builds' tile sizes make differ."
        ),
        "",
        "| run | kernels | bit-identical | differ | not captured | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for strict, (found, seconds) in runs.items():
        counts = collections.Counter(a.status for a in found)
        lines.append(
            f"| {'strict' if strict else 'as built'} | {len(found)} | {counts['identical']} | {counts['differs']} "
            f"| {counts['not captured']} | {seconds:.0f} |"
        )
    lines += ["", "| run | kernel | result | detail |", "| --- | --- | --- | --- |"]
    for strict, (found, _) in runs.items():
        lines += [
            f"| {'strict' if strict else 'as built'} | `{a.kernel[:70]}` | {a.status} | {a.detail} |"
            for a in found
            if a.status != "identical"
        ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", default=",".join(hc.ARCHS))
    parser.add_argument("--limit", type=int, help="only the first N kernels per architecture (a quick look)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "hip-corpus.md")
    parser.add_argument("--cross-check", action="store_true", help="also compare the CUDA and HIP builds' outputs")
    parser.add_argument(
        "--quantized", action="store_true", help="also compare the builds' kernels on quantized blocks (hip_corpus)"
    )
    parser.add_argument(
        "--quantized-only",
        action="store_true",
        help="only that comparison: replace its section of --out, keeping the rest of the file",
    )
    args = parser.parse_args()
    archs = tuple(args.archs.split(","))
    ok, why = hc.available()
    if not ok:
        print(f"skipped: {why}")
        return 0
    try:
        root = kc.fetch(hc.LLAMA_HIP)
    except kc.CorpusUnavailable as exc:
        print(f"skipped: {exc}")
        return 0
    start = time.perf_counter()
    done = hc.build(root, hc.ARCHS)
    if not done.ok:
        print(done.messages[-3000:])
        return 1
    entries = {e.arch: e for e in done.entries()}
    if args.quantized_only:
        section = quantized_table(root, entries["gfx90a"])
        text = args.out.read_text() if args.out.exists() else ""
        head = section[0]
        if head in text:  # this section, up to the next one or the run time's line
            before, after = text.split(head, 1)
            rest = [m for m in ("\n## ", "\nRun time") if m in after]
            after = after[min(after.index(m) for m in rest) :] if rest else "\n"
        else:
            before, after = text.rstrip("\n") + "\n\n", "\n"
        args.out.write_text(before + "\n".join(section) + "\n" + after)
        print("\n".join(section))
        return 0
    clang = hc.code_object_kernels(done.obj)
    by_arch = hc.host_verdicts(done)
    verdicts = [v for found in by_arch.values() for v in found]
    lines = [
        "# HIP corpus: llama.cpp (llama-cpp-python 0.2.56) built as HIP",
        "",
        f"Sdist: {hc.LLAMA_HIP.name} {hc.LLAMA_HIP.version} (sha256 {hc.LLAMA_HIP.sha256[:12]}..., "
        f"{hc.LLAMA_HIP.licence}), fetched from PyPI at run time, never committed. Unit: "
        "`vendor/llama.cpp/ggml-cuda.cu` with `-DGGML_USE_HIPBLAS`, stand-in hipBLAS/rocBLAS headers "
        "(declarations only).",
        f"Built by: `mneme-cc {' '.join(a for a in done.command[3:] if not a.startswith(('/', '-I')))}` "
        f"({done.seconds:.0f} s, cached after).",
        "",
        "| arch | units | IR modules | kernels (clang's code objects) | kernels with IR | code objects (hip backend) "
        "| median ms per code object | host-accepted | host-refused |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    refused_rows = []
    for arch in archs:
        entry = entries.get(arch)
        if entry is None:
            lines.append(f"| {arch} | 1 | 0 | {len(clang.get(arch, ()))} | 0 | - | - | - | - |")
            continue
        built, failed, seconds = hip_code_objects(entry, arch, args.limit)
        tried = len(list(entry.kernels)[: args.limit])
        found = by_arch.get(arch, [])
        accepted = sum(v.runnable for v in found)
        share = 100 * accepted / len(found) if found else 0
        ms = statistics.median(seconds) * 1e3 if seconds else float("nan")
        lines.append(
            f"| {arch} | 1 | 1 | {len(clang.get(arch, ()))} | {len(entry.kernels)} | {built} of {tried} "
            f"| {ms:.0f} | {accepted} ({share:.1f}%) | {len(found) - accepted} |"
        )
        for v in found:
            if not v.runnable:
                refused_rows.append(f"| {arch} | `{v.kernel[:70]}` | {'; '.join(_short(u) for u in v.unsupported)} |")
        refused_rows += [f"| {arch} | hip backend | {f} |" for f in failed]
    counts = collections.Counter(_short(u) for v in verdicts if not v.runnable for u in v.unsupported)
    lines += [
        "",
        "## Refused on the host backend, by construct",
        "",
        "| construct | kernels (all archs) |",
        "| --- | --- |",
    ]
    lines += [f"| {c} | {n} |" for c, n in counts.most_common()] or ["| (none) | 0 |"]
    lines += ["", "## Refused kernels", "", "| arch | kernel | construct |", "| --- | --- | --- |", *refused_rows]
    if args.cross_check:
        lines += ["", *cross_check_table(root, entries["gfx90a"])]
    if args.quantized:
        lines += ["", *quantized_table(root, entries["gfx90a"])]
    lines += ["", f"Run time: {time.perf_counter() - start:.0f} s.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
