"""Where a capture's buffers live and what its argument bytes hold.

Real programs pass more than one array per pointer: a buffer may carry padding before and
after its elements (real memory, part of the allocation: a kernel that reads just outside
its arrays, harmless on a GPU, runs on the host too), its first element may need an
alignment, a pointer argument may point into another buffer at an offset, and a struct may
be passed by value with typed fields (pointers among them). This module places the buffers
and packs the argument bytes; `mneme.capture` runs the launch (docs/capture.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from mneme.core import limits
from mneme.core.errors import UsageError

#: Where captured buffers live; the same base on every backend (host included).
DEFAULT_VA_ADDR = 0x153940000000
#: Buffers start on this boundary (the CUDA VMM granularity), so every backend can map them.
ALIGNMENT = 2 << 20
#: The alignment of a buffer's first element unless one is given: cudaMalloc's guarantee.
DEFAULT_ALIGN = 256
#: Bytes of a pointer field of a struct (the 64-bit GPU targets).
POINTER_BYTES = 8
#: How far outside a buffer a faulting address is still reported as next to it.
PAGE_REACH = 1 << 16
#: The element types a buffer, field or global may have: numbers and booleans.
NUMERIC_KINDS = "biuf"


class DescriptionError(UsageError):
    """The arguments, buffers or globals of a capture do not fit the kernel; `field` names the part at fault."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}")


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _alignment(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ALIGNMENT or value & (value - 1):
        raise ValueError(f"an alignment is a power of two from 1 to {ALIGNMENT} bytes, got {value!r}")
    return value


def _count(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"padding is a number of elements >= 0, got {value!r}")
    return int(value)


def _array(value: Any) -> np.ndarray:
    array = np.ascontiguousarray(value)
    if array.dtype.kind not in NUMERIC_KINDS:
        raise ValueError(f"a buffer holds numbers, not {array.dtype}")
    return array


@attrs.frozen(eq=False)
class Buffer:
    """A device buffer: `array`, with `before`/`after` elements of padding filled with `fill`.

    The padding is part of the allocation: it is mapped, snapshotted, restored on replay and
    verified like the elements; the pointer a kernel receives is the first element's address,
    aligned to `align` bytes. `output` marks a buffer the launch should change (checked after it).
    """

    array: np.ndarray = attrs.field(converter=_array)
    before: int = attrs.field(default=0, converter=_count)
    after: int = attrs.field(default=0, converter=_count)
    fill: Any = 0
    align: int = attrs.field(default=DEFAULT_ALIGN, validator=lambda _s, _a, v: _alignment(v))
    output: bool = False

    @property
    def itemsize(self) -> int:
        return self.array.dtype.itemsize

    @property
    def padding_bytes(self) -> tuple[int, int]:
        return self.before * self.itemsize, self.after * self.itemsize

    @property
    def size(self) -> int:
        before, after = self.padding_bytes
        return max(1, before + self.array.nbytes + after)

    def data(self) -> bytes:
        """The region's bytes: padding, elements, padding."""
        limits.check("buffer_bytes", self.size, "a buffer with its padding: its bytes")
        if not (self.before or self.after):
            return self.array.tobytes() or b"\0"
        try:
            pad = np.array(self.fill).astype(self.array.dtype, casting="same_kind")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"padding value {self.fill!r} is not a {self.array.dtype}: {exc}") from None
        if pad.dtype.kind in "iu" and pad != self.fill:
            raise ValueError(f"padding value {self.fill!r} does not fit in {self.array.dtype}")
        return b"".join((np.full(self.before, pad).tobytes(), self.array.tobytes(), np.full(self.after, pad).tobytes()))


@attrs.frozen
class Pointer:
    """A pointer into another buffer: `target` (an argument's index or a buffer's name), `offset` elements in.

    The offset counts elements of the target's dtype (so the pointer stays aligned to them) and may
    reach into the padding: from ``-before`` to ``len + after`` (one past the end included).
    """

    target: int | str
    offset: int = 0
    output: bool = False


@attrs.frozen
class Field:
    """One field of a by-value struct: a NumPy scalar or array, or a `Pointer`; `align` raises its alignment."""

    name: str
    value: Any
    align: int | None = None


def _fields(value: Any) -> tuple[Field, ...]:
    if isinstance(value, Mapping):
        return tuple(Field(str(k), v) for k, v in value.items())
    return tuple(f if isinstance(f, Field) else Field(*f) for f in value)


@attrs.frozen(eq=False)
class Struct:
    """A struct passed by value, laid out as C lays out its fields (each at its alignment, the size rounded up)."""

    fields: tuple[Field, ...] = attrs.field(converter=_fields)


@attrs.define
class Region:
    """A placed buffer: its name, the argument it is (if any), where its padding and first element lie."""

    name: str
    buffer: Buffer
    index: int | None
    addr: int
    data_addr: int

    @property
    def size(self) -> int:
        return self.buffer.size


@attrs.define
class Layout:
    """The placed buffers, the packed argument bytes, the address range they need and which pointer goes where."""

    regions: list[Region]
    arg_bytes: bytes
    va_size: int
    pointers: dict[int, Region]  # argument index -> the region a pointer argument points into
    outputs: set[str]  # names of regions marked as outputs

    def fault_hint(self, message: str) -> str:
        """What a faulting address in `message` is next to, and the padding that would hold it ("" if none)."""
        found = re.search(r"address (0x[0-9a-fA-F]+)", message)
        if not found:
            return ""
        addr = int(found.group(1), 16)
        for region in self.regions:
            buf, end = region.buffer, region.addr + region.size
            where = (
                f"{region.addr - addr} bytes before"
                if region.addr - PAGE_REACH <= addr < region.addr
                else f"{addr - end} bytes after the end of"
                if end <= addr < end + PAGE_REACH
                else None
            )
            if where:
                what = f"argument {region.index}" if region.index is not None else "a named buffer"
                return (
                    f"; {found.group(1)} is {where} buffer {region.name!r} ({what}): if the kernel reads just "
                    "outside its arrays, give the buffer padding (padding: {before: N, after: N} in elements)"
                )
        return ""


def place(
    params: Sequence[Any],
    args: Sequence[Any],
    names: Sequence[str],
    kernel: str,
    va_addr: int,
    *,
    buffers: Mapping[str, Any] | None = None,
    struct_offsets=None,
    pack_scalar=None,
) -> Layout:
    """Place the buffers of `args` and `buffers` from `va_addr` and pack the argument bytes.

    `struct_offsets(index)` gives the IR's field offsets of a by-value struct parameter (or None);
    `pack_scalar(value, param, index, kernel)` packs everything else. Errors are `DescriptionError`s
    whose field is ``args[i]...`` or ``buffers.NAME``.
    """
    # Every buffer by name: the arguments' own first, then the named ones only pointers reach.
    pending: list[tuple[str, Buffer, int | None]] = []
    by_index: dict[int, str] = {}
    for index, (param, value) in enumerate(zip(params, args)):
        if isinstance(value, np.ndarray):
            value = Buffer(value)
        if isinstance(value, Buffer):
            if param.kind != "pointer":
                raise DescriptionError(
                    f"args[{index}]",
                    f"argument {index} ({names[index]}) of kernel {kernel!r} is a "
                    f"{param.type}, not a pointer; pass a scalar, not an array",
                )
            pending.append((names[index], value, index))
            by_index[index] = names[index]
    for name, value in (buffers or {}).items():
        if name in {n for n, _, _ in pending}:
            raise DescriptionError(
                f"buffers.{name}", f"the name {name!r} is also an argument's; give the buffer another name"
            )
        if not isinstance(value, Buffer):
            try:
                value = Buffer(value)
            except ValueError as exc:
                raise DescriptionError(f"buffers.{name}", str(exc)) from None
        pending.append((str(name), value, None))
    seen: set[str] = set()
    regions: dict[str, Region] = {}
    cursor = va_addr
    total = 0
    for name, buf, index in pending:
        if name in seen:
            raise DescriptionError(
                f"args[{index}]" if index is not None else f"buffers.{name}",
                f"two buffers are named {name!r}; name each buffer once",
            )
        seen.add(name)
        total += buf.size
        limits.check("capture_bytes", total, f"{kernel!r}: the bytes of all buffers up to {name!r}")
        before, _ = buf.padding_bytes
        addr = cursor + align_up(before, buf.align) - before  # the padding exactly, the first element aligned
        regions[name] = Region(name, buf, index, addr, addr + before)
        cursor = align_up(addr + buf.size, ALIGNMENT)

    outputs = {name for name, buf, _ in pending if buf.output}
    pointers: dict[int, Region] = {}

    def resolve(pointer: Pointer, field: str) -> tuple[int, Region]:
        target = pointer.target
        if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
            name = by_index.get(int(target))
            if name is None:
                raise DescriptionError(field, f"points into argument {target}, which is not a buffer")
        elif isinstance(target, str):
            name = target
        else:
            raise DescriptionError(field, f"a pointer's target is an argument index or a buffer name, not {target!r}")
        region = regions.get(name)
        if region is None:
            raise DescriptionError(
                field, f"points into {name!r}, which is no buffer; buffers: {', '.join(regions) or 'none'}"
            )
        offset = pointer.offset
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise DescriptionError(field, f"an offset is a whole number of elements, got {offset!r}")
        buf = region.buffer
        if not -buf.before <= offset <= buf.array.size + buf.after:
            raise DescriptionError(
                field,
                f"offset {offset} lies outside buffer {name!r}: it has {buf.array.size} "
                f"elements, {buf.before} of padding before and {buf.after} after, so an "
                f"offset is from {-buf.before} to {buf.array.size + buf.after}",
            )
        if pointer.output:
            outputs.add(name)
        return region.data_addr + int(offset) * buf.itemsize, region

    arg_bytes = bytearray(max((p.offset + p.size for p in params), default=0))
    for index, (param, value) in enumerate(zip(params, args)):
        field = f"args[{index}]"
        if index in by_index:
            region = regions[by_index[index]]
            data = region.data_addr.to_bytes(param.size, "little")
            pointers[index] = region
        elif isinstance(value, Pointer):
            if param.kind != "pointer":
                raise DescriptionError(
                    field, f"argument {index} ({names[index]}) of kernel {kernel!r} is a {param.type}, not a pointer"
                )
            addr, pointers[index] = resolve(value, field)
            data = addr.to_bytes(param.size, "little")
        elif isinstance(value, Struct):
            offsets = struct_offsets(index) if struct_offsets else None
            data = pack_struct(value, param, field, names[index], kernel, offsets, lambda p, f: resolve(p, f)[0])
        else:
            try:
                data = pack_scalar(value, param, index, kernel)
            except DescriptionError:
                raise
            except UsageError as exc:
                raise DescriptionError(field, str(exc)) from None
        arg_bytes[param.offset : param.offset + param.size] = data
    va_size = max(cursor - va_addr, ALIGNMENT)
    return Layout(list(regions.values()), bytes(arg_bytes), va_size, pointers, outputs)


def pack_struct(
    struct: Struct,
    param: Any,
    field: str,
    name: str,
    kernel: str,
    ir_offsets: Sequence[tuple[int, int, str]] | None,
    resolve,
) -> bytes:
    """The bytes of a by-value struct, its size checked against the kernel's parameter (and, where the IR's
    fields match the given ones one to one, each field's offset, size and kind)."""
    if param.kind != "struct":
        raise DescriptionError(
            field,
            f"argument {param.index} ({name}) of kernel {kernel!r} is a {param.type}, not a struct passed by value",
        )
    placed: list[tuple[int, bytes]] = []
    offset = 0
    biggest = 1
    for k, item in enumerate(struct.fields):
        where = f"{field}.struct[{k}]"
        if isinstance(item.value, Pointer):
            size = align = POINTER_BYTES
            data = resolve(item.value, where).to_bytes(POINTER_BYTES, "little")
        else:
            value = item.value
            if not isinstance(value, (np.ndarray, np.generic)) or value.dtype.kind not in NUMERIC_KINDS:
                raise DescriptionError(
                    where,
                    f"field {item.name!r} needs a typed value (a NumPy scalar or array such "
                    f"as np.int32(5)) or a Pointer, got {value!r}"[:300],
                )
            data = np.ascontiguousarray(value).tobytes()
            size, align = len(data), value.dtype.itemsize
        if item.align is not None:
            try:
                align = max(align, _alignment(item.align))
            except ValueError as exc:
                raise DescriptionError(f"{where}.align", str(exc)) from None
        offset = align_up(offset, align)
        placed.append((offset, data))
        offset += size
        biggest = max(biggest, align)
    total = align_up(offset, biggest)
    layout = ", ".join(f"{f.name}@{o}" for f, (o, _) in zip(struct.fields, placed))
    if total != param.size:
        raise DescriptionError(
            f"{field}.struct",
            f"the fields take {total} bytes ({layout}), but argument "
            f"{param.index} ({name}: {param.type}) of kernel {kernel!r} is {param.size} bytes; "
            "give every field of the struct with its type, in order",
        )
    if ir_offsets is not None and len(ir_offsets) == len(placed):
        for k, ((at, data), (want, size, kind)) in enumerate(zip(placed, ir_offsets)):
            item = struct.fields[k]
            ours = "p" if isinstance(item.value, Pointer) else ("f" if item.value.dtype.kind == "f" else "i")
            if at != want or len(data) != size or (kind in "fip" and kind != ours):
                raise DescriptionError(
                    f"{field}.struct[{k}]",
                    f"field {item.name!r} is {_KIND_WORDS[ours]} of "
                    f"{len(data)} bytes at byte {at}, but field {k} of the kernel's {param.type} "
                    f"is {_KIND_WORDS.get(kind, 'a value')} of {size} bytes at byte {want}; "
                    "give each field with the type the kernel declares",
                )
    out = bytearray(total)
    for at, data in placed:
        out[at : at + len(data)] = data
    return bytes(out)


_KIND_WORDS = {"f": "a float", "i": "an integer", "p": "a pointer", "a": "an aggregate"}


def _ir_kind(ty: Any) -> str:
    text = str(ty)
    if text in ("half", "bfloat", "float", "double"):
        return "f"
    if text == "ptr" or text.startswith("ptr "):
        return "p"
    return "i" if re.fullmatch(r"i\d+", text) else "a"


def struct_offsets(module: Any, kernel: str, index: int) -> list[tuple[int, int, str]] | None:
    """(offset, size, kind) of each top-level field of a by-value struct parameter, from the IR (None if unknown).

    The kind is "f" (floating point), "i" (integer), "p" (pointer) or "a" (an array or nested aggregate).
    """
    from mneme.core import ir as irmod

    arg = list(irmod.find_kernel(module, kernel).arguments)[index]
    ty = irmod.byval_type(module, arg.attributes) if arg.type.is_pointer else None
    if ty is None and arg.type.is_struct:
        ty = arg.type
    if ty is None or not ty.is_struct:
        return None
    td = irmod.target_data(module.data_layout)
    return [(td.get_element_offset(ty, k), td.get_abi_size(elem), _ir_kind(elem)) for k, elem in enumerate(ty.elements)]


def written_pointers(module: Any, kernel: str) -> set[int] | None:
    """Indices of the kernel's pointer parameters it may write through (LLVM's inferred attributes), or None.

    Runs SROA and function-attribute inference on a copy of the module with a target machine for its
    own triple; a parameter marked `readonly`/`readnone` is never written.
    """
    import llvmlite.binding as llvm

    from mneme.core import ir as irmod

    try:
        irmod.initialize()
        copy = irmod.clone(module)
        machine = llvm.Target.from_triple(copy.triple).create_target_machine()
        manager = llvm.create_new_module_pass_manager()
        manager.add_sroa_pass()
        manager.add_post_order_function_attributes_pass()
        manager.run(copy, llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(0)))
        fn = irmod.find_kernel(copy, kernel)
    except Exception:  # an unknown target or analysis failure: no answer, not a failed capture
        return None
    written = set()
    for index, arg in enumerate(fn.arguments):
        attrs_ = {a.decode() if isinstance(a, bytes) else str(a) for a in arg.attributes}
        if arg.type.is_pointer and not any(re.match(r"(readonly|readnone|byval)\b", a) for a in attrs_):
            written.add(index)
    return written
