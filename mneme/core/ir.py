"""LLVM IR helpers on llvmlite: load, verify, link, clone, find a kernel, read its parameters, hash.

Every module handed out here has been verified: LLVM aborts the process on invalid IR in
passes and code generation, so invalid IR must stop here, as an `IRError` naming the input.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Union

import attrs
import llvmlite.binding as llvm

from mneme.core import envvars, targets
from mneme.core.errors import IRError, MalformedIRError

log = logging.getLogger(__name__)

ModuleRef = llvm.ModuleRef
IRInput = Union[str, bytes, bytearray, memoryview, os.PathLike, ModuleRef]

BITCODE_MAGIC = b"BC\xc0\xde"
BITCODE_WRAPPER_MAGIC = b"\xde\xc0\x17\x0b"
LLVM_VERSION = ".".join(map(str, llvm.llvm_version_info))

_init_lock = threading.Lock()
_initialized = False


def initialize() -> None:
    """Initialize LLVM's targets once per process (every target llvmlite has, and the host)."""
    global _initialized
    with _init_lock:
        if _initialized:
            return
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialized = True


_tm_lock = threading.Lock()


def target_machine(triple: str, cpu: str = "", features: str = "", opt: int = 3, reloc: str = "default",
                   codemodel: str = "jitdefault", jit: bool = False) -> llvm.TargetMachine:  # fmt: skip
    """A cached llvmlite target machine (backends choose the triple, cpu and options of their targets)."""
    with _tm_lock:
        return _target_machine(triple, cpu, features, opt, reloc, codemodel, jit)


@functools.lru_cache(maxsize=32)
def _target_machine(triple: str, cpu: str, features: str, opt: int, reloc: str, codemodel: str,
                    jit: bool) -> llvm.TargetMachine:  # fmt: skip
    initialize()
    return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt, reloc=reloc,
                                                                 codemodel=codemodel, jit=jit)  # fmt: skip


@attrs.frozen
class Param:
    """One kernel parameter as the IR declares it.

    `kind` is "pointer", "int", "float" or "struct" (a by-value aggregate: `type` is the
    aggregate, `size` its size). `offset` is its place in the packed argument buffer
    (each parameter aligned to its ABI alignment, as the GPU runtimes pack them).
    """

    name: str
    type: str
    size: int
    kind: str
    align: int = 1
    offset: int = 0
    index: int = 0


# -- loading ---------------------------------------------------------------------------------


def _describe(source: object, name: str | None) -> str:
    if name:
        return name
    if isinstance(source, (str, os.PathLike)) and not _looks_like_ir_text(source):
        return os.fspath(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<{len(source)} bytes of IR>"
    return "<IR text>"


def _looks_like_ir_text(source: object) -> bool:
    return isinstance(source, str) and ("\n" in source or source.lstrip().startswith(("define", "declare", ";", "target", "source_filename", "@", "%")))


def is_bitcode(data: bytes | bytearray | memoryview) -> bool:
    head = bytes(data[:4])
    return head in (BITCODE_MAGIC, BITCODE_WRAPPER_MAGIC)


def load(source: IRInput, name: str | None = None) -> ModuleRef:
    """Parse and verify LLVM IR from a path (.ll or .bc), IR text, bitcode bytes, or a module.

    A ModuleRef is cloned (the caller keeps theirs). Raises `IRError` naming the input
    (`name`, else the path) for unreadable, malformed or invalid IR; never aborts.
    """
    initialize()
    label = _describe(source, name)
    if isinstance(source, ModuleRef):
        return clone(source)
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not _looks_like_ir_text(source)):
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise IRError(f"{label}: cannot read the IR file ({exc.strerror or exc}); check the path") from exc
    elif isinstance(source, str):
        data = source.encode()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        raise IRError(f"{label}: cannot load IR from a {type(source).__name__}; give a path, IR text or bitcode bytes")
    if is_bitcode(data):
        mod = _parse_bitcode(data, label)
    else:
        mod = _parse_text(data, label)
    verify(mod, label)
    _adopt_triple(mod, label)
    if name or not label.startswith("<"):
        mod.name = label  # errors downstream name the file
    return mod


def _adopt_triple(mod: ModuleRef, label: str) -> None:
    """Give a module without a target triple (some compilers' IR) the one its code implies.

    The backends say which kernel calling conventions and intrinsics give their target away
    (`Backend.kernel_marks`, `Backend.default_triple`).
    """
    if mod.triple:
        return
    triple = targets.triple_for_marks(str(mod))
    if triple:
        log.info("%s names no target triple; its kernels are %s code, so it is taken as %s", label,
                 triple.split("-")[0], triple)
        mod.triple = triple


def _parse_text(data: bytes, label: str) -> ModuleRef:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedIRError(f"{label}: neither LLVM bitcode nor UTF-8 IR text (byte {exc.start} is not text); is it IR?") from exc
    if "\0" in text:
        raise MalformedIRError(f"{label}: contains NUL bytes: neither LLVM bitcode nor IR text; is it corrupt?")
    try:
        return llvm.parse_assembly(text)
    except RuntimeError as exc:
        raise MalformedIRError(f"{label}: malformed LLVM IR: {_first_lines(exc)}") from exc


def _parse_bitcode(data: bytes, label: str) -> ModuleRef:
    try:
        return llvm.parse_bitcode(data)
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and "bitcode parsing error" not in ln]
        message = " | ".join(lines[:4]) or "unreadable"
        producer = bitcode_producer(data)
        hint = "the file is corrupt or truncated; rebuild it"
        if producer and _newer_than_reader(producer[0]):
            hint = (
                f"it was written by {producer[0]}, newer than this reader (LLVM {LLVM_VERSION}, from llvmlite); "
                "emit textual IR (.ll) or use an LLVM no newer than the reader"
            )
        elif producer and producer[1] != 0:
            hint = f"it has bitcode epoch {producer[1]} (written by {producer[0]}); this reader knows epoch 0"
        raise MalformedIRError(f"{label}: cannot read LLVM bitcode: {message}; {hint}") from exc


def _first_lines(exc: BaseException, n: int = 4) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return " | ".join(lines[:n])


def _newer_than_reader(producer: str) -> bool:
    match = re.match(r"(?:APPLE_\d+_)?LLVM(\d+)(?:\.(\d+))?", producer)
    if not match:
        return False
    version = (int(match.group(1)), int(match.group(2) or 0))
    return version > tuple(llvm.llvm_version_info[:2])


# -- the bitcode identification block (producer string and epoch) ----------------------------


class _Bits:
    def __init__(self, data: bytes, pos: int = 0):
        self.data = data
        self.pos = pos  # in bits

    def read(self, width: int) -> int:
        value = 0
        for i in range(width):
            byte = self.data[(self.pos + i) >> 3]
            value |= ((byte >> ((self.pos + i) & 7)) & 1) << i
        self.pos += width
        return value

    def vbr(self, width: int) -> int:
        value, shift = 0, 0
        while True:
            chunk = self.read(width)
            value |= (chunk & ((1 << (width - 1)) - 1)) << shift
            shift += width - 1
            if not chunk >> (width - 1):
                return value


_CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"


def bitcode_identification(data: bytes) -> dict | None:
    """Read the IDENTIFICATION block at the start of a bitcode file.

    Returns {"producer": str, "producer_bits": bit offset of each character (None where
    not addressable), "epoch": int, "epoch_bit": bit offset of the epoch's VBR value} or None when the file has no such block (or is not readable bitcode).
    """
    try:
        start = 0
        if data[:4] == BITCODE_WRAPPER_MAGIC:
            start = int.from_bytes(data[8:12], "little")
        if data[start : start + 4] != BITCODE_MAGIC:
            return None
        bits = _Bits(data, (start + 4) * 8)
        if bits.read(2) != 1:  # ENTER_SUBBLOCK
            return None
        if bits.vbr(8) != 13:  # IDENTIFICATION_BLOCK_ID
            return None
        width = bits.vbr(4)
        bits.pos = (bits.pos + 31) & ~31
        bits.read(32)  # block length in words
        abbrevs: list[list[tuple]] = []
        result: dict = {}
        while True:
            abbrev_id = bits.read(width)
            if abbrev_id == 0:  # END_BLOCK
                return result or None
            if abbrev_id == 2:  # DEFINE_ABBREV
                ops = []
                count = bits.vbr(5)
                i = 0
                while i < count:
                    literal = bits.read(1)
                    if literal:
                        ops.append(("lit", bits.vbr(8)))
                    else:
                        enc = bits.read(3)
                        ops.append(("fixed", bits.vbr(5)) if enc == 1 else ("vbr", bits.vbr(5)) if enc == 2 else
                                   ("array",) if enc == 3 else ("char6",) if enc == 4 else ("blob",))  # fmt: skip
                    i += 1
                abbrevs.append(ops)
                continue
            if abbrev_id == 3:  # UNABBREV_RECORD
                code = bits.vbr(6)
                values = [bits.vbr(6) for _ in range(bits.vbr(6))]
                positions = [None] * len(values)
            else:
                ops = abbrevs[abbrev_id - 4]
                values, positions = [], []

                def scalar(op):
                    pos = bits.pos
                    if op[0] == "lit":
                        return op[1], None
                    if op[0] == "fixed":
                        return bits.read(op[1]), pos
                    if op[0] == "vbr":
                        return bits.vbr(op[1]), pos
                    return _CHAR6.index(_CHAR6[bits.read(6)]), pos

                j = 0
                while j < len(ops):
                    op = ops[j]
                    if op[0] == "array":
                        n = bits.vbr(6)
                        elem = ops[j + 1]
                        for _ in range(n):
                            v, p = scalar(elem)
                            values.append(_CHAR6[v] if elem[0] == "char6" else v)
                            positions.append(p)
                        j += 2
                        continue
                    v, p = scalar(op)
                    values.append(v)
                    positions.append(p)
                    j += 1
                code, values, positions = values[0], values[1:], positions[1:]
            if code == 1:  # IDENTIFICATION_CODE_STRING
                result["producer"] = "".join(v if isinstance(v, str) else chr(v) for v in values)
                result["producer_bits"] = positions
            elif code == 2:  # IDENTIFICATION_CODE_EPOCH
                result["epoch"] = values[0]
                result["epoch_bit"] = positions[0]
    except (IndexError, ValueError):
        return None


def bitcode_producer(data: bytes) -> tuple[str, int] | None:
    """(producer, epoch) of a bitcode file, e.g. ("LLVM22.1.0", 0); None when unknown."""
    ident = bitcode_identification(data)
    if not ident or "producer" not in ident:
        return None
    return ident["producer"], ident.get("epoch", 0)


# -- verification, cloning, hashing ------------------------------------------------------------


def verify(mod: ModuleRef, label: str | None = None) -> None:
    """Raise `IRError` naming `label` (else the module name) if the module is invalid."""
    try:
        mod.verify()
    except RuntimeError as exc:
        raise IRError(f"{label or mod.name or '<module>'}: invalid LLVM IR: {_first_lines(exc, 6)}") from exc


def clone(mod: ModuleRef) -> ModuleRef:
    return mod.clone()


_NOISE = re.compile(r"^(; ModuleID = .*|source_filename = .*|; Function Attrs: .*)$", re.MULTILINE)
_TYPE_DEF = re.compile(r'^%("(?:[^"\\]|\\.)*"|[-\w.$]+) = type ', re.MULTILINE)
_IDENT_LINE = re.compile(r'^!llvm\.ident = .*$', re.MULTILINE)


def normalized_text(mod: ModuleRef) -> str:
    """The module's IR text without its module ID, source file name, comments and `llvm.ident`."""
    text = _IDENT_LINE.sub("", _NOISE.sub("", str(mod)))
    # named struct types get ".N" suffixes when several modules share LLVM's context: renumber
    types = {name: f"%T{i}" for i, name in enumerate(_TYPE_DEF.findall(text))}
    if types:
        pattern = re.compile("|".join(re.escape("%" + n) for n in sorted(types, key=len, reverse=True)) + r"(?![-\w.$])")
        text = pattern.sub(lambda m: types[m.group(0)[1:]], text)
    return "\n".join(line for line in text.splitlines() if line.strip())


def module_hash(mod: ModuleRef) -> str:
    """Stable SHA-256 of the module's code, independent of its module ID and source file name."""
    return hashlib.sha256(normalized_text(mod).encode()).hexdigest()


def combine_hash(base: str, *parts: object) -> str:
    """Derive a variant hash from `base` and what changed (a transform name and its parameters)."""
    h = hashlib.sha256(base.encode())
    for part in parts:
        h.update(b"\0")
        h.update(repr(part).encode())
    return h.hexdigest()


# -- kernels and parameters --------------------------------------------------------------------

_DEFINE = re.compile(r'^define\s[^@]*@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(', re.MULTILINE)
# LLVM's kernel calling conventions all end in "_kernel" (one per GPU target, and SPIR's).
_KERNEL_CC = re.compile(r" \w+_kernel ")


def unquote(name: str) -> str:
    """An LLVM identifier without its quotes (``"a.b"`` -> ``a.b``)."""
    return name[1:-1] if name.startswith('"') else name


def kernels(mod: ModuleRef) -> list[str]:
    """Names of the kernels (entry points) defined in the module, in order."""
    text = str(mod)
    found = []
    for match in _DEFINE.finditer(text):
        header = text[match.start() : match.end()]
        if _KERNEL_CC.search(header):
            found.append(unquote(match.group(1)))
    if not found:  # old NVVM IR: kernels marked in !nvvm.annotations only
        for name in re.findall(r'!\{ptr @("(?:[^"\\]|\\.)*"|[-\w.$]+), !"kernel", i32 1\}', text):
            found.append(unquote(name))
    return found


def defined_functions(mod: ModuleRef) -> list[str]:
    return [f.name for f in mod.functions if not f.is_declaration]


def find_kernel(mod: ModuleRef, name: str) -> llvm.ValueRef:
    """The kernel function `name` (mangled); `IRError` listing the kernels present otherwise."""
    try:
        fn = mod.get_function(name)
    except NameError:
        fn = None
    if fn is None or fn.is_declaration:
        present = kernels(mod) or defined_functions(mod)
        listing = ", ".join(present[:20]) + (" ..." if len(present) > 20 else "") if present else "none"
        raise IRError(f"kernel {name!r} is not defined in module {mod.name or '<module>'!r}; kernels present: {listing}")
    return fn


@functools.lru_cache(maxsize=64)
def target_data(layout: str) -> llvm.TargetData:
    """The LLVM target data of a data layout string (type sizes and alignments), cached per layout."""
    return llvm.create_target_data(layout)


def _type_kind(ty: llvm.TypeRef) -> str:
    if ty.is_pointer:
        return "pointer"
    if ty.is_struct or ty.is_array or ty.is_vector:
        return "struct"
    text = str(ty)
    if re.fullmatch(r"i\d+", text):
        return "int"
    if text in ("half", "bfloat", "float", "double", "fp128", "x86_fp80"):
        return "float"
    return "struct"


def _byval_type(mod: ModuleRef, attributes: Iterable[bytes]) -> llvm.TypeRef | None:
    for attr in attributes:
        text = attr.decode() if isinstance(attr, bytes) else str(attr)
        match = re.match(r"(?:byval|byref)\((.*)\)$", text)
        if match:
            inner = match.group(1).strip()
            if inner.startswith("%"):
                return mod.get_struct_type(unquote(inner[1:]))
            return None
    return None


def kernel_params(mod: ModuleRef, kernel_name: str) -> list[Param]:
    """The kernel's parameters with their IR types, sizes and offsets in the argument buffer."""
    fn = find_kernel(mod, kernel_name)
    td = target_data(mod.data_layout)
    params = []
    offset = 0
    for index, arg in enumerate(fn.arguments):
        ty = arg.type
        byval = _byval_type(mod, arg.attributes) if ty.is_pointer else None
        if byval is not None:
            size, align, kind, type_text = td.get_abi_size(byval), td.get_abi_alignment(byval), "struct", str(byval)
        else:
            size, align, kind, type_text = td.get_abi_size(ty), td.get_abi_alignment(ty), _type_kind(ty), str(ty)
        offset = (offset + align - 1) // align * align
        params.append(Param(arg.name or f"arg{index}", type_text, size, kind, align, offset, index))
        offset += size
    return params


# -- linking -----------------------------------------------------------------------------------


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
            log.debug("extracting kernel %r from %s failed (%s); cloning the linked module", kernel_name,
                      self.module.name, _first_lines(exc))
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
            raise IRError(f"linking {_describe(src, None)} for kernel {kernel_name!r} failed: {_first_lines(exc)}") from exc
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
    keep = reachable_functions(mod, kernel_name)
    before = len(defined_functions(mod))
    for fn in mod.functions:
        if not fn.is_declaration and fn.name not in keep:
            fn.linkage = llvm.Linkage.internal
    drop_unused_globals(mod)
    return before - len(defined_functions(mod))


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


# -- textual rewriting -------------------------------------------------------------------------
# llvmlite's binding cannot replace uses or edit instructions; transforms that need to
# rewrite IR edit the module's text with the helpers below, then re-parse and verify.

_STRING = re.compile(r'c?"(?:[^"\\]|\\.)*"')


def function_span(text: str, name: str) -> tuple[int, int, int]:
    """(start of the `define` line, start of the body, end of the closing brace line) of `name`."""
    quoted = re.escape(name) if re.fullmatch(r"[-\w.$]+", name) else re.escape('"' + name + '"')
    match = re.search(r"^define\s[^\n]*@" + quoted + r"\(", text, re.MULTILINE)
    if match is None:
        raise IRError(f"function {name!r} is not defined in the module text")
    body = text.index("{\n", match.end()) + 2
    end = text.index("\n}\n", body - 1) + 3
    return match.start(), body, end


def defined_function_spans(text: str) -> list[tuple[str, int, int, int]]:
    """(name, start, body, end) of every function definition in module text."""
    spans = []
    for match in _DEFINE.finditer(text):
        name = unquote(match.group(1))
        body = text.index("{\n", match.end()) + 2
        end = text.index("\n}\n", body - 1) + 3
        spans.append((name, match.start(), body, end))
    return spans


def sub_outside_strings(pattern: re.Pattern, repl, line: str) -> str:
    """`pattern.sub(repl, line)` applied only outside string constants (inline asm, c"..." data)."""
    out, last = [], 0
    for m in _STRING.finditer(line):
        out.append(pattern.sub(repl, line[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(pattern.sub(repl, line[last:]))
    return "".join(out)


def ensure_declaration(text: str, name: str, declaration: str) -> str:
    """Add `declaration` (a full `declare ...` line) unless `@name` is already declared or defined."""
    if re.search(r"^(declare|define)\s[^\n]*@" + re.escape(name) + r"\(", text, re.MULTILINE):
        return text
    return text.rstrip("\n") + "\n\n" + declaration + "\n"


def max_attribute_group(text: str) -> int:
    ids = [int(x) for x in re.findall(r"^attributes #(\d+) = ", text, re.MULTILINE)]
    return max(ids, default=-1)


def reparse(text: str, label: str) -> ModuleRef:
    """Parse rewritten module text and verify it; a failure is an `IRError` naming `label`."""
    try:
        mod = llvm.parse_assembly(text)
    except RuntimeError as exc:
        raise IRError(f"{label}: the rewritten IR does not parse (a Mneme bug; please report): {_first_lines(exc)}") from exc
    verify(mod, f"{label} (rewritten IR)")
    module_id = re.match(r"; ModuleID = '(.*)'\n", text)
    if module_id:
        mod.name = module_id.group(1)
    return mod


_TARGET_CPU = re.compile(r'"target-cpu"="([^"]*)"')
_TARGET_FEATURES = re.compile(r'"target-features"="([^"]*)"')
_ATTRIBUTE_GROUP = re.compile(r"^attributes #\d+ = \{.*\}$", re.MULTILINE)


def function_targets(mod: ModuleRef) -> list[tuple[str, list[str]]]:
    """(target-cpu, target-features) that each defined function names ("" and [] where it names none).

    Front ends write the architecture they compiled for into every function, and LLVM's back ends
    generate each function for its own attributes, not for the target machine's.
    """
    found = []
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        text = b" ".join(fn.attributes).decode("utf-8", "replace")
        cpu, features = _TARGET_CPU.search(text), _TARGET_FEATURES.search(text)
        found.append((cpu.group(1) if cpu else "", [f for f in features.group(1).split(",") if f] if features else []))
    return found


def retarget_functions(mod: ModuleRef, cpu: str, features: Callable[[list[str]], list[str]], label: str) -> ModuleRef:
    """A new module whose functions name `cpu` as their target-cpu and `features(their features)` as their
    target-features (an empty list drops the attribute); `mod` itself is left as it was."""

    def new_features(m: re.Match) -> str:
        kept = ",".join(features([f for f in m.group(1).split(",") if f]))
        return f'"target-features"="{kept}"' if kept else ""

    def group(match: re.Match) -> str:
        return _TARGET_FEATURES.sub(new_features, _TARGET_CPU.sub(f'"target-cpu"="{cpu}"', match.group(0)))

    return reparse(_ATTRIBUTE_GROUP.sub(group, str(mod)), label)


def function_attribute(text: str, name: str, key: str) -> str | None:
    """The value of string attribute `key` ("key"="value") of function `name`, or None."""
    start, body, _ = function_span(text, name)
    match = re.search(r" #(\d+)(?=[\s{])", text[start:body])
    if match is None:
        return None
    group = re.search(r"^attributes #" + match.group(1) + r" = \{ (.*) \}$", text, re.MULTILINE)
    found = re.search(r'"' + re.escape(key) + r'"="([^"]*)"', group.group(1)) if group else None
    return found.group(1) if found else None


def set_function_attributes(text: str, name: str, add: dict[str, str], remove: Iterable[str] = ()) -> str:
    """Give function `name` a fresh attribute group: its current one, minus keys `remove` and `add`'s
    keys, plus `add` (string attributes "key"="value"). Other functions keep theirs."""
    start, body, _ = function_span(text, name)
    header = text[start:body]
    match = re.search(r" #(\d+)(?=[\s{])", header)
    current = ""
    if match is not None:
        group = re.search(r"^attributes #" + match.group(1) + r" = \{ (.*) \}$", text, re.MULTILINE)
        current = group.group(1) if group else ""
    drop = set(remove) | set(add)
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"(?:="(?:[^"\\]|\\.)*")?|[^\s"]+(?:\([^)]*\))?', current)
    kept = [t for t in tokens if not (t.startswith('"') and t.split("=", 1)[0].strip('"') in drop)]
    kept += [f'"{key}"="{value}"' for key, value in add.items()]
    new_id = max_attribute_group(text) + 1
    if match is not None:
        new_header = header[: match.start()] + f" #{new_id}" + header[match.end() :]
    else:
        new_header = header[: header.rindex("{")].rstrip() + f" #{new_id} {{\n"
    text = text[:start] + new_header + text[body:]
    return text.rstrip("\n") + f"\n\nattributes #{new_id} = {{ {' '.join(kept)} }}\n"
