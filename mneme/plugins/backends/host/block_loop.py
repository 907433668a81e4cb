"""The block loop: one call of ``__mneme_entry`` runs every thread of a block, or a run of blocks along x.

A kernel without barriers or warp operations whose thread index only the kernel itself reads
gets the thread index (and its block's x index) as parameters (`thread_indices_as_parameters`);
`entry` then inlines it into a loop over the threads, which LLVM vectorizes across threads.
With `runs` (retarget.FLAG_BLOCK_RUNS, the runtime's MODE_BLOCK_RUNS) one call runs
``mn_ctx.run`` blocks along x, a row of threads of each in turn (docs/design/internals.md).
"""

from __future__ import annotations

import dataclasses
import re

from mneme.core import envvars, ir
from mneme.plugins.backends.host import intrinsics
from mneme.plugins.backends.host.irtext import COND_BR, DEF, match_paren, symbol_ref

ENTRY = "__mneme_entry"
#: the entry's form, in the build key: 2 runs the rows of a run of short power-of-two rows as one loop, 3 runs the
#: threads below a kernel's guard through a copy with the guard taken (`find_guard`)
VERSION = "3"
#: 0: long rows run every thread through the kernel's own guard (masked vector steps), as in form 2
GUARD_ENV = "MNEME_HOST_GUARD_SPLIT"
CTX_NTID = intrinsics.CTX_OFFSETS["ntid"]
CTX_CTAID = intrinsics.CTX_OFFSETS["ctaid"]
CTX_RUN = 76  # mn_ctx.run (runtime.c): how many blocks along x the call runs, from ctaid.x on
CTX_RUN_ROWS = 80  # mn_ctx.run_rows: set where the call runs the run's rows as one loop (a failure names the run)
SHORT_ROW = 64  # threads along x below which a row runs as masked vector steps (`entry`)

# Special registers that differ between the threads of a block; read through the context otherwise.
_THREAD_SREGS = re.compile(
    r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid\.[xyz]|laneid|warpid|lanemask\.\w+)\(|@llvm\.nvvm\.activemask\("
)
_THREAD_SREG_CALL = re.compile(
    r"^(\s*%[-\w.$\"]+) = (?:tail |notail )?call [^@]*@llvm\.nvvm\.read\.ptx\.sreg\.(tid\.[xyz]|laneid|warpid|ctaid\.x)\(\).*$"
)
_CTAID_X = re.compile(r"@llvm\.nvvm\.read\.ptx\.sreg\.ctaid\.x\(")
# what makes the order of a block's threads observable, where races are not: atomics, volatile accesses, printf
ORDERED = re.compile(
    r"\b(?:atomicrmw|cmpxchg|fence)\b|\b(?:load|store) (?:atomic|volatile)\b|@llvm\.nvvm\.atomic|@__nv_atom|@vprintf\("
)

TID_PARAMS = ("%__mneme_tid_x", "%__mneme_tid_y", "%__mneme_tid_z", "%__mneme_linear")
CTAID_PARAM = "%__mneme_ctaid_x"


def block_extent_loads() -> list[str]:
    """IR lines of an entry that load the launch context (``%ctx``) and the block's extent from it
    (``%ntx``, ``%nty``, ``%ntz``)."""
    return [
        "  %ctx = call ptr @__mneme_ctx()",
        f"  %ntxp = getelementptr i8, ptr %ctx, i64 {CTX_NTID}",
        f"  %ntyp = getelementptr i8, ptr %ctx, i64 {CTX_NTID + 4}",
        f"  %ntzp = getelementptr i8, ptr %ctx, i64 {CTX_NTID + 8}",
        "  %ntx = load i32, ptr %ntxp, align 4",
        "  %nty = load i32, ptr %ntyp, align 4",
        "  %ntz = load i32, ptr %ntzp, align 4",
    ]


def _definition(lines: list[str], kernel_name: str) -> tuple[int, int] | None:
    """The indices of the kernel's `define` line and of its closing brace, or None where it is not defined."""
    header = re.compile(r"^define .*" + re.escape(symbol_ref(kernel_name)) + r"\(")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    return None if start is None else (start, lines.index("}", start))


def thread_indices_as_parameters(text: str, kernel_name: str, serial: bool = False) -> tuple[str, bool, bool]:
    """Pass the thread index (and the block's x index) to the kernel as parameters, when only the kernel reads it.

    Then `entry` can run a whole block in one call (the kernel inlined into a loop over
    the threads, every block-invariant value hoisted out of it). Returns (text, done, runs):
    `runs` when the call may run several blocks along x: nothing else reads the block's x index,
    the module has no atomic or volatile access, fence or printf (`ORDERED`) and the caller did
    not ask for blocks one at a time (`serial`: shared memory, a block's own; atomics in code
    added later), so running the rows of consecutive blocks one after another is a thread order
    of the GPU whose results are those of block after block.
    """
    lines = text.split("\n")
    span = _definition(lines, kernel_name)
    if span is None:
        return text, False, False
    start, end = span
    for i, line in enumerate(lines):
        if (i < start or i > end) and not line.startswith("declare ") and _THREAD_SREGS.search(line):
            return text, False, False  # another function reads the thread index: keep one call per thread
    if "@llvm.nvvm.activemask(" in "\n".join(lines[start:end]) or "sreg.lanemask" in "\n".join(lines[start:end]):
        return text, False, False
    if re.search(r"\b(noinline|optnone)\b", lines[start]):
        return text, False, False
    runs = (
        not serial
        and not any(
            (i < start or i > end) and not line.startswith("declare ") and _CTAID_X.search(line)
            for i, line in enumerate(lines)
        )
        and not any(ORDERED.search(line) for line in lines if not line.startswith("declare "))
    )
    for i in range(start + 1, end):
        m = _THREAD_SREG_CALL.match(lines[i])
        if not m:
            continue
        target, which = m.groups()
        if which.startswith("tid."):
            value = TID_PARAMS["xyz".index(which[-1])]
            lines[i] = f"{target} = or i32 {value}, 0"
        elif which == "laneid":
            lines[i] = f"{target} = and i32 %__mneme_linear, 31"
        elif which == "ctaid.x":
            lines[i] = f"{target} = or i32 {CTAID_PARAM}, 0"
        else:
            lines[i] = f"{target} = lshr i32 %__mneme_linear, 5"
    if any(_THREAD_SREGS.search(line) for line in lines[start + 1 : end]):
        return text, False, False  # a read of a form not rewritten above
    runs = runs and not any(_CTAID_X.search(line) for line in lines[start + 1 : end])
    line = lines[start]
    open_index = line.index(symbol_ref(kernel_name) + "(") + len(symbol_ref(kernel_name))
    close = match_paren(line, open_index)
    extra = ", ".join(f"i32 {p}" for p in (*TID_PARAMS, CTAID_PARAM))
    sep = ", " if line[open_index + 1 : close].strip() else ""
    lines[start] = line[:close] + sep + extra + line[close:]
    return "\n".join(lines), True, runs


def guard_split() -> bool:
    """Whether long rows run the threads below a kernel's guard through its copy (`GUARD_ENV`)."""
    return (envvars.get(GUARD_ENV) or "1") not in ("0", "off", "no", "false")


def key() -> str:
    """The entry's form in the build key."""
    return VERSION if guard_split() else f"{VERSION}-unsplit"


_CALL = re.compile(r"\bcall\b[^@\n]*@(?!llvm\.)([-\w.$\"]+)\(")


def calls_nothing(text: str) -> bool:
    """Whether module `text` calls no function but LLVM's intrinsics: no assertion, trap or printf whose message
    would name a block (then a run's rows may run as one loop, whose failures name the run: `entry`)."""
    return all(
        m.group(1) == "__mneme_ctx" or m.group(1).startswith("__mneme.nvvm.read.ptx.sreg.")  # the context's reads
        for m in _CALL.finditer(text)
    )


def entry(
    kernel_name: str,
    unpacked: tuple[list[str], list[str]],
    runs: bool = False,
    loop_md: int | None = None,
    rows_as_one: bool = False,
    guard: Guard | None = None,
) -> str:
    """``__mneme_entry(args)`` that runs every thread of the block: x fastest, then y, then z.

    With `runs`, it runs ``mn_ctx.run`` blocks along x from the context's ctaid.x on, a row of
    threads of each in turn: for z, for y, for each block, for x. A 16x16 tile launch then walks
    memory row after row as a loop over the array would, instead of 16 rows of 64 bytes per block
    (the two orders in plain C: 2.2x at 2^20 floats, docs/design/investigations/host-grid-stride-2026-12-06.md).
    The entry stores each block's x index in the context, so that a failure names its block.
    `unpacked`: `retarget.unpack_args` of the kernel's parameters (the lines reading them, the call's arguments).

    `loop_md`: a free metadata number; rows shorter than SHORT_ROW threads then run a copy of the
    loop over x that asks LLVM to fold its remainder into masked vector steps instead of vector
    and scalar epilogues: a 16-thread row (a 16x16 tile) is one masked step (tile saxpy at 2^20:
    1.3x). Long rows keep the unmasked loop, which a masked one slowed (the stencil: 1.5x).

    `rows_as_one` (with `runs` and `loop_md`; for kernels that call nothing, `calls_nothing`): rows of a
    power-of-two length shorter than SHORT_ROW run the run's row, every block's threads in the same order, as
    one loop over m = b * ntx + x: x is m less (m >> log2 ntx) * ntx, so the kernel's ``bx * ntx + x`` folds
    back to ``bx0 * ntx + m`` and a 16x16 tile's row is one contiguous vector loop (saxpy tile at 2^20, one
    worker: 0.242 -> 0.172 ms; the stencil 0.469 -> 0.227 ms). No store of each block's index in the loop
    (it would keep it scalar): the entry marks the context (``mn_ctx.run_rows``), and a fault names the run's
    blocks, ``one of blocks (a..b, y, z)``. This copy replaces the masked one (two inlined copies, not three:
    compile time): short rows of another length then run the unmasked loop.

    `guard` (`find_guard`): long rows run their threads below the kernel's bound through its copy whose guard is
    taken (bounds in 64 bits: where the index would wrap, the kernel's own comparison decides), then the rest
    through the kernel.
    """
    body, call_args = unpacked[0], list(unpacked[1])
    lines = [f"define void @{ENTRY}(ptr %args) {{", "entry:", *body]
    call_args += ["i32 %x", "i32 %y", "i32 %z", "i32 %lin", "i32 %bx"]
    lines += [
        *block_extent_loads(),
        f"  %bxp = getelementptr i8, ptr %ctx, i64 {CTX_CTAID}",
        "  %bx0 = load i32, ptr %bxp, align 4",
    ]
    if runs:
        lines += [f"  %runp = getelementptr i8, ptr %ctx, i64 {CTX_RUN}", "  %run = load i32, ptr %runp, align 4"]
    else:
        lines += ["  %run = or i32 1, 0"]
    lines += [f"  %short = icmp ult i32 %ntx, {SHORT_ROW}"]
    flat_runs = runs and loop_md is not None and rows_as_one
    masked = loop_md is not None and not flat_runs  # the copy for short rows, where no flat copy replaces it
    if flat_runs:  # short rows of a power-of-two length: the run's rows as one loop (below)
        lines += [
            "  %ntx1 = add i32 %ntx, -1",
            "  %ntxm = and i32 %ntx, %ntx1",
            "  %pow2 = icmp eq i32 %ntxm, 0",
            "  %flatrun = and i1 %short, %pow2",
            "  %sx = call i32 @llvm.cttz.i32(i32 %ntx, i1 false)",
            "  %nf = mul i32 %run, %ntx",
        ]
    lines += [
        "  br label %lz",
        "lz:",
        "  %z = phi i32 [ 0, %entry ], [ %z1, %lz.latch ]",
        "  br label %ly",
        "ly:",
        "  %y = phi i32 [ 0, %lz ], [ %y1, %ly.latch ]",
        "  %zy = mul i32 %z, %nty",
        "  %zyy = add i32 %zy, %y",
        "  %row = mul i32 %zyy, %ntx",
        "  br i1 %flatrun, label %lf.pre, label %lb" if flat_runs else "  br label %lb",
        "lb:",
        "  %b = phi i32 [ 0, %ly ], [ %b1, %lb.latch ]",
        "  %bx = add i32 %bx0, %b",
        *(["  store i32 %bx, ptr %bxp, align 4"] if runs else []),
        *(_guarded_rows(guard, call_args, "%lxs" if masked else None) if guard else []),
        *([] if guard else ["  br i1 %short, label %lxs, label %lx" if masked else "  br label %lx"]),
        "lx:",
        "  %x = phi i32 [ %xe, %lx.tail ], [ %x1, %lx ]" if guard else "  %x = phi i32 [ 0, %lb ], [ %x1, %lx ]",
        "  %lin = add i32 %row, %x",
        f"  call void {symbol_ref(kernel_name)}({', '.join(call_args)})",
        "  %x1 = add nuw i32 %x, 1",
        "  %cx = icmp ult i32 %x1, %ntx",
        "  br i1 %cx, label %lx, label %lb.latch",
    ]
    if masked:  # the same loop for short rows, its remainder folded into masked vector steps
        short_args = ", ".join(
            a.replace("%x", "%xs").replace("%lin", "%lins") if a in ("i32 %x", "i32 %lin") else a for a in call_args
        )
        lines += [
            "lxs:",
            "  %xs = phi i32 [ 0, %lb ], [ %xs1, %lxs ]",
            "  %lins = add i32 %row, %xs",
            f"  call void {symbol_ref(kernel_name)}({short_args})",
            "  %xs1 = add nuw i32 %xs, 1",
            "  %cxs = icmp ult i32 %xs1, %ntx",
            f"  br i1 %cxs, label %lxs, label %lb.latch, !llvm.loop !{loop_md}",
        ]
    if flat_runs:
        # x of the run's row as one index m: block m >> sx of the run, thread m - (m >> sx) * ntx of it, so that
        # the kernel's bx * ntx + x folds back to bx0 * ntx + m and a 16x16 tile's row is one contiguous loop
        flat_args = ", ".join(
            {"i32 %x": "i32 %xf", "i32 %lin": "i32 %linf", "i32 %bx": "i32 %bxf"}.get(a, a) for a in call_args
        )
        lines += [
            "lf.pre:",
            "  store i32 %bx0, ptr %bxp, align 4",
            f"  %rrp = getelementptr i8, ptr %ctx, i64 {CTX_RUN_ROWS}",
            "  store i32 1, ptr %rrp, align 4",
            "  br label %lf",
            "lf:",
            "  %m = phi i32 [ 0, %lf.pre ], [ %m1, %lf ]",
            "  %bo = lshr i32 %m, %sx",
            "  %bxf = add i32 %bx0, %bo",
            "  %bon = mul i32 %bo, %ntx",
            "  %xf = sub i32 %m, %bon",
            "  %linf = add i32 %row, %xf",
            f"  call void {symbol_ref(kernel_name)}({flat_args})",
            "  %m1 = add nuw i32 %m, 1",
            "  %cf = icmp ult i32 %m1, %nf",
            "  br i1 %cf, label %lf, label %ly.latch",
        ]
    lines += [
        "lb.latch:",
        "  %b1 = add nuw i32 %b, 1",
        "  %cb = icmp ult i32 %b1, %run",
        "  br i1 %cb, label %lb, label %ly.latch",
        "ly.latch:",
        "  %y1 = add nuw i32 %y, 1",
        "  %cy = icmp ult i32 %y1, %nty",
        "  br i1 %cy, label %ly, label %lz.latch",
        "lz.latch:",
        "  %z1 = add nuw i32 %z, 1",
        "  %cz = icmp ult i32 %z1, %ntz",
        "  br i1 %cz, label %lz, label %exit",
        "exit:",
        "  ret void",
        "}",
    ]
    if masked:
        lines += [
            f"!{loop_md} = distinct !{{!{loop_md}, !{loop_md + 1}}}",
            f'!{loop_md + 1} = !{{!"llvm.loop.vectorize.predicate.enable", i1 true}}',
        ]
    if flat_runs:
        lines += ["declare i32 @llvm.cttz.i32(i32, i1)"]
    return "\n".join(lines)


def _guarded_rows(guard: Guard, call_args: list[str], short_label: str | None) -> list[str]:
    """The lines from the end of block `lb` to the loop over a row's threads above the guard's bound (`lx`):
    the threads below it through the guard's copy. For a signed bound the index must also stay below 2^31, for an
    unsigned one below 2^32 (it does: n < 2^32), so that the kernel's 32-bit index is the 64-bit one here."""
    n = call_args[guard.bound].split()[-1]
    signed = guard.predicate.startswith("s")
    widen = "sext" if signed else "zext"
    lines = [
        f"  br i1 %short, label {short_label}, label %lx.pre" if short_label else "  br label %lx.pre",
        "lx.pre:",
        "  %gbx = zext i32 %bx to i64",
        "  %gntx = zext i32 %ntx to i64",
        "  %gbase = mul i64 %gbx, %gntx",
        f"  %gn = {widen} i32 {n} to i64",
        f"  %glim0 = add i64 %gn, {1 if guard.predicate.endswith('le') else 0}",
    ]
    if signed:  # the index below 2^31 too
        lines += [
            "  %gwrap = icmp slt i64 %glim0, 2147483648",
            "  %glim = select i1 %gwrap, i64 %glim0, i64 2147483648",
        ]
    lines += [
        f"  %gd = sub i64 {'%glim' if signed else '%glim0'}, %gbase",
        "  %gpos = icmp sgt i64 %gd, 0",
        "  %gd0 = select i1 %gpos, i64 %gd, i64 0",
        "  %gin = icmp slt i64 %gd0, %gntx",
        "  %gd1 = select i1 %gin, i64 %gd0, i64 %gntx",
        "  %xe = trunc i64 %gd1 to i32",
        "  %ghead = icmp ne i32 %xe, 0",
        "  br i1 %ghead, label %lxh, label %lx.tail",
        "lxh:",
        "  %xh = phi i32 [ 0, %lx.pre ], [ %xh1, %lxh ]",
        "  %linh = add i32 %row, %xh",
    ]
    args = ", ".join({"i32 %x": "i32 %xh", "i32 %lin": "i32 %linh"}.get(a, a) for a in call_args)
    lines += [
        f"  call void {symbol_ref(guard.name)}({args})",
        "  %xh1 = add nuw i32 %xh, 1",
        "  %cxh = icmp ult i32 %xh1, %xe",
        "  br i1 %cxh, label %lxh, label %lx.tail",
        "lx.tail:",
        "  %gtail = icmp ult i32 %xe, %ntx",
        "  br i1 %gtail, label %lx, label %lb.latch",
    ]
    return lines


_VALUE = r"(%[-\w.$]+|%\"[^\"]+\")"
_ICMP = re.compile(rf"^\s*{_VALUE} = icmp (slt|sle|sgt|sge|ult|ule|ugt|uge) i32 {_VALUE}, {_VALUE}\s*$")
_ADD = re.compile(rf"^\s*{_VALUE} = add (?:nuw |nsw )*i32 {_VALUE}, {_VALUE}\s*$")
_MUL = re.compile(rf"^\s*{_VALUE} = mul (?:nuw |nsw )*i32 {_VALUE}, {_VALUE}\s*$")
_OR0 = re.compile(rf"^\s*{_VALUE} = or (?:disjoint )?i32 {_VALUE}, 0\s*$")
_NTID_X = re.compile(rf"^\s*{_VALUE} = (?:tail |notail )?call [^@]*@__mneme\.nvvm\.read\.ptx\.sreg\.ntid\.x\(\)")
_LOAD = re.compile(rf"^\s*{_VALUE} = load i32, ptr {_VALUE}(?:, align \d+)?(?:, ![\w.]+ ![0-9]+)*\s*$")
# g < n read from either side and either way round: (predicate of g against n, whether the branch's true side is g's
# in-range side)
_SWAPPED = {sign + a: sign + b for sign in "su" for a, b in (("lt", "gt"), ("le", "ge"), ("gt", "lt"), ("ge", "le"))}
_NEGATED = {"sge": "slt", "sgt": "sle", "uge": "ult", "ugt": "ule"}


@dataclasses.dataclass(frozen=True)
class Guard:
    """A kernel that begins `if (blockIdx.x * blockDim.x + threadIdx.x < n)` (or <=, signed or unsigned, either way
    round): `bound` the index of its parameter n, `predicate` the comparison of the index with it (slt, sle, ult,
    ule), and `clone` the text of the kernel's copy with the branch taken as in range, named `name`."""

    bound: int
    predicate: str
    name: str
    clone: str


def _params(define_line: str, kernel_name: str) -> list[str]:
    """The value names of a define line's parameters, in order."""
    open_index = define_line.index(symbol_ref(kernel_name) + "(") + len(symbol_ref(kernel_name))
    inner = define_line[open_index + 1 : match_paren(define_line, open_index)]
    return [(re.findall(_VALUE, piece) or [""])[-1] for piece in ir.split_top_level(inner)]


def find_guard(text: str, kernel_name: str) -> Guard | None:
    """The kernel's guard on its global x index, where its first block ends in one (`Guard`); None otherwise.

    In the rows of threads below the bound the guard holds, so the entry runs them through a copy whose branch
    is taken (`entry`): LLVM then vectorizes them without masked loads and stores, which cost twice as much as
    plain ones once the data comes from beyond the L2 (a znver5, 2^22 floats: saxpy 1.19 -> 0.53 ms, one worker).
    """
    lines = text.split("\n")
    span = _definition(lines, kernel_name)
    if span is None or "!dbg" in lines[span[0]] or " comdat" in lines[span[0]]:
        return None  # a debug subprogram belongs to one function
    start, fn_end = span
    defs: dict[str, str] = {}
    at: dict[str, int] = {}  # where each value of the first block is defined
    end = start + 1  # the first block's terminator, once found
    while end < fn_end and not re.match(r"^\s+(br|ret|switch|unreachable)\b", lines[end]):
        m = DEF.match(lines[end])
        if m:
            defs[m.group(1)] = lines[end]
            at[m.group(1)] = end
        end += 1
    branch = COND_BR.match(lines[end])
    if branch is None or branch.group(1) not in defs:
        return None
    cmp = _ICMP.match(defs[branch.group(1)])
    if cmp is None:
        return None
    body = lines[start + 1 : fn_end]

    def stored_once(slot: str, before: int) -> str | None:
        """The value of the one store to `slot`, an i32 alloca of the first block that nothing else touches, where
        the store comes before line `before` (IR as clang writes it without optimizations, as `mneme-cc` records
        it)."""
        if not re.match(rf"^\s*{re.escape(slot)} = alloca i32\b", defs.get(slot, "")):
            return None
        token = re.compile(re.escape(slot) + r"(?![-\w.$])")
        uses = [line for line in body if token.search(line)]
        stores = [line for line in uses if re.match(r"^\s*store i32 ", line)]
        others = [line for line in uses if not re.match(r"^\s*(store i32 |%\S+ = load i32, ptr )", line)]
        if len(stores) != 1 or any("alloca" not in line and "@llvm.lifetime." not in line for line in others):
            return None
        found = re.match(rf"^\s*store i32 {_VALUE}, ptr {re.escape(slot)},", stores[0])
        return found.group(1) if found and stores[0] in lines[start + 1 : before] else None

    def unwrap(value: str) -> str:
        m = _OR0.match(defs.get(value, ""))
        if m:
            return unwrap(m.group(2))
        load = _LOAD.match(defs.get(value, ""))
        stored = stored_once(load.group(2), at[value]) if load else None
        return unwrap(stored) if stored else value

    def is_global_x(value: str) -> bool:
        add = _ADD.match(defs.get(unwrap(value), ""))
        if add is None:
            return False
        for mul_side, tid_side in ((add.group(2), add.group(3)), (add.group(3), add.group(2))):
            mul = _MUL.match(defs.get(unwrap(mul_side), ""))
            if mul is None or unwrap(tid_side) != TID_PARAMS[0]:
                continue
            a, b = unwrap(mul.group(2)), unwrap(mul.group(3))
            if {a, b} & {CTAID_PARAM} and any(_NTID_X.match(defs.get(v, "")) for v in (a, b) if v != CTAID_PARAM):
                return True
        return False

    params = _params(lines[start], kernel_name)
    predicate, left, right = cmp.group(2), unwrap(cmp.group(3)), unwrap(cmp.group(4))
    if is_global_x(left) and right in params:
        bound = right
    elif is_global_x(right) and left in params:
        predicate, bound = _SWAPPED[predicate], left
    else:
        return None
    taken = predicate not in _NEGATED  # g < n or g <= n: the true side is in range
    predicate = _NEGATED.get(predicate, predicate)
    if not re.search(
        r"\bi32 (?:noundef |signext |zeroext |range\([^)]*\) )*" + re.escape(bound) + r"[,)]", lines[start]
    ):
        return None  # the bound must be an i32 parameter
    name = f"{kernel_name}.__mneme_in_range"
    clone = lines[start : fn_end + 1]
    head = re.sub(
        r"^define\s+(?:(?:dso_local|internal|private|external|hidden|protected)\s+)*", "define internal ", clone[0]
    )
    clone[0] = head.replace(symbol_ref(kernel_name) + "(", symbol_ref(name) + "(", 1)
    constant = "true" if taken else "false"
    clone[end - start] = lines[end].replace(f"br i1 {branch.group(1)},", f"br i1 {constant},", 1)
    return Guard(params.index(bound), predicate, name, "\n".join(clone))
