"""benchmarks/paired.py: two workloads (or one and several references) in alternating batches, compared pair by pair,
with their CPU time; the host-throughput benchmark's C loop in a process of its own per OpenMP wait policy."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def paired(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import paired

    return paired


def _burn(cpu_seconds: float) -> None:
    """Spin until this thread has run `cpu_seconds` on a CPU (whatever the machine's load)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def _workload(order: list[str], tag: str, seconds: float):
    """A batch runner doing `seconds` of CPU work a run; each call appends `tag` to `order`."""

    def run(runs: int) -> list[float]:
        order.append(tag)
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            _burn(seconds)
            walls.append(time.perf_counter() - start)
        return walls

    return run


def test_batches_alternate_and_the_ratios_follow_the_work(paired):
    order: list[str] = []

    workload = functools.partial(_workload, order)
    pairs = paired.paired(
        workload("a", 0.001), os.getpid, workload("b", 0.002), os.getpid, budget=0.0, batch_seconds=0.01, least=5
    )
    assert len(pairs.a) == len(pairs.b) == 5
    # after the two calls that size the batches, a and b in turn
    assert order[2:] == ["a", "b"] * 5
    cpu = paired.Pairs.spread(pairs.ratios("cpu"))[0]
    assert 1.7 < cpu < 2.3  # b does twice a's work a run, on a CPU
    assert all(batch.cpu >= 0.001 for batch in pairs.a)
    assert all(batch.runs >= 3 for batch in pairs.a + pairs.b)


def test_several_references_take_their_turns_after_each_batch_of_the_workload(paired):
    order: list[str] = []

    workload = functools.partial(_workload, order)
    refs = [(workload("b", 0.002), os.getpid), (workload("c", 0.0005), os.getpid)]
    b, c = paired.paired_with(workload("a", 0.001), os.getpid, refs, budget=0.0, batch_seconds=0.01, least=4)
    assert order[3:] == ["a", "b", "c"] * 4  # after the three calls that size the batches
    assert b.a is c.a and len(b.b) == len(c.b) == 4
    assert 1.7 < paired.Pairs.spread(b.ratios("cpu"))[0] < 2.3
    assert 0.35 < paired.Pairs.spread(c.ratios("cpu"))[0] < 0.65


@contextlib.contextmanager
def _child(script: str):
    """A Python process running `script`, killed at the end."""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_cpu_seconds_reads_another_process_clock(paired):
    script = (
        "import sys, time\n"
        "end = time.process_time() + 0.2\n"
        "while time.process_time() < end: pass\n"
        "print('done', flush=True)\n"
        "time.sleep(30)\n"
    )
    with _child(script) as child:
        assert child.stdout.readline().strip() == "done"
        seconds = paired.cpu_seconds(child.pid)
        threads = paired.thread_times(child.pid)
    assert 0.2 <= seconds < 2.0
    assert child.pid in threads  # the main thread, by its id
    assert sum(run for run, _ in threads.values()) > 0.1e9


def test_settle_waits_until_the_other_process_stops_running(paired):
    # a process that keeps its CPU for 0.3 s of CPU time after saying so, then sleeps: as a spinning OpenMP
    # loop's threads do after their last run
    script = (
        "import time\n"
        "print('spinning', flush=True)\n"
        "end = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\n"
        "time.sleep(30)\n"
    )
    with _child(script) as child:
        assert child.stdout.readline().strip() == "spinning"
        assert paired.running_threads(child.pid) == 1
        waited = paired.settle(child.pid, most=30.0)
        cpu = paired.cpu_seconds(child.pid)
        assert paired.running_threads(child.pid) == 0
        assert paired.settle(child.pid) < 0.05  # asleep: at once
    assert cpu >= 0.3  # it returned only once the spinning was over
    assert waited > 0.1


def test_settle_gives_up_after_its_limit(paired):
    with _child("while True: pass") as child:
        time.sleep(0.05)
        start = time.perf_counter()
        paired.settle(child.pid, most=0.2)
        assert 0.2 <= time.perf_counter() - start < 5.0
        assert paired.running_threads(child.pid) == 1


def test_spread_is_median_and_quartiles(paired):
    assert paired.Pairs.spread([5.0, 1.0, 3.0, 2.0, 4.0]) == (3.0, 2.0, 4.0)
    assert paired.Pairs.spread([0.7]) == (0.7, 0.7, 0.7)


def test_per_thread_keeps_threads_doing_a_share_of_the_work(paired):
    batches = [
        paired.Batch(runs=10, wall=1.0, cpu=1.0, waited=0.0, threads={1: 0.6, 2: 0.39, 3: 0.01}),
        paired.Batch(runs=30, wall=1.0, cpu=1.0, waited=0.0, threads={1: 0.5, 2: 0.5}),
    ]
    pairs = paired.Pairs(batches, batches)
    shares = pairs.per_thread("a")
    # thread 3: 0.1 of 40 s-runs, under 2%; the others weighted by runs
    assert shares == pytest.approx([(6 + 15) / 40, (3.9 + 15) / 40])


@pytest.fixture
def throughput(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH.parent / "tests"))
    import bench_host_throughput

    return bench_host_throughput


@pytest.mark.parametrize("policy", ["passive", "spin"])
def test_the_c_loop_runs_in_a_process_of_its_own_under_its_wait_policy(throughput, tmp_path, monkeypatch, policy):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    try:
        lib = throughput.c_library(tmp_path)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no C compiler with OpenMP here: {exc}")
    loops = throughput.CLoops(lib, 1 << 12, policy)
    try:
        times = loops.times(throughput.KINDS["sum"], 1 << 12, 2, 5)
        environ = Path(f"/proc/{loops.pid()}/environ").read_bytes().split(b"\0")
    finally:
        loops.close()
    assert loops.pid() != os.getpid() and loops.process.returncode == 0
    assert len(times) == 5 and all(0 < t < 1.0 for t in times)
    assert (b"OMP_WAIT_POLICY=passive" in environ) is (policy == "passive")
