"""`mneme tune` killed, resumed and sharing one results folder, as a user runs it: real tuner processes on
the host backend, SIGKILL at chosen points, the stored study read back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_tuning_session import capture_saxpy


CLI = [sys.executable, "-m", "mneme"]
SPACE = ["--space", "quick", "-o", "axes=x", "--retime-top", "1", "--retime-repeats", "1", "--measure-time", "2"]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    return capture_saxpy(tmp_path_factory.mktemp("saxpy"))


# -- processes, read from /proc ----------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int, int] | None:
    """State, parent pid and start time (clock ticks since boot) of a process; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[19])


def _descendants(pid: int) -> dict[int, int]:
    """Every process below `pid` (children, their children, ...): pid -> start time."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                parents.setdefault(stat[1], []).append(int(entry.name))
                starts[int(entry.name)] = stat[2]
    found, todo = {}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child in starts:
                found[child] = starts[child]
                todo.append(child)
    return found


def _running(processes: dict[int, int]) -> list[int]:
    """Of `processes` (pid -> start time), those still running (a zombie or a reused pid is gone)."""
    alive = []
    for pid, start in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z" and stat[2] == start:
            alive.append(pid)
    return alive


def _kill_tree(pid: int, others: dict[int, int]) -> None:
    for victim in [pid, *_running(others)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _wait_for(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the tuner ended before the point the test waits for"
        assert time.monotonic() < deadline, "the tuner never reached the point the test waits for"
        time.sleep(0.05)


# -- no worker outlives its tuner -----------------------------------------------------------------------
def test_no_worker_outlives_a_tuner_killed_with_sigkill(saxpy_db, tmp_path):
    results = tmp_path / "run"
    # 100000 timed runs make each experiment (the baseline first) take seconds: the workers are mid-experiment
    # when the tuner dies, where they do not read their pipe (before the fix they outlived it by the rest of it).
    args = ["tune", "-rdb", saxpy_db, "--trials", 4, "--iterations", 100000, "--devices", "0,1", "--results",
            results, *SPACE]
    proc = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "MNEME_HOST_DEVICES": "2"})
    workers: dict[int, int] = {}
    try:
        _wait_for(lambda: (results / "session.json").is_file(), 120, proc)  # the pool is up, the baseline runs
        time.sleep(1.0)
        workers = _descendants(proc.pid)
        assert len(workers) >= 2, workers  # a worker per device (and their sandbox processes)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
        while _running(workers) and time.monotonic() - killed < 5:
            time.sleep(0.02)
        outlived = time.monotonic() - killed
        assert not _running(workers), f"processes {_running(workers)} outlived their tuner by 5 s"
        assert outlived < 1.0, f"the tuner's processes outlived it by {outlived:.2f} s"
    finally:
        _kill_tree(proc.pid, workers)
