"""What retargeting AMDGPU (HIP) kernel IR to the host adds to the NVPTX path of `retarget`.

HIP kernel IR differs from CUDA's in a few places the retargeting must know:

* the ``amdgpu_kernel`` calling convention, and allocas in address space 5 (``alloca T, align
  N, addrspace(5)``) that become ordinary allocas;
* the wave width: 64 lanes on gfx9 (gfx90a, gfx942), 32 on gfx10 and later unless the code is
  built with ``+wavefrontsize64``; the runtime meets that many lanes at a cross-lane operation;
* ``llvm.amdgcn.*`` intrinsics, implemented in `intrinsics_amdgpu`;
* symbols the HIP toolchain adds that are no program state (``__hip_cuid_*``, the empty
  ``__HIP_Coordinates`` objects behind ``threadIdx``...), which are no device globals to snapshot.

The kernel's parameters are read from the packed buffer that ``hipModuleLaunchKernel`` takes
(``HIP_LAUNCH_PARAM_BUFFER_POINTER``): each at its natural alignment, as in the kernarg segment;
aggregates passed ``byref`` are read in place. See docs/design/host-amdgpu.md.
"""

from __future__ import annotations

import re

from mneme.plugins.backends.host import intrinsics_amdgpu, intrinsics_amdgpu_lanes

#: The global the retargeted module defines with its wave width (read by the loader).
WAVE_GLOBAL = "__mneme_wave"
_ALLOCA_SPACE = re.compile(r", addrspace\(\d+\)")
_NOT_STATE = re.compile(r"__hip_cuid_|_ZN\d+__HIP_Coordinates|__oclc_|__hip_device_heap")
SYNC = re.compile(r"@llvm\.amdgcn\.(s\.barrier|wave\.barrier|" + intrinsics_amdgpu_lanes.CROSS_LANE.pattern + ")")


def is_amdgpu(triple: str) -> bool:
    return (triple or "").startswith("amdgcn")


#: The attribute that keeps a function's wave width once its target-cpu and target-features are gone.
WAVE_ATTRIBUTE = "mneme-wave"


def wave_size(text: str) -> int:
    """Lanes per wave of the code in `text` (its ``target-cpu`` and ``target-features``, or the
    ``mneme-wave`` attribute `retarget.strip_target_attributes` leaves in their place)."""
    kept = re.search(r'"mneme-wave"="(\d+)"', text)
    if kept:
        return int(kept.group(1))
    cpu = re.search(r'"target-cpu"="(gfx(\d+)[\w]*)"', text)
    if "+wavefrontsize64" in text:
        return 64
    if "+wavefrontsize32" in text:
        return 32
    if cpu and len(cpu.group(2)) >= 4 and int(cpu.group(2)[:-2]) >= 10:  # gfx1010 and later default to wave32
        return 32
    return 64


def strip_kernel_cc(line: str) -> str:
    return re.sub(r"\bamdgpu_(kernel|gfx|cs|ps|vs) ", "", line)


def merge_alloca_spaces(text: str) -> str:
    """``alloca T, align N, addrspace(5)`` -> ``alloca T, align N`` (the host has one address space)."""
    return _ALLOCA_SPACE.sub("", text)


_CONSTANT_LOAD = re.compile(
    r"^(\s*%[-\w.$\"]+ = load (?!atomic|volatile)[^\n]*\bptr addrspace\(4\) [^\n]*?)$", re.MULTILINE
)


def constant_loads_invariant(text: str) -> str:
    """Loads from the constant address space (4: kernel arguments, the implicit arguments and dispatch packet that
    hold the block's extent, constant globals) marked ``!invariant.load`` before the host merges the address spaces:
    nothing a kernel stores can change them, as on the GPU, so LLVM may hoist them out of the block loop's loop over
    threads (where a load that might alias the kernel's stores kept it scalar: a HIP saxpy over 2^20 floats, 2 workers,
    0.23 -> 0.046 ms)."""
    if not _CONSTANT_LOAD.search(text):
        return text
    node = max((int(m) for m in re.findall(r"!(\d+)\b", text)), default=-1) + 1
    text = _CONSTANT_LOAD.sub(
        lambda m: m.group(1) if "!invariant.load" in m.group(1) else f"{m.group(1)}, !invariant.load !{node}", text
    )
    return text + f"\n!{node} = !{{}}\n"


def is_program_state(name: str) -> bool:
    """Whether a global of HIP IR is a device variable of the program (not the toolchain's)."""
    return not _NOT_STATE.match(name)


def synchronizes(body: str) -> bool:
    """Whether IR text calls an AMDGPU barrier or cross-lane operation."""
    return bool(SYNC.search(body))


_READ_REGISTER = re.compile(r"@llvm\.read_register\.(i32|i64)\(metadata (![\w.]+)\)")
EXEC = "__mneme.amdgcn.exec"


def read_registers(text: str, unsupported: set[str]) -> tuple[str, list[str]]:
    """Replace reads of the ``exec`` mask (``__builtin_amdgcn_read_exec``) by a ballot of the lanes
    present; other register reads are refused by name. Returns the text and definitions to add."""
    names = dict(re.findall(r'^(![\w.]+) = !\{!"([\w.]+)"\}$', text, re.MULTILINE))
    used: set[str] = set()

    def replace(m: re.Match) -> str:
        register = names.get(m.group(2), m.group(2))
        if register not in ("exec", "exec_lo", "exec_hi"):
            unsupported.add(f"llvm.read_register of {register!r}")
            return m.group(0)
        name = f"{EXEC}.{register}.{m.group(1)}"
        used.add(name)
        return f"@{name}()"

    text = _READ_REGISTER.sub(replace, text)
    definitions = []
    for name in sorted(used):
        register, ty = name.split(".")[-2:]
        lines = ["%b = call i64 @__mneme_wave_ballot(i32 1)"]
        if register == "exec_hi":
            lines.append("%b = lshr i64 %b0, 32")
            lines[0] = lines[0].replace("%b =", "%b0 =")
        lines += ["ret i64 %b"] if ty == "i64" else ["%r = trunc i64 %b to i32", "ret i32 %r"]
        definitions.append(
            f"define internal {ty} @{name}() alwaysinline nounwind {{\n"
            + "\n".join("  " + line for line in lines)
            + "\n}"
        )
    return text, definitions


def is_comment_asm(asm: str) -> bool:
    """Inline assembly that is only an assembler comment (``; ockl ballot hoisting hack $0``)."""
    return asm.lstrip().startswith(";") and "\\0A" not in asm


def comment_asm_body(ret_type: str, arg_types: list[str]) -> list[str] | None:
    """A comment asm statement ties its output to its input (``=v,0``): the host returns the input."""
    if ret_type == "void":
        return ["ret void"]
    if arg_types and arg_types[0] == ret_type:
        return [f"ret {ret_type} %a0"]
    return None


def implement(intrinsic: str, fn_type: str, new_name: str, wave: int) -> str | None:
    return intrinsics_amdgpu.implement(intrinsic, fn_type, new_name, wave)


def wave_global(wave: int) -> str:
    return f"@{WAVE_GLOBAL} = constant i32 {wave}"
