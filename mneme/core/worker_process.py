"""Starting a worker process: a fresh interpreter that imports only what a worker needs.

`multiprocessing`'s spawn start re-imports the parent's main module in every child (for the
`mneme` command, the whole CLI; for a script, whatever it imports) and starts a resource
tracker: about a third of a GPU worker's start-up, paid again on every respawn. A worker
needs neither: its entry point (`mneme.core.worker_servers.tune_worker_main`) and its three
arguments are all it runs. So the pool starts `python -c BOOT FD` itself, with one end of a
socket pair as FD; the child reads the parent's `sys.path` and its arguments from it, then
imports the worker's module and runs the entry point, talking over the same connection.
"""

from __future__ import annotations

import atexit
import subprocess
import sys
import weakref
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

# The child's first code: before `mneme` is importable it must see the parent's sys.path.
BOOT = (
    "import sys\n"
    "from multiprocessing.connection import Connection\n"
    "conn = Connection(int(sys.argv[1]))\n"
    "start = conn.recv()\n"
    "sys.path[:] = start['sys_path']\n"
    "from mneme.core.worker_servers import tune_worker_main\n"
    "tune_worker_main(conn, start['spec'], start['log_path'])\n"
)


# Workers still running when this interpreter exits are killed (as multiprocessing does its daemons).
_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _kill_live_workers() -> None:
    for process in list(_LIVE):
        process.kill()
        process.join(5)


class WorkerProcess:
    """A worker's process: `start()` it (the pool's end of its connection comes back), then
    `is_alive()`, `kill()`, `join()`, `exitcode` and `pid`, as `multiprocessing.Process` has them.

    Parameters
    ----------
    spec, log_path : the worker's arguments (`tune_worker_main`)
    executable : the interpreter to run (the pool's SIGINT-ignoring launcher); default `sys.executable`
    """

    def __init__(self, spec: dict[str, Any], log_path: str, executable: str | None = None):
        self._start_message = {"sys_path": list(sys.path), "spec": spec, "log_path": log_path}
        self._executable = executable or sys.executable
        self._popen: subprocess.Popen | None = None

    def start(self) -> Connection:
        """Start the interpreter; the connection to it (its start message already sent)."""
        parent, child = Pipe(duplex=True)
        fd = child.fileno()
        # The interpreter's own flags (-X, -W, -O...) carry over, as multiprocessing's spawn does.
        command = [self._executable, *subprocess._args_from_interpreter_flags(), "-c", BOOT, str(fd)]
        try:
            self._popen = subprocess.Popen(command, pass_fds=(fd,), stdin=subprocess.DEVNULL)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        _LIVE.add(self)
        parent.send(self._start_message)  # buffered by the socket; the child reads it first
        return parent

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def exitcode(self) -> int | None:
        """The exit code; a signal's number, negated, when one ended it (as multiprocessing reports)."""
        return self._popen.poll() if self._popen is not None else None

    def is_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def kill(self) -> None:
        if self.is_alive():
            try:
                self._popen.kill()
            except ProcessLookupError:  # ended meanwhile
                pass

    def join(self, timeout: float | None = None) -> None:
        if self._popen is None:
            return
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
