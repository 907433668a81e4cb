"""examples/slurm: the tuners a job array launches share one study (run here as concurrent processes)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mneme
from mneme.core.tuning.report import open_results
from mneme.core.tuning.store import COUNTED, EVALUATED, ResultStore
from test_tune_cli import postgres_url  # noqa: F401 - the fixture: a PostgreSQL server of the test's own
from paths import ROOT

SLURM = ROOT / "examples" / "slurm"
TASK = SLURM / "tune-task.sh"
SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
N = 4096


@pytest.mark.parametrize("script", ["tune-array.sbatch", "tune-array-postgres.sbatch"])
def test_each_array_task_runs_tune_task_and_the_scripts_parse(script):
    text = (SLURM / script).read_text()
    assert re.search(r"^#SBATCH --array=\d+-\d+$", text, re.MULTILINE)
    assert re.search(r'^srun "\$task"$', text, re.MULTILINE) and "tune-task.sh" in text
    for path in (SLURM / script, TASK):
        proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def _three_tasks_share_one_study(tmp_path, storage):
    db = mneme.capture(
        SAXPY_IR,
        "saxpy",
        16,
        256,
        [np.int32(N), np.float32(2.0), np.arange(N, dtype=np.float32), np.ones(N, dtype=np.float32)],
        tmp_path / "rec",
        backend="host",
    )
    env = {
        **os.environ,
        "MNEME": f"{sys.executable} -m mneme",
        "MNEME_RECORDING": str(db),
        "MNEME_STORAGE": storage,
        "MNEME_STUDY": "array",
        "MNEME_TRIALS": "9",
        "MNEME_SPACE": "quick",
        "MNEME_SAMPLER": "random",
        "MNEME_SEED": "5",
        "MNEME_BACKEND": "host",
        "MNEME_RESULTS": str(tmp_path / "results"),
        "MNEME_TUNE_ARGS": "--iterations 1 --retime-top 1 --retime-repeats 1",
        "SLURM_ARRAY_JOB_ID": "77",
    }
    tasks = [
        subprocess.Popen(
            ["bash", str(TASK)],
            env={**env, "SLURM_ARRAY_TASK_ID": str(i)},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outputs = [task.communicate(timeout=400) for task in tasks]
    for task, (_, stderr) in zip(tasks, outputs):
        assert task.returncode == 0, stderr
    records = ResultStore.load(storage, "array").records()
    counted = [r for r in records if r.status in COUNTED]
    # One budget of experiments run: each tuner checks it before each ask, so each may take one more
    # while another takes the last; a point another tuner measured meanwhile is answered from the
    # store (`cached`), spends nothing and points at the experiment that ran.
    evaluated = [r for r in records if r.status in EVALUATED]
    assert 9 <= len(evaluated) <= 9 + len(tasks)
    by_number = {r.number: r for r in records}
    assert all(by_number[r.cached_from].status in EVALUATED for r in records if r.status == "cached")
    # The tuners split the one budget: trials from more than one of them (on a loaded machine the
    # last to start can find the budget spent), and from no other process.
    owners = {r.owner["pid"] for r in counted}
    assert len(owners) >= 2 and owners <= {task.pid for task in tasks}
    ran = [r.hash for r in records if r.status in EVALUATED]
    assert len(ran) == len(set(ran))  # no configuration ran twice across the tuners
    # Each task's results folder reads the whole shared study.
    for i in range(3):
        store, session = open_results(tmp_path / "results" / f"task-{i}")
        assert session["storage"] == storage and len(store.records()) == len(records)


@pytest.mark.slow
def test_three_array_tasks_share_one_journal_study(tmp_path):
    _three_tasks_share_one_study(tmp_path, f"journal:{tmp_path / 'shared' / 'study.log'}")


@pytest.mark.slow
def test_three_array_tasks_share_one_postgresql_study(tmp_path, postgres_url):  # noqa: F811
    _three_tasks_share_one_study(tmp_path, postgres_url)
