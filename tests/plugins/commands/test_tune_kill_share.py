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
from tuning_sessions import capture_saxpy

from mneme.core.tuning.report import open_results
from mneme.core.tuning.store import COUNTED, EVALUATED


CLI = [sys.executable, "-m", "mneme"]
SPACE = ["--space", "quick", "-o", "axes=x", "--retime-top", "1", "--retime-repeats", "1", "--measure-time", "2"]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")

# `mneme tune`, SIGKILLed by itself right after its Nth ask of the study (MNEME_TEST_DIE_AT_ASK): the trial
# exists, RUNNING, and nothing says whose it is. The test wraps the real tuner; Mneme has no such hook.
DIE_AFTER_ASK = """
import os, signal, sys
from mneme.core.tuning import loop

asked, ask = [0], loop.TrialLoop._ask_trial

def ask_then_die(self):
    got = ask(self)
    asked[0] += 1
    if asked[0] == int(os.environ["MNEME_TEST_DIE_AT_ASK"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return got

loop.TrialLoop._ask_trial = ask_then_die
from mneme.core.interrupt import main
main()
"""


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
    fields = text[text.rindex(")") + 2 :].split()
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
    args = [
        "tune",
        "-rdb",
        saxpy_db,
        "--trials",
        4,
        "--iterations",
        100000,
        "--devices",
        "0,1",
        "--results",
        results,
        *SPACE,
    ]
    proc = subprocess.Popen(
        [*CLI, *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MNEME_HOST_DEVICES": "2"},
    )
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


def mneme(*args, timeout=240, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *map(str, args)], check=False, capture_output=True, text=True, timeout=timeout, **kwargs
    )


def _records(results: Path) -> list:
    store, _ = open_results(results)
    return store.records()


# -- a trial asked for and never claimed --------------------------------------------------------------
def test_a_trial_asked_for_by_a_tuner_killed_right_after_is_failed_as_interrupted_on_resume(saxpy_db, tmp_path):
    results = tmp_path / "run"
    args = ["tune", "-rdb", saxpy_db, "--sampler", "exhaustive", "--trials", 8, "--results", results, *SPACE]
    proc = subprocess.Popen(
        [sys.executable, "-c", DIE_AFTER_ASK, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MNEME_TEST_DIE_AT_ASK": "5"},
    )
    workers: dict[int, int] = {}
    try:
        _wait_for(lambda: (results / "session.json").is_file(), 120, proc)
        workers = _descendants(proc.pid)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, stderr
    finally:
        _kill_tree(proc.pid, workers)
    before = _records(results)
    # The fifth ask's trial: nobody claimed it; the experiment in flight (the tuner keeps two) is claimed.
    asked = [r for r in before if r.state == "RUNNING" and not r.owner]
    assert [(r.status, r.config) for r in asked] == [("running", None)]
    assert len([r for r in before if r.state == "RUNNING"]) <= 2
    assert len([r for r in before if r.status in COUNTED]) >= 2
    assert len(list((results / ".study.db.tuners").glob("*.tuner"))) == 1  # the killed tuner's entry, unlocked
    out = mneme(*args, "--resume")
    assert out.returncode == 0, out.stderr
    assert not list((results / ".study.db.tuners").glob("*.tuner"))  # the dead one's entry went with its trial
    after = _records(results)
    assert not [r.number for r in after if r.state == "RUNNING"]
    left = next(r for r in after if r.number == asked[0].number)
    assert (left.state, left.status) == ("FAIL", "interrupted")
    ran = [r.hash for r in after if r.status in EVALUATED]
    assert len(ran) == len(set(ran)) == 8  # the budget, each configuration once
    assert {r.number: r.value for r in after if r.number < asked[0].number} == {
        r.number: r.value for r in before if r.number < asked[0].number
    }  # nothing finished was lost or changed


# -- tuners starting together on one results folder --------------------------------------------------------
@pytest.mark.parametrize("apart", [0.0, 1.0], ids=["same-instant", "one-second-apart"])
def test_two_tuners_started_together_on_one_results_folder_share_one_budget_exactly(saxpy_db, tmp_path, apart):
    results = tmp_path / "run"
    # 40 of the space's 44 points: the second tuner joins while the first is at work.
    args = ["tune", "-rdb", saxpy_db, "--sampler", "exhaustive", "--trials", 40, "--results", results, *SPACE]
    procs = []
    for i in range(2):
        if i:
            time.sleep(apart)
        procs.append(
            subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, stderr) in zip(procs, outs, strict=True):
        assert p.returncode == 0, stderr
    store, _ = open_results(results)  # refuses a storage of several studies: there is one
    records = store.records()
    ran = [r.hash for r in records if r.status in EVALUATED]
    assert len(ran) == 40  # exactly the budget: they take turns checking it and claiming a trial
    assert len(set(ran)) == 40  # no configuration measured twice
    by_number = {r.number: r for r in records}
    for r in records:
        if r.status == "cached":
            assert by_number[r.cached_from].status in EVALUATED
    assert {r.owner["pid"] for r in records if r.status in EVALUATED} == {p.pid for p in procs}
    assert not [r.number for r in records if r.state == "RUNNING"]
    assert not list((results / ".study.db.tuners").glob("*.tuner"))  # both left


def test_a_tuner_of_another_study_is_refused_on_a_results_folder_in_use(saxpy_db, tmp_path):
    from click.testing import CliRunner

    from mneme.core.cli import cli
    from mneme.core.tuning.lease import Tuners

    results = tmp_path / "run"
    at_work = Tuners(results / ".study.db.tuners", "elsewhere")  # a live tuner of another space's study
    at_work.register({"pid": os.getpid(), "host": "here", "study": "mneme-other-study"})
    try:
        result = CliRunner().invoke(
            cli, [str(a) for a in ["tune", "-rdb", saxpy_db, "--trials", 2, "--results", results, *SPACE]]
        )
    finally:
        at_work.close()
    out = " ".join(result.output.split())
    assert result.exit_code == 2, out
    assert f"{results} is in use by a tuner (pid {os.getpid()} on here) of study 'mneme-other-study'" in out
    assert not (results / "study.db").exists()  # refused before the study was opened


def test_a_tuner_killed_right_after_asking_leaves_the_other_tuner_of_its_folder_the_exact_budget(saxpy_db, tmp_path):
    results = tmp_path / "run"
    args = ["tune", "-rdb", saxpy_db, "--sampler", "exhaustive", "--trials", 30, "--results", results, *SPACE]
    survivor = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = subprocess.Popen(
        [sys.executable, "-c", DIE_AFTER_ASK, *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MNEME_TEST_DIE_AT_ASK": "3"},
    )
    try:
        assert victim.wait(timeout=120) == -signal.SIGKILL
        _, stderr = survivor.communicate(timeout=240)
    finally:
        survivor.kill()
    assert survivor.returncode == 0, stderr
    records = _records(results)
    assert not [r.number for r in records if r.state == "RUNNING"]
    left = [r for r in records if r.owner.get("pid") in (None, victim.pid) and r.state == "FAIL"]
    assert [r.status for r in left if not r.owner] == ["interrupted"]  # the trial it asked for, never claimed
    ran = [r.hash for r in records if r.status in EVALUATED]
    # The victim's claimed experiment was failed too and run again by the survivor: still exactly the budget.
    table = [(r.number, r.state, r.status, r.owner.get("pid"), r.hash[:6], r.cached_from) for r in records]
    assert len(ran) == len(set(ran)) == 30, (table, victim.pid, stderr[-3000:])
    assert survivor.pid in {r.owner.get("pid") for r in records if r.status in EVALUATED}
