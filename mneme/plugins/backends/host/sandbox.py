"""The sandbox process of a loaded host kernel: where its recorded code is mapped and run, and only there.

`HostDevice.load` forks one sandbox process per kernel. The child links the kernel's object
with MCJIT (the backend's process never makes recorded code executable), sends what the
backend needs to launch it (`image.KernelInfo`: numbers and names), and enters the runtime's
serve loop (`runtime_parts/serve.inc`), which starts the helper threads, installs a seccomp
filter on every thread (`runtime_parts/sandbox.inc`), and then runs launch requests from a
socket. Device memory is shared: `memory.AddressSpace` maps it ``MAP_SHARED`` at the recorded
addresses, so the child sees it at the same addresses. Everything the child answers is data
to this side: sizes are checked, and a child that stops answering within the time limit is
killed (SIGKILL), whatever it does with its signals. A child that died or was killed, or that
was forked before a new reservation of device memory, is started again at the next request,
with the device globals as they were last written. Design and filter: docs/security.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import os
import platform
import queue
import signal
import socket
import struct
import sys
import threading
import time
import warnings
from typing import Any, Callable

from mneme.core import envvars, limits
from mneme.core.errors import ExperimentError, MissingGlobalError, MnemeError
from mneme.plugins.backends.host import image as host_image
from mneme.plugins.backends.host import limits as host_limits
from mneme.plugins.backends.host import runtime

ENV = "MNEME_HOST_SANDBOX"
#: requests of runtime_parts/serve.inc (mn_request, mn_reply, mn_launch_request)
OP_LAUNCH, OP_BOUNDS, OP_WRITE_GLOBAL, OP_READ_GLOBAL, OP_PROTECT = 1, 2, 3, 4, 5
REQUEST = struct.Struct("=IIQQ")
REPLY = struct.Struct("=iIQ")
LAUNCH = struct.Struct("=3I3IQQii")
#: seconds a request that runs no kernel code may take, and the start of a sandbox (linking included)
QUIET_SECONDS = 60.0
MAX_HELLO = 1 << 20
MAX_MESSAGE = 1 << 16


def enabled() -> bool:
    """Whether host kernels run in sandbox processes (``MNEME_HOST_SANDBOX``, default on; 0 is unsafe)."""
    return (envvars.get(ENV) or "1") not in ("0", "off", "no", "false")


def check_supported() -> None:
    """Raise a clear error where the sandbox cannot run: it needs Linux on x86-64 or AArch64 (seccomp)."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux") and machine in ("x86_64", "amd64", "aarch64", "arm64"):
        return
    raise MnemeError(
        f"the host backend runs recorded kernels in a seccomp sandbox, which needs Linux on x86-64 or "
        f"AArch64 (this is {sys.platform} on {platform.machine()}); set {ENV}=0 to run them in this "
        "process without isolation, only for recordings you trust (docs/security.md)"
    )


def worker_threads() -> int:
    """Threads a sandbox runs blocks on: ``MNEME_HOST_THREADS``, else the CPUs this process may use."""
    text = envvars.get("MNEME_HOST_THREADS") or ""
    if text.isdigit() and int(text) > 0:  # as the runtime reads it: anything else is the default
        return min(int(text), 256)
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 256))
    except (AttributeError, OSError):
        return max(1, min(os.cpu_count() or 1, 256))


def _drop_writable_code() -> None:
    """Make every page this process inherited writable and executable at once not executable (W^X).

    The backend's process may hold such pages that Mneme never made (libffi's closures for a ctypes
    or cffi callback of the caller): kernel code could write machine code there and run it. Nothing
    in this process calls them once the serve loop runs, and the filter keeps them non-executable.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open("/proc/self/maps") as maps:
        lines = maps.read().splitlines()
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or "w" not in fields[1] or "x" not in fields[1]:
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        if libc.mprotect(start, end - start, 0x1 | 0x2) != 0:  # PROT_READ | PROT_WRITE
            raise OSError(ctypes.get_errno(), f"cannot make the writable code at 0x{start:x} non-executable")


def _child(sock: socket.socket, data: bytes, kernel_name: str, parent: int) -> None:
    """The sandbox's side, before its filter: link the object, say what it is, serve (never returns)."""
    fd = sock.fileno()
    # A crash here is the backend's to report (it names the signal); the inherited faulthandler (pytest's,
    # a user's) would print the Python stack and every loaded extension module of a process that is not theirs.
    faulthandler.disable()
    try:
        loaded = host_image.LoadedImage(data, kernel_name)
        info = loaded.info
        names = list(loaded.globals)
        hello = {
            "static_shared": info.static_shared,
            "param_bytes": info.param_bytes,
            "frame_bytes": info.frame_bytes,
            "mode": info.mode,
            "warp": info.warp,
            "checked": info.checked,
            "globals": [[name, loaded.globals[name][1]] for name in names],
        }
        table = (ctypes.c_uint64 * (3 * max(len(names), 1)))()
        for i, name in enumerate(names):
            addr, size = loaded.globals[name]
            table[3 * i : 3 * i + 3] = [addr, size, int(host_image.writable(addr, size))]
        _drop_writable_code()  # last: linking (above) may still call back into Python
    except BaseException as exc:  # noqa: BLE001 - told to the backend's process, which raises it
        hello, loaded = {"error": str(exc)}, None
    text = json.dumps(hello).encode()
    os.write(fd, struct.pack("=Q", len(text)) + text)
    if loaded is not None:
        runtime.load().mneme_serve(
            fd, loaded.entry, loaded.entry_checked, ctypes.addressof(table), len(names), worker_threads(), parent
        )
    os._exit(0)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"signal {signal.Signals(sig).name}"
        except ValueError:
            return f"signal {sig}"
    return f"exit code {os.WEXITSTATUS(status)}"


class _Forker:
    """The thread that forks every sandbox process, alive as long as this process.

    A sandbox dies with the thread that forked it (PR_SET_PDEATHSIG names a thread), which is what
    ends it when a supervisor kills this process in the middle of a launch; a sandbox forked by a
    short-lived thread of the caller would die with that thread instead.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._owner = 0  # the process whose thread it is (a forked copy of this process has none)

    def fork(self, child: Callable[[], None]) -> int:
        """Fork on the forking thread; `child` runs in the new process and must not return. Returns its pid."""
        with self._lock:
            if self._owner != os.getpid():
                self._requests = queue.SimpleQueue()
                threading.Thread(
                    target=self._serve, args=(self._requests,), name="mneme-sandbox-fork", daemon=True
                ).start()
                self._owner = os.getpid()
            reply: queue.SimpleQueue = queue.SimpleQueue()
            self._requests.put((child, reply))
        answer = reply.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    @staticmethod
    def _serve(requests: queue.SimpleQueue) -> None:
        while True:
            child, reply = requests.get()
            try:
                with warnings.catch_warnings():  # a process with threads: the child runs only `child`, then C
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError as exc:
                reply.put(exc)
                continue
            if pid == 0:
                try:
                    child()
                finally:
                    os._exit(1)
            reply.put(pid)


_forker = _Forker()

#: sandbox processes killed and not reaped yet
_ended: list[int] = []


def _reap() -> None:
    """Reap the sandbox processes killed so far that have ended (no waiting)."""
    for pid in list(_ended):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _ended.remove(pid)


def _ended_now(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


class SandboxDied(Exception):
    """The sandbox process ended or stopped answering in the middle of a request; it is gone now."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class Sandbox:
    """The sandbox process of one loaded kernel. `info` says how to launch it; `close` ends the process."""

    def __init__(self, data: bytes, kernel_name: str, memory: Any):
        self.data = data
        self.kernel_name = kernel_name
        self.memory = memory
        self.info: host_image.KernelInfo | None = None
        self._pid = 0
        self._sock: socket.socket | None = None
        self._generation = self._mapped_generation = -1
        self._global_index: dict[str, int] = {}
        self._written: dict[int, bytes] = {}  # last bytes written to each global, for a restart
        self._bounds = b""
        self.starts = 0
        self._lock = threading.RLock()  # one request at a time on the socket, whichever thread asks
        with self._lock:
            self._start()

    # -- the process -------------------------------------------------------------------------------------
    def _start(self) -> None:
        _reap()
        runtime.load()  # built and loaded before the fork: the child only calls it
        ours, theirs = socket.socketpair()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        data, name = self.data, self.kernel_name
        try:
            pid = _forker.fork(lambda: _child(theirs, data, name, parent))
        finally:
            theirs.close()
        self._pid, self._sock = pid, ours
        self._generation, self._mapped_generation = self.memory.generation, self.memory.mapped_generation
        self.starts += 1
        try:
            hello = self._hello()
            if "error" in hello:
                raise ExperimentError(str(hello["error"])[:2000], kind="load")
            self.info = self._info(hello)
        except (SandboxDied, socket.timeout, EOFError, OSError) as exc:
            status = self._kill(status=not isinstance(exc, socket.timeout))
            why = (
                str(exc)
                if isinstance(exc, SandboxDied)
                else (
                    f"no answer within {QUIET_SECONDS:g} s"
                    if isinstance(exc, socket.timeout)
                    else f"it ended ({_how(status) if status is not None else 'unknown cause'})"
                )
            )
            if "seccomp" in why:  # this kernel or container has no seccomp filters
                why += (
                    f"; the host backend runs recorded kernels only under one (set {ENV}=0 to run them in this "
                    "process without isolation, only for recordings you trust: docs/security.md)"
                )
            raise ExperimentError(
                f"kernel {self.kernel_name!r}: the host sandbox did not start: {why}", kind="load"
            ) from None
        except BaseException:
            self._kill()
            raise
        self._global_index = {name: i for i, (name, _) in enumerate(hello["globals"])}

    def _hello(self) -> dict:
        deadline = time.monotonic() + QUIET_SECONDS
        (length,) = struct.unpack("=Q", self._recv(8, deadline))
        if length > MAX_HELLO:
            raise SandboxDied(f"it sent {length} bytes of description", "load")
        try:
            hello = json.loads(self._recv(length, deadline))
        except ValueError as exc:
            raise SandboxDied(f"its description is not JSON: {exc}", "load") from None
        if not isinstance(hello, dict):
            raise SandboxDied("its description is not an object", "load")
        if "error" not in hello:
            rc, text, _ = self._reply(deadline)  # "ready": the filter is on
            if rc:
                raise SandboxDied(str(text), "load")
        return hello

    def _info(self, hello: dict) -> host_image.KernelInfo:
        def number(key: str, most: int) -> int:
            value = hello.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
                raise ExperimentError(
                    f"kernel {self.kernel_name!r}: the sandbox described it with {key}={value!r}", kind="load"
                )
            return value

        entries = hello.get("globals")
        if not isinstance(entries, list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], int) and e[1] >= 0
            for e in entries
        ):
            raise ExperimentError(f"kernel {self.kernel_name!r}: the sandbox listed its globals wrongly", kind="load")
        return host_image.KernelInfo(
            static_shared=number("static_shared", 1 << 40),
            param_bytes=number("param_bytes", 1 << 32),
            frame_bytes=number("frame_bytes", 1 << 32),
            mode=number("mode", host_image.MODE_BLOCK_RUNS),
            warp=number("warp", 64),
            globals={name: size for name, size in entries},
            checked=bool(hello.get("checked")),
        )

    def _kill(self, status: bool = False) -> int | None:
        """End the process (SIGKILL). With `status`, wait for it and return its exit status; else it is
        reaped later (`_reap`): an address space takes milliseconds to tear down."""
        pid, self._pid = self._pid, 0
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if not pid:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not status:
            _ended.append(pid)
            return None
        with contextlib.suppress(ChildProcessError):
            return os.waitpid(pid, 0)[1]
        return None

    def close(self) -> None:
        with self._lock:
            self._kill()
        _reap()

    @property
    def pid(self) -> int:
        """The process's id (0 while none runs)."""
        return self._pid

    def _ensure(self) -> None:
        """A live process that sees today's device memory: started again if it died or predates a reservation."""
        if self._pid and _ended_now(self._pid):  # between requests: PR_SET_PDEATHSIG (the thread that
            self._pid = 0  # forked it ended), or someone else's kill; no kernel ran since its last answer
            if self._sock is not None:
                self._sock.close()
                self._sock = None
        if self._pid and self._generation != self.memory.generation:
            self._save_globals()
            self._kill()
        if not self._pid:
            self._start()
            for index, data in self._written.items():
                self._call(OP_WRITE_GLOBAL, data, index=index)
            if self._bounds:
                self._call(OP_BOUNDS, self._bounds)
        if self._mapped_generation != self.memory.mapped_generation:
            spans = b"".join(struct.pack("=QQ", lo, hi - lo) for lo, hi in self.memory.mapped())
            self._mapped_generation = self.memory.mapped_generation
            self._call(OP_PROTECT, spans)

    def _save_globals(self) -> None:
        """Keep what the kernel's globals hold now, for the process that replaces this one."""
        assert self.info is not None
        for name, index in self._global_index.items():
            with contextlib.suppress(SandboxDied, ExperimentError):
                rc, data, _ = self._call(OP_READ_GLOBAL, index=index, size=self.info.globals[name])
                if rc == 0:
                    self._written[index] = data

    # -- the wire ----------------------------------------------------------------------------------------
    def _recv(self, count: int, deadline: float | None) -> bytes:
        assert self._sock is not None
        buffer = bytearray(count)
        view, got = memoryview(buffer), 0
        while got < count:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout
                self._sock.settimeout(left)
            else:
                self._sock.settimeout(None)
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise EOFError
            got += n
        return bytes(buffer)

    def _reply(self, deadline: float | None, size: int = 0) -> tuple[int, bytes | str, int]:
        rc, length, elapsed = REPLY.unpack(self._recv(REPLY.size, deadline))
        if length > max(size, MAX_MESSAGE) or (size and rc == 0 and length != size):
            self._kill()
            raise SandboxDied(f"it answered with {length} bytes", "fault")
        data = self._recv(length, deadline) if length else b""
        return rc, data if size and rc == 0 else data.decode(errors="replace"), elapsed

    def _call(
        self, op: int, payload: bytes = b"", *, index: int = 0, size: int = 0, seconds: float = QUIET_SECONDS
    ) -> tuple[int, Any, int]:
        """Send one request and wait for its reply at most `seconds` (0: no limit); kills the process on failure."""
        assert self._sock is not None
        deadline = time.monotonic() + seconds if seconds > 0 else None
        try:
            self._sock.settimeout(None)
            self._sock.sendall(REQUEST.pack(op, index, size, len(payload)) + payload)
            return self._reply(deadline, size)
        except socket.timeout:
            self._kill()
            raise SandboxDied(
                f"timed out after {seconds:g} s (the limit: --timeout, or "
                f"{limits.variable('timeout_seconds')}); its sandbox process was killed",
                "timeout",
            ) from None
        except (EOFError, ConnectionError, OSError):
            status = self._kill(status=True)
            how = _how(status) if status is not None else "an unknown cause"
            raise SandboxDied(
                f"its sandbox process died ({how}): a crash in kernel code, or the memory cap", "fault"
            ) from None
        except BaseException:  # Ctrl-C in the middle of a request: the process's state is unknown
            self._kill()
            raise

    # -- requests ----------------------------------------------------------------------------------------
    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        mode: int,
        frame_bytes: int,
        checked: bool,
        args: bytes,
    ) -> tuple[int, str, float]:
        """Run the kernel once; (0, "", seconds in the runtime), or (1, why, 0) when the launch failed.

        The time limit (``--timeout``, ``MNEME_LIMIT_TIMEOUT_SECONDS``) is kept here: past it the process
        is killed and the launch fails as timed out; the next request starts a new one. Inside a kernel
        window a supervisor watches (`mneme.core.kernel_clock`: a tuning worker, `mneme replay`'s
        child), the supervisor keeps it: it kills this process, and the sandbox dies with it.
        """
        seconds = host_limits.timeout_seconds()
        request = LAUNCH.pack(*grid, *block, shared_bytes, frame_bytes, mode, int(checked)) + bytes(args)
        try:
            with self._lock:
                self._ensure()
                rc, text, elapsed = self._call(OP_LAUNCH, request, seconds=seconds)
        except SandboxDied as exc:
            return 1, str(exc), 0.0
        return (1, text or "failed (the sandbox gave no reason)", 0.0) if rc else (0, "", elapsed / 1e9)

    def set_bounds(self, entries: list[tuple[int, int, int]]) -> None:
        """The runtime's table of buffers and slacks for the read checks (empty: none)."""
        with self._lock:
            self._bounds = b"".join(struct.pack("=QQQ", *entry) for entry in entries)
            if self._pid:
                self._request(OP_BOUNDS, self._bounds)

    def write_global(self, name: str, data: bytes) -> None:
        index = self._index(name)
        rc, text, _ = self._request(OP_WRITE_GLOBAL, bytes(data), index=index)
        if rc == 2:
            raise MnemeError(
                f"device global {name!r} of kernel {self.kernel_name!r} lies in read-only memory; its "
                "recorded value cannot be restored on the host backend"
            )
        if rc:
            raise MnemeError(f"device global {name!r} of kernel {self.kernel_name!r}: {text}")
        self._written[index] = bytes(data)

    def read_global(self, name: str, size: int) -> bytes:
        rc, data, _ = self._request(OP_READ_GLOBAL, index=self._index(name), size=size)
        if rc or len(data) != size:
            raise MnemeError(f"device global {name!r} of kernel {self.kernel_name!r} could not be read: {data}")
        return data

    def _index(self, name: str) -> int:
        if name not in self._global_index:
            known = ", ".join(sorted(self._global_index)) or "none"
            raise MissingGlobalError(f"kernel {self.kernel_name!r} has no device global {name!r}; known: {known}")
        return self._global_index[name]

    def _request(self, op: int, payload: bytes = b"", **kw: Any) -> tuple[int, Any, int]:
        try:
            with self._lock:
                self._ensure()
                return self._call(op, payload, **kw)
        except SandboxDied as exc:
            raise ExperimentError(f"kernel {self.kernel_name!r}: {exc}", kind=exc.kind) from None
