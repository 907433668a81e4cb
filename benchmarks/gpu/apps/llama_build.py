"""Build the application corpus's llama.cpp program (`ggml_ops_app.cu` beside this file) with `mneme-cc nvcc`.

    python benchmarks/gpu/apps/llama_build.py [--out .gpu/bin/ggml_ops_app]

llama.cpp's sources come from the llama-cpp-python sdist the kernel corpus already fetches from PyPI
(tests/kernel_corpus.py: pinned sha256, unpacked and cached under ~/.cache/mneme/corpus, never
committed). The program is linked from:

- the ggml-cuda units of the operators it runs (`UNITS`), built by the kernel corpus's own
  `mneme-cc nvcc -c` for sm_90 with llama.cpp's CUDA flags and, as llama.cpp's CMake builds them with
  CUDA 12.8 and later, `-compress-mode=size` (its GGML_CUDA_COMPRESSION_MODE default: zstd-compressed
  machine code, a tenth of the size), cached there by a key of the source, the flags and mneme-cc's
  sources, so their device IR is embedded;
- ggml-base (`GGML_BASE`, the library llama.cpp's CMake makes of these files) compiled with the host
  compilers, cached by a key of its sources and flags;
- the program itself, built with `mneme-cc nvcc -c`.

llama.cpp's own test-backend-ops needs the whole ggml-cuda library: its host glue calls cuBLAS (not
installed here) and every unit, whose matrix-multiply and flash-attention template instances take
hours to compile on two cores and would make a binary far larger than what a device run carries.
So the program calls the operators as that test does, through ggml-cuda's `ggml_cuda_op_*` entry
points, and checks each against a reference. Exit 2 with the reason when something cannot be had.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[3]
SOURCE = Path(__file__).resolve().parent / "ggml_ops_app.cu"
sys.path.insert(0, str(ROOT / "tests"))

import kernel_corpus as kc  # tests/: the corpus's fetch and unit build

log = logging.getLogger("llama_build")

#: The ggml-cuda units whose operators the program runs.
UNITS = ("norm", "softmax", "getrows", "scale", "unary", "cpy", "rope")
# (binbcast, for ADD and MUL, would add 1.7 MB of host code and IR: the device run carries 64 MiB in all, and
# the GPU suite's programs, wheels and corpus IR take most of it.)
#: ggml-base, as llama.cpp's ggml/src/CMakeLists.txt lists it.
GGML_BASE = (
    "ggml.c",
    "ggml.cpp",
    "ggml-alloc.c",
    "ggml-backend.cpp",
    "ggml-backend-meta.cpp",
    "ggml-opt.cpp",
    "ggml-threading.cpp",
    "ggml-quants.c",
    "gguf.cpp",
)
C_FLAGS = ("-O2", "-std=gnu11", "-fPIC", "-D_GNU_SOURCE", "-DNDEBUG")
CXX_FLAGS = ("-O2", "-std=c++17", "-fPIC", "-DNDEBUG")
DEFAULT_OUT = ROOT / ".gpu" / "bin" / "ggml_ops_app"
COMPRESSION = ("-compress-mode=size",)  # llama.cpp's GGML_CUDA_COMPRESSION_MODE default (nvcc 12.8 and later)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        raise kc.CorpusUnavailable(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def ggml_base(root: Path) -> list[Path]:
    """ggml-base's objects, compiled once per source and flags (cached beside the corpus's builds)."""
    src = root / "vendor/llama.cpp/ggml/src"
    include = root / "vendor/llama.cpp/ggml/include"
    cc, cxx = os.environ.get("CC", "cc"), os.environ.get("CXX", "c++")
    key = _digest(
        [(name, (src / name).read_text(errors="replace")) for name in GGML_BASE],
        C_FLAGS,
        CXX_FLAGS,
        cc,
        cxx,
        kc.LLAMA.folder,
    )
    folder = kc.cache_root() / "build" / f"ggml-base-{key}"
    objects = [folder / (Path(name).name.replace(".", "_") + ".o") for name in GGML_BASE]
    if all(o.exists() for o in objects):
        return objects
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # ggml-version.h is configured by llama.cpp's CMake from ggml-version.h.in.
    template = (src / "ggml-version.h.in").read_text()
    (tmp / "ggml-version.h").write_text(
        template.replace("@GGML_VERSION@", kc.LLAMA.version).replace(
            "@GGML_BUILD_COMMIT@", f"{kc.LLAMA.name}-{kc.LLAMA.version}"
        )
    )
    for name, obj in zip(GGML_BASE, objects):
        compiler, flags = (cc, C_FLAGS) if name.endswith(".c") else (cxx, CXX_FLAGS)
        _run(
            [
                *compiler.split(),
                *flags,
                f"-I{tmp}",
                f"-I{include}",
                f"-I{src}",
                "-c",
                str(src / name),
                "-o",
                str(tmp / obj.name),
            ],
            f"compiling ggml-base's {name}",
        )
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return objects


def build(out: Path = DEFAULT_OUT) -> Path:
    """Fetch, compile and link the program into `out`; raises kc.CorpusUnavailable saying why it cannot."""
    kc.nvcc_version()  # a clear reason when there is no nvcc
    root = kc.fetch(kc.LLAMA)
    units = [attrs.evolve(u, flags=(*u.flags, *COMPRESSION)) for u in kc.ggml_units(root, UNITS)]
    built = kc.build(units, jobs=max(1, min(len(units), os.cpu_count() or 1)))
    failed = [b for b in built if not b.nvcc_ok or b.obj is None]
    if failed:
        raise kc.CorpusUnavailable(f"ggml-cuda unit {failed[0].unit.name} did not build: {failed[0].messages[-800:]}")
    missing_ir = [b.unit.name for b in built if not b.ir_embedded]
    if missing_ir:
        log.warning(
            "no device IR embedded in ggml-cuda unit(s) %s: their kernels replay from the binary only",
            ", ".join(missing_ir),
        )
    base = ggml_base(root)
    app = SOURCE.parent / "ggml_ops_app.cu"
    flags = units[0].flags  # llama.cpp's CUDA flags and include folders, as its units were built with
    key = _digest(app.read_text(), flags, kc.ARCH, kc._tool_key(), kc.nvcc_version())
    app_obj = kc.cache_root() / "build" / f"ggml-ops-app-{key}.o"
    if not app_obj.exists():
        tmp = app_obj.with_suffix(f".tmp{os.getpid()}.o")
        _run(
            [
                sys.executable,
                "-m",
                "mneme.instrument.launcher",
                kc.NVCC,
                f"-arch={kc.ARCH}",
                *flags,
                "-c",
                str(app),
                "-o",
                str(tmp),
            ],
            "mneme-cc nvcc of ggml_ops_app.cu",
        )
        tmp.rename(app_obj)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    _run(
        [
            kc.NVCC,
            f"-arch={kc.ARCH}",
            "-o",
            str(tmp_out),
            str(app_obj),
            *(str(b.obj) for b in built),
            *(str(o) for o in base),
            "-lpthread",
        ],
        "linking ggml_ops_app",
    )
    tmp_out.replace(out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        path = build(opts.out)
    except kc.CorpusUnavailable as exc:
        log.error("llama.cpp application not built: %s", exc)
        return 2
    log.info("%s (%.1f MB)", path, path.stat().st_size / 1e6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
