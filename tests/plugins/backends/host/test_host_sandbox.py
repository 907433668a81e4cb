"""Recorded host kernels run only in a sandbox process whose every thread is under a seccomp filter
(issue 36; docs/security.md). The kernels here are host objects built from LLVM IR text that calls
the C library directly, as a kernel that got past the allowlist (a compiler bug, a tampered build
cache) would: what they try must not reach the process that launched them."""

from __future__ import annotations

import glob
import os
import platform
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from mneme.core.backend import DeviceBinary, get_backend
from mneme.core.errors import ExperimentError
from mneme.plugins.backends.host import sandbox

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
    reason="the sandbox's filter is tested on Linux x86-64",
)

BASE = 0x2B0000000000

CRAFT = '''
import platform
from mneme.core.backend import DeviceBinary
from mneme.plugins.backends.host import machine


def crafted(body, declarations="", name="crafted"):
    """A host object whose entry runs `body` once (mode 0, one block of one thread); %out: the first argument."""
    llvm = machine.binding()
    text = (f'target triple = "{llvm.get_process_triple()}"\\n{declarations}\\n'
            "@__mneme_info = constant [4 x i64] [i64 0, i64 0, i64 8, i64 0]\\n"
            "define void @__mneme_entry(ptr %args) {\\nentry:\\n  %out = load ptr, ptr %args\\n"
            + body + "\\n  ret void\\n}\\n")
    module = llvm.parse_assembly(text)
    module.verify()
    data = bytes(machine.target_machine().emit_object(module))
    return DeviceBinary(backend="host", arch=platform.machine(), kind="host-object", kernel_name=name, data=data)
'''
exec(CRAFT)  # noqa: S102 - the same helper in this process and in the scripts below

STORE_42 = "  store i32 42, ptr %out"
SPIN = "  br label %spin\nspin:\n  %v = load volatile i32, ptr %out\n  br label %spin\nunreachable:"
#: mprotect(the page of open64, 2 pages, PROT) then two bytes of open64 become ud2
PATCH_OPEN64 = """\
  %a = ptrtoint ptr @open64 to i64
  %p = and i64 %a, -4096
  %pp = inttoptr i64 %p to ptr
  %rc = call i32 @mprotect(ptr %pp, i64 8192, i32 {prot})
  store i32 %rc, ptr %out
  store i16 2831, ptr @open64"""
PATCH_DECLARATIONS = "declare i32 @mprotect(ptr, i64, i32)\ndeclare i32 @open64(ptr, i32, ...)"


@pytest.fixture
def device():
    with get_backend("host").open_device() as dev:
        if not dev.sandboxed:
            pytest.skip("MNEME_HOST_SANDBOX=0 in this environment")
        dev.reserve(BASE, 1 << 20)
        dev.map(BASE, 4096)
        yield dev


def _launch(device, kernel) -> None:
    device.launch(kernel, 1, 1, 0, struct.pack("<Q", BASE))


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether process `pid` is gone or a zombie within `seconds` (SIGKILL is delivered asynchronously)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as status:
                if "State:\tZ" in status.read():
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


def _good_launch_works(device) -> None:
    device.write(BASE, bytes(4))
    _launch(device, device.load(crafted(STORE_42)))  # noqa: F821 - defined by exec(CRAFT)
    assert struct.unpack("<i", device.read(BASE, 4)) == (42,)


PATCH_SCRIPT = CRAFT + textwrap.dedent('''
    import ctypes, struct, sys
    from mneme.core.backend import DeviceBinary, get_backend
    prot, marker = int(sys.argv[1]), sys.argv[2]
    libc = ctypes.CDLL(None)
    open64 = ctypes.cast(libc.open64, ctypes.c_void_p).value
    before = ctypes.string_at(open64, 2)
    body = """{body}""".format(prot=prot)
    with get_backend("host").open_device() as dev:
        dev.reserve({base}, 1 << 20)
        dev.map({base}, 4096)
        kernel = dev.load(crafted(body, """{declarations}"""))
        try:
            dev.launch(kernel, 1, 1, 0, struct.pack("<Q", {base}))
            print("launch: done", struct.unpack("<i", dev.read({base}, 4))[0])
        except Exception as exc:
            print("launch: failed:", exc)
        print("open64 unchanged:", ctypes.string_at(open64, 2) == before)
        with open(marker, "w") as f:  # the next open() of this process
            f.write("written by the launching process")
        print("open works:", open(marker).read() == "written by the launching process")
    ''').format(body=PATCH_OPEN64, declarations=PATCH_DECLARATIONS, base=BASE)


def _patch(tmp_path, prot: int, sandbox: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MNEME_HOST_SANDBOX": sandbox}
    return subprocess.run(
        [sys.executable, "-c", PATCH_SCRIPT, str(prot), str(tmp_path / "marker")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_kernel_cannot_make_libc_writable_and_executable_and_the_launch_fails_naming_mprotect(tmp_path):
    proc = _patch(tmp_path, 7, "1")  # PROT_READ | PROT_WRITE | PROT_EXEC
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "launch: failed:" in proc.stdout and "forbidden system call" in proc.stdout and "(mprotect)" in proc.stdout
    assert "open64 unchanged: True" in proc.stdout and "open works: True" in proc.stdout, proc.stdout


def test_a_kernel_that_patches_libc_in_its_own_process_cannot_affect_the_process_that_launched_it(tmp_path):
    proc = _patch(tmp_path, 3, "1")  # PROT_READ | PROT_WRITE: allowed, and the patch lands, in the sandbox
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "open64 unchanged: True" in proc.stdout and "open works: True" in proc.stdout, proc.stdout


def test_without_the_sandbox_the_same_patch_breaks_the_launching_process(tmp_path):
    # the control: what the two tests above stop is real (unsafe mode, in a child process)
    proc = _patch(tmp_path, 7, "0")
    assert "open64 unchanged: False" in proc.stdout or proc.returncode != 0, proc.stdout
    assert "open works: True" not in proc.stdout


def test_a_kernel_cannot_run_a_shell_command(device, tmp_path):
    marker = tmp_path / "ran"
    command = f"touch {marker}".encode() + b"\0"
    kernel = device.load(
        crafted(  # noqa: F821
            "  %rc = call i32 @system(ptr @cmd)\n  store i32 %rc, ptr %out",
            f'declare i32 @system(ptr)\n@cmd = constant [{len(command)} x i8] c"{command[:-1].decode()}\\00"',
        )
    )
    with pytest.raises(ExperimentError, match=r"forbidden system call \d+ \((rt_sigaction|clone|clone3|execve)\)"):
        _launch(device, kernel)  # system() first sets its signal handlers: refused there
    assert not marker.exists()
    _good_launch_works(device)


def test_a_kernel_that_calls_fork_fails_its_launch_at_once_and_the_next_launch_works(device):
    kernel = device.load(crafted("  %pid = call i32 @fork()\n  store i32 %pid, ptr %out", "declare i32 @fork()"))  # noqa: F821
    start = time.monotonic()
    with pytest.raises(ExperimentError, match=r"forbidden system call \d+ \((clone|clone3|fork)\)"):
        _launch(device, kernel)
    assert time.monotonic() - start < 10
    _good_launch_works(device)


def test_a_kernel_that_blocks_signals_fails_naming_the_call_and_the_next_launch_works(device, monkeypatch):
    monkeypatch.setenv("MNEME_LIMIT_TIMEOUT_SECONDS", "5")
    body = (
        "  %set = alloca [16 x i64]\n  call void @llvm.memset.p0.i64(ptr %set, i8 -1, i64 128, i1 false)\n"
        "  %rc = call i32 @pthread_sigmask(i32 0, ptr %set, ptr null)\n" + SPIN
    )
    declarations = "declare i32 @pthread_sigmask(i32, ptr, ptr)\ndeclare void @llvm.memset.p0.i64(ptr, i8, i64, i1)"
    kernel = device.load(crafted(body, declarations))  # noqa: F821
    with pytest.raises(ExperimentError, match=r"forbidden system call \d+ \(rt_sigprocmask\)"):
        _launch(device, kernel)
    _good_launch_works(device)


def test_a_kernel_looping_forever_is_killed_from_outside_at_its_limit_and_the_next_launch_gets_a_new_sandbox(
    device, monkeypatch
):
    monkeypatch.setenv("MNEME_LIMIT_TIMEOUT_SECONDS", "1")
    kernel = device.load(crafted(SPIN))  # noqa: F821
    first = kernel.sandbox.pid
    start = time.monotonic()
    with pytest.raises(ExperimentError, match=r"timed out after 1 s .* its sandbox process was killed") as caught:
        _launch(device, kernel)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - start < 10
    assert _ends_within(first, 10)
    device.write(BASE, bytes(4))
    with pytest.raises(ExperimentError, match="timed out"):  # the same kernel, in a new sandbox process
        _launch(device, kernel)
    assert kernel.sandbox.starts == 2
    _good_launch_works(device)


def test_a_segfault_fails_its_launch_and_the_next_launch_works(device):
    # one page mapped at BASE; BASE + 8 KiB is reserved, not mapped: a guard page
    kernel = device.load(crafted(f"  %p = inttoptr i64 {BASE + 8192} to ptr\n  store i32 1, ptr %p"))  # noqa: F821
    with pytest.raises(ExperimentError, match=r"invalid memory access \(SIGSEGV\)") as caught:
        _launch(device, kernel)
    assert caught.value.kind == "fault"
    _good_launch_works(device)


def test_a_kernel_that_ends_its_process_fails_its_launch_and_the_sandbox_starts_again(device):
    kernel = device.load(crafted("  call void @_exit(i32 3)", "declare void @_exit(i32)"))  # noqa: F821
    with pytest.raises(ExperimentError, match=r"its sandbox process died \(exit code 3\)"):
        _launch(device, kernel)
    with pytest.raises(ExperimentError, match=r"died \(exit code 3\)"):
        _launch(device, kernel)
    assert kernel.sandbox.starts == 2
    _good_launch_works(device)


def test_every_thread_of_the_sandbox_is_filtered_and_the_launching_process_is_not(device):
    kernel = device.load(crafted(STORE_42))  # noqa: F821
    _launch(device, kernel)
    modes = {}
    for status in glob.glob(f"/proc/{kernel.sandbox.pid}/task/*/status"):
        line = next(line for line in open(status) if line.startswith("Seccomp:"))
        modes[status.split("/")[4]] = int(line.split()[1])
    assert len(modes) == sandbox.worker_threads()  # the serve thread and a helper per other worker
    assert set(modes.values()) == {2}, modes  # SECCOMP_MODE_FILTER on every thread
    ours = next(line for line in open("/proc/self/status") if line.startswith("Seccomp:"))
    assert ours.split()[1] == "0"


def _executable_anonymous_mappings() -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line for line in maps if line.split()[1].startswith("r-x") and len(line.split()) < 6]


def test_the_launching_process_never_maps_recorded_code(device):
    before = _executable_anonymous_mappings()
    for _ in range(3):
        _launch(device, device.load(crafted(STORE_42)))  # noqa: F821
    assert _executable_anonymous_mappings() == before


def test_memory_mapped_after_the_sandbox_started_reaches_it_and_so_does_a_new_reservation(device):
    kernel = device.load(crafted(STORE_42))  # noqa: F821
    later = BASE + 16 * 4096
    device.map(later, 4096)  # inside the reservation: the sandbox makes it writable too
    device.launch(kernel, 1, 1, 0, struct.pack("<Q", later))
    assert struct.unpack("<i", device.read(later, 4)) == (42,)
    elsewhere = BASE + (64 << 20)
    device.reserve(elsewhere, 1 << 20)  # a new reservation: the sandbox starts again with it
    device.map(elsewhere, 4096)
    device.launch(kernel, 1, 1, 0, struct.pack("<Q", elsewhere))
    assert struct.unpack("<i", device.read(elsewhere, 4)) == (42,)
    assert kernel.sandbox.starts == 2


def test_crafted_objects_are_refused_by_the_allowlist_when_compiled_from_ir():
    # the same calls written in kernel IR never compile: the allowlist is the first error
    from mneme.core import ir
    from mneme.core.errors import UnsupportedError
    from mneme.core.types import ExperimentConfiguration

    backend = get_backend("host")
    text = NVPTX.format(
        declarations="declare i32 @fork()", body="  %pid = call i32 @fork()\n  store i32 %pid, ptr %out"
    )
    with pytest.raises(UnsupportedError, match=r"external function fork"):
        backend.compile(ir.load(text), "k", ExperimentConfiguration(grid=1, block=1), backend.arch())


NVPTX = """\
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
{declarations}
define void @k(ptr %out) {{
entry:
{body}
  ret void
}}
!nvvm.annotations = !{{!0}}
!0 = !{{ptr @k, !"kernel", i32 1}}
"""


def _compile(declarations: str, body: str):
    from mneme.core import ir
    from mneme.core.types import ExperimentConfiguration

    backend = get_backend("host")
    text = NVPTX.format(declarations=declarations, body=body)
    return backend.compile(ir.load(text), "k", ExperimentConfiguration(grid=1, block=1), backend.arch())


def test_a_global_named_with_llvms_no_mangling_prefix_is_refused_by_the_name_it_links_to():
    from mneme.core.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r'external global "\\01environ"') as caught:
        _compile(
            '@"\\01environ" = external global ptr', '  %e = load ptr, ptr @"\\01environ"\n  store ptr %e, ptr %out'
        )
    assert "refused before compiling" in str(caught.value)
    with pytest.raises(UnsupportedError, match=r'external function "\\01system"'):
        _compile('declare i32 @"\\01system"(ptr)', '  %rc = call i32 @"\\01system"(ptr %out)')


def test_an_allowed_function_spelled_with_the_prefix_is_still_that_function():
    binary = _compile(
        'declare i64 @"\\01__mneme_clock64"()', '  %t = call i64 @"\\01__mneme_clock64"()\n  store i64 %t, ptr %out'
    )
    with get_backend("host").open_device() as dev:
        dev.reserve(BASE, 1 << 20)
        dev.map(BASE, 4096)
        dev.launch(dev.load(binary), 1, 1, 0, struct.pack("<Q", BASE))
        assert struct.unpack("<Q", dev.read(BASE, 8))[0] > 0  # the runtime's clock ran


@pytest.mark.parametrize(
    "intrinsic, call",
    [
        (
            "declare void @llvm.experimental.patchpoint.void(i64, i32, ptr, i32, ...)",
            "  call void (i64, i32, ptr, i32, ...) @llvm.experimental.patchpoint.void(i64 1, i32 16, ptr %out, i32 0)",
        ),
        (
            "declare void @llvm.experimental.stackmap(i64, i32, ...)",
            "  call void (i64, i32, ...) @llvm.experimental.stackmap(i64 1, i32 0)",
        ),
        (
            "declare token @llvm.experimental.gc.statepoint.p0(i64, i32, ptr, i32, i32, ...)\n"
            'define void @g(ptr %p) gc "statepoint-example" {\n  %t = call token (i64, i32, ptr, i32, i32, ...) '
            "@llvm.experimental.gc.statepoint.p0(i64 0, i32 0, ptr elementtype(void ()) %p, i32 0, i32 0, i32 0, i32 0)\n"
            "  ret void\n}",
            "  call void @g(ptr %out)",
        ),
    ],
)
def test_intrinsics_that_call_an_address_they_are_given_are_refused_by_name(intrinsic, call):
    from mneme.core.errors import MnemeError

    name = intrinsic.split("@")[1].split("(")[0]  # the first declaration's
    with pytest.raises(MnemeError, match=rf"intrinsic {name.replace('.', '[.]')} \(it calls or jumps to an address"):
        _compile(intrinsic, call)


def test_an_ifunc_is_refused_its_resolver_would_run_at_load():
    from mneme.core.errors import UnsupportedError

    declarations = "define internal ptr @resolve() {\n  ret ptr null\n}\n@f = ifunc void (), ptr @resolve"
    with pytest.raises(UnsupportedError, match=r"ifunc f \(its resolver would run"):
        _compile(declarations, "  call void @f()")


SIGMASK_THEN_SPIN = NVPTX.format(
    declarations="declare i32 @pthread_sigmask(i32, ptr, ptr)",
    body="  %rc = call i32 @pthread_sigmask(i32 0, ptr %out, ptr null)\n  br label %spin\nspin:\n"
    "  %v = load volatile i32, ptr %out\n  br label %spin\nafter:",
).replace("define void @k(ptr %out)", "define void @k(ptr %out, ptr %unused)")
FORK = NVPTX.format(declarations="declare i32 @fork()", body="  %pid = call i32 @fork()\n  store i32 %pid, ptr %out")


def _mneme(*args, env=None) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )
    return proc, time.monotonic() - start


@pytest.mark.parametrize("ir, called", [(SIGMASK_THEN_SPIN, "pthread_sigmask"), (FORK, "fork")])
def test_capture_refuses_a_kernel_calling_libc_by_name_at_once(tmp_path, ir, called):
    (tmp_path / "k.ll").write_text(ir)
    args = "  - {zeros: {dtype: int32, shape: [64]}}\n" * (2 if called == "pthread_sigmask" else 1)
    (tmp_path / "k.yaml").write_text(f"ir: k.ll\nkernel: k\ngrid: 1\nblock: 1\nargs:\n{args}")
    proc, seconds = _mneme("capture", tmp_path / "k.yaml", "-o", tmp_path / "out", "--backend", "host", "--timeout", 2)
    assert proc.returncode != 0 and f"external function {called}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and seconds < 90


def test_replay_of_a_recording_whose_ir_was_replaced_refuses_it_by_name(tmp_path):
    from kernel_timeout_cases import record

    db = record(tmp_path, "host")
    (module,) = [p for p in db.parent.iterdir() if p.suffix in (".ll", ".bc")]
    # the route: the database does not pin its IR's content; same kernel name and signature
    module.write_text(SIGMASK_THEN_SPIN.replace("@k", "@spin_if_wide"))
    proc, seconds = _mneme("replay", "-rdb", db, "--backend", "host", "--timeout", 2)
    assert proc.returncode != 0 and "external function pthread_sigmask" in (proc.stdout + proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr and seconds < 90


def test_an_object_that_does_not_load_fails_its_load_and_the_process_goes_on(device):
    junk = DeviceBinary(
        backend="host", arch=platform.machine(), kind="host-object", kernel_name="junk", data=b"\x7fELF" + bytes(60)
    )
    with pytest.raises(ExperimentError, match=r"kernel 'junk': (the host sandbox did not start|could not load)"):
        device.load(junk)
    _good_launch_works(device)


COUNTER = (
    "@g = global i32 0\n"
    "@__mneme_globals = constant [1 x [2 x i64]] [[2 x i64] [i64 ptrtoint (ptr @g to i64), i64 4]]\n"
    '@__mneme_global_names = constant [2 x i8] c"g\\00"'
)


def test_device_globals_keep_their_values_when_the_sandbox_starts_again(device):
    kernel = device.load(
        crafted(  # noqa: F821
            "  %v = load i32, ptr @g\n  store i32 %v, ptr %out\n  %n = add i32 %v, 1\n  store i32 %n, ptr @g", COUNTER
        )
    )
    device.write_global(kernel, "g", struct.pack("<i", 5))
    _launch(device, kernel)
    assert struct.unpack("<i", device.read(BASE, 4)) == (5,)
    device.reserve(BASE + (64 << 20), 1 << 20)  # the next request starts a new sandbox process
    _launch(device, kernel)
    assert struct.unpack("<i", device.read(BASE, 4)) == (6,) and kernel.sandbox.starts == 2
    assert device.read_global(kernel, "g", 4) == struct.pack("<i", 7)


PATH_CONSTANT = '@path = constant [12 x i8] c"/etc/passwd\\00"'


@pytest.mark.parametrize(
    "call, declaration, refused",
    [
        (
            "call i32 (ptr, i32, ...) @open(ptr @path, i32 0)",
            "declare i32 @open(ptr, i32, ...)\n" + PATH_CONSTANT,
            "openat",
        ),
        ("call i32 @socket(i32 2, i32 1, i32 0)", "declare i32 @socket(i32, i32, i32)", "socket"),
        ("call i32 @kill(i32 {parent}, i32 0)", "declare i32 @kill(i32, i32)", "kill"),
        ("call i64 @ptrace(i32 0, i32 0, ptr null, ptr null)", "declare i64 @ptrace(i32, i32, ptr, ptr)", "ptrace"),
        (
            "call i32 @execve(ptr @path, ptr null, ptr null)",
            "declare i32 @execve(ptr, ptr, ptr)\n" + PATH_CONSTANT,
            "execve",
        ),
        (
            "call ptr @mmap(ptr null, i64 4096, i32 7, i32 34, i32 -1, i64 0)",
            "declare ptr @mmap(ptr, i64, i32, i32, i32, i64)",
            "mmap",
        ),
        ("call i64 @write(i32 0, ptr @path, i64 4)", "declare i64 @write(i32, ptr, i64)\n" + PATH_CONSTANT, "write"),
        ("call i64 @read(i32 0, ptr %out, i64 4)", "declare i64 @read(i32, ptr, i64)", "read"),
    ],
)
def test_each_call_outside_the_filter_fails_the_launch_naming_it(device, call, declaration, refused):
    body = "  %r = " + call.format(parent=os.getpid())
    kernel = device.load(crafted(body, declaration))  # noqa: F821
    with pytest.raises(ExperimentError, match=rf"forbidden system call \d+ \({refused}\)"):
        _launch(device, kernel)
    _good_launch_works(device)


def test_a_kernel_loaded_by_a_thread_that_ended_keeps_its_sandbox(device):
    # the sandbox dies with the thread that forked it (PR_SET_PDEATHSIG): Mneme forks from its own
    # long-lived thread, so a caller's short-lived thread does not take the sandbox with it
    import threading

    loaded = {}
    thread = threading.Thread(target=lambda: loaded.setdefault("kernel", device.load(crafted(STORE_42))))  # noqa: F821
    thread.start()
    thread.join()
    kernel = loaded["kernel"]
    time.sleep(0.5)
    device.write(BASE, bytes(4))
    _launch(device, kernel)
    assert struct.unpack("<i", device.read(BASE, 4)) == (42,) and kernel.sandbox.starts == 1
