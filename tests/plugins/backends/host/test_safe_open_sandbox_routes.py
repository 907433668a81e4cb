"""Routes an attacker tries next against the host sandbox (issue 36, tried on main): raw system calls the
filter must stop whatever libc symbol they avoid, code that would run before the filter is on, pages
writable and executable at once inherited from the launching process, and IR constructs that jump to an
address they are given without a call instruction. Kernels that skip the allowlist are host objects built
from IR (`crafted`, as in test_host_sandbox.py); the IR routes go through the host backend's compile."""

from __future__ import annotations

import ctypes
import platform
import struct
import sys

import pytest
from test_host_sandbox import (  # noqa: F401
    BASE,
    STORE_42,
    _compile,
    _good_launch_works,
    _launch,
    crafted,
    device,
)

from mneme.core.backend import DeviceBinary
from mneme.core.errors import ExperimentError, UnsupportedError

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
    reason="the sandbox's filter is tested on Linux x86-64",
)


def _asm_ready() -> None:
    from mneme.plugins.backends.host import machine

    machine.binding().initialize_native_asmparser()  # inline asm in a crafted object


def raw_syscall(nr: int, *args: str) -> str:
    """Kernel body: `syscall` instruction with number `nr` (no libc symbol named); its result to %out."""
    a = [*args, "0", "0", "0"][:3]
    return (
        "  %o = ptrtoint ptr %out to i64\n"
        '  %r = call i64 asm sideeffect "syscall", "={rax},{rax},{rdi},{rsi},{rdx},~{rcx},~{r11},~{memory}"'
        f"(i64 {nr}, i64 {a[0]}, i64 {a[1]}, i64 {a[2]})\n"
        "  %t = trunc i64 %r to i32\n  store i32 %t, ptr %out"
    )


#: name, number, arguments (%o: the address of the output buffer)
SYSCALLS = [
    ("memfd_create", 319, ("%o", "0")),
    ("execveat", 322, ("-100", "%o", "0")),
    ("process_vm_writev", 311, ("1",)),
    ("process_vm_readv", 310, ("1",)),
    ("ptrace", 101, ("16", "1")),
    ("clone", 56, ("17",)),
    ("fork", 57, ()),
    ("vfork", 58, ()),
    ("clone3", 435, ("%o", "88")),
    ("pkey_mprotect", 329, ("%o", "4096", "7")),
    ("mmap", 9, ("0", "4096", "7")),
    ("mprotect", 10, ("%o", "4096", "5")),
    ("personality", 135, ("4194304",)),
    ("rt_sigaction", 13, ("31", "0")),
    ("rt_sigprocmask", 14, ("0", "%o")),
    ("openat", 257, ("-100", "%o")),
    ("userfaultfd", 323, ()),
    ("io_uring_setup", 425, ("1", "%o")),
    ("kill", 62, ("1", "0")),
    ("write", 1, ("0", "%o", "1")),
    ("read", 0, ("1", "%o", "1")),
    ("close", 3, ("3",)),
    ("dup", 32, ("3",)),
]


@pytest.mark.parametrize("name, nr, args", SYSCALLS, ids=[s[0] for s in SYSCALLS])
def test_a_raw_system_call_from_kernel_code_fails_its_launch_naming_the_call(device, name, nr, args):  # noqa: F811
    _asm_ready()
    kernel = device.load(crafted(raw_syscall(nr, *args)))
    with pytest.raises(ExperimentError, match=rf"forbidden system call {nr} \({name}\)"):
        _launch(device, kernel)
    _good_launch_works(device)


@pytest.mark.parametrize(
    "body",
    [
        raw_syscall(0x40000000 + 2, "0"),  # x32 ABI open
        '  %r = call i32 asm sideeffect "int $$0x80", "={eax},{eax},~{memory}"(i32 20)\n  store i32 %r, ptr %out',
    ],  # the 32-bit ABI
    ids=["x32", "int80"],
)
def test_a_system_call_of_another_abi_kills_the_sandbox_and_the_next_launch_works(device, body):  # noqa: F811
    _asm_ready()
    kernel = device.load(crafted(body))
    with pytest.raises(ExperimentError, match=r"sandbox process died \(signal SIGSYS\)"):
        _launch(device, kernel)
    _good_launch_works(device)


def test_pages_writable_and_executable_in_the_launching_process_are_not_executable_in_the_sandbox(device):  # noqa: F811
    # a ctypes callback is a libffi closure: on Linux an anonymous page mapped read-write-execute
    callback = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)
    with open("/proc/self/maps") as maps:
        ours = [line for line in maps if {"w", "x"} <= set(line.split()[1])]
    if not ours:
        pytest.skip("this libffi maps no writable code (nothing to inherit)")
    kernel = device.load(crafted(STORE_42))
    _launch(device, kernel)
    with open(f"/proc/{kernel.sandbox.pid}/maps") as maps:
        theirs = [line for line in maps if {"w", "x"} <= set(line.split()[1])]
    assert theirs == [], f"kernel code could write machine code there and run it: {theirs}"
    assert callback() == 1  # the launching process's own closure still works


def _object_with(extra: str, body: str = "  store i32 42, ptr %out") -> DeviceBinary:
    """A crafted object whose @evil calls getppid (forbidden under the filter) and stores its result at BASE+8."""
    from mneme.plugins.backends.host import machine

    llvm = machine.binding()
    evil = (
        "define internal void @evil() {\n"
        '  %r = call i64 asm sideeffect "syscall", "={rax},{rax},~{rcx},~{r11},~{memory}"(i64 110)\n'
        f"  store i64 %r, ptr inttoptr (i64 {BASE + 8} to ptr)\n  ret void\n}}\n"
    )
    text = (
        f'target triple = "{llvm.get_process_triple()}"\n{evil}{extra}\n'
        "@__mneme_info = constant [4 x i64] [i64 0, i64 0, i64 8, i64 0]\n"
        "define void @__mneme_entry(ptr %args) {\nentry:\n  %out = load ptr, ptr %args\n" + body + "\n  ret void\n}\n"
    )
    module = llvm.parse_assembly(text)
    module.verify()
    return DeviceBinary(
        backend="host",
        arch=platform.machine(),
        kind="host-object",
        kernel_name="ctor",
        data=bytes(machine.target_machine().emit_object(module)),
    )


STARTUP = {
    "global_ctors": "@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] [{ i32, ptr, ptr } { i32 0, ptr @evil, ptr null }]",
    "init_array": '@ia = internal global ptr @evil, section ".init_array"\n'
    '@llvm.used = appending global [1 x ptr] [ptr @ia], section "llvm.metadata"',
    "preinit_array": '@ia = internal global ptr @evil, section ".preinit_array"\n'
    '@llvm.used = appending global [1 x ptr] [ptr @ia], section "llvm.metadata"',
}


@pytest.mark.parametrize("extra", STARTUP.values(), ids=list(STARTUP))
def test_constructors_of_kernel_code_never_run_before_the_filter(device, extra):  # noqa: F811
    _asm_ready()
    device.write(BASE, bytes(16))
    kernel = device.load(_object_with(extra))
    _launch(device, kernel)
    assert struct.unpack("<iiq", device.read(BASE, 16)) == (42, 0, 0), "a constructor ran (before the filter)"


def test_an_ifunc_resolver_runs_only_under_the_filter(device):  # noqa: F811
    _asm_ready()
    device.write(BASE, bytes(16))
    kernel = device.load(
        _object_with(
            "define internal ptr @resolver() {\n  call void @evil()\n  ret ptr @target\n}\n"
            "define void @target() {\n  ret void\n}\n@f = ifunc void (), ptr @resolver",
            "  call void @f()\n  store i32 42, ptr %out",
        )
    )
    assert device.read(BASE, 16) == bytes(16), "the resolver ran when the code was loaded"
    with pytest.raises(ExperimentError, match=r"forbidden system call 110 \(getppid\)"):
        _launch(device, kernel)


#: IR that jumps to, or calls, an address it is given, written without a call through a pointer
JUMPS = {
    "indirectbr": (
        "",
        "  %a = load ptr, ptr %out\n  indirectbr ptr %a, [label %b]\nb:",
        r"indirect branch \(indirectbr\)",
    ),
    "coro.resume": (
        "declare void @llvm.coro.resume(ptr)",
        "  %h = load ptr, ptr %out\n  call void @llvm.coro.resume(ptr %h)",
        r"intrinsic llvm\.coro\.resume",
    ),
    "coro.destroy": (
        "declare void @llvm.coro.destroy(ptr)",
        "  %h = load ptr, ptr %out\n  call void @llvm.coro.destroy(ptr %h)",
        r"intrinsic llvm\.coro\.destroy",
    ),
    "objc.retain": (
        "declare ptr @llvm.objc.retain(ptr)",
        "  %r = call ptr @llvm.objc.retain(ptr %out)",
        r"intrinsic llvm\.objc\.retain",
    ),
    "type.checked.load": (
        "declare {ptr, i1} @llvm.type.checked.load(ptr, i32, metadata)",
        '  %f = call {ptr, i1} @llvm.type.checked.load(ptr %out, i32 0, metadata !"t")',
        r"intrinsic llvm\.type\.checked\.load",
    ),  # its malformed use aborted LLVM (an assertion)
    "eh.sjlj.longjmp": (
        "declare void @llvm.eh.sjlj.longjmp(ptr)",
        "  call void @llvm.eh.sjlj.longjmp(ptr %out)",
        r"intrinsic llvm\.eh\.sjlj\.longjmp",
    ),
    "call inttoptr": ("", "  call void inttoptr (i64 4096 to ptr)()", r"a call through a pointer"),
    "extern_weak system": (
        "declare extern_weak i32 @system(ptr)",
        "  %r = call i32 @system(ptr %out)",
        r"external function system",
    ),
    "extern_weak environ": (
        "@environ = extern_weak global ptr",
        "  %e = load ptr, ptr @environ\n  store ptr %e, ptr %out",
        r"external global environ",
    ),
    "environ in an initializer": (
        "@environ = external global ptr\n@p = global ptr @environ",
        "  %e = load ptr, ptr @p\n  store ptr %e, ptr %out",
        r"external global environ",
    ),
    r"\01_exit": (
        'declare void @"\\01_exit"(i32)',
        '  call void @"\\01_exit"(i32 0)',
        r'external function "\\01_exit"',
    ),
    r"\01__libc_system": (
        'declare i32 @"\\01__libc_system"(ptr)',
        '  %r = call i32 @"\\01__libc_system"(ptr %out)',
        r"__libc_system",
    ),
    r"\01dlopen": ('declare ptr @"\\01dlopen"(ptr, i32)', '  %r = call ptr @"\\01dlopen"(ptr %out, i32 0)', r"dlopen"),
    "syscall()": (
        "declare i64 @syscall(i64, ...)",
        "  %r = call i64 (i64, ...) @syscall(i64 57)",
        r"external function syscall",
    ),
    "mprotect()": (
        "declare i32 @mprotect(ptr, i64, i32)",
        "  %r = call i32 @mprotect(ptr %out, i64 4096, i32 7)",
        r"external function mprotect",
    ),
    "inline asm syscall": (
        "",
        '  %r = call i64 asm sideeffect "syscall", "={rax},{rax},~{rcx},~{r11}"(i64 57)',
        r"inline assembly",
    ),
    "versioned symbol": (
        'declare i32 @"system@GLIBC_2.2.5"(ptr)',
        '  %r = call i32 @"system@GLIBC_2.2.5"(ptr %out)',
        r"system@GLIBC_2\.2\.5",
    ),
}


@pytest.mark.parametrize("declarations, body, refusal", JUMPS.values(), ids=list(JUMPS))
def test_ir_that_reaches_code_it_was_not_given_by_name_is_refused_before_compiling(declarations, body, refusal):
    with pytest.raises(UnsupportedError, match=refusal):
        _compile(declarations, body)
