"""Parallel NVPTX code generation (`codegen_method="parallel"`): PTX per partition of the functions.

The kernel's functions are split into partitions; each partition is the whole module with the other
partitions' functions marked `available_externally` (LLVM emits no code for them), emitted to PTX in
a worker process (llvmlite serializes every call behind one process-wide lock, so threads would not
overlap; the workers are `python -c` processes kept for the process's life, so no user script is re-imported), and nvJitLink links the partitions' PTX into one cubin. Functions that touch global
variables stay with the kernel, so no variable is defined twice.
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

from mneme.core import ir
from mneme.core.errors import IRError, UsageError

log = logging.getLogger(__name__)

# Below this many defined functions per partition the worker round trip costs more than it saves.
MIN_FUNCTIONS_PER_PARTITION = 8

_GLOBAL_REF = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)')
_FUNC_HEADER = re.compile(r"^\.visible \.func\s+(.*?)\n\{", re.MULTILINE | re.DOTALL)
_FUNC_NAME = re.compile(r"^(?:\([^)]*\)\s*)?([\w$]+)\s*\(")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")

_pool_lock = threading.Lock()
_workers: list[Worker] = []


def codegen_jobs() -> int:
    """How many partitions (processes) parallel code generation uses: $MNEME_CODEGEN_JOBS, else the CPUs."""
    text = os.environ.get("MNEME_CODEGEN_JOBS", "")
    if text:
        if not text.isdigit() or int(text) < 1:
            raise UsageError(f"MNEME_CODEGEN_JOBS must be a positive integer, not {text!r}")
        return int(text)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def partitions(module: llvm.ModuleRef, kernel_name: str, jobs: int) -> list[list[str]]:
    """Defined function names in at most `jobs` partitions balanced by IR size; the kernel's first.

    Fewer partitions when the module is small (MIN_FUNCTIONS_PER_PARTITION); one means: serial.
    """
    ir.find_kernel(module, kernel_name)
    global_names = {g.name for g in module.global_variables}
    text = str(module)  # printing once is much cheaper than printing each function
    sizes, first = {}, [kernel_name]
    for name, start, _, end in ir.defined_function_spans(text):
        sizes[name] = end - start
        refs = {ir._unquote(n) for n in _GLOBAL_REF.findall(text, start, end)}
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


def _partition_module(module: llvm.ModuleRef, keep: set[str]) -> llvm.ModuleRef:
    part = ir.clone(module)
    for fn in part.functions:
        if not fn.is_declaration:
            # defined here: visible to the other partitions; defined elsewhere: no code emitted here
            fn.linkage = llvm.Linkage.external if fn.name in keep else llvm.Linkage.available_externally
    return part


def _emit(bitcode: bytes, arch: str, opt: int) -> str:
    """One partition's bitcode -> PTX (in a worker)."""
    from mneme.core import codegen

    mod = llvm.parse_bitcode(bitcode)
    try:
        return codegen.target_machine("nvptx", arch, opt).emit_assembly(mod)
    finally:
        mod.close()


def serve() -> None:
    """A worker's loop: pickled (bitcode, arch, opt) requests on stdin, ("ok"|"error", text) on stdout."""
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
        self.proc = subprocess.Popen([sys.executable, "-c", "from mneme.core.parallel_codegen import serve; serve()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip

    def emit(self, bitcode: bytes, arch: str, opt: int) -> str:
        with self.lock:
            data = pickle.dumps((bitcode, arch, opt))
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
    from mneme.core import codegen

    tm = codegen.target_machine("nvptx", "sm_90", 3)
    empty = llvm.parse_assembly(f'target triple = "{tm.triple}"\ntarget datalayout = "{tm.target_data}"\n')
    data = empty.as_bitcode()
    with concurrent.futures.ThreadPoolExecutor(8) as threads:
        list(threads.map(lambda w: w.emit(data, "sm_90", 3), workers(count or max(1, codegen_jobs() - 1))))


@atexit.register
def _stop_workers() -> None:
    for worker in _workers:
        worker.close()


def emit_partitions(module: llvm.ModuleRef, kernel_name: str, arch: str, opt: int, jobs: int | None = None) -> list[str]:
    """The PTX of each partition of `module` (an optimized, verified NVPTX module), kernel's first.

    One element when the module is too small to split; then it is the serial PTX.
    """
    from mneme.core import codegen

    parts = partitions(module, kernel_name, jobs or codegen_jobs())
    tm = codegen.target_machine("nvptx", arch, opt)
    if len(parts) == 1:
        return [tm.emit_assembly(module)]
    modules = [_partition_module(module, set(p)) for p in parts]
    try:
        payloads = [m.as_bitcode() for m in modules[1:]]
        with concurrent.futures.ThreadPoolExecutor(len(payloads)) as threads:  # threads wait on the pipes
            futures = [threads.submit(w.emit, data, arch, opt) for w, data in zip(workers(len(payloads)), payloads)]
            ptxs = [tm.emit_assembly(modules[0])]  # the kernel's partition here, meanwhile
            try:
                ptxs += [f.result() for f in futures]
            except _WorkerDied as exc:
                raise IRError(f"a code generation worker for kernel {kernel_name!r} died ({exc}); "
                              "compile it with codegen_method=serial") from exc  # fmt: skip
            except IRError as exc:
                raise IRError(f"parallel code generation of kernel {kernel_name!r} failed: {exc}") from exc
    finally:
        for m in modules:
            m.close()
    log.debug("emitted %s in %d partitions of %s functions", kernel_name, len(parts), "/".join(str(len(p)) for p in parts))
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
