"""Specialization: recorded argument values and launch dimensions become constants (or facts).

* `specialize_args`: the bytes of selected arguments (from the snapshot's argument buffer),
  read by the IR parameter types, replace the uses of those parameters in the kernel.
* `specialize_dims`: block and grid sizes become constants. NVPTX: the `ntid`/`nctaid`
  special-register reads; AMDGPU: the work-group size and block-count loads from the
  implicit kernel arguments (code object v5) or the dispatch packet (v4).
* `specialize_dims_assume`: the same as facts the optimizer may use: exact ranges on the
  size reads, and `[0, block)` / `[0, grid)` ranges on the thread and block indices.

Rewrites are textual (llvmlite cannot replace uses); the result is re-parsed and verified.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Sequence

from mneme.core import ir
from mneme.core.errors import UsageError
from mneme.core.pipeline import Transform, TransformContext, module_target
from mneme.core.types import dim3

log = logging.getLogger(__name__)

_AXES = "xyz"

# -- arguments -----------------------------------------------------------------------------------


def constant_text(type_text: str, data: bytes) -> str:
    """LLVM IR text of a constant of type `type_text` holding little-endian `data`."""
    if re.fullmatch(r"i\d+", type_text):
        bits = int(type_text[1:])
        if bits == 1:
            return "true" if data[0] & 1 else "false"
        value = int.from_bytes(data[: (bits + 7) // 8], "little", signed=False) & ((1 << bits) - 1)
        if value >> (bits - 1):
            value -= 1 << bits
        return str(value)
    if type_text == "float":
        (value,) = struct.unpack("<f", data[:4])
        return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"
    if type_text == "double":
        return f"0x{int.from_bytes(data[:8], 'little'):016X}"
    if type_text == "half":
        return f"0xH{int.from_bytes(data[:2], 'little'):04X}"
    if type_text == "bfloat":
        return f"0xR{int.from_bytes(data[:2], 'little'):04X}"
    if type_text.startswith("ptr"):
        value = int.from_bytes(data[:8], "little")
        return "null" if value == 0 else f"inttoptr (i64 {value} to {type_text})"
    raise UsageError(f"cannot specialize a parameter of IR type {type_text}")


def _arg_tokens(fn) -> list[str]:
    tokens, unnamed = [], 0
    for arg in fn.arguments:
        if arg.name:
            name = arg.name
            tokens.append("%" + (name if re.fullmatch(r"[-\w.$]+", name) else '"' + name + '"'))
        else:
            tokens.append(f"%{unnamed}")
            unnamed += 1
    return tokens


def specialize_args(module, kernel_name: str, args: bytes, indexes: Sequence[int], arg_layout: Sequence | None = None):
    """Return (module, {index: constant text}) with the selected arguments folded into the kernel.

    `args` is the packed argument buffer; `arg_layout` (the recording's ArgInfo list, with
    `offset` and `size`) overrides the IR's own layout. An index out of range raises UsageError.
    """
    fn = ir.find_kernel(module, kernel_name)
    params = ir.kernel_params(module, kernel_name)
    for index in indexes:
        if not isinstance(index, int) or not 0 <= index < len(params):
            raise UsageError(
                f"specialization index {index!r} is out of range: kernel {kernel_name!r} has {len(params)} parameters "
                f"(indexes 0..{len(params) - 1})"
            )
    if arg_layout is not None and len(arg_layout) != len(params):
        raise UsageError(
            f"the recording describes {len(arg_layout)} arguments, but kernel {kernel_name!r} "
            f"has {len(params)} parameters in its IR; is it the right IR?"
        )
    tokens = _arg_tokens(fn)
    text = str(module)
    _, body, end = ir.function_span(text, kernel_name)
    replacements: dict[int, str] = {}
    entry_stores: list[str] = []
    replaced_structs: dict[int, str] = {}
    for index in sorted(set(indexes)):
        param = params[index]
        offset, size = (
            (arg_layout[index].offset, arg_layout[index].size) if arg_layout is not None else (param.offset, param.size)
        )
        chunk = bytes(args[offset : offset + size])
        if len(chunk) < size:
            raise UsageError(
                f"the argument buffer ({len(args)} bytes) ends before argument {index} of kernel "
                f"{kernel_name!r} (bytes {offset}..{offset + size})"
            )
        arg_type = str(list(fn.arguments)[index].type)
        if param.kind == "struct":
            space = re.search(r"addrspace\((\d+)\)", arg_type)
            if not arg_type.startswith("ptr") or (space and space.group(1) == "4"):
                log.warning(
                    "not specializing argument %d of %s: a by-value aggregate passed as %s",
                    index,
                    kernel_name,
                    arg_type,
                )
                continue
            # write the recorded bytes into the by-value copy on entry: loads fold to constants,
            # and the store dies with the copy; correct even if the kernel writes the struct
            data = "".join(f"\\{b:02X}" for b in chunk)
            entry_stores.append(f'  store [{size} x i8] c"{data}", {arg_type} {tokens[index]}, align {param.align}')
            replaced_structs[index] = chunk.hex()
            continue
        replacements[index] = constant_text(arg_type, chunk)
    if not replacements and not entry_stores:
        return module, {}
    pattern = (
        re.compile("(?:" + "|".join(re.escape(tokens[i]) for i in replacements) + r")(?![-\w.$])")
        if replacements
        else None
    )
    lookup = {tokens[i]: value for i, value in replacements.items()}
    lines = text[body:end].split("\n")
    if replacements:
        lines = [ir.sub_outside_strings(pattern, lambda m: lookup[m.group(0)], line) for line in lines]
    if entry_stores:
        at = 1 if re.match(r"^[-\w.$\"]+:", lines[0]) else 0  # after a named entry block's label
        lines[at:at] = entry_stores
    text = text[:body] + "\n".join(lines) + text[end:]
    return ir.reparse(text, f"kernel {kernel_name!r} with specialized arguments"), {**replacements, **replaced_structs}


class SpecializeArgs(Transform):
    name = "specialize_args"
    order = 40
    description = "fold recorded argument values into the kernel"

    def enabled(self, ctx: TransformContext) -> bool:
        return ctx.config.specialize

    def apply(self, module, variant_hash, ctx):
        if ctx.args is None:
            raise UsageError(
                f"the configuration specializes arguments of kernel {ctx.kernel_name!r}, "
                "but no recorded argument bytes were given"
            )
        if ctx.specialize_indexes is not None:
            indexes = list(ctx.specialize_indexes)
        elif ctx.arg_layout is not None:
            indexes = [i for i, a in enumerate(ctx.arg_layout) if getattr(a, "specializable", True)]
        else:
            indexes = [p.index for p in ir.kernel_params(module, ctx.kernel_name) if p.kind != "struct"]
        new, replaced = specialize_args(module, ctx.kernel_name, ctx.args, indexes, ctx.arg_layout)
        return new, ir.combine_hash(variant_hash, self.name, sorted(replaced.items()))


# -- launch dimensions ---------------------------------------------------------------------------

_CALL = r"^(\s*)(%[-\w.$\"]+) = (?:tail |notail |musttail )?call [^@\n]*@"
_NV_SREG = re.compile(_CALL + r"llvm\.nvvm\.read\.ptx\.sreg\.(ntid|nctaid|tid|ctaid)\.([xyz])\(\)[^\n]*$", re.MULTILINE)
_AMD_ID = re.compile(_CALL + r"llvm\.amdgcn\.(workitem|workgroup)\.id\.([xyz])\(\)[^\n]*$", re.MULTILINE)
_AMD_BASE = re.compile(_CALL + r"llvm\.amdgcn\.(implicitarg|dispatch)\.ptr\(\)", re.MULTILINE)
_GEP = r"^\s*(%[-\w.$\"]+) = getelementptr (?:inbounds |nuw |nusw )*i8, ptr addrspace\(4\) {base}, i64 (\d+)"
_LOAD = r"^(\s*)(%[-\w.$\"]+) = load (i16|i32), ptr addrspace\(4\) {ptr}(?:, align \d+)?[^\n]*$"


def _amdgpu_dim_loads(text: str, grid: dim3, block: dim3) -> list[tuple[str, int]]:
    """(load line regex, value) for every read of a launch size through the kernel's ABI pointers."""
    reads = []
    for match in _AMD_BASE.finditer(text):
        base, kind = match.group(2), match.group(3)
        if kind == "implicitarg":  # code object v5: hidden_block_count_{x,y,z}, hidden_group_size_{x,y,z}
            fields = {0: grid.x, 4: grid.y, 8: grid.z, 12: block.x, 14: block.y, 16: block.z}
        else:  # v4 dispatch packet: workgroup_size_{x,y,z} (u16), grid_size_{x,y,z} (u32, in work-items)
            fields = {
                4: block.x,
                6: block.y,
                8: block.z,
                12: grid.x * block.x,
                16: grid.y * block.y,
                20: grid.z * block.z,
            }
        pointers = {0: base}
        for gep in re.finditer(_GEP.format(base=re.escape(base)), text, re.MULTILINE):
            pointers[int(gep.group(2))] = gep.group(1)
        for offset, ptr in pointers.items():
            if offset in fields:
                reads.append((_LOAD.format(ptr=re.escape(ptr) + r"(?![-\w.$])"), fields[offset]))
    return reads


def _canonical_amdgpu(module) -> None:
    """Inline and fold the device library's launch-size helpers (ockl) into plain constant-offset loads.

    Front-end IR reads sizes through generic `__ockl_get_local_size(dim)` code that picks the
    ABI at run time; after this the reads are `load i16/i32` at fixed offsets of the kernel's
    ABI pointers, which the rewrites below recognise.
    """
    import llvmlite.binding as llvm

    text = str(module)
    if not re.search(r"getelementptr (?:inbounds )?(?:nuw )?i(16|32|64), ptr addrspace\(4\)|__ockl_get_", text):
        return
    arch = re.search(r'"target-cpu"="(gfx[0-9a-f]+)"', text)
    # the module's own target (its triple), so no backend needs to be installed to specialize it
    tm = ir.target_machine(module.triple, arch.group(1) if arch else "gfx90a", "", 2, reloc="pic")
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(1))
    pb.getModulePassManager().run(module, pb)


def _rewrite_functions(text: str, rewrite) -> str:
    """Apply `rewrite(function_text)` to every function definition of module text."""
    out, last = [], 0
    for _name, start, _body, end in ir.defined_function_spans(text):
        out.append(text[last:start])
        out.append(rewrite(text[start:end]))
        last = end
    out.append(text[last:])
    return "".join(out)


def specialize_dims(module, kernel_name: str, grid: dim3, block: dim3):
    """Return a new module in which every launch-size read is the constant of this launch."""
    ir.find_kernel(module, kernel_name)
    grid, block = dim3.of(grid), dim3.of(block)
    sizes = {"ntid": block, "nctaid": grid}

    def nvptx(fn_text: str) -> str:
        def repl(m):
            if m.group(3) not in sizes:
                return m.group(0)
            value = getattr(sizes[m.group(3)], m.group(4))
            return f"{m.group(1)}{m.group(2)} = add i32 {value}, 0"

        return _NV_SREG.sub(repl, fn_text)

    def amdgpu(fn_text: str) -> str:
        for pattern, value in _amdgpu_dim_loads(fn_text, grid, block):
            fn_text = re.sub(
                pattern,
                lambda m, v=value: f"{m.group(1)}{m.group(2)} = add {m.group(3)} {v}, 0",
                fn_text,
                flags=re.MULTILINE,
            )
        return fn_text

    if module_target(module) == "amdgpu":
        _canonical_amdgpu(module)
    text = _rewrite_functions(str(module), amdgpu if module_target(module) == "amdgpu" else nvptx)
    return ir.reparse(text, f"kernel {kernel_name!r} with constant launch dimensions")


def _set_range(line: str, low: int, high: int) -> str:
    line = re.sub(r"range\(i32 -?\d+, -?\d+\) ", "", line)
    line = re.sub(r", !range ![0-9]+", "", line)
    return re.sub(
        r"(call [^@]*?)(i32 @)", lambda m: f"{m.group(1)}range(i32 {low}, {high}) {m.group(2)}", line, count=1
    )


def specialize_dims_assume(module, kernel_name: str, grid: dim3, block: dim3):
    """Return a new module that states this launch's sizes and index ranges as optimizer facts."""
    ir.find_kernel(module, kernel_name)
    grid, block = dim3.of(grid), dim3.of(block)
    nv_ranges = {
        "ntid": lambda a: (getattr(block, a), getattr(block, a) + 1),
        "nctaid": lambda a: (getattr(grid, a), getattr(grid, a) + 1),
        "tid": lambda a: (0, getattr(block, a)),
        "ctaid": lambda a: (0, getattr(grid, a)),
    }
    amd_ranges = {"workitem": lambda a: (0, getattr(block, a)), "workgroup": lambda a: (0, getattr(grid, a))}
    counter = [0]

    def nvptx(fn_text: str) -> str:
        return _NV_SREG.sub(lambda m: _set_range(m.group(0), *nv_ranges[m.group(3)](m.group(4))), fn_text)

    def amdgpu(fn_text: str) -> str:
        fn_text = _AMD_ID.sub(lambda m: _set_range(m.group(0), *amd_ranges[m.group(3)](m.group(4))), fn_text)
        for pattern, value in _amdgpu_dim_loads(fn_text, grid, block):

            def assume(m, v=value):
                counter[0] += 1
                flag = f"%mneme.dim{counter[0]}"
                return (
                    f"{m.group(0)}\n{m.group(1)}{flag} = icmp eq {m.group(3)} {m.group(2)}, {v}\n"
                    f"{m.group(1)}call void @llvm.assume(i1 {flag})"
                )

            fn_text = re.sub(pattern, assume, fn_text, flags=re.MULTILINE)
        return fn_text

    if module_target(module) == "amdgpu":
        _canonical_amdgpu(module)
    text = _rewrite_functions(str(module), amdgpu if module_target(module) == "amdgpu" else nvptx)
    if counter[0]:
        text = ir.ensure_declaration(text, "llvm.assume", "declare void @llvm.assume(i1 noundef)")
    return ir.reparse(text, f"kernel {kernel_name!r} with launch-dimension assumptions")


class SpecializeDims(Transform):
    name = "specialize_dims"
    order = 50
    description = "grid and block sizes become constants"

    def enabled(self, ctx: TransformContext) -> bool:
        return ctx.config.specialize_dims

    def apply(self, module, variant_hash, ctx):
        cfg = ctx.config
        new = specialize_dims(module, ctx.kernel_name, cfg.grid, cfg.block)
        return new, ir.combine_hash(variant_hash, self.name, cfg.grid.as_tuple(), cfg.block.as_tuple())


class SpecializeDimsAssume(Transform):
    name = "specialize_dims_assume"
    order = 55
    description = "grid and block sizes and index ranges as facts for the optimizer"

    def enabled(self, ctx: TransformContext) -> bool:
        return ctx.config.specialize_dims_assume and not ctx.config.specialize_dims

    def apply(self, module, variant_hash, ctx):
        cfg = ctx.config
        new = specialize_dims_assume(module, ctx.kernel_name, cfg.grid, cfg.block)
        return new, ir.combine_hash(variant_hash, self.name, cfg.grid.as_tuple(), cfg.block.as_tuple())
