"""Linking a kernel's modules: once per recording and process (the link cache), then each kernel takes its
own part; internalizing and pruning what the kernel cannot reach."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm

from mneme.core import envvars
from mneme.core.errors import IRError
from mneme.core.ir._module import (
    IRInput,
    ModuleRef,
    _describe,
    _first_lines,
    _looks_like_ir_text,
    clone,
    defined_functions,
    find_kernel,
    initialize,
    load,
    verify,
)
from mneme.core.ir._text import defined_function_spans, unquote

log = logging.getLogger(__name__)


def link(
    sources: Sequence[IRInput] | IRInput,
    kernel_name: str,
    prune: bool = True,
    internalize: bool = True,
) -> ModuleRef:
    """Link the IR modules of one kernel into one verified module.

    `sources` are paths, IR text/bitcode or modules (modules are cloned, not consumed).
    With `internalize` every function but the kernel becomes internal; with `prune`,
    what the kernel cannot reach is dropped.
    """
    if isinstance(sources, (str, bytes, bytearray, memoryview, os.PathLike, ModuleRef)):
        sources = [sources]
    if not sources:
        raise IRError(f"no IR modules to link for kernel {kernel_name!r}")
    key = _link_key(sources)
    if key is None:
        root = _link_all(sources, kernel_name)
    else:
        # the files of a recording are linked once per process; each kernel takes its own part
        with _link_lock:
            base = _linked.get(key)
            if base is None:
                base = _Linked(_link_all(sources, kernel_name))
                _linked[key] = base
                while len(_linked) > _LINK_CACHE_ENTRIES:
                    _linked.popitem(last=False)[1].module.close()
            _linked.move_to_end(key)
            find_kernel(base.module, kernel_name)
            root = (base.extract(kernel_name) if prune else None) or clone(base.module)
    find_kernel(root, kernel_name)
    if internalize:
        internalize_module(root, kernel_name)
    if prune:
        prune_module(root, kernel_name)
    return root


_LINK_CACHE_ENTRIES = 8
_linked: OrderedDict[tuple, ModuleRef] = OrderedDict()
_link_lock = threading.Lock()


def _link_key(sources: Sequence[IRInput]) -> tuple | None:
    """The inputs of a link as a cache key: each file's path, size and modification time; None if not all are files."""
    if envvars.get("MNEME_LINK_CACHE") == "0":
        return None
    key = []
    for src in sources:
        if not isinstance(src, (str, os.PathLike)) or _looks_like_ir_text(src):
            return None
        try:
            path = Path(src).resolve()
            st = path.stat()
        except OSError:
            return None  # `load` names the unreadable file
        key.append((str(path), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(key)


def clear_link_cache() -> None:
    """Forget the linked modules this process keeps (`link` re-reads the files)."""
    with _link_lock:
        while _linked:
            _linked.popitem()[1].module.close()


class _Linked:
    """A linked module kept for its kernels, with its text cut into function definitions and the rest.

    `extract` gives one kernel's part (what it reaches) by parsing only that text: a 200-kernel
    module is not cloned and pruned again for each kernel. Anything outside the function
    definitions (globals, aliases, metadata) that names a function keeps it.
    """

    def __init__(self, module: ModuleRef):
        self.module = module
        self._spans: list[tuple[str, int, int]] | None = None  # (name, start, end) of each definition
        self._calls: dict[str, set[str]] = {}
        self._roots: set[str] = set()
        self._text = ""

    def _index(self) -> None:
        text = self._text = str(self.module)
        spans = [(name, start, end) for name, start, _body, end in defined_function_spans(text)]
        names = {name for name, _, _ in spans}
        ref = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)')
        for name, start, end in spans:
            self._calls[name] = {unquote(m) for m in ref.findall(text, start, end)} & names
        rest, last = [], 0
        for _name, start, end in spans:
            rest.append(text[last:start])
            last = end
        rest.append(text[last:])
        self._roots = {unquote(m) for m in ref.findall("".join(rest))} & names
        self._spans = spans

    def extract(self, kernel_name: str) -> ModuleRef | None:
        """The module with only the functions `kernel_name` reaches (not internalized); None if it cannot."""
        if self._spans is None:
            self._index()
        keep, todo = set(), [kernel_name, *self._roots]
        while todo:
            name = todo.pop()
            if name not in keep and name in self._calls:
                keep.add(name)
                todo.extend(self._calls[name] - keep)
        parts, last = [], 0
        for name, start, end in self._spans:
            if name not in keep:
                parts.append(self._text[last:start])
                last = end
        parts.append(self._text[last:])
        try:
            mod = llvm.parse_assembly("".join(parts))
            mod.verify()
        except RuntimeError as exc:  # an unusual reference (e.g. a blockaddress): the module's own copy will do
            log.debug(
                "extracting kernel %r from %s failed (%s); cloning the linked module",
                kernel_name,
                self.module.name,
                _first_lines(exc),
            )
            return None
        mod.name = self.module.name
        return mod


def _link_all(sources: Sequence[IRInput], kernel_name: str) -> ModuleRef:
    """Load and link every source into one verified module (not internalized, not pruned)."""
    modules = [load(s) for s in sources]
    root = modules[0]
    for src, other in zip(sources[1:], modules[1:]):
        if other.triple and root.triple and other.triple != root.triple:
            raise IRError(
                f"cannot link {_describe(src, None)} (target {other.triple}) into a {root.triple} module "
                f"for kernel {kernel_name!r}; all modules of a kernel must target the same device"
            )
        try:
            llvm.link_modules(root, other)
        except RuntimeError as exc:
            raise IRError(
                f"linking {_describe(src, None)} for kernel {kernel_name!r} failed: {_first_lines(exc)}"
            ) from exc
    verify(root, f"linked module of kernel {kernel_name!r}")
    return root


_KEEP_LINKAGE = {"appending"}


def internalize_module(mod: ModuleRef, kernel_name: str) -> int:
    """Make every defined function but the kernel internal; returns how many changed.

    Device global variables keep their linkage: the replay writes their recorded values
    by name, and the optimizer must not fold their initializers into the code.
    """
    find_kernel(mod, kernel_name)
    changed = 0
    for fn in mod.functions:
        if fn.is_declaration or fn.name == kernel_name:
            continue
        if fn.linkage.name not in ("internal", "private"):
            fn.linkage = llvm.Linkage.internal
            changed += 1
    return changed


def _referenced_functions(value: llvm.ValueRef, functions: set[str]) -> set[str]:
    found = set()
    for name in re.findall(r'@("(?:[^"\\]|\\.)*"|[-\w.$]+)', str(value)):
        name = unquote(name)
        if name in functions:
            found.add(name)
    return found


def reachable_functions(mod: ModuleRef, kernel_name: str) -> set[str]:
    """Names of the defined functions the kernel can reach (calls and address-taken uses)."""
    defined = {f.name: f for f in mod.functions if not f.is_declaration}
    names = set(defined)
    # globals that the kernel may read can point at functions (vtables, function tables)
    roots = {kernel_name}
    for gv in mod.global_variables:
        if gv.name.startswith("llvm.") or not gv.is_declaration:
            roots |= _referenced_functions(gv, names)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in defined:
            continue
        seen.add(name)
        todo.extend(_referenced_functions(defined[name], names) - seen)
    return seen


def prune_module(mod: ModuleRef, kernel_name: str) -> int:
    """Drop the functions (and then-unused declarations and internal globals) the kernel cannot reach.

    Returns the number of functions removed.
    """
    find_kernel(mod, kernel_name)
    others = [fn for fn in mod.functions if not fn.is_declaration and fn.name != kernel_name]
    # Where every other function is internal already (`internalize_module` ran), LLVM's global dead code
    # elimination alone removes the unreachable ones; else those the kernel cannot reach become internal first.
    if any(fn.linkage.name not in ("internal", "private") for fn in others):
        keep = reachable_functions(mod, kernel_name)
        for fn in others:
            if fn.name not in keep:
                fn.linkage = llvm.Linkage.internal
    drop_unused_globals(mod)
    return len(others) + 1 - len(defined_functions(mod))


def drop_unused_globals(mod: ModuleRef) -> None:
    """Remove unreferenced internal functions and variables, and declarations nothing uses."""
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.add_strip_dead_prototype_pass()
    pm.run(mod, _utility_pass_builder())


@functools.lru_cache(maxsize=1)
def _utility_pass_builder() -> llvm.PassBuilder:
    """A pass builder for target-independent clean-up passes (global DCE and the like)."""
    initialize()
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine()
    return llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(0))
