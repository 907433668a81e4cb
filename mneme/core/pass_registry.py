"""LLVM's own pass registry and textual pipeline parser, reached through llvmlite's library.

llvmlite exposes a pass builder but neither LLVM's textual pipeline parser nor its list of
registered passes. Both live in llvmlite's shared library (`PassBuilder::parsePassPipeline`,
`PassBuilder::printPassNames`) as local symbols of its symbol table; this module finds them
there and calls them, so the pass names and the syntax (`function(loop-mssa(licm))`,
`simplifycfg<bonus-inst-threshold=4>`) are exactly those of the LLVM that compiles the code.

The pass listing is printed once in a child process (LLVM writes it to a raw stream, here its
unbuffered standard error) and cached per llvmlite library; parsing is in process.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from mneme.core.errors import IRError, MnemeError, UsageError
from mneme.core.native_loader import NativeLoader

log = logging.getLogger(__name__)

_PRINT_PASS_NAMES = "_ZN4llvm11PassBuilder14printPassNamesERNS_11raw_ostreamE"
_ERRS = "_ZN4llvm4errsEv"
_PARSE_MODULE_PIPELINE = "_ZN4llvm11PassBuilder17parsePassPipelineERNS_11PassManagerINS_6ModuleENS_15AnalysisManagerIS2_JEEEJEEENS_9StringRefE"
_ERROR_MESSAGE = "LLVMGetErrorMessage"
_DISPOSE_MESSAGE = "LLVMDisposeErrorMessage"
# An exported function of the same library: its address minus its symbol value is the load base.
_ANCHOR = "LLVMPY_CreatePassBuilder"
_WANTED = (_PRINT_PASS_NAMES, _ERRS, _PARSE_MODULE_PIPELINE, _ERROR_MESSAGE, _DISPOSE_MESSAGE, _ANCHOR)

#: A registry section is a transform pass list (not an analysis) at this nesting level.
SECTION_LEVELS = {
    "Module passes:": "module",
    "Module passes with params:": "module",
    "CGSCC passes:": "cgscc",
    "CGSCC passes with params:": "cgscc",
    "Function passes:": "function",
    "Function passes with params:": "function",
    "LoopNest passes:": "loopnest",
    "Loop passes:": "loop",
    "Loop passes with params:": "loop",
}


def _library_path() -> str:
    from llvmlite.binding import ffi

    return ffi.lib._name


@functools.lru_cache(maxsize=1)
def _symbols() -> dict[str, int]:
    """Symbol values of the functions this module calls, from the library's symbol tables."""
    from mneme.core import elf

    return elf.symbol_values(elf.ElfFile.read(_library_path()), frozenset(_WANTED))


def _unavailable() -> str | None:
    """Why LLVM's parser cannot be reached here, or None when it can."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        # LLVM's parser returns its error object through a hidden pointer; only the x86-64 System V
        # calling convention passes that pointer as an ordinary first argument that ctypes can give.
        return f"calling LLVM's pipeline parser needs Linux on x86-64 (this is {sys.platform} {platform.machine()})"
    try:
        missing = [s for s in _WANTED if s not in _symbols()]
    except MnemeError as exc:
        return f"cannot read llvmlite's library {_library_path()}: {exc}"
    if missing:
        return f"llvmlite's library {_library_path()} has no symbol table entry for {', '.join(missing)}"
    return None


#: llvmlite's library, opened again to find its load address: its functions are reached by their symbol
#: values (`_symbols`), not by name, so none is declared here; `_unavailable` checks they are there.
_LLVMLITE = NativeLoader(
    "llvmlite's LLVM library",
    _library_path,
    {},
    remedy="reinstall llvmlite (pip install "
    "--force-reinstall llvmlite), or use default<Ox> and the pass names `mneme ir passes` lists",
)


class _Native:
    """The LLVM functions, as ctypes callables at their load addresses."""

    def __init__(self) -> None:
        from llvmlite.binding import ffi

        why = _unavailable()
        if why:
            raise IRError(
                f"LLVM's textual pass pipelines are not available: {why}; use default<Ox> or the pass "
                "names `mneme ir passes` lists"
            )
        syms = _symbols()
        ffi.lib  # noqa: B018 - loads llvmlite's library; opening it again below finds the same mapping
        anchor = ctypes.cast(_LLVMLITE.load()[_ANCHOR], ctypes.c_void_p).value
        base = anchor - syms[_ANCHOR]

        def fn(name: str, restype: Any, *argtypes: Any) -> Any:
            return ctypes.CFUNCTYPE(restype, *argtypes)(base + syms[name])

        vp = ctypes.c_void_p
        self.errs = fn(_ERRS, vp)
        self.print_pass_names = fn(_PRINT_PASS_NAMES, None, vp, vp)
        # Error parsePassPipeline(PassBuilder *this, ModulePassManager &, StringRef): the Error comes back
        # through the hidden first pointer, the StringRef as (data, length).
        self.parse = fn(_PARSE_MODULE_PIPELINE, None, vp, vp, vp, ctypes.c_char_p, ctypes.c_size_t)
        self.error_message = fn(_ERROR_MESSAGE, vp, vp)
        self.dispose_message = fn(_DISPOSE_MESSAGE, None, vp)


@functools.lru_cache(maxsize=1)
def _native() -> _Native:
    return _Native()


def available() -> bool:
    """True when LLVM's pipeline parser and pass registry can be used in this process."""
    return _unavailable() is None


def parse_into(pass_builder: Any, module_pass_manager: Any, text: str) -> None:
    """Parse LLVM's textual pipeline `text` into llvmlite's module pass manager, as `opt -passes=` does.

    Raises `UsageError` with LLVM's message when LLVM refuses the text (an unknown pass, a bad
    parameter, an adaptor around the wrong kind of pass); the pass manager is then unusable.
    """
    native = _native()
    data = text.encode()
    error = ctypes.c_uint64(0)
    native.parse(ctypes.addressof(error), pass_builder._ptr, module_pass_manager._ptr, data, len(data))
    payload = error.value & ~1  # the low bit is LLVM's "not yet checked" flag, not part of the pointer
    if payload:
        message = native.error_message(payload)  # takes the error over
        try:
            why = ctypes.string_at(message).decode(errors="replace")
        finally:
            native.dispose_message(message)
        raise UsageError(f"LLVM refuses pipeline {text!r}: {why}")


_check_lock = threading.Lock()


def _check_triples() -> tuple[str, ...]:
    """The host ("") and every installed backend's GPU triple: a pipeline may name a pass only one target
    registers (the backends declare their triples: `mneme.core.targets`)."""
    from mneme.core import targets

    return ("", *dict.fromkeys(t for t in targets.default_triples() if t))


@functools.lru_cache(maxsize=4096)
def check_pipeline(text: str) -> None:
    """Raise `UsageError` unless LLVM parses `text` as a module pipeline for the host or a GPU target.

    A pass of one target only (`nvvm-reflect`) passes here; running it for another target fails
    when the pipeline is built for that target (`mneme.core.pipeline.optimize`).
    """
    import llvmlite.binding as llvm

    from mneme.core import ir

    first: UsageError | None = None
    with _check_lock:
        ir.initialize()
        for triple in _check_triples():
            try:
                target = llvm.Target.from_triple(triple) if triple else llvm.Target.from_default_triple()
            except RuntimeError:  # a target this llvmlite lacks
                continue
            builder = llvm.create_pass_builder(
                target.create_target_machine(), llvm.create_pipeline_tuning_options(speed_level=2)
            )
            try:
                parse_into(builder, llvm.create_new_module_pass_manager(), text)
                return
            except UsageError as exc:
                first = first or exc
    raise first


def _print_registry() -> None:
    """Child process: LLVM prints its registered passes to standard error."""
    import llvmlite.binding as llvm

    from mneme.core import ir

    ir.initialize()
    machine = llvm.Target.from_default_triple().create_target_machine()
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    native = _native()
    native.print_pass_names(builder._ptr, native.errs())


def _cache_file() -> Path:
    from mneme.core.native import cache_dir

    lib = Path(_library_path())
    stat = lib.stat()
    return cache_dir("llvm-passes") / f"{stat.st_size}-{int(stat.st_mtime)}.json"


def _parse_listing(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            current = line.strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line.strip())
    return sections


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, list[str]]:
    """LLVM's registered passes and analyses by section (`"Function passes with params:"` -> entries).

    An entry is a pass name, with its parameters in LLVM's notation when it takes some
    (`simplifycfg<no-forward-switch-cond;...;bonus-inst-threshold=N>`).
    """
    cache = _cache_file()
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    if _unavailable():
        raise IRError(f"LLVM's pass registry is not available: {_unavailable()}")
    done = subprocess.run(
        [sys.executable, "-c", "from mneme.core.pass_registry import _print_registry; _print_registry()"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    sections = _parse_listing(done.stderr)
    if done.returncode != 0 or "Function passes:" not in sections:
        raise IRError(f"LLVM did not list its passes (exit {done.returncode}): {done.stderr[-500:]}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sections))
        os.replace(tmp, cache)
    except OSError as exc:  # a read-only cache only costs the listing again next time
        log.debug("cannot cache LLVM's pass listing in %s: %s", cache, exc)
    return sections


def transform_passes() -> list[tuple[str, str, str]]:
    """Every registered transform pass: `(name, parameters or "", level)`, level one of SECTION_LEVELS' values."""
    out = []
    for section, entries in registry().items():
        level = SECTION_LEVELS.get(section)
        if level is None:
            continue
        for entry in entries:
            name, _, params = entry.partition("<")
            out.append((name, ("<" + params) if params else "", level))
    return out


# The adaptors around a pass of each level, outermost first (LLVM runs loop-nest passes in `loop(...)`;
# LICM needs MemorySSA, which `loop-mssa(...)` provides).
ADAPTORS = {
    "module": (),
    "cgscc": ("cgscc",),
    "function": ("function<eager-inv>",),
    "loopnest": ("function<eager-inv>", "loop"),
    "loop": ("function<eager-inv>", "loop"),
    "loop-mssa": ("function<eager-inv>", "loop-mssa"),
}
NEEDS_MEMORY_SSA = frozenset({"licm", "lnicm"})


def level_of(name: str) -> str:
    """The level a registered pass runs at (the outermost it is registered at), `loop-mssa` for LICM."""
    if name in NEEDS_MEMORY_SSA:
        return "loop-mssa"
    for pass_name, _params, level in transform_passes():
        if pass_name == name:
            return level
    raise UsageError(f"unknown pass {name!r}: LLVM registers no such pass (`mneme ir passes --llvm` lists them)")


def nest(items: list[tuple[str, str]]) -> str:
    """A pipeline text running `(pass text, level)` items in order, each inside the adaptors of its level.

    Consecutive passes of one level share their adaptors: `[("instcombine", "function"), ("licm",
    "loop-mssa"), ("gvn", "function")]` -> `function<eager-inv>(instcombine,loop-mssa(licm),gvn)`.
    """
    out: list[str] = []
    open_path: tuple[str, ...] = ()
    for index, (text, level) in enumerate(items):
        path = ADAPTORS[level]
        common = 0
        while common < min(len(path), len(open_path)) and path[common] == open_path[common]:
            common += 1
        out.append(")" * (len(open_path) - common) + ("," if index else ""))
        out.append("".join(a + "(" for a in path[common:]) + text)
        open_path = path
    out.append(")" * len(open_path))
    return "".join(out)


def pass_names() -> list[str]:
    """The names of every registered transform pass (a name registered at several levels appears once)."""
    return list(dict.fromkeys(name for name, _, _ in transform_passes()))
