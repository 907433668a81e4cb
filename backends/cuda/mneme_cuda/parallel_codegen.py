"""Parallel NVPTX code generation (`codegen_method="parallel"`): PTX per partition of the functions.

The kernel's functions are split into partitions. Each partition is the module's text with the
other partitions' functions turned into declarations (`available_externally` would still run
LLVM's IR-level code generation passes over their bodies: 40% of the serial time, measured). Its
PTX is generated in a worker process: llvmlite serializes every call behind one process-wide lock,
so threads would not overlap; the workers are `python -c` processes kept for the process's life,
so no user script is imported again. nvJitLink links the partitions' PTX into one cubin.
Functions that use a global variable stay with the kernel, so no variable is defined twice.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import pickle
import re
import struct
import subprocess
import sys
import threading

import llvmlite.binding as llvm

from mneme.core import envvars, ir
from mneme.core.errors import IRError, UsageError
from mneme_cuda.target import target_machine

log = logging.getLogger(__name__)

# Below this many defined functions per partition the worker round trip costs more than it saves.
MIN_FUNCTIONS_PER_PARTITION = 8

_GLOBAL_REF = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)')
_FUNC_HEADER = re.compile(r"^\.visible \.func\s+(.*?)\n\{", re.MULTILINE | re.DOTALL)
_FUNC_NAME = re.compile(r"^(?:\([^)]*\)\s*)?([\w$]+)\s*\(")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_SPECIAL_GLOBAL = re.compile(r"^@llvm\.(?:used|compiler\.used|global_ctors|global_dtors) = [^\n]*\n", re.MULTILINE)

_pool_lock = threading.Lock()
_workers: list[Worker] = []


def codegen_jobs() -> int:
    """How many partitions (processes) parallel code generation uses: $MNEME_CODEGEN_JOBS, else the CPUs."""
    text = envvars.get("MNEME_CODEGEN_JOBS", "")
    if text:
        if not text.isdigit() or int(text) < 1:
            raise UsageError(f"MNEME_CODEGEN_JOBS must be a positive integer, not {text!r}")
        return int(text)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def partitions(module: llvm.ModuleRef, kernel_name: str, jobs: int, text: str | None = None) -> list[list[str]]:
    """Defined function names in at most `jobs` partitions balanced by IR size; the kernel's first.

    Fewer partitions when the module is small (MIN_FUNCTIONS_PER_PARTITION); one means: serial.
    `text` is the module's text when the caller has printed it already.
    """
    ir.find_kernel(module, kernel_name)
    defined = ir.defined_functions(module)
    if min(jobs, len(defined) // MIN_FUNCTIONS_PER_PARTITION) < 2:
        return [[kernel_name] + [n for n in defined if n != kernel_name]]
    global_names = {g.name for g in module.global_variables}
    text = text if text is not None else str(module)  # printing once is much cheaper than printing each function
    spans = ir.defined_function_spans(text)
    for match in _SPECIAL_GLOBAL.finditer(text):
        if {ir.unquote(n) for n in _GLOBAL_REF.findall(match.group(0))} & {name for name, *_ in spans}:
            return [[name for name, *_ in spans]]  # llvm.used or constructors name functions: keep them whole
    sizes, first = {}, [kernel_name]
    for name, start, _, end in spans:
        sizes[name] = end - start
        refs = {ir.unquote(n) for n in _GLOBAL_REF.findall(text, start, end)}
        if name != kernel_name and global_names & refs:
            first.append(name)  # a global variable is defined once: with the kernel
    count = max(1, min(jobs, len(sizes) // MIN_FUNCTIONS_PER_PARTITION))
    parts = [first] + [[] for _ in range(count - 1)]
    loads = [sum(sizes[n] for n in first)] + [0] * (count - 1)
    for name in sorted(set(sizes) - set(first), key=lambda n: (-sizes[n], n)):
        target = loads.index(min(loads))
        parts[target].append(name)
        loads[target] += sizes[name]
    return [p for p in parts if p]


_LINKAGE = re.compile(
    r"^(define|declare)((?:\s+(?:private|internal|available_externally|linkonce|linkonce_odr|weak|"
    r"weak_odr|common|appending|extern_weak|external))*)\s"
)
_NOT_ON_DECLARATIONS = re.compile(
    r'\s+(?:comdat(?:\(\$[^)]*\))?|section\s+"[^"]*"|personality\s+[^#!{]*|'
    r"prefix\s+[^#!{]*|prologue\s+[^#!{]*|!\w+\s+!\d+)"
)


def partition_text(text: str, spans: list[tuple[str, int, int, int]], keep: set[str], kernel_part: bool) -> str:
    """Module text that defines only `keep` (external linkage: other partitions call them), declares the rest.

    Outside the kernel's partition llvm.used and llvm.compiler.used go: they would keep its variables.
    """
    if not kernel_part:
        text = _SPECIAL_GLOBAL.sub("", text)
        spans = ir.defined_function_spans(text)
    out, last = [], 0
    for name, start, body, end in spans:
        header = text[start : body - 2].rstrip()  # "define ... {" without the brace
        out.append(text[last:start])
        if name in keep:
            out.append(_LINKAGE.sub(r"\1 ", header, count=1) + " {\n" + text[body:end])
        else:
            out.append(_NOT_ON_DECLARATIONS.sub("", _LINKAGE.sub("declare ", header, count=1)) + "\n")
        last = end
    out.append(text[last:])
    return "".join(out)


def _emit(text: str, arch: str, opt: int, drop_globals: bool = True) -> str:
    """One partition's module text -> PTX (in a worker, or here for the kernel's partition)."""
    mod = llvm.parse_assembly(text)
    try:
        if drop_globals:  # defined by the kernel's partition; unused here by construction
            for gv in mod.global_variables:
                if not gv.is_declaration:
                    gv.linkage = llvm.Linkage.internal
            ir.drop_unused_globals(mod)
        ir.verify(mod, "a partition of parallel code generation")
        return target_machine(arch, opt).emit_assembly(mod)
    finally:
        mod.close()


def serve() -> None:
    """A worker's loop: pickled (module text, arch, opt) requests on stdin, ("ok"|"error", text) on stdout."""
    ir.initialize()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        request = pickle.loads(stdin.read(struct.unpack("<Q", header)[0]))
        try:
            reply = ("ok", _emit(*request))
        except Exception as exc:  # the parent raises it, naming the kernel
            reply = ("error", f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(reply)
        stdout.write(struct.pack("<Q", len(data)) + data)
        stdout.flush()


class Worker:
    """One code generation process (`python -c serve()`), owning its pipes; one request at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from mneme_cuda.parallel_codegen import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def emit(self, text: str, arch: str, opt: int) -> str:
        with self.lock:
            data = pickle.dumps((text, arch, opt))
            try:
                self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
                self.proc.stdin.flush()
                header = self.proc.stdout.read(8)
                status, text = pickle.loads(self.proc.stdout.read(struct.unpack("<Q", header)[0]))
            except (OSError, struct.error, EOFError, pickle.UnpicklingError) as exc:
                raise _WorkerDied(f"exit status {self.proc.poll()}") from exc
        if status != "ok":
            raise IRError(text)
        return text

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


class _WorkerDied(Exception):
    pass


def workers(count: int) -> list[Worker]:
    """`count` running workers, started on first use and kept for the process's life."""
    with _pool_lock:
        _workers[:] = [w for w in _workers if w.proc.poll() is None]
        while len(_workers) < count:
            _workers.append(Worker())
        return _workers[:count]


def warm(count: int | None = None) -> None:
    """Start the workers now and wait until they are ready (importing llvmlite there takes a moment)."""
    tm = target_machine("sm_90", 3)
    data = f'target triple = "{tm.triple}"\ntarget datalayout = "{tm.target_data}"\n'
    with concurrent.futures.ThreadPoolExecutor(8) as threads:
        list(threads.map(lambda w: w.emit(data, "sm_90", 3), workers(count or max(1, codegen_jobs() - 1))))


@atexit.register
def _stop_workers() -> None:
    for worker in _workers:
        worker.close()


def emit_partitions(
    module: llvm.ModuleRef, kernel_name: str, arch: str, opt: int, jobs: int | None = None
) -> list[str]:
    """The PTX of each partition of `module` (an optimized, verified NVPTX module), kernel's first.

    One element when the module is too small to split; then it is the serial PTX.
    """
    jobs = jobs or codegen_jobs()
    if min(jobs, len(ir.defined_functions(module)) // MIN_FUNCTIONS_PER_PARTITION) < 2:
        return [target_machine(arch, opt).emit_assembly(module)]
    text = str(module)
    parts = partitions(module, kernel_name, jobs, text)
    if "\n!llvm.dbg.cu = " in text:  # one compile unit's debug info cannot be split by function
        log.info("kernel %r carries debug info; generating it serially", kernel_name)
        parts = parts[:1]
    if len(parts) == 1:
        return [target_machine(arch, opt).emit_assembly(module)]
    spans = ir.defined_function_spans(text)
    texts = [partition_text(text, spans, set(p), kernel_part=i == 0) for i, p in enumerate(parts)]
    with concurrent.futures.ThreadPoolExecutor(len(texts) - 1) as threads:  # threads wait on the pipes
        futures = [threads.submit(w.emit, t, arch, opt) for w, t in zip(workers(len(texts) - 1), texts[1:])]
        try:
            ptxs = [_emit(texts[0], arch, opt, drop_globals=False)]  # the kernel's partition here, meanwhile
            ptxs += [f.result() for f in futures]
        except _WorkerDied as exc:
            raise IRError(
                f"a code generation worker for kernel {kernel_name!r} died ({exc}); "
                "compile it with codegen_method=serial"
            ) from exc
        except IRError as exc:
            raise IRError(f"parallel code generation of kernel {kernel_name!r} failed: {exc}") from exc
    log.debug(
        "emitted %s in %d partitions of %s functions", kernel_name, len(parts), "/".join(str(len(p)) for p in parts)
    )
    return link_ready(ptxs)


def link_ready(ptxs: list[str]) -> list[str]:
    """Declare in each partition's PTX the functions it uses that another partition defines.

    LLVM prints no prototype for an `available_externally` callee; ptxas needs one to call it.
    """
    prototypes = {}
    defined = []
    for ptx in ptxs:
        names = set()
        for match in _FUNC_HEADER.finditer(ptx):
            name = _FUNC_NAME.match(match.group(1))
            if name:
                prototypes[name.group(1)] = match.group(1)
                names.add(name.group(1))
        defined.append(names)
    out = []
    for ptx, own in zip(ptxs, defined):
        used = (set(_IDENT.findall(ptx)) & prototypes.keys()) - own
        declarations = "".join(f".extern .func {prototypes[n]}\n;\n" for n in sorted(used))
        head, sep, rest = ptx.partition(".address_size 64\n")
        if not sep:
            raise IRError("the NVPTX back end's PTX has no .address_size 64 line (a Mneme bug; please report)")
        out.append(head + sep + "\n" + declarations + rest)
    return out
