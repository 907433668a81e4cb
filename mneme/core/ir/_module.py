"""Modules: target machines, loading (text or bitcode, named in every error), verification, cloning,
hashing, kernels and their parameters, and the rewrites that re-parse a module's text."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Union

import attrs
import llvmlite.binding as llvm

from mneme.core import limits, targets
from mneme.core.errors import FormatError, IRError, MalformedIRError
from mneme.core.ir._bitcode import BITCODE_MAGIC, BITCODE_WRAPPER_MAGIC, bitcode_producer
from mneme.core.ir._probe import crash_reading
from mneme.core.ir._text import _DEFINE, unquote

log = logging.getLogger(__name__)

ModuleRef = llvm.ModuleRef
IRInput = Union[str, bytes, bytearray, memoryview, os.PathLike, ModuleRef]

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


def target_machine(
    triple: str,
    cpu: str = "",
    features: str = "",
    opt: int = 3,
    reloc: str = "default",
    codemodel: str = "jitdefault",
    jit: bool = False,
    flags: tuple[str, ...] = (),
) -> llvm.TargetMachine:
    """A cached llvmlite target machine (backends choose the triple, cpu and options of their targets).

    `flags`: boolean LLVM options (`-name`) that a target reads once, when its machine is made; they are
    on while it is made, off again after, and machines are cached by them too.
    """
    with _tm_lock:
        return _target_machine(triple, cpu, features, opt, reloc, codemodel, jit, tuple(flags))


@functools.lru_cache(maxsize=32)
def _target_machine(
    triple: str, cpu: str, features: str, opt: int, reloc: str, codemodel: str, jit: bool, flags: tuple[str, ...]
) -> llvm.TargetMachine:
    initialize()
    for flag in flags:
        llvm.set_option("mneme", flag)
    try:
        return llvm.Target.from_triple(triple).create_target_machine(
            cpu=cpu, features=features, opt=opt, reloc=reloc, codemodel=codemodel, jit=jit
        )
    finally:
        for flag in flags:
            llvm.set_option("mneme", f"{flag}=false")


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
    return isinstance(source, str) and (
        "\n" in source or source.lstrip().startswith(("define", "declare", ";", "target", "source_filename", "@", "%"))
    )


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
        try:  # bounded before it is read: parsing costs ~50 bytes of memory per byte of IR
            data = limits.read_bytes(path, "IR file", limit_name="ir_bytes")
        except FormatError as exc:
            raise IRError(f"{label}: cannot read the IR file ({exc}); check the path") from None
    elif isinstance(source, str):
        data = source.encode()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        raise IRError(f"{label}: cannot load IR from a {type(source).__name__}; give a path, IR text or bitcode bytes")
    limits.check("ir_bytes", len(data), f"{label}: the IR's size")
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
    try:
        if mod.triple:
            return
    except UnicodeDecodeError:  # a bitcode record holding bytes that are not text
        raise MalformedIRError(f"{label}: its target triple is not text; is the file corrupt?") from None
    triple = targets.triple_for_marks(str(mod))
    if triple:
        log.info(
            "%s names no target triple; its kernels are %s code, so it is taken as %s",
            label,
            triple.split("-")[0],
            triple,
        )
        mod.triple = triple


def _parse_text(data: bytes, label: str) -> ModuleRef:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedIRError(
            f"{label}: neither LLVM bitcode nor UTF-8 IR text (byte {exc.start} is not text); is it IR?"
        ) from exc
    if "\0" in text:
        raise MalformedIRError(f"{label}: contains NUL bytes: neither LLVM bitcode nor IR text; is it corrupt?")
    try:
        return llvm.parse_assembly(text)
    except UnicodeDecodeError as exc:  # the message LLVM wrote quotes bytes that are not UTF-8
        raise MalformedIRError(f"{label}: malformed LLVM IR (LLVM's message about it is not text)") from exc
    except RuntimeError as exc:
        raise MalformedIRError(f"{label}: malformed LLVM IR: {_first_lines(exc)}") from exc


def _parse_bitcode(data: bytes, label: str) -> ModuleRef:
    crashed = crash_reading(data)
    if crashed:
        raise MalformedIRError(
            f"{label}: cannot read LLVM bitcode: LLVM's reader dies on it ({crashed}); the file "
            "is corrupt or crafted; rebuild it"
        )
    try:
        return llvm.parse_bitcode(data)
    except UnicodeDecodeError as exc:  # llvmlite decodes LLVM's message, which may quote the file's own bytes
        raise MalformedIRError(
            f"{label}: cannot read LLVM bitcode: LLVM's reader refused it with a message that is not text "
            "(it quotes the file's bytes); the file is corrupt or crafted; rebuild it"
        ) from exc
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


# -- verification, cloning, hashing ------------------------------------------------------------


def verify(mod: ModuleRef, label: str | None = None) -> None:
    """Raise `IRError` naming `label` (else the module name) if the module is invalid."""
    try:
        mod.verify()
    except UnicodeDecodeError as exc:  # the verifier's message quotes names that are not UTF-8
        raise IRError(
            f"{label or mod.name or '<module>'}: invalid LLVM IR (the verifier's message is not text)"
        ) from exc
    except RuntimeError as exc:
        raise IRError(f"{label or mod.name or '<module>'}: invalid LLVM IR: {_first_lines(exc, 6)}") from exc


def clone(mod: ModuleRef) -> ModuleRef:
    return mod.clone()


_NOISE = re.compile(r"^(; ModuleID = .*|source_filename = .*|; Function Attrs: .*)$", re.MULTILINE)
_TYPE_DEF = re.compile(r'^%("(?:[^"\\]|\\.)*"|[-\w.$]+) = type ', re.MULTILINE)
_IDENT_LINE = re.compile(r"^!llvm\.ident = .*$", re.MULTILINE)


def normalized_text(mod: ModuleRef) -> str:
    """The module's IR text without its module ID, source file name, comments and `llvm.ident`."""
    text = _IDENT_LINE.sub("", _NOISE.sub("", str(mod)))
    # named struct types get ".N" suffixes when several modules share LLVM's context: renumber
    types = {name: f"%T{i}" for i, name in enumerate(_TYPE_DEF.findall(text))}
    if types:
        pattern = re.compile(
            "|".join(re.escape("%" + n) for n in sorted(types, key=len, reverse=True)) + r"(?![-\w.$])"
        )
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
# LLVM's kernel calling conventions all end in "_kernel" (one per GPU target, and SPIR's).
_KERNEL_CC = re.compile(r" \w+_kernel ")


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
        raise IRError(
            f"kernel {name!r} is not defined in module {mod.name or '<module>'!r}; kernels present: {listing}"
        )
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


def byval_type(mod: ModuleRef, attributes: Iterable[bytes]) -> llvm.TypeRef | None:
    """The aggregate a pointer parameter carries by value (its `byval`/`byref` type), or None."""
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
        byval = byval_type(mod, arg.attributes) if ty.is_pointer else None
        if byval is not None:
            size, align, kind, type_text = td.get_abi_size(byval), td.get_abi_alignment(byval), "struct", str(byval)
        else:
            size, align, kind, type_text = td.get_abi_size(ty), td.get_abi_alignment(ty), _type_kind(ty), str(ty)
        offset = (offset + align - 1) // align * align
        params.append(Param(arg.name or f"arg{index}", type_text, size, kind, align, offset, index))
        offset += size
    return params


# -- rewriting a module through its text (mneme.core.ir._text) ------------------------------


def reparse(text: str, label: str) -> ModuleRef:
    """Parse rewritten module text and verify it; a failure is an `IRError` naming `label`."""
    try:
        mod = llvm.parse_assembly(text)
    except RuntimeError as exc:
        raise IRError(
            f"{label}: the rewritten IR does not parse (a Mneme bug; please report): {_first_lines(exc)}"
        ) from exc
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
