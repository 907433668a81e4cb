"""Block-step kernels that read a buffer at the global 1D index prefetch a later block's slice of it.

A block-step kernel (`block_steps`: a reduction's shared-memory tree, a scan) runs each block's passes between its
barriers on one CPU, and its first pass reads the block's inputs, ``x[blockIdx.x * blockDim.x + threadIdx.x]``: a
slice of ``blockDim.x`` elements, the next block's right after it. The passes that follow compute on the block's
shared memory, so the CPU's own prefetchers see short bursts of reads a few hundred nanoseconds apart and do not
run ahead: where the data come from memory rather than the caches, every block waits for its slice (a sum over
2^22 floats, 256 a block: 287 ns a block on one CPU against 141 ns where the data were in the L3).

So the entry (`block_steps._entry`) prefetches, before a block's passes, the slice of each such buffer that the
block `AHEAD` blocks later will read: a worker runs its claim's blocks in order (the runtime's `claim_blocks`), so
by the time it gets there the lines are in its caches. A prefetch never faults, past a buffer's end included, and
changes no value: the kernel's results stay what they were. Only loads whose address is a pointer parameter
indexed by exactly that expression (sign- or zero-extended) are taken; any other index is left to the CPU.
"""

from __future__ import annotations

import re

from mneme.plugins.backends.host import accesses
from mneme.plugins.backends.host.irtext import function_span

AHEAD = 2  # blocks: far enough that a block's passes cover the lines' trip from memory
MAX_BYTES = 4096  # a slice's bytes at most, each prefetched once per block (64 lines)
LINE = 64
_BYTES = {"i8": 1, "i16": 2, "half": 2, "bfloat": 2, "i32": 4, "float": 4, "i64": 8, "double": 8}
_VALUE = r"(%[-\w.$]+)"
_SREG = re.compile(
    _VALUE + r" = (?:tail )?call [^@\n]*@(?:llvm|__mneme)\.nvvm\.read\.ptx\.sreg\.(ctaid|ntid|tid)\.x\(\)"
)
_MUL = re.compile(_VALUE + r" = mul (?:nuw )?(?:nsw )?i32 " + _VALUE + ", " + _VALUE + "$")
_ADD = re.compile(_VALUE + r" = (?:add (?:nuw )?(?:nsw )?|or disjoint )i32 " + _VALUE + ", " + _VALUE + "$")
_EXT = re.compile(_VALUE + r" = [sz]ext (?:nneg )?i32 " + _VALUE + " to i64$")
_GEP = re.compile(_VALUE + r" = getelementptr (?:inbounds )?(?:nuw )?(\w+), ptr " + _VALUE + ", i64 " + _VALUE + "$")
_LOAD = re.compile(r"= load (?:volatile )?[^,]+, ptr " + _VALUE + r"\b")


def indexed_reads(lines: list[str], kernel_name: str) -> list[tuple[int, int]]:
    """(parameter position, element bytes) of each pointer parameter the kernel loads from at
    ``blockIdx.x * blockDim.x + threadIdx.x``, in the kernel's retargeted IR (the indices read through the
    ``llvm.nvvm.read.ptx.sreg`` intrinsics or the runtime's ``__mneme.nvvm.read.ptx.sreg`` functions); each parameter
    once."""
    span = function_span(lines, kernel_name)
    if span is None:
        return []
    header = lines[span[0]]
    params = accesses.split_operands(header[header.index("(", header.index("@")) + 1 : header.rindex(")")])
    position = {p.split()[-1]: k for k, p in enumerate(params) if p.split() and p.split()[0] == "ptr"}
    body = [line.strip() for line in lines[span[0] + 1 : span[1]]]
    regs: dict[str, set[str]] = {"ctaid": set(), "ntid": set(), "tid": set()}
    for line in body:
        m = _SREG.match(line)
        if m:
            regs[m.group(2)].add(m.group(1))
    products = {
        m.group(1)
        for m in map(_MUL.match, body)
        if m and {m.group(2), m.group(3)} & regs["ctaid"] and {m.group(2), m.group(3)} & regs["ntid"]
    }
    index = {
        m.group(1)
        for m in map(_ADD.match, body)
        if m and {m.group(2), m.group(3)} & products and {m.group(2), m.group(3)} & regs["tid"]
    }
    wide = {m.group(1) for m in map(_EXT.match, body) if m and m.group(2) in index}
    addresses = {
        m.group(1): (position[m.group(3)], _BYTES[m.group(2)])
        for m in map(_GEP.match, body)
        if m and m.group(4) in wide and m.group(3) in position and m.group(2) in _BYTES
    }
    found: dict[int, int] = {}
    for line in body:
        m = _LOAD.search(line)
        if m and m.group(1) in addresses:
            k, size = addresses[m.group(1)]
            found[k] = max(found.get(k, 0), size)
    return sorted(found.items())


def entry_lines(reads: list[tuple[int, int]], done: str) -> list[str]:
    """The entry's prefetch loop (after its first block's lines, which read ``%bx``, ``%ntx`` and each parameter as
    ``%a<position>``), ending in a branch to `done`; its last block is ``%nb.done``. Empty where `reads` is."""
    if not reads:
        return []
    widest = max(size for _, size in reads)
    lines = [
        "  %nb.bx = zext i32 %bx to i64",
        f"  %nb.b = add i64 %nb.bx, {AHEAD}",
        "  %nb.nt = zext i32 %ntx to i64",
        "  %nb.e = mul i64 %nb.b, %nb.nt",
        f"  %nb.w = mul i64 %nb.nt, {widest}",
        f"  %nb.len = call i64 @llvm.umin.i64(i64 %nb.w, i64 {MAX_BYTES})",
    ]
    for k, size in reads:
        lines += [f"  %nb.o{k} = mul i64 %nb.e, {size}", f"  %nb.s{k} = getelementptr i8, ptr %a{k}, i64 %nb.o{k}"]
    lines += ["  br label %nb.loop", "nb.loop:", "  %nb.i = phi i64 [ 0, %entry ], [ %nb.i1, %nb.loop ]"]
    for k, _ in reads:
        lines += [
            f"  %nb.p{k} = getelementptr i8, ptr %nb.s{k}, i64 %nb.i",
            f"  call void @llvm.prefetch.p0(ptr %nb.p{k}, i32 0, i32 3, i32 1)",
        ]
    return [
        *lines,
        f"  %nb.i1 = add i64 %nb.i, {LINE}",
        "  %nb.c = icmp ult i64 %nb.i1, %nb.len",
        "  br i1 %nb.c, label %nb.loop, label %nb.done",
        "nb.done:",
        f"  br label {done}",
    ]
