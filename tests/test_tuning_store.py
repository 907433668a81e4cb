"""The result store: Optuna storage URLs, run identity checks, budgets, interrupted trials."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from mneme.core.errors import UsageError
from mneme.core.tuning.store import ResultStore, open_storage, owner, storage_url

optuna.logging.set_verbosity(optuna.logging.WARNING)

IDENTITY = {"static_hash": "s1", "dynamic_hash": "d1", "space": "f1", "env": "e1"}


def test_default_storage_is_a_sqlite_file_in_the_results_folder(tmp_path):
    url = storage_url(None, tmp_path)
    assert url == f"sqlite:///{tmp_path.resolve()}/study.db"
    _, existed = ResultStore.create_or_load(url, "s")
    assert not existed and (tmp_path / "study.db").exists()
    assert ResultStore.create_or_load(url, "s")[1]


def test_journal_storage_keeps_trials_in_a_file(tmp_path):
    url = f"journal:{tmp_path / 'j' / 'study.log'}"
    store, _ = ResultStore.create_or_load(url, "s")
    trial = store.study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    trial.set_user_attr("status", "ok")
    store.study.tell(trial, 1.5)
    again = ResultStore.load(url)
    assert [r.value for r in again.records()] == [1.5]


def test_an_unknown_storage_is_a_usage_error():
    with pytest.raises(UsageError, match="journal:PATH"):
        open_storage("redis-ish")


def test_a_study_of_another_kernel_is_refused_unless_forced(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    store.set_meta(IDENTITY)
    assert store.check_meta(dict(IDENTITY), force=False) == []
    other = {**IDENTITY, "static_hash": "s2", "env": "e2"}
    with pytest.raises(UsageError, match="kernel: stored 's1', now 's2'.*environment"):
        store.check_meta(other, force=False)
    assert len(store.check_meta(other, force=True)) == 2


def test_budget_counts_finished_and_running_trials_but_not_infeasible_ones(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    for status in ("ok", "failed", "cached", "infeasible", "unverified"):
        trial = store.study.ask()
        trial.set_user_attr("status", status)
        trial.set_user_attr("hash", f"h-{status}")
        store.study.tell(trial, 1.0)
    running = store.study.ask()
    running.set_user_attr("status", "running")
    assert store.budget_used() == 5
    assert set(store.evaluated()) == {"h-ok", "h-failed", "h-unverified"}


def test_trials_of_a_dead_process_on_this_host_are_orphans_and_can_be_marked_interrupted(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)
    orphan = store.study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    orphan.set_user_attr("owner", {**owner(), "pid": int(dead.stdout)})
    orphan.set_user_attr("status", "running")
    mine = store.study.ask()
    mine.set_user_attr("owner", owner())
    found = store.orphans()
    assert [t.number for t in found] == [orphan.number]
    store.mark_interrupted(found[0])
    record = {r.number: r for r in store.records()}[orphan.number]
    assert (record.state, record.status) == ("FAIL", "interrupted")
    assert store.trials(states=(TrialState.RUNNING,))[0].number == mine.number
