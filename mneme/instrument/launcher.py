"""`mneme-cc`: a compiler launcher that also embeds each translation unit's device bitcode.

``mneme-cc COMPILER ARGS...`` runs ``COMPILER ARGS...`` unchanged (same output, same exit
status). When that command compiles device code to an object (``-c``), clang builds the
device bitcode of the same translation unit for the same GPU architectures, in parallel
with the real compile, and the bitcode is added to the object in the `.mneme_ir` section.
Nothing that goes wrong on the IR side fails the build: one warning names the file and why.

Environment: ``MNEME_CC_DISABLE=1`` (run the compiler only), ``MNEME_CC_CLANG`` (clang for
nvcc and hipcc builds), ``MNEME_CC_OBJCOPY`` (objcopy to use), ``MNEME_CC_VERBOSE=1`` (debug log).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from mneme import __version__
from mneme.core import envvars
from mneme.instrument import compat, flags
from mneme.instrument.section import SECTION_NAME, EmbeddedEntry, pack_entries

log = logging.getLogger("mneme.instrument")

# Headers clang's CUDA wrapper includes that CUDA 13 no longer ships; -idirafter keeps real ones first.
STANDIN_HEADERS = ("texture_fetch_functions.h", "curand_mtgp32_kernel.h")


class _Formatter(logging.Formatter):
    def format(self, record):
        return f"mneme-cc: {record.levelname.lower()}: {record.getMessage()}"


def _setup_logging() -> None:
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if envvars.get("MNEME_CC_VERBOSE") else logging.WARNING)
    log.propagate = False


def write_standins(folder: str) -> str:
    path = Path(folder, "standins")
    path.mkdir(exist_ok=True)
    for name in STANDIN_HEADERS:
        (path / name).write_text(f"/* mneme-cc: empty stand-in for {name}, which this CUDA toolkit lacks */\n")
    return str(path)


def find_objcopy() -> str | None:
    env = envvars.get("MNEME_CC_OBJCOPY", "")  # set: that one; else the search below
    if env:
        return shutil.which(env)
    for name in ("llvm-objcopy-19", "llvm-objcopy-20", "llvm-objcopy-21", "llvm-objcopy-22", "llvm-objcopy", "objcopy"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _first_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else "no message"


def embed(obj: str, entries: list[EmbeddedEntry], objcopy: str, scratch: str) -> None:
    """Add (or replace) the `.mneme_ir` section of one object file."""
    from mneme.core.elf import ElfFile

    blob = Path(scratch, f"{abs(hash(obj))}.mneme_ir")
    blob.write_bytes(pack_entries(entries))
    cmd = [objcopy]
    if ElfFile.read(obj).sections_named(SECTION_NAME):
        cmd += ["--remove-section", SECTION_NAME]
    cmd += ["--add-section", f"{SECTION_NAME}={blob}", obj]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{os.path.basename(objcopy)} failed: {_first_error(done.stderr)}")


def _run_ir_jobs(plan: flags.Plan, scratch: str, real: subprocess.Popen) -> int:
    """Start the clang jobs, wait for the real compiler, then embed; returns its exit status."""
    procs = []
    for n, job in enumerate(plan.jobs):
        out = os.path.join(scratch, f"{n}.bc")
        err = open(os.path.join(scratch, f"{n}.err"), "w+")
        log.debug("clang command: %s", shlex.join([*job.argv, "-o", out]))
        try:
            proc = subprocess.Popen(
                [*job.argv, "-o", out], stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            proc = None
            err.write(str(exc))
        procs.append((job, out, err, proc))
    status = real.wait()
    if status != 0:
        for _, _, err, proc in procs:
            if proc is not None:
                proc.kill()
                proc.wait()
            err.close()
        return status
    try:
        _capture(procs)
    except Exception as exc:  # a bug on the IR side must not fail the user's build
        log.warning("IR capture failed (%s: %s); the build continues without embedded IR", type(exc).__name__, exc)
    return status


def _capture(procs) -> None:
    from mneme.instrument.symbols import module_symbols

    per_object: dict[str, list[EmbeddedEntry]] = {}
    failed: dict[str, list[str]] = {}
    for job, out, err, proc in procs:
        code = proc.wait() if proc is not None else -1
        err.seek(0)
        message = err.read()
        err.close()
        label = f"{job.source} ({job.arch or 'default arch'})"
        applied: tuple[compat.Workaround, ...] = ()
        if code != 0 or not os.path.exists(out):
            log.debug("clang command: %s\n%s", " ".join(job.argv), message)
            built, applied, message = compat.retry(job.argv, out, job.language, message)
            if not built:
                tried = f" (also with {', '.join(w.name for w in applied)})" if applied else ""
                failed.setdefault(job.source, []).append(
                    f"{job.arch or 'default arch'}: {_first_error(message)}{tried}"
                )
                continue
            log.warning(
                "IR for %s captured with workarounds for code clang rejects and nvcc accepts: %s",
                label,
                ", ".join(w.name for w in applied),
            )
        bitcode = Path(out).read_bytes()
        try:
            syms = module_symbols(bitcode, label)
        except Exception as exc:  # an IR the reader cannot read is a failed capture, not a failed build
            failed.setdefault(job.source, []).append(f"{job.arch}: {exc}")
            continue
        if not syms.defined:
            log.debug("%s defines no device code; nothing embedded", label)
            continue
        bitcode, syms = _nvcc_kernel_names(job, bitcode, syms, label)
        arch = job.arch or syms.target_cpu
        per_object.setdefault(job.obj, []).append(
            EmbeddedEntry(
                source=job.source,
                arch=arch,
                bitcode=bitcode,
                language=job.language,
                clang_version=syms.producer,
                targets=job.targets or (arch,),
                rdc=job.rdc,
                kernels=syms.kernels,
                producer=f"mneme-cc {__version__}"
                + (f" (workarounds: {', '.join(w.name for w in applied)})" if applied else ""),
            )
        )
    for source, reasons in failed.items():
        log.warning(
            "no IR captured for %s: clang failed (%s); the build continues and its kernels stay "
            "recordable without IR (MNEME_CC_VERBOSE=1 shows the clang command)",
            source,
            "; ".join(reasons),
        )
    if per_object:
        objcopy = find_objcopy()
        for obj, entries in per_object.items():
            try:
                if objcopy is None:
                    raise RuntimeError("no llvm-objcopy or objcopy found (install llvm-19 or binutils)")
                embed(obj, entries, objcopy, os.path.dirname(procs[0][1]))
                log.debug("embedded %d IR entries into %s", len(entries), obj)
            except Exception as exc:
                log.warning("no IR embedded into %s: %s; the build continues", obj, exc)


def _nvcc_kernel_names(job, bitcode: bytes, syms, label: str):
    """The bitcode with internal-linkage kernels renamed to the names in nvcc's cubin (nvcc_names)."""
    from mneme.instrument import nvcc_names
    from mneme.instrument.fatbin import iter_cubins, kernel_names
    from mneme.instrument.symbols import module_symbols

    try:
        compiled = {k for cubin in iter_cubins(job.obj) for k in kernel_names(cubin)}
        mapping = nvcc_names.renames(syms.kernels, compiled)
        if not mapping:
            return bitcode, syms
        renamed = nvcc_names.rename_kernels(bitcode, mapping)
        log.debug("%s: %d kernels renamed to nvcc's names", label, len(mapping))
        return renamed, module_symbols(renamed, label)
    except Exception as exc:  # the names are an aid to the finalizer; the IR is kept as clang wrote it
        log.debug("%s: kernel names not matched to nvcc's (%s)", label, exc)
        return bitcode, syms


def run(argv: list[str]) -> int:
    """Run one compiler command through the launcher; returns the exit status to use."""
    _setup_logging()
    if not argv:
        log.error("usage: mneme-cc COMPILER ARGS...  (e.g. mneme-cc nvcc -c k.cu -o k.o)")
        return 2
    compiler_argv = list(argv)
    while compiler_argv and os.path.basename(compiler_argv[0]) in flags.WRAPPERS and len(compiler_argv) > 1:
        compiler_argv = compiler_argv[1:]  # ccache nvcc ...: read nvcc's command line
    if shutil.which(argv[0]) is None:
        log.error("compiler %r not found on PATH", argv[0])
        return 127
    if envvars.get("MNEME_CC_DISABLE"):
        return subprocess.call(argv)
    scratch = tempfile.mkdtemp(prefix="mneme-cc-")
    try:
        try:
            plan = flags.plan(compiler_argv, os.getcwd(), standins=write_standins(scratch), ask_hipcc=True)
        except Exception as exc:  # the real build must never depend on our reading of its flags
            log.warning("could not read the command line of %s (%s); IR not captured", compiler_argv[0], exc)
            plan = flags.Plan(flags.classify(compiler_argv[0]))
        if plan.kind == "unknown":
            log.warning(
                "unknown compiler %r: running it unchanged without capturing IR (mneme-cc knows nvcc, "
                "clang, clang++, hipcc and host compilers such as gcc/g++)",
                os.path.basename(compiler_argv[0]),
            )
        if plan.dropped:
            log.debug("nvcc flags with no clang equivalent, not passed to clang: %s", " ".join(plan.dropped))
        for note in plan.notes:
            log.warning("%s", note)
        real = subprocess.Popen(argv)
        try:
            if not plan.jobs:
                return real.wait()
            return _run_ir_jobs(plan, scratch, real)
        except KeyboardInterrupt:
            real.send_signal(signal.SIGINT)
            return real.wait()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    status = run(sys.argv[1:])
    if status < 0:  # the compiler died of a signal: die the same way
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


if __name__ == "__main__":
    main()
