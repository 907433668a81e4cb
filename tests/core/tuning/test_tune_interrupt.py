"""`mneme tune` stopped as users stop it: Ctrl-C and SIGTERM at any moment, a retry after a failed start,
a stop by --timeout; real `mneme` processes on the host backend."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mneme.core.tuning.report import export_csv, open_results
from mneme.core.tuning.store import COUNTED, EVALUATED, ResultStore

MNEME = str(Path(sys.executable).with_name("mneme"))  # the console script users run
SPACE = ["--space", "quick", "-o", "axes=x", "--retime-top", "1", "--retime-repeats", "1"]


def as_foreground_job(ignore_sigint: bool = False):
    """The signal dispositions of a terminal's foreground command, whatever this test runner inherited
    (a CI runner may start it with SIGINT ignored, as a shell without job control starts `cmd &`)."""

    def apply() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return apply


def start(*args, ignore_sigint: bool = False) -> subprocess.Popen:
    # A session of its own: the signal goes to the whole group, as a terminal's Ctrl-C does.
    return subprocess.Popen(
        [MNEME, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_foreground_job(ignore_sigint),
    )


def finished(results: Path) -> int:
    if not (results / "session.json").exists():
        return 0
    try:
        store = ResultStore.load(f"sqlite:///{results / 'study.db'}")
    except Exception:  # not created yet
        return 0
    return sum(r.status in COUNTED for r in store.records())


def stop(proc: subprocess.Popen, signum: int, group: bool = True) -> tuple[int, str]:
    try:
        if group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of its workers
        except ProcessLookupError:
            pass
    return proc.returncode, stdout + stderr


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([MNEME, *map(str, args)], capture_output=True, text=True, timeout=300, check=False)


def resume_command(out: str) -> list[str]:
    found = re.search(r"^\s*(mneme tune .*--resume.*)$", out, re.MULTILINE)
    assert found, out
    words = shlex.split(found.group(1))
    return [MNEME, *words[1:]]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_tuning_saves_the_trials_and_prints_the_exact_resume_command(saxpy_db, tmp_path, signum, code):
    results = tmp_path / "run"
    # many timed runs per experiment: the search lasts seconds, not the one second a busy CI machine's
    # first look at the store can take (the tuner then finished before it could be stopped)
    proc = start(
        "tune",
        "-rdb",
        saxpy_db,
        "--sampler",
        "exhaustive",
        "--trials",
        24,
        "--results",
        results,
        *SPACE,
        "--iterations",
        600,
    )
    deadline = time.monotonic() + 180
    while finished(results) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, "the tuner finished before it could be stopped"
    returncode, out = stop(proc, signum, group=signum == signal.SIGINT)
    assert returncode == code, out
    assert "Traceback" not in out and "Aborted" not in out
    saved = finished(results)
    assert 3 <= saved < 24
    assert re.search(rf"\b{saved} trials? (are )?saved", out), out
    store, _ = open_results(results)
    assert not [r for r in store.records() if r.status == "running"]  # in-flight trials were marked
    interrupted = [r for r in store.records() if r.status == "interrupted" and r.config]
    # The printed command continues the run.
    again = subprocess.run(resume_command(out), capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    store, _ = open_results(results)
    records = store.records()
    assert not [r for r in records if r.status == "running"]
    export_csv(store, tmp_path / "t.csv")
    assert ",running," not in (tmp_path / "t.csv").read_text()
    ran = [r.hash for r in records if r.status in EVALUATED]
    assert len(ran) == len(set(ran)) == 24  # nothing ran twice, the budget is complete
    for r in interrupted:
        assert r.hash in ran  # the interrupted experiment ran again


@pytest.mark.parametrize("delay", [0.3, 1.0, 2.0, 3.5])
def test_ctrl_c_at_any_moment_of_start_up_exits_130_without_a_traceback(saxpy_db, tmp_path, delay):
    results = tmp_path / "run"
    args = ["tune", "-rdb", saxpy_db, "--sampler", "exhaustive", "--trials", 24, "--results", results, *SPACE]
    # many timed runs per experiment and a budget that outlasts the delays: at every delay the tuner
    # is still starting or searching, however fast this machine runs one experiment
    proc = start(*args[:6], 200, *args[7:], "--iterations", 400)
    time.sleep(delay)
    if proc.poll() is not None:
        pytest.fail(f"the tuner ended within {delay} s: {proc.communicate()}")
    returncode, out = stop(proc, signal.SIGINT)
    assert returncode == 130, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out and "Aborted" not in out, out
    if finished(results) == 0 and delay == 2.0:
        # Nothing was finished: the same command, without --resume, may use the folder again.
        again = run(*args[: -len(SPACE)], *SPACE[:4], "--trials", 3, "--retime-top", 0)
        assert again.returncode == 0, again.stdout + again.stderr


def test_a_sigint_the_tuner_was_started_ignoring_stays_ignored(saxpy_db, tmp_path):
    # `mneme tune ... &` from a script: the Ctrl-C meant for the foreground command must not stop it.
    results = tmp_path / "run"
    proc = start(
        "tune",
        "-rdb",
        saxpy_db,
        "--sampler",
        "exhaustive",
        "--trials",
        200,
        "--results",
        results,
        *SPACE,
        "--iterations",
        400,
        ignore_sigint=True,
    )
    deadline = time.monotonic() + 180
    while finished(results) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None, proc.communicate()
    returncode, out = stop(proc, signal.SIGTERM, group=False)
    assert returncode == 143, out
    assert "SIGINT" not in out and "SIGTERM" in out, out


def test_a_run_that_failed_before_its_first_trial_can_be_retried_without_resume(saxpy_db, tmp_path):
    results = tmp_path / "run"
    bad = run("tune", "-rdb", saxpy_db, "--devices", "0,5", "--results", results, *SPACE)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    good = run("tune", "-rdb", saxpy_db, "--trials", 3, "--results", results, *SPACE)
    assert good.returncode == 0, good.stdout + good.stderr
    # A folder holding a finished trial still asks for --resume.
    again = run("tune", "-rdb", saxpy_db, "--trials", 5, "--results", results, *SPACE)
    assert again.returncode == 2 and "--resume" in again.stderr


def test_a_stop_by_timeout_says_so(saxpy_db, tmp_path):
    results = tmp_path / "run"
    out = run("tune", "-rdb", saxpy_db, "--trials", 1000, "--timeout", 1, "--results", results, *SPACE)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join((out.stdout + out.stderr).split())
    assert "stopped by --timeout 1" in text, text
    summary = json.loads((results / "summary.json").read_text())
    assert summary["stop"]["reason"] == "timeout"
