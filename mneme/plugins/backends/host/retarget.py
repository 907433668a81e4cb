"""Retarget CUDA-flavoured NVPTX (or HIP AMDGPU) kernel IR to the host CPU, as a rewrite of the textual IR.

AMDGPU specifics live in `retarget_amdgpu` and `intrinsics_amdgpu`.

What changes (everything else is left to LLVM):

* triple and data layout become the host's; the ``ptx_kernel`` calling convention and the
  NVPTX ``target-cpu``/``target-features`` attributes go away;
* address spaces 1/3/4/5 become plain pointers (``addrspacecast`` becomes a no-op), and
  intrinsic names mangled with them are renamed (``llvm.memcpy.p0.p3.i64`` -> ``.p0.p0.``);
* every ``addrspace(3)`` (shared) global becomes an offset into the per-block shared memory
  buffer of the runtime: functions using it compute its address once in their entry block,
  so blocks run in parallel; ``extern __shared__`` arrays start after the static ones;
* NVVM intrinsics and libdevice's inline PTX become calls to host implementations
  (`intrinsics.py`): special registers read the per-thread context, barriers and warp
  operations call the runtime;
* a trampoline ``__mneme_entry(ptr args)`` unpacks CUDA's parameter buffer (each parameter at
  its natural alignment, as laid out by the NVPTX data layout) and calls the kernel;
* ``__mneme_info`` and ``__mneme_globals`` tell the loader the static shared-memory size, whether
  the kernel needs fibers (and every block resident: a grid-wide barrier), and where each device
  global variable lives.

Anything it cannot run raises `UnsupportedError` naming it, before LLVM sees the code.
"""

from __future__ import annotations

import logging
import re

import attrs
import llvmlite.binding as llvm

from mneme.core.errors import IRError, UnsupportedError
from mneme.plugins.backends.host import block_loop as block_loops
from mneme.plugins.backends.host import (
    inline_ptx,
    intrinsics,
    intrinsics_amdgpu,
    ptx_blocks,
    retarget_amdgpu,
    row_ranges,
)
from mneme.plugins.backends.host.irtext import match_paren, symbol_ref


log = logging.getLogger(__name__)

ENTRY = block_loops.ENTRY
INFO = "__mneme_info"
GLOBAL_TABLE = "__mneme_globals"
GLOBAL_NAMES = "__mneme_global_names"
DYNAMIC_SHARED_ALIGN = 16
FLAG_FIBERS = 1  # one fiber per GPU thread: the kernel has barriers or warp operations
FLAG_BLOCK_LOOP = 2  # the entry runs a whole block: a loop over the threads around the inlined kernel
FLAG_GRID = 8  # with FLAG_FIBERS: every block resident at once, the kernel reads the grid workspace (grid.sync())
# with FLAG_BLOCK_LOOP: one call may run a run of blocks along x (the runtime's MODE_BLOCK_RUNS), see `block_loop`
FLAG_BLOCK_RUNS = 16

_NAME = r'(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+)'
_GLOBAL_REF = re.compile(r"@" + _NAME)
_CONSTEXPR = re.compile(r"\b(getelementptr(?:\s+(?:inbounds|nuw|nusw))*|ptrtoint|bitcast|inttoptr)\s*\(")
_ADDRSPACECAST_EXPR = re.compile(r"\baddrspacecast\s*\(")
_ADDRSPACE = re.compile(r"\s*addrspace\(\d+\)")
_INTRINSIC_NAME = re.compile(r"@llvm\.[\w.]+")
_ASM_CALL = re.compile(
    r'\basm\s+(?:sideeffect\s+|alignstack\s+|inteldialect\s+|unwind\s+)*"((?:[^"\\]|\\.)*)",\s*"[^"]*"'
)


@attrs.frozen
class Param:
    """One kernel parameter as laid out in CUDA's parameter buffer."""

    index: int
    type: str  # the IR type passed to the kernel
    offset: int
    size: int
    byval: str | None = None  # the pointee type of a byval parameter
    byref: bool = False  # an AMDGPU aggregate read in place from the argument buffer


@attrs.frozen
class SharedVar:
    name: str
    offset: int
    size: int
    dynamic: bool


@attrs.frozen
class HostModule:
    """The retargeted IR text and what the loader needs to know about it."""

    text: str
    kernel_name: str
    params: tuple[Param, ...]
    shared: tuple[SharedVar, ...]
    static_shared: int
    device_globals: tuple[str, ...]
    flags: int = 0


_TARGET_ATTRIBUTE = re.compile(r'\s*"(target-cpu|target-features|tune-cpu|nvptx-f32ftz)"="[^"]*"')


def strip_target_attributes(text: str) -> str:
    """Drop the GPU's target-cpu and target-features from the attribute groups of IR text."""
    return "\n".join(_strip_group(line) if line.startswith("attributes #") else line for line in text.split("\n"))


def _strip_group(line: str) -> str:
    # AMDGPU code keeps its wave width, which the target-cpu and target-features told
    wave = (
        f' "{retarget_amdgpu.WAVE_ATTRIBUTE}"="{retarget_amdgpu.wave_size(line)}"'
        if '"target-cpu"="gfx' in line
        else ""
    )
    line = _TARGET_ATTRIBUTE.sub("", line)
    if wave and retarget_amdgpu.WAVE_ATTRIBUTE not in line:
        line = re.sub(r"\s*\}$", wave + " }", line)
    # a group left empty is invalid IR; GPU code never unwinds, so nounwind keeps it true and valid
    return re.sub(r"\{\s*\}$", "{ nounwind }", line)


_SYNC_INTRINSIC = re.compile(
    r"@llvm\.nvvm\.(barrier|bar\.|shfl\.|vote\.|activemask|match\.)|" + retarget_amdgpu.SYNC.pattern
)


def inline_synchronizing_functions(text: str) -> str:
    """Mark functions that reach a barrier or warp operation `alwaysinline` (unless `noinline`).

    CUDA's wrappers (``__shfl_down_sync`` ...) then disappear into the kernel, where barriers and
    shuffles can become step points instead of needing fibers.
    """
    lines = text.split("\n")
    groups = {}
    for line in lines:
        m = re.match(r"^attributes (#\d+) = \{(.*)\}", line)
        if m:
            groups[m.group(1)] = m.group(2)
    bodies: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(lines):
        if line.startswith("define "):
            m = re.search(r"@(" + _NAME + r")\(", line)
            if m and line.rstrip().endswith("{"):
                end = lines.index("}", i)
                bodies[m.group(1)] = (i, "\n".join(lines[i + 1 : end]))
    reaching = {name for name, (_, body) in bodies.items() if _SYNC_INTRINSIC.search(body)}
    while True:
        more = {
            name
            for name, (_, body) in bodies.items()
            if name not in reaching and any(f"@{r}(" in body for r in reaching)
        }
        if not more:
            break
        reaching |= more
    for name in reaching:
        i, _ = bodies[name]
        header = lines[i]
        group = re.search(r"(#\d+)\s*(?:comdat[^{]*|align \d+\s*)*\{$", header)
        attrs_text = groups.get(group.group(1), "") if group else ""
        if (
            re.search(r"\b(noinline|optnone|alwaysinline)\b", header + " " + attrs_text)
            or "ptx_kernel" in header
            or "amdgpu_kernel" in header
        ):
            continue
        quoted = symbol_ref(name) if not name.startswith('"') else "@" + name
        open_index = header.index(quoted + "(") + len(quoted)
        close = match_paren(header, open_index)
        # after (local_)unnamed_addr, which must precede the function attributes
        after = re.match(r"(\s+(?:local_)?unnamed_addr)?", header[close + 1 :]).end() + close + 1
        lines[i] = header[:after] + " alwaysinline" + header[after:]
    return "\n".join(lines)


def _split_to(inner: str) -> tuple[str, str]:
    """Split ``SRC_TYPE VALUE to DST_TYPE`` at its last top-level `` to ``."""
    depth = 0
    cut = -1
    for i, ch in enumerate(inner):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif depth == 0 and inner.startswith(" to ", i):
            cut = i
    if cut < 0:
        raise IRError(f"cannot read cast expression {inner!r}")
    return inner[:cut], inner[cut + 4 :]


def _strip_type(typed_value: str) -> str:
    """``ptr addrspace(3) @g`` -> ``@g``; ``ptr getelementptr (...)`` -> ``getelementptr (...)``."""
    text = typed_value.strip()
    text = re.sub(r"^ptr(\s+addrspace\(\d+\))?\s+", "", text)
    return text


def remove_addrspacecast_exprs(text: str) -> str:
    """Replace every constant ``addrspacecast (T V to T2)`` by ``V`` (address spaces are merged)."""
    out = []
    pos = 0
    while True:
        m = _ADDRSPACECAST_EXPR.search(text, pos)
        if not m:
            out.append(text[pos:])
            return "".join(out)
        open_index = m.end() - 1
        close = match_paren(text, open_index)
        source, _ = _split_to(text[open_index + 1 : close])
        out.append(text[pos : m.start()])
        out.append(remove_addrspacecast_exprs(_strip_type(source)))
        pos = close + 1


def _canonical_intrinsic(name: str) -> str:
    return re.sub(r"\.p\d+(?=\.|$)", ".p0", name)


def _hoist_shared(line: str, refs: dict[str, str], hoisted: list[str], counter: list[int]) -> str:
    """Turn constant expressions over shared globals in `line` into entry-block instructions."""

    def uses_shared(text: str) -> bool:
        return any(m.group(0) in refs for m in _GLOBAL_REF.finditer(text))

    def replace_refs(text: str) -> str:
        return _GLOBAL_REF.sub(lambda m: refs.get(m.group(0), m.group(0)), text)

    while True:
        for m in _CONSTEXPR.finditer(line):
            open_index = m.end() - 1
            close = match_paren(line, open_index)
            inner = line[open_index + 1 : close]
            if not uses_shared(inner):
                continue
            nested = _CONSTEXPR.finditer(line, open_index + 1, close)
            if any(uses_shared(line[n.start() : match_paren(line, n.end() - 1)]) for n in nested):
                continue  # hoist the innermost first
            counter[0] += 1
            name = f"%__mneme_ce{counter[0]}"
            op = m.group(1)
            hoisted.append(f"  {name} = {op} {replace_refs(inner)}")
            line = line[: m.start()] + name + line[close + 1 :]
            break
        else:
            return replace_refs(line)


@attrs.define
class _Function:
    header: int  # index of the define line
    end: int  # index of the closing brace
    entry: int  # index where entry-block instructions may be inserted


def _functions(lines: list[str]) -> list[_Function]:
    found = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("define ") and lines[i].rstrip().endswith("{"):
            start = i
            j = i + 1
            while j < len(lines) and lines[j] != "}":
                j += 1
            entry = start + 1
            while entry < j and (not lines[entry].strip() or lines[entry].lstrip().startswith(";")):
                entry += 1
            if entry < j and re.match(r"^" + _NAME + r":", lines[entry]):
                entry += 1
            found.append(_Function(start, j, entry))
            i = j
        i += 1
    return found


def kernel_params(module, kernel_name: str, target_data) -> tuple[Param, ...]:
    """The kernel's parameters, at the offsets of CUDA's parameter buffer (NVPTX data layout)."""
    fn = module.get_function(kernel_name)
    params = []
    offset = 0
    for index, arg in enumerate(fn.arguments):
        attrs_text = [a.decode() if isinstance(a, bytes) else str(a) for a in arg.attributes]
        byval = next((a[len("byval(") : -1] for a in attrs_text if a.startswith("byval(")), None)
        byref = next((a[len("byref(") : -1] for a in attrs_text if a.startswith("byref(")), None)
        align_attr = next((int(a.split()[1]) for a in attrs_text if a.startswith("align ")), None)
        if byref is not None:  # HIP passes aggregates as a pointer into the kernarg segment
            ty = _named_struct(module, byref) if byref.startswith("%") else None
            if ty is None:
                raise UnsupportedError(
                    f"not supported on the host backend: parameter {index} of kernel {kernel_name!r} is passed "
                    f"byref as a literal type {byref}"
                )
            size = target_data.get_abi_size(ty)
            align = align_attr or target_data.get_abi_alignment(ty)
            offset = (offset + align - 1) // align * align
            params.append(Param(index, "ptr", offset, size, None, True))
            offset += size
            continue
        if byval is not None:
            if not byval.startswith("%"):
                raise UnsupportedError(
                    f"not supported on the host backend: parameter {index} of kernel {kernel_name!r} is passed "
                    f"byval as a literal type {byval}"
                )
            ty = _named_struct(module, byval)
            size = target_data.get_abi_size(ty)
            align = align_attr or target_data.get_abi_alignment(ty)
            type_text = "ptr"
        else:
            ty = arg.type
            type_text = _ADDRSPACE.sub("", str(ty))  # one address space on the host: AMDGPU's ptr addrspace(1) too
            size = target_data.get_abi_size(ty)
            align = target_data.get_abi_alignment(ty)
        offset = (offset + align - 1) // align * align
        params.append(Param(index, type_text, offset, size, byval))
        offset += size
    return tuple(params)


def _named_struct(module, ref: str):
    """The struct type an IR reference names: `%name` or, for names like C++'s `a::b`, `%"name"`."""
    name = ref[1:]
    if len(name) > 1 and name[0] == name[-1] == '"':
        name = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name[1:-1])
    return module.get_struct_type(name)


def unpack_args(params: tuple[Param, ...]) -> tuple[list[str], list[str]]:
    """IR lines that read each parameter from CUDA's packed buffer `%args`, and the call's arguments."""
    lines, call_args = [], []
    for p in params:
        lines.append(f"  %p{p.index} = getelementptr i8, ptr %args, i64 {p.offset}")
        if p.byval is not None:
            call_args.append(f"ptr byval({p.byval}) %p{p.index}")
        elif p.byref:
            call_args.append(f"ptr %p{p.index}")
        else:
            lines.append(f"  %a{p.index} = load {p.type}, ptr %p{p.index}, align 1")
            call_args.append(f"{p.type} %a{p.index}")
    return lines, call_args


def _trampoline(kernel_name: str, params: tuple[Param, ...]) -> str:
    body, call_args = unpack_args(params)
    lines = [f"define void @{ENTRY}(ptr %args) {{", *body]
    lines.append(f"  call void {symbol_ref(kernel_name)}({', '.join(call_args)})")
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def _global_alignment(gv_text: str) -> int:
    m = re.search(r", align (\d+)", gv_text)
    return int(m.group(1)) if m else 1


def retarget(module, kernel_name: str, host_triple: str, host_data_layout: str) -> HostModule:
    """Rewrite a parsed NVPTX module (llvmlite ModuleRef) into host IR text; see the module docstring."""
    try:
        module.get_function(kernel_name)
    except NameError as exc:
        raise IRError(f"kernel {kernel_name!r} is not defined in the module; check the kernel name") from exc
    target_data = llvm.create_target_data(module.data_layout)
    params = kernel_params(module, kernel_name, target_data)
    amdgpu = retarget_amdgpu.is_amdgpu(module.triple)

    # Shared and device globals, from the parsed module.
    shared: list[SharedVar] = []
    device_globals: list[tuple[str, int]] = []
    dynamic: list[str] = []
    offset = 0
    for gv in module.global_variables:
        gv_text = str(gv)
        space = re.search(r"addrspace\((\d+)\)", str(gv.type))
        space = int(space.group(1)) if space else 0
        if space == 3:
            size = target_data.get_abi_size(gv.global_value_type)
            if gv.is_declaration or size == 0:
                dynamic.append(gv.name)
                continue
            align = max(_global_alignment(gv_text), 1)
            offset = (offset + align - 1) // align * align
            shared.append(SharedVar(gv.name, offset, size, False))
            offset += size
        elif gv.name.startswith("llvm.") or gv.name.startswith(".str") or gv.is_declaration:
            continue
        elif amdgpu and not retarget_amdgpu.is_program_state(gv.name):
            continue
        elif space in (1, 4) or (space == 0 and not gv.name.startswith("__mneme")):
            if " constant " in gv_text.split("=", 1)[1] and " externally_initialized " not in gv_text:
                continue  # a literal table the program cannot write
            device_globals.append((gv.name, target_data.get_abi_size(gv.global_value_type)))
    static_shared = offset
    dynamic_offset = (static_shared + DYNAMIC_SHARED_ALIGN - 1) // DYNAMIC_SHARED_ALIGN * DYNAMIC_SHARED_ALIGN
    shared += [SharedVar(name, dynamic_offset, 0, True) for name in dynamic]

    text = str(module)
    wave = retarget_amdgpu.wave_size(text) if amdgpu else 32
    if "\nmodule asm " in text or text.startswith("module asm "):
        raise UnsupportedError("not supported on the host backend: module-level inline assembly (`module asm`)")
    text = remove_addrspacecast_exprs(text)
    lines = text.split("\n")

    # Declarations, to know intrinsic signatures.
    declared: dict[str, str] = {}
    for fn in module.functions:
        if fn.is_declaration:
            declared[fn.name] = str(fn.global_value_type)

    shared_refs = {symbol_ref(v.name): f"%__mneme_sh{i}" for i, v in enumerate(shared)}
    unsupported: set[str] = set()
    asm_impls: dict[str, tuple[str, str]] = {}  # asm text -> (function name, definition)
    out: list[str] = []
    functions = {f.header: f for f in _functions(lines)}
    counter = [0]
    i = 0
    while i < len(lines):
        if i in functions:
            fn = functions[i]
            body = lines[fn.header + 1 : fn.end]
            hoisted: list[str] = []
            new_body = []
            for line in body:
                line = _rewrite_asm(line, asm_impls, unsupported)
                if shared_refs and any(m.group(0) in shared_refs for m in _GLOBAL_REF.finditer(line)):
                    line = _hoist_shared(line, shared_refs, hoisted, counter)
                new_body.append(line)
            if hoisted or any(ref in "\n".join(new_body) for ref in shared_refs.values()):
                base = [
                    "  %__mneme_ctx0 = call ptr @__mneme_ctx()",
                    "  %__mneme_shp = getelementptr i8, ptr %__mneme_ctx0, i64 64",
                    "  %__mneme_shbase = load ptr, ptr %__mneme_shp, align 8, !invariant.load !{}",
                ]
                for var, local in zip(shared, shared_refs.values()):
                    base.append(f"  {local} = getelementptr inbounds i8, ptr %__mneme_shbase, i64 {var.offset}")
                insert_at = fn.entry - fn.header - 1
                new_body[insert_at:insert_at] = base + hoisted
            out.append(_rewrite_header(lines[i]))
            out += new_body
            out.append("}")
            i = fn.end + 1
            continue
        line = lines[i]
        if line.startswith("target datalayout = "):
            line = f'target datalayout = "{host_data_layout}"'
        elif line.startswith("target triple = "):
            line = f'target triple = "{host_triple}"'
        elif line.startswith("declare "):
            line = _rewrite_header(line)
        elif line.startswith("attributes #"):
            line = _strip_group(line)
        out.append(line)
        i += 1
    text = "\n".join(out)

    # NVVM intrinsics: rename to host implementations and drop their declarations.
    renames: dict[str, str] = {}
    defined: set[str] = set()
    definitions: list[str] = []
    for name, fn_type in declared.items():
        if not _is_used(text, name):
            continue
        if name.startswith("llvm.nvvm.") or name == "__nvvm_reflect":
            intrinsic = "llvm.nvvm.reflect" if name == "__nvvm_reflect" else name
            new_name = "__mneme." + intrinsic[len("llvm.") :]
            impl = intrinsics.implement(intrinsic, _ADDRSPACE.sub("", fn_type), new_name)
            if impl is None:
                unsupported.add(name)
                continue
            renames[name] = new_name
            defined.add(new_name)
            definitions.append(impl)
        elif name.startswith("llvm.amdgcn."):
            new_name = "__mneme." + name[len("llvm.") :]
            impl = retarget_amdgpu.implement(name, _ADDRSPACE.sub("", fn_type), new_name, wave)
            if impl is None:
                unsupported.add(name)
                continue
            renames[name] = new_name
            defined.add(new_name)
            definitions.append(impl)
        elif name == "vprintf":  # CUDA's printf, not the C library's
            renames[name] = "__mneme_vprintf"
    if amdgpu:
        text, register_reads = retarget_amdgpu.read_registers(text, unsupported)
        definitions += register_reads
    if not unsupported:
        sync_functions = intrinsics.SYNC_FUNCTIONS + intrinsics_amdgpu.SYNC_FUNCTIONS
        implementations = "\n".join(definitions + [d for _, d in asm_impls.values()])  # asm blocks may shuffle
        grid = any(f"@{f}(" in implementations for f in intrinsics.GRID_FUNCTIONS)
        fibers = grid or any(f"@{f}(" in implementations for f in sync_functions)
        block_loop = runs = False
        if not fibers:  # AMDGPU's work-item and work-group ids as NVVM's thread and block indices
            # blocks one at a time: shared memory is a block's own; atomics in an intrinsic's or an asm block's
            # implementation make the order of threads visible
            serial = bool(shared) or bool(block_loops.ORDERED.search(implementations))
            text, block_loop, runs = block_loops.thread_indices_as_parameters(text, kernel_name, serial)
    if unsupported:
        raise UnsupportedError(
            "not supported on the host backend: "
            + ", ".join(sorted(unsupported))
            + f" (used by kernel {kernel_name!r}); run this kernel on a GPU backend"
        )
    if renames:
        pattern = re.compile(
            "|".join(re.escape(symbol_ref(n)) + r"(?=\()" for n in sorted(renames, key=len, reverse=True))
        )
        text = pattern.sub(lambda m: "@" + renames[m.group(0)[1:].strip('"')], text)
        text = "\n".join(
            line
            for line in text.split("\n")
            if not (line.startswith("declare ") and any(f"@{new}(" in line for new in defined))
        )
    # Address spaces: merge into one.
    if amdgpu:
        text = retarget_amdgpu.merge_alloca_spaces(text)
        text = retarget_amdgpu.constant_loads_invariant(text)
    text = _ADDRSPACE.sub("", text)
    text = re.sub(r"= addrspacecast ", "= bitcast ", text)
    text = _INTRINSIC_NAME.sub(lambda m: _canonical_intrinsic(m.group(0)), text)
    text = _dedupe_declarations(text)
    text = _writable_globals(text, [n for n, _ in device_globals])

    runtime_decls = {**intrinsics.RUNTIME_DECLS, **(intrinsics_amdgpu.RUNTIME_DECLS if amdgpu else {})}
    support = [d for name, d in runtime_decls.items() if not re.search(rf"^declare .*@{name}\(", text, re.MULTILINE)]
    support += [d for _, d in asm_impls.values()]
    support += definitions
    runs = block_loop and runs
    flags = (FLAG_FIBERS if fibers else 0) | (FLAG_BLOCK_LOOP if block_loop else 0) | (FLAG_GRID if grid else 0)
    flags |= FLAG_BLOCK_RUNS if runs else 0
    if block_loop:
        free_md = max((int(m) for m in re.findall(r"!(\d+)\b", text + "\n".join(support))), default=0) + 1
        rows_as_one = block_loops.calls_nothing(text)
        guard = row_ranges.find_guard(text, kernel_name) if block_loops.guard_split() else None
        if guard is not None:
            support += [guard.clone, guard.span]
        support.append(block_loops.entry(kernel_name, unpack_args(params), runs, free_md, rows_as_one, guard))
    else:
        support.append(_trampoline(kernel_name, params))
    param_bytes = max((p.offset + p.size for p in params), default=0)
    if amdgpu:
        support.append(retarget_amdgpu.wave_global(wave))
    support.append(f"@{INFO} = constant [4 x i64] [i64 {static_shared}, i64 {flags}, i64 {param_bytes}, i64 0]")
    # Device globals by name: their addresses, sizes, and names (NUL-separated).
    entries = ", ".join(f"{{ ptr, i64 }} {{ ptr {symbol_ref(n)}, i64 {size} }}" for n, size in device_globals)
    support.append(f"@{GLOBAL_TABLE} = constant [{len(device_globals)} x {{ ptr, i64 }}] [{entries}]")
    names = "".join(n.replace("\\", "\\5C").replace('"', "\\22") + "\\00" for n, _ in device_globals)
    names += "\\00"  # an empty name ends the table
    length = sum(len(n.encode()) + 1 for n, _ in device_globals) + 1
    support.append(f'@{GLOBAL_NAMES} = constant [{length} x i8] c"{names}"')
    text = text + "\n" + "\n\n".join(support) + "\n"
    return HostModule(
        text, kernel_name, params, tuple(shared), static_shared, tuple(n for n, _ in device_globals), flags
    )


def _writable_globals(text: str, names: list[str]) -> str:
    """Device globals the replay writes by name (`write_global`) as `global`, not `constant`.

    An externally initialized `constant` (CUDA `extern "C" __device__ const`) would land in
    read-only memory, and restoring its recorded value would fault; the kernel cannot write it either way.
    """
    for name in names:
        text = re.sub(
            r"^(" + re.escape(symbol_ref(name)) + r" = (?:[\w()]+ )*?)constant ",
            r"\1global ",
            text,
            count=1,
            flags=re.MULTILINE,
        )
    return text


def _is_used(text: str, name: str) -> bool:
    """Whether `text` calls or takes the address of function `name` outside its declaration."""
    ref = re.compile(re.escape(symbol_ref(name)) + r"(?![-a-zA-Z$._0-9])")
    return any(ref.search(line) for line in text.split("\n") if not line.startswith("declare "))


def _rewrite_header(line: str) -> str:
    line = re.sub(r"\bptx_(kernel|device) ", "", line)
    return retarget_amdgpu.strip_kernel_cc(line)


def _rewrite_asm(line: str, impls: dict[str, tuple[str, str]], unsupported: set[str]) -> str:
    m = _ASM_CALL.search(line)
    if not m:
        return line
    asm = m.group(1)
    body = intrinsics.inline_asm(asm)
    call = re.match(r"^(\s*(?:%\S+\s*=\s*)?(?:tail\s+|notail\s+|musttail\s+)?call\s+)(.*)$", line)
    if body is None and call:  # one PTX instruction it can read (conversions, packing, 16-bit float math)
        body = inline_ptx.body(asm, *_asm_types(line, m, call.group(1)))
        if body is None:  # a block of several instructions over its own registers (CUB's warp reductions)
            body = ptx_blocks.body(asm, *_asm_types(line, m, call.group(1)))
    comment = body is None and retarget_amdgpu.is_comment_asm(asm)
    if body is None and not comment:
        unsupported.add(f"inline assembly {asm!r}")
        return line
    if not call:
        unsupported.add(f"inline assembly {asm!r} outside a call")
        return line
    ret_type, arg_types = _asm_types(line, m, call.group(1))
    args_open = m.end()
    key = f"{asm}\0{ret_type}\0{','.join(arg_types)}"  # one body per asm text and call type
    if comment:  # an optimization barrier of ROCm's device libraries: passes its operand through
        body = retarget_amdgpu.comment_asm_body(ret_type, arg_types)
        if body is None:
            unsupported.add(f"inline assembly {asm!r} of type {ret_type} ({', '.join(arg_types)})")
            return line
    if key not in impls:
        name = f"__mneme.asm.{len(impls)}"
        sig = intrinsics.Signature(ret_type, arg_types)
        impls[key] = (name, sig.header(name) + "\n" + "\n".join("  " + b for b in body) + "\n}")
    name = impls[key][0]
    return line[: m.start()] + "@" + name + line[args_open:]


def _asm_types(line: str, m: re.Match, prefix: str) -> tuple[str, list[str]]:
    """(return type, argument types) of the inline asm call `m` found in `line`."""
    ret_type = line[len(prefix) : m.start()].strip()
    ret_type = re.sub(r"^(?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc|\s)+", "", ret_type)
    ret_type = re.sub(r"^(?:noundef|zeroext|signext|inreg)\s+", "", ret_type).strip()
    args_close = match_paren(line, m.end())
    return ret_type, [_arg_type(a) for a in intrinsics.split_top_level(line[m.end() + 1 : args_close])]


def _arg_type(arg: str) -> str:
    tokens = arg.split()
    return tokens[0] if tokens else arg


def _dedupe_declarations(text: str) -> str:
    seen: set[str] = set()
    out = []
    for line in text.split("\n"):
        if line.startswith("declare "):
            m = _GLOBAL_REF.search(line)
            if m:
                if m.group(0) in seen:
                    continue
                seen.add(m.group(0))
        out.append(line)
    return "\n".join(out)
