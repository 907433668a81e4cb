"""The default store of a results folder's study.db keeps Optuna's tables through sqlite3 (issue 39, point 5):
Optuna reads what it writes and it reads what Optuna writes, queued points included, and a `mneme tune` call
imports neither Optuna nor SQLAlchemy."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import optuna
import pytest
from paths import ROOT

from mneme.core.tuning.distributions import Categorical, FloatRange, IntRange
from mneme.core.tuning.storage import TrialState, open_store
from mneme.plugins.samplers.optuna_store import OptunaStore
from mneme.plugins.samplers.sqlite_store import ALEMBIC_REVISION, SqliteStore

DOMAINS = {
    "block_x": IntRange(0, 10, 2),
    "specialize": Categorical([True, False]),
    "unroll": Categorical(["none", 1, None]),
    "scale": FloatRange(1e-3, 1.0, log=True),
}


def test_the_default_store_of_a_sqlite_file_is_the_sqlite3_one(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'study.db'}", "s", create=True)
    assert isinstance(store, SqliteStore) and store.created


def test_optuna_reads_a_study_written_here_with_its_params_values_and_attributes(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    store = SqliteStore.open(url, "s", create=True)
    done = store.ask(DOMAINS, {"block_x": 4, "specialize": False, "unroll": None, "scale": 0.5})
    store.set_trial_attr(done.id, "status", "ok")
    store.tell(done.id, 2.5)
    store.set_study_attr("mneme", {"kernel": "saxpy", "sizes": [1, 2]})
    running = store.ask(DOMAINS, {"block_x": 6, "specialize": True, "unroll": 1, "scale": 0.1})
    study = optuna.load_study(study_name="s", storage=url)
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    assert study.user_attrs == {"mneme": {"kernel": "saxpy", "sizes": [1, 2]}}
    first, second = study.trials
    assert (first.number, first.state, first.value, first.user_attrs) == (
        0,
        optuna.trial.TrialState.COMPLETE,
        2.5,
        {"status": "ok"},
    )
    assert first.params == {"block_x": 4, "specialize": False, "unroll": None, "scale": 0.5}
    assert (second.number, second.state, second.params["unroll"]) == (1, optuna.trial.TrialState.RUNNING, 1)
    assert second._trial_id == running.id


def test_a_study_optuna_wrote_reads_here_and_its_queued_point_is_asked_first(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    theirs = OptunaStore.open(url, "s", create=True)
    trial = theirs.ask(DOMAINS, {"block_x": 10, "specialize": True, "unroll": "none", "scale": 1.0})
    theirs.tell(trial.id, 1.5)
    theirs.enqueue({"block_x": 2, "specialize": False, "unroll": 1, "scale": 0.3})
    ours = SqliteStore.open(url, None, create=False)
    assert ours is not None and ours.study_name == "s" and not ours.created
    states = [(t.number, t.state, t.value) for t in ours.trials()]
    assert states == [(0, TrialState.COMPLETE, 1.5), (1, TrialState.WAITING, None)]
    asked = ours.ask(DOMAINS, {"block_x": 0, "specialize": True, "unroll": None, "scale": 0.2})
    assert asked.number == 1 and dict(asked.params) == {"block_x": 2, "specialize": False, "unroll": 1, "scale": 0.3}
    again = ours.ask(DOMAINS, {"block_x": 0, "specialize": True, "unroll": None, "scale": 0.2})
    assert again.number == 2 and again.params["block_x"] == 0


def test_a_finished_trial_takes_no_update_and_fails_only_once(tmp_path):
    store = SqliteStore.open(f"sqlite:///{tmp_path / 'study.db'}", "s", create=True)
    trial = store.ask({}, {})
    assert store.fail(trial.id) and not store.fail(trial.id)
    from mneme.core.tuning.lease import TrialFinished

    with pytest.raises(TrialFinished):
        store.set_trial_attr(trial.id, "status", "ok")
    with pytest.raises(TrialFinished):
        store.tell(trial.id, 1.0)


def test_a_file_of_another_schema_revision_is_left_to_optunas_store(tmp_path):
    path = tmp_path / "study.db"
    url = f"sqlite:///{path}"
    SqliteStore.open(url, "s", create=True)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = 'v9.9.9'")
    assert SqliteStore.open(url, "s", create=False) is None
    assert ALEMBIC_REVISION != "v9.9.9"


def test_a_tune_call_imports_neither_optuna_nor_sqlalchemy(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("name: blocks\nparameters:\n  block_x: {ordinal: [32, 64, 128, 256]}\n")
    script = (
        "import json, sys\n"
        "from mneme.core.tuning.session import TuneOptions, TuningSession\n"
        f"options = TuneOptions(record_db={str(ROOT / 'examples' / 'recordings' / 'saxpy-4k')!r}, "
        f"space={str(space)!r}, trials=4, results={str(tmp_path / 'run')!r}, retime_top=0, backend='host')\n"
        "summary = TuningSession(options).run()\n"
        "print(json.dumps({'trials': summary['counts']['trials'], 'sampler': options.sampler,\n"
        "  'loaded': sorted(m for m in ('optuna', 'sqlalchemy', 'alembic', 'nevergrad') if m in sys.modules)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"trials": 4, "sampler": "guided", "loaded": []}
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}")
    assert sum(t.user_attrs.get("status") == "ok" for t in study.trials) == 4  # and Optuna reads the folder's study
