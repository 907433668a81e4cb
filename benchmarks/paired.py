"""Two workloads (or one and several references) timed side by side on a shared machine: short alternating
batches, ratios per pair.

A machine shared with other sessions gives a workload its CPUs or not from one moment to the next: the
best of many runs of one side, then the best of the other, compares two different moments. Here the two
run in short batches, A B A B ..., each batch about `batch_seconds` long, and each ratio is taken between
the two batches of one pair, so both saw about the same load; the figure is the median of those ratios,
with its quartiles. Beside the wall time each batch reads the CPU time of the process doing the work (its
CPU clock, all threads, exact) and the time each of its threads ran and waited runnable for a CPU
(``/proc/PID/task/*/schedstat``, brought up to date at the scheduler's ticks and switches: per thread an
approximation): CPU time follows the code, not whether its threads got a CPU, and the wait says how much
they were held back. After each batch the next waits until the threads of the process that ran it have
stopped (`settle`): a C loop under libgomp's default policy spins for milliseconds after its last run, and
those spins took the CPUs from the start of whatever batch came next (the host backend after the spinning
C loop, waited 0.4 ms a launch on an idle machine; in the other order the sleeping C loop did).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def cpu_seconds(pid: int) -> float:
    """CPU seconds of all threads of process `pid` so far (its process CPU clock, as clock_getcpuclockid)."""
    if pid == os.getpid():
        return time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
    return time.clock_gettime((~pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process (linux/posix-timers.h)


def _task_files(pid: int, name: str):
    """(thread id, text of /proc/PID/task/TID/`name`) for each thread of `pid` still there when read."""
    folder = f"/proc/{pid}/task"
    for tid in os.listdir(folder):
        try:
            with open(f"{folder}/{tid}/{name}") as file:
                text = file.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
        if text.strip():  # empty: the thread ended while it was read
            yield int(tid), text


def thread_times(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of `pid`: (nanoseconds on a CPU, nanoseconds runnable and waiting), from schedstat."""
    times: dict[int, tuple[int, int]] = {}
    for tid, text in _task_files(pid, "schedstat"):
        run, wait, _ = text.split()
        times[tid] = (int(run), int(wait))
    return times


def running_threads(pid: int) -> int:
    """Threads of `pid` on a CPU or runnable (state R in /proc/PID/task/*/stat), the caller's own left out."""
    me = threading.get_native_id()
    # the state follows the command name, which is in parentheses and may hold anything
    return sum(tid != me and text.rpartition(")")[2].split()[0] == "R" for tid, text in _task_files(pid, "stat"))


def settle(pid: int, most: float = 0.1) -> float:
    """Wait (at most `most` seconds) until no thread of `pid` runs; the seconds waited."""
    start = time.perf_counter()
    while running_threads(pid) and time.perf_counter() - start < most:
        time.sleep(0.0002)
    return time.perf_counter() - start


@dataclass
class Batch:
    """One batch of `runs` runs: the median wall time of a run, and CPU time and wait per run."""

    runs: int
    wall: float  # seconds, the median of the runs as the workload itself timed them
    cpu: float  # seconds on a CPU per run, all threads of the process together (its CPU clock)
    waited: float  # seconds runnable but not running per run, all threads together (schedstat)
    threads: dict[int, float] = field(default_factory=dict)  # seconds on a CPU per run, per thread (schedstat)


def batch(run: Callable[[int], list[float]], runs: int, pid: Callable[[], int]) -> Batch:
    """Call `run(runs)` (returns the seconds of each run) between two reads of `pid()`'s thread times."""
    worker = pid()
    before, cpu_before = thread_times(worker), cpu_seconds(worker)
    walls = run(runs)
    worker_after = pid()
    cpu_after, after = cpu_seconds(worker_after), thread_times(worker_after)
    if worker_after != worker:  # the process was replaced (a sandbox restarted): its whole time is this batch's
        before, cpu_before = {}, 0.0
    threads, waited = {}, 0
    for tid, (ran, wait) in after.items():
        ran0, wait0 = before.get(tid, (0, 0))
        threads[tid] = (ran - ran0) / 1e9 / runs
        waited += wait - wait0
    settle(worker_after)  # the next batch starts with this process's threads asleep
    return Batch(runs, statistics.median(walls), (cpu_after - cpu_before) / runs, waited / 1e9 / runs, threads)


@dataclass
class Pairs:
    """The batches of two workloads, `a` and `b`, taken in turn: a[i] and b[i] are one pair."""

    a: list[Batch]
    b: list[Batch]

    def ratios(self, what: str = "wall") -> list[float]:
        """Per pair, b's figure over a's: with a the workload under test and b the reference, a's speed
        relative to b's (above 1: a faster)."""
        return [getattr(y, what) / getattr(x, what) for x, y in zip(self.a, self.b, strict=True)]

    @staticmethod
    def spread(values: list[float]) -> tuple[float, float, float]:
        """(median, lower quartile, upper quartile)."""
        if len(values) < 2:
            return values[0], values[0], values[0]
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return median, q1, q3

    def median(self, side: str, what: str) -> float:
        return statistics.median(getattr(batch, what) for batch in getattr(self, side))

    def per_thread(self, side: str) -> list[float]:
        """Seconds on a CPU per run for each thread that did at least 2% of the work, most first."""
        batches = getattr(self, side)
        total_runs = sum(batch.runs for batch in batches)
        threads: dict[int, float] = {}
        for batch in batches:
            for tid, seconds in batch.threads.items():
                threads[tid] = threads.get(tid, 0.0) + seconds * batch.runs
        per_run = sorted((seconds / total_runs for seconds in threads.values()), reverse=True)
        whole = sum(per_run)
        return [seconds for seconds in per_run if whole and seconds >= 0.02 * whole]


def runs_for(run: Callable[[int], list[float]], batch_seconds: float, most: int = 1000) -> int:
    """Runs of `run` that take about `batch_seconds` of wall time (its overhead included), at least 3."""
    start = time.perf_counter()
    run(3)
    each = (time.perf_counter() - start) / 3
    return max(3, min(most, int(batch_seconds / max(each, 1e-9))))


def paired(
    a: Callable[[int], list[float]],
    a_pid: Callable[[], int],
    b: Callable[[int], list[float]],
    b_pid: Callable[[], int],
    budget: float,
    batch_seconds: float = 0.02,
    least: int = 7,
    most: int = 100,
) -> Pairs:
    """Batches of `a` and `b` in turn (a, b, a, b, ...) for `budget` seconds, at least `least` pairs and at
    most `most`. `a(runs)` and `b(runs)` run their workload `runs` times and return each run's seconds;
    `a_pid()` and `b_pid()` name the process whose threads do that work (read before and after each batch)."""
    return paired_with(a, a_pid, [(b, b_pid)], budget, batch_seconds, least, most)[0]


def paired_with(
    a: Callable[[int], list[float]],
    a_pid: Callable[[], int],
    references: list[tuple[Callable[[int], list[float]], Callable[[], int]]],
    budget: float,
    batch_seconds: float = 0.02,
    least: int = 7,
    most: int = 100,
) -> list[Pairs]:
    """Batches of `a` and of each reference in turn (a, b1, b2, ..., a, b1, b2, ...), as `paired` does for one:
    one `Pairs` per reference, all sharing `a`'s batches (a[i] with each reference's i-th batch)."""
    a_runs = runs_for(a, batch_seconds)
    ref_runs = [runs_for(b, batch_seconds) for b, _ in references]
    ours: list[Batch] = []
    theirs: list[list[Batch]] = [[] for _ in references]
    end = time.perf_counter() + budget
    while len(ours) < least or (time.perf_counter() < end and len(ours) < most):
        ours.append(batch(a, a_runs, a_pid))
        for (b, b_pid), runs, batches in zip(references, ref_runs, theirs, strict=True):
            batches.append(batch(b, runs, b_pid))
    return [Pairs(ours, batches) for batches in theirs]
