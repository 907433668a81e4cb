"""Host kernels run under a seccomp filter (runtime_parts/sandbox.inc, issue 24): a system call outside
the runtime's allowlist ends the launch with an error naming it, the call has no effect, and the
runtime goes on. The runtime's probe entry (not linkable from kernel code) makes the call, as a
kernel reaching a `syscall` instruction would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import ctypes, os, sys
    from mneme.plugins.backends.host import runtime
    lib = runtime.load()
    print("sandbox", runtime.sandbox(lib))
    probe = ctypes.cast(lib.mneme_sandbox_probe, ctypes.c_void_p).value
    u3 = ctypes.c_uint32 * 3

    def call(nr, a=0, b=0, c=0, mode=2):
        args = (ctypes.c_long * 5)(nr, a, b, c, 0)
        msg = ctypes.create_string_buffer(1024)
        rc = lib.mneme_launch(probe, ctypes.addressof(args), u3(1, 1, 1), u3(1, 1, 1), 0, mode, 0, 0, msg, 1024)
        return rc, msg.value.decode(), args[4]

    path = ctypes.create_string_buffer(sys.argv[1].encode())
    getpid = 39 if os.uname().machine == "x86_64" else 172
    print(call(getpid))
    print(call(int(sys.argv[2]), -100, ctypes.addressof(path), os.O_CREAT | os.O_WRONLY))
    print(call(getpid))
    """)
OPENAT = {"x86_64": 257, "aarch64": 56}


def _run(tmp_path, env_extra=None):
    marker = tmp_path / "created-by-kernel"
    machine = os.uname().machine
    if machine not in OPENAT:
        pytest.skip(f"no syscall numbers for {machine} in this test")
    env = {**os.environ, **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(marker), str(OPENAT[machine])], capture_output=True,
                          text=True, timeout=120, env=env)
    return proc, marker


def test_a_forbidden_system_call_fails_the_launch_naming_it_and_has_no_effect(tmp_path):
    proc, marker = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    if lines[0] != "sandbox True":
        pytest.skip("no seccomp filters on this machine")
    assert lines[1].startswith("(0, '', ")  # getpid: allowed
    assert lines[2].startswith("(1, ") and "forbidden system call" in lines[2] and "(openat)" in lines[2], lines[2]
    assert not marker.exists()
    assert lines[3].startswith("(0, '', ")  # the runtime goes on


def test_without_the_sandbox_the_same_call_runs(tmp_path):
    proc, marker = _run(tmp_path, {"MNEME_HOST_SANDBOX": "0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "sandbox False"
    assert marker.exists()  # the filter, not something else, stopped it above


def test_the_filter_applies_to_the_kernel_threads_not_to_python():
    code = PROBE.replace("print(call(int(sys.argv[2])", "#") + textwrap.dedent("""
        import glob
        modes = {}
        for status in glob.glob("/proc/self/task/*/status"):
            line = next(l for l in open(status) if l.startswith("Seccomp:"))
            modes[status.split("/")[4]] = int(line.split()[1])
        print(modes.pop(str(os.getpid())), sorted(set(modes.values())))
        """)
    proc = subprocess.run([sys.executable, "-c", code, "unused", "0"], capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr
    if lines[0] != "sandbox True":
        pytest.skip("no seccomp filters on this machine")
    assert lines[-1].startswith("0 ") and "2" in lines[-1], lines  # Python's thread: none; a helper: filter (2)


def test_a_child_forked_after_launches_runs_its_own(tmp_path):
    # the parent's parked helpers leave waiters on the runtime's condition variables: a child must not
    # wait for them (mneme replay and capture fork before opening anything; an embedding program may not)
    code = PROBE.replace("print(call(int(sys.argv[2])", "#") + textwrap.dedent("""
        import time
        codes = set()
        for _ in range(30):  # right after a launch, the helpers are on their way back to waiting
            call(getpid)
            pid = os.fork()
            if pid == 0:
                rc, _, value = call(getpid)
                os._exit(0 if rc == 0 and value == os.getpid() else 1)
            deadline = time.monotonic() + 10
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            if done[0] == 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                codes.add("hung")
            else:
                codes.add(os.waitstatus_to_exitcode(done[1]))
        print("child", sorted(map(str, codes)))
        """)
    proc = subprocess.run([sys.executable, "-c", code, "unused", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "child ['0']", proc.stdout + proc.stderr


def test_a_helper_thread_gets_its_malloc_arena_before_the_filter():
    # glibc sets up a new thread's malloc arena at the thread's first allocation and, once the
    # process has more than `arena_test` arenas (1 here), reads the CPU count from /sys with
    # openat, which the filter refuses. Helpers entered the sandbox before that allocation, and
    # the refusal outside a kernel recursed in the fault handler until the process died of
    # SIGSEGV (seen under pytest, whose threads had made the arenas).
    code = PROBE.replace("print(call(int(sys.argv[2])", "#").replace("u3(1, 1, 1), u3(1, 1, 1)", "u3(64, 1, 1), u3(1, 1, 1)")
    proc = subprocess.run([sys.executable, "-c", code, "unused", "0"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GLIBC_TUNABLES": "glibc.malloc.arena_test=1", "MNEME_HOST_THREADS": "4"})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    if lines[0] != "sandbox True":
        pytest.skip("no seccomp filters on this machine")
    assert lines[1].startswith("(0, '', ") and lines[2].startswith("(0, '', "), lines
