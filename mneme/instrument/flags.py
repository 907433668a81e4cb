"""Read a compiler command line and plan the clang runs that produce its device bitcode.

`plan(argv, cwd)` returns a `Plan`: the compiler's kind, and one `DeviceJob` per
translation unit and GPU architecture. nvcc's flags are translated to clang's; clang
command lines are reused with the output options replaced. hipcc is a script around a clang:
its dry run shows the clang command it runs (mneme.instrument.hipcc reads it), which is replayed
with our clang (clang-19).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import attrs

from mneme.core import envvars
from mneme.core.errors import UsageError
from mneme.instrument.hipcc import hipcc_clang_command, without_includes_under

log = logging.getLogger("mneme.instrument")

CUDA_SOURCE = {".cu"}
HIP_SOURCE = {".hip"}
CXX_SOURCE = {".c", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CPP"}
WRAPPERS = {"ccache", "sccache", "distcc"}
HOST_COMPILERS = re.compile(r"^(?:[\w.-]+-)?(?:gcc|g\+\+|cc|c\+\+|icx|icpx|icpc|icc|nvc\+\+|nvc)(?:-[\d.]+)?$")
CLANG = re.compile(r"^(?:[\w.-]+-)?(?:amd)?clang(?:\+\+)?(?:-[\d.]+)?$")
HIPCC = re.compile(r"^hipcc(?:\.pl|\.bin)?$")

# nvcc's --use_fast_math is -ftz=true -prec-div=false -prec-sqrt=false -fmad=true and the single-precision math
# functions as their fast intrinsics (expf as __expf, tanhf as tanh.approx, ...), nothing more: no reassociation,
# no assumption that values are finite (clang's -ffast-math would give both). clang-19 swaps only sinf, cosf, logf,
# log2f and sincosf under -fgpu-approx-transcendentals, so every libdevice function nvcc swaps is renamed to its
# __nv_fast_ twin (docs/design/investigations/ir-vs-nvcc-2026-12-06.md).
FAST_MATH_FUNCTIONS = ("expf", "exp10f", "logf", "log2f", "log10f", "sinf", "cosf", "sincosf", "tanf", "tanhf", "powf")
FAST_MATH = (
    "-fgpu-flush-denormals-to-zero",
    "-fgpu-approx-transcendentals",
    "-fapprox-func",  # on a division: NVPTX's div.approx, rcp.approx (-prec-div=false as fast math sets it)
    *(f"-D__nv_{f}=__nv_fast_{f}" for f in FAST_MATH_FUNCTIONS),
)


@attrs.frozen
class DeviceJob:
    """One clang run: the device bitcode of `source` for `arch`, to embed into `obj`."""

    source: str  # absolute path
    obj: str  # absolute path of the object the real command writes
    arch: str  # "" when the compiler's default applies (read back from the bitcode)
    language: str  # "cuda" or "hip"
    argv: tuple[str, ...]  # without "-o OUT"
    targets: tuple[str, ...] = ()
    rdc: bool = False


@attrs.frozen
class Plan:
    kind: str  # "nvcc", "clang", "hipcc", "host" or "unknown"
    jobs: tuple[DeviceJob, ...] = ()
    notes: tuple[str, ...] = ()  # one warning each (e.g. an arch clang cannot target)
    dropped: tuple[str, ...] = ()  # nvcc flags with no clang meaning (one debug log)


def classify(compiler: str) -> str:
    name = os.path.basename(compiler)
    if name == "nvcc":
        return "nvcc"
    if HIPCC.match(name):
        return "hipcc"
    if CLANG.match(name):
        return "clang"
    if HOST_COMPILERS.match(name):
        return "host"
    return "unknown"


def expand_response_files(args: list[str], cwd: str) -> list[str]:
    """Inline `@file` (clang, gcc) and `--options-file file` / `-optf file` (nvcc, CMake)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        path = None
        if a.startswith("@") and len(a) > 1:
            path = a[1:]
        elif a in ("--options-file", "-optf") and i + 1 < len(args):
            path = args[i + 1]
            i += 1
        elif a.startswith(("--options-file=", "-optf=")):
            path = a.split("=", 1)[1]
        if path is None:
            out.append(a)
        else:
            try:
                text = Path(cwd, path).read_text()
            except OSError as exc:
                raise UsageError(f"cannot read response file {path!r}: {exc.strerror}") from exc
            out.extend(expand_response_files(shlex.split(text), cwd))
        i += 1
    return out


# ---------------------------------------------------------------------------- nvcc

# nvcc options that take a value as the next argument when not written `-opt=value`.
_NVCC_VALUED = {
    "-o": "--output-file",
    "-D": "--define-macro",
    "-U": "--undefine-macro",
    "-I": "--include-path",
    "-isystem": "--system-include",
    "-include": "--pre-include",
    "-std": "--std",
    "-x": "--x",
    "-arch": "--gpu-architecture",
    "-code": "--gpu-code",
    "-gencode": "--generate-code",
    "-rdc": "--relocatable-device-code",
    "-O": "--optimize",
    "-Xcompiler": "--compiler-options",
    "-Xptxas": "--ptxas-options",
    "-Xnvlink": "--nvlink-options",
    "-Xlinker": "--linker-options",
    "-Xarchive": "--archive-options",
    "-Xcudafe": "--cudafe-options",
    "-Xfatbin": "--fatbin-options",
    "-ccbin": "--compiler-bindir",
    "-MF": "--dependency-output",
    "-MT": "--dependency-target-name",
    "-t": "--threads",
    "-odir": "--output-directory",
    "-keep-dir": "--keep-dir",
    "-l": "--library",
    "-L": "--library-path",
    "-maxrregcount": "--maxrregcount",
    "-default-stream": "--default-stream",
    "-cudart": "--cudart",
    "-cudadevrt": "--cudadevrt",
    "-dopt": "--dopt",
    "-Werror": "--Werror",
    "-diag-suppress": "--diag-suppress",
    "-diag-warn": "--diag-warn",
    "-diag-error": "--diag-error",
    "-split-compile": "--split-compile",
    "-time": "--time",
    "-run-args": "--run-args",
    "-ftz": "--ftz",
    "-prec-div": "--prec-div",
    "-prec-sqrt": "--prec-sqrt",
    "-fmad": "--fmad",
    "-ftemplate-depth": "--ftemplate-depth",
    "-Ofc": "--Ofast-compile",
    "-jtd": "--jump-table-density",
    "-MQ": "-MQ",
    "-pg": "-pg",
}
_NVCC_LONG = {long: short for short, long in _NVCC_VALUED.items()}
# nvcc flags with no meaning for the device IR that we drop silently (host-side, output, diagnostics).
_NVCC_HOST_ONLY = {
    "-Xcompiler",
    "-Xlinker",
    "-Xarchive",
    "-Xnvlink",
    "-Xptxas",
    "-Xcudafe",
    "-Xfatbin",
    "-ccbin",
    "-MF",
    "-MT",
    "-MQ",
    "-t",
    "-odir",
    "-keep-dir",
    "-l",
    "-L",
    "-maxrregcount",
    "-cudart",
    "-cudadevrt",
    "-Werror",
    "-diag-suppress",
    "-diag-warn",
    "-diag-error",
    "-split-compile",
    "-time",
    "-run-args",
    "-default-stream",
    "-dopt",
    "-Ofc",
    "-jtd",
    "-pg",
    "-MD",
    "-MMD",
    "-MP",
    "-M",
    "-MM",
    "-g",
    "--debug",
    "-lineinfo",
    "--generate-line-info",
    "-w",
    "--disable-warnings",
    "-Wno-deprecated-gpu-targets",
    "-Wno-deprecated-declarations",
    "-keep",
    "--keep",
    "-res-usage",
    "--resource-usage",
    "-v",
    "--verbose",
    "-shared",
    "--shared",
    "--expt-relaxed-constexpr",
    "-expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-expt-extended-lambda",
    "--extended-lambda",
    "-extended-lambda",
    "--forward-unknown-to-host-compiler",
    "-forward-unknown-to-host-compiler",
    "--forward-unknown-to-host-linker",
    "-src-in-ptx",
    "-allow-unsupported-compiler",
    "--allow-unsupported-compiler",
    "-extra-device-vectorization",
    "--extra-device-vectorization",
    "-restrict",
    "--restrict",
    "-Wreorder",
    "-Wdefault-stream-launch",
    "-Wext-lambda-captures-this",
    "-Wmissing-launch-bounds",
    "-dlto",
    "-static-global-template-stub",
}
# nvcc modes that do not compile a translation unit to an object
_NVCC_NO_OBJECT = {
    "-ptx",
    "--ptx",
    "-cubin",
    "--cubin",
    "-fatbin",
    "--fatbin",
    "-E",
    "--preprocess",
    "-M",
    "--generate-dependencies",
    "-MM",
    "-dlink",
    "--device-link",
    "-lib",
    "--lib",
    "-link",
    "--link",
    "-run",
    "--run",
    "-optix-ir",
    "--optix-ir",
    "-lto",
    "-dryrun",
    "--dryrun",
    "-fdevice-syntax-only",
    "-cuda",
    "--cuda",
    "-dlto-ir",
    "-ltoir",
}


def _nvcc_options(args: list[str]):
    """Yield (canonical short option, value or None, raw tokens) for each nvcc argument."""
    i = 0
    while i < len(args):
        a = args[i]
        raw = [a]
        if not a.startswith("-") or a == "-":
            yield None, a, raw
            i += 1
            continue
        name, eq, value = a.partition("=")
        name = _NVCC_LONG.get(name, name)
        known = name in _NVCC_VALUED or name in _NVCC_HOST_ONLY or name in _NVCC_NO_OBJECT
        if not known and a[:2] in ("-D", "-U", "-I", "-O", "-l", "-L"):  # joined: -DFOO=1, -Iinc, -O3
            yield a[:2], a[2:], raw
        elif eq:
            yield name, value, raw
        elif name in _NVCC_VALUED:
            if i + 1 < len(args):
                value = args[i + 1]
                raw.append(value)
                i += 1
            yield name, value, raw
        else:
            yield a, None, raw
        i += 1


_ARCH_NUM = re.compile(r"^(?:sm|compute|lto)_(\d+[a-z]?)$")


def _sm(name: str) -> str | None:
    m = _ARCH_NUM.match(name.strip())
    return f"sm_{m.group(1)}" if m else None


def _split_list(value: str) -> list[str]:
    return [v for v in re.split(r"[,\[\]\s]+", value) if v]


def nvcc_default_arch(nvcc: str) -> str:
    """nvcc's architecture when none is given: sm_75 from CUDA 13, sm_52 before."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
        major = int(re.search(r"release (\d+)\.", out).group(1))
    except (OSError, AttributeError, ValueError, subprocess.TimeoutExpired):
        return "sm_75"
    return "sm_75" if major >= 13 else "sm_52"


def cuda_root_of(nvcc: str) -> str | None:
    """The CUDA toolkit folder of an nvcc executable (for clang's --cuda-path)."""
    found = shutil.which(nvcc)
    if found:
        root = Path(os.path.realpath(found)).parent.parent
        if (root / "include" / "cuda_runtime.h").exists():
            return str(root)
        try:  # nvcc is a wrapper script: ask nvcc where its toolkit is
            dry = [found, "-dryrun", "-x", "cu", "-E", os.devnull]
            out = subprocess.run(dry, capture_output=True, text=True, timeout=30).stderr
            top = re.search(r"^#\$ TOP=(.+)$", out, re.M)
            if top and (Path(top.group(1).strip()) / "include" / "cuda_runtime.h").exists():
                return os.path.realpath(top.group(1).strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env) and Path(os.environ[env], "include", "cuda_runtime.h").exists():
            return os.environ[env]
    return "/usr/local/cuda" if Path("/usr/local/cuda/include/cuda_runtime.h").exists() else None


def _nvcc_archs(archs: list[str], codes: list[str], gencodes: list[str], nvcc: str, notes: list[str]):
    """[(clang arch, targets)] in nvcc's command-line order."""
    result: dict[str, list[str]] = {}
    for gencode in gencodes:
        fields = dict(part.split("=", 1) for part in re.split(r",(?=\s*(?:arch|code)\s*=)", gencode) if "=" in part)
        virtual = _sm(fields.get("arch", "")) if fields.get("arch") else None
        targets = _split_list(fields.get("code", ""))
        if virtual is None:
            virtual = next((_sm(t) for t in targets if _sm(t)), None)
        if virtual is None:
            notes.append(f"cannot read -gencode {gencode!r}")
            continue
        result.setdefault(virtual, []).extend(targets or [virtual])
    for arch in [a for value in archs for a in _split_list(value)]:
        if arch in ("native", "all", "all-major"):
            notes.append(f"-arch={arch} names no fixed architecture; give -arch=sm_XX to capture IR")
            continue
        virtual = _sm(arch)
        if virtual is None:
            notes.append(f"unknown GPU architecture {arch!r}")
            continue
        targets = [t for value in codes for t in _split_list(value)] or [arch, arch.replace("sm_", "compute_")]
        result.setdefault(virtual, []).extend(targets)
    if not result and not archs and not gencodes:
        default = nvcc_default_arch(nvcc)
        result[default] = [default, default.replace("sm_", "compute_")]
    return [(arch, tuple(dict.fromkeys(t))) for arch, t in result.items()]


def plan_nvcc(argv: list[str], cwd: str, *, clang: str | None, standins: str = "") -> Plan:
    nvcc, args = argv[0], expand_response_files(argv[1:], cwd)
    compile_only = rdc = device_debug = False
    language = None
    output = None
    sources: list[tuple[str, str | None]] = []  # (path, -x language in force)
    archs, codes, gencodes = [], [], []
    translated: list[str] = []
    dropped: list[str] = []
    notes: list[str] = []
    for name, value, raw in _nvcc_options(args):
        if name is None:
            sources.append((value, language))
        elif name in _NVCC_NO_OBJECT:
            return Plan("nvcc")
        elif name in ("-c", "--compile"):
            compile_only = True
        elif name in ("-dc", "--device-c"):
            compile_only = rdc = True
        elif name in ("-dw", "--device-w"):
            compile_only, rdc = True, False
        elif name == "-o":
            output = value
        elif name == "-x":
            language = value
        elif name in ("-D", "-U", "-I"):
            translated.append(name + value)
        elif name in ("-isystem", "-include"):
            translated += [name, value]
        elif name == "-std":
            translated.append(f"-std={value}")
        elif name == "-O":
            pass  # host optimization; nvcc optimizes device code unless -G
        elif name == "-rdc":
            rdc = value.lower() in ("true", "1", "yes")
        elif name == "-arch":
            archs.append(value)
        elif name == "-code":
            codes.append(value)
        elif name == "-gencode":
            gencodes.append(value)
        elif name in ("-G", "--device-debug"):
            device_debug = True
        elif name in ("-use_fast_math", "--use_fast_math"):
            translated += list(FAST_MATH)
        elif name == "-ftz" and value.lower() == "true":
            translated.append("-fgpu-flush-denormals-to-zero")
        elif name == "-fmad" and value.lower() == "false":
            translated.append("-ffp-contract=off")
        elif name in ("-ftz", "-fmad", "-prec-div", "-prec-sqrt"):
            dropped.append(" ".join(raw))
        elif name == "-ftemplate-depth":
            translated.append(f"-ftemplate-depth={value}")
        elif name in _NVCC_HOST_ONLY or name.startswith(("-Wno-", "--Wno-", "-Xcompiler", "--diag")):
            pass
        else:
            dropped.append(" ".join(raw))
    if not compile_only:
        return Plan("nvcc", dropped=tuple(dropped))
    cu_sources = []
    for path, lang in sources:
        ext = os.path.splitext(path)[1]
        if lang in ("cu", "cuda") or (lang is None and ext in CUDA_SOURCE):
            cu_sources.append(path)
    if not cu_sources:
        return Plan("nvcc", dropped=tuple(dropped))
    if clang is None:
        return Plan(
            "nvcc",
            notes=tuple(
                f"no IR for {p}: clang was not found (install clang-19 or set MNEME_CC_CLANG)" for p in cu_sources
            ),
            dropped=tuple(dropped),
        )
    cuda = cuda_root_of(nvcc)
    base = [clang, "-x", "cuda", "--cuda-device-only", "-emit-llvm", "-c", "-w", "-Wno-unknown-cuda-version"]
    if cuda:
        base.append(f"--cuda-path={cuda}")
    base += translated
    if cuda and (Path(cuda) / "include" / "cccl").is_dir():
        base += ["-isystem", str(Path(cuda) / "include" / "cccl")]
    if standins:
        base += ["-idirafter", standins]
    base += ["-O0", "-Xclang", "-disable-O0-optnone"] if device_debug else ["-O3"]
    if rdc:
        base += ["-fgpu-rdc", "-D__CUDACC_RDC__"]
    arch_list = _nvcc_archs(archs, codes, gencodes, nvcc, notes)
    if arch_list:  # nvcc names CCCL's versioned namespaces after it (cub::CUB_300001_SM_800_900)
        numbers = sorted({int(re.sub(r"\D", "", a)) * 10 for a, _ in arch_list})
        base.append("-D__CUDA_ARCH_LIST__=" + ",".join(map(str, numbers)))
    jobs = []
    for src in cu_sources:
        obj = output if output and len(cu_sources) == 1 else Path(src).stem + ".o"
        for arch, targets in arch_list:
            jobs.append(
                DeviceJob(
                    source=os.path.abspath(os.path.join(cwd, src)),
                    obj=os.path.abspath(os.path.join(cwd, obj)),
                    arch=arch,
                    language="cuda",
                    argv=tuple(base + [f"--cuda-gpu-arch={arch}", src]),
                    targets=targets,
                    rdc=rdc,
                )
            )
    return Plan("nvcc", tuple(jobs), tuple(notes), tuple(dropped))


# ---------------------------------------------------------------------------- clang, hipcc

# clang options whose value is the next argument
_CLANG_VALUED = {
    "-o",
    "-I",
    "-D",
    "-U",
    "-include",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-imacros",
    "-x",
    "-Xclang",
    "-Xcuda-ptxas",
    "-Xcuda-fatbinary",
    "-Xlinker",
    "-Xassembler",
    "-Xpreprocessor",
    "-Xoffload-linker",
    "-mllvm",
    "-target",
    "-L",
    "-isysroot",
    "-include-pch",
    "-MF",
    "-MT",
    "-MQ",
    "-MJ",
    "-z",
    "-u",
    "-T",
    "-working-directory",
    "-iprefix",
    "-iwithprefix",
    "-cxx-isystem",
    "--serialize-diagnostics",
    "-ivfsoverlay",
    "-Xopenmp-target",
    "-Xarch_device",
    "-Xarch_host",
    "-arch",
    "--offload-arch",
    "--cuda-gpu-arch",
}
_CLANG_DROP_VALUED = {"-o", "-MF", "-MT", "-MQ", "-MJ", "--serialize-diagnostics"}
_CLANG_DROP = {
    "-c",
    "-S",
    "-E",
    "-emit-llvm",
    "-MD",
    "-MMD",
    "-MP",
    "-M",
    "-MM",
    "-MG",
    "--cuda-device-only",
    "--offload-device-only",
    "-fsyntax-only",
    "-save-temps",
    "-v",
    "-###",
}


def plan_clang(argv: list[str], cwd: str, kind: str) -> Plan:
    """clang / hipcc: the same driver builds the device bitcode from the same flags."""
    driver, args = argv[0], expand_response_files(argv[1:], cwd)
    compile_only = rdc = False
    opt_zero = True
    language = None
    output = None
    archs: list[str] = []
    kept: list[str] = []
    sources: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        a = args[i]
        value = args[i + 1] if a in _CLANG_VALUED and i + 1 < len(args) else None
        step = 2 if value is not None else 1
        if a in ("--cuda-host-only", "--offload-host-only", "-E", "-S", "-fsyntax-only", "-M", "-MM"):
            return Plan(kind)
        if a == "-c":
            compile_only = True
        elif a == "-o":
            output = value
        elif a.startswith("-o") and len(a) > 2:
            output = a[2:]
        elif a in ("--offload-arch", "--cuda-gpu-arch"):
            archs += _split_list(value or "")
        elif a.startswith(("--offload-arch=", "--cuda-gpu-arch=")):
            archs += _split_list(a.split("=", 1)[1])
        elif a in _CLANG_DROP or a.startswith(("-save-temps", "-ftime-trace", "-MF", "-MT", "-MQ", "-MJ")):
            pass
        elif a in _CLANG_DROP_VALUED:
            pass
        elif not a.startswith("-") and a != "-":
            sources.append((a, language))
        else:
            if a == "-x":
                language = value
            elif a.startswith("-x") and len(a) > 2:
                language = a[2:]
            elif a in ("-fgpu-rdc", "-fcuda-rdc"):
                rdc = True
            elif a in ("-fno-gpu-rdc", "-fno-cuda-rdc"):
                rdc = False
            elif a.startswith("-O"):
                opt_zero = a in ("-O0",)
            kept += args[i : i + step]
        i += step
    if not compile_only:
        return Plan(kind)
    device_sources = []
    for path, lang in sources:
        ext = os.path.splitext(path)[1]
        if lang in ("cuda", "cu") or (lang is None and ext in CUDA_SOURCE):
            device_sources.append((path, "cuda"))
        elif (
            lang == "hip"
            or (lang is None and ext in HIP_SOURCE)
            or (lang is None and kind == "hipcc" and ext in CXX_SOURCE | CUDA_SOURCE)
        ):
            device_sources.append((path, "hip"))
    if not device_sources:
        return Plan(kind)
    base = [driver, *kept, "--cuda-device-only", "-emit-llvm", "-c", "-w"]
    if opt_zero:  # keep the IR optimizable: no optnone at -O0
        base += ["-Xclang", "-disable-O0-optnone"]
    jobs = []
    hip = kind == "hipcc" or any(lang == "hip" for _, lang in device_sources)
    flag = "--offload-arch=" if hip else "--cuda-gpu-arch="
    for src, lang in device_sources:
        obj = output if output and len(device_sources) == 1 else Path(src).stem + ".o"
        for arch in archs or [""]:
            jobs.append(
                DeviceJob(
                    source=os.path.abspath(os.path.join(cwd, src)),
                    obj=os.path.abspath(os.path.join(cwd, obj)),
                    arch=arch,
                    language=lang,
                    argv=tuple(base + ([flag + arch] if arch else []) + [src]),
                    targets=(arch,) if arch else (),
                    rdc=rdc,
                )
            )
    return Plan(kind, tuple(jobs))


def plan_hipcc(argv: list[str], cwd: str, *, clang: str | None) -> Plan:
    """hipcc: replay the clang command hipcc runs with our clang, device-only.

    hipcc adds flags of its own (ROCm and device-library paths, -O3 when no -O is given, HIP
    version, inlining options); its dry run gives them exactly. Include folders inside hipcc's
    clang's own resource folder are left out (they hold that clang's builtin headers), and the
    code object version hipcc's clang builds is kept (it sets the kernels' hidden arguments).
    """
    written = plan_clang(argv, cwd, "hipcc")  # the command line as written: is there device code?
    if not written.jobs:
        return written
    sources = list(dict.fromkeys(os.path.relpath(j.source, cwd) for j in written.jobs))
    try:
        hipcc = hipcc_clang_command(argv, cwd)
    except RuntimeError as exc:
        return Plan("hipcc", notes=tuple(f"no IR for {s}: {exc}; the build continues" for s in sources))
    command = hipcc.argv
    log.debug("hipcc runs: %s", shlex.join(command))
    compiler = os.path.basename(command[0])
    if classify(command[0]) != "clang":
        platform = os.environ.get("HIP_PLATFORM") or "not set"
        return Plan(
            "hipcc",
            notes=tuple(
                f"no IR for {s}: hipcc compiles it with {compiler} (HIP_PLATFORM {platform}); mneme-cc captures hipcc's "
                "IR for AMD GPUs (HIP_PLATFORM=amd)"
                for s in sources
            ),
        )
    if clang is None:
        return Plan(
            "hipcc",
            notes=tuple(
                f"no IR for {s}: clang was not found (install clang-19 or set MNEME_CC_CLANG)" for s in sources
            ),
        )
    found = shutil.which(command[0])
    own_headers = Path(os.path.realpath(found)).parent.parent / "lib" / "clang" if found else None
    args = without_includes_under(command[1:], own_headers, cwd) if own_headers else command[1:]
    if hipcc.code_object is not None:  # first: a -mcode-object-version hipcc passes on comes later and wins
        args = [f"-mcode-object-version={hipcc.code_object}", *args]
    if not any(a.startswith(("--offload-arch", "--cuda-gpu-arch")) for a in args):
        # no arch given (and none found by rocm_agent_enumerator): hipcc's clang's default, not ours
        args += [f"--offload-arch={arch}" for arch in hipcc.archs]
    replayed = plan_clang([clang, *args], cwd, "clang")
    return Plan("hipcc", replayed.jobs, replayed.notes, replayed.dropped)


def find_clang() -> str | None:
    """The clang for nvcc and hipcc builds: $MNEME_CC_CLANG, else clang++-19 (or a newer one llvmlite reads)."""
    env = envvars.get("MNEME_CC_CLANG", "")  # set: that one; else the search below
    if env:
        return shutil.which(env)
    for name in ("clang++-19", "clang++-20", "clang++-21", "clang++-22", "clang++-18", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def plan(argv: list[str], cwd: str, *, standins: str = "", ask_hipcc: bool = False) -> Plan:
    """The device-bitcode jobs for one compiler command line (`argv[0]` is the compiler).

    For hipcc, `ask_hipcc=True` (what `mneme-cc` does) runs hipcc's dry run and plans our
    clang on the command hipcc runs; without it, the hipcc command line is read as written.
    """
    if not argv:
        raise UsageError("no compiler command given; usage: mneme-cc COMPILER ARGS...")
    kind = classify(argv[0])
    if kind == "nvcc":
        return plan_nvcc(argv, cwd, clang=find_clang(), standins=standins)
    if kind == "hipcc" and ask_hipcc:
        return plan_hipcc(argv, cwd, clang=find_clang())
    if kind in ("clang", "hipcc"):
        return plan_clang(argv, cwd, kind)
    return Plan(kind)
