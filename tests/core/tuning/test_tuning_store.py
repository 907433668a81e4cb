"""The result store: storage URLs, run identity checks, budgets, interrupted trials (on the default store)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mneme.core.errors import UsageError
from mneme.core.tuning.distributions import IntRange
from mneme.core.tuning.lease import Lease, StaleWatch
from mneme.core.tuning.storage import TrialState
from mneme.core.tuning.store import ResultStore, owner, storage_url
from mneme.core.types import ExperimentConfiguration

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
    trial = store.ask({"x": IntRange(0, 3)}, {"x": 2})
    store.annotate(trial, "status", "ok")
    store.tell(trial, 1.5)
    again = ResultStore.load(url)
    assert [r.value for r in again.records()] == [1.5]


def test_an_unknown_storage_is_a_usage_error_naming_the_forms_the_default_store_takes(tmp_path):
    with pytest.raises(UsageError, match="no plugin keeps tuning results at storage 'redis-ish'.*journal:PATH"):
        ResultStore.create_or_load("redis-ish", "s")


def test_a_study_of_another_kernel_is_refused_unless_forced(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    store.set_meta(IDENTITY)
    assert store.check_meta(dict(IDENTITY), force=False) == []
    other = {**IDENTITY, "static_hash": "s2", "env": "e2"}
    with pytest.raises(UsageError, match="kernel: stored 's1', now 's2'.*environment"):
        store.check_meta(other, force=False)
    assert len(store.check_meta(other, force=True)) == 2


def test_budget_counts_measured_and_running_trials_but_not_duplicates_or_infeasible_ones(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    for status in ("ok", "failed", "cached", "infeasible", "unverified"):
        trial = store.ask({}, {})
        store.annotate(trial, "status", status)
        store.annotate(trial, "hash", f"h-{status}")
        store.tell(trial, 1.0)
    running = store.ask({}, {})
    store.annotate(running, "status", "running")
    assert store.budget_used() == 4  # ok, failed, unverified, running: a cached duplicate spends nothing
    assert set(store.evaluated()) == {"h-ok", "h-failed", "h-unverified"}


def test_trials_of_a_dead_process_on_this_host_are_orphans_and_can_be_marked_interrupted(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    orphan = store.ask({"x": IntRange(0, 3)}, {"x": 1})
    store.annotate(orphan, "owner", {**owner(), "pid": int(dead.stdout)})
    store.annotate(orphan, "status", "running")
    mine = store.ask({}, {})
    store.annotate(mine, "owner", owner())
    found = store.orphans()
    assert [t.number for t in found] == [orphan.number]
    store.mark_interrupted(found[0])
    record = {r.number: r for r in store.records()}[orphan.number]
    assert (record.state, record.status) == ("FAIL", "interrupted")
    assert store.trials(states=(TrialState.RUNNING,))[0].number == mine.number


def _foreign_owner(grace: float | None) -> dict:
    found = {**owner(), "host": "another-node", "session": "other"}  # not this host: no pid to check
    if grace:
        found["lease"] = {"interval": grace / 3, "grace": grace}
    return found


def _wait_for_stale(store, watch, limit: float = 20.0) -> list:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        failed = store.fail_stale(watch, "mine")
        if failed:
            return failed
        time.sleep(0.1)
    return []


def test_a_journal_trial_whose_lease_is_no_longer_refreshed_is_failed_after_its_grace(tmp_path):
    store, _ = ResultStore.create_or_load(f"journal:{tmp_path / 'study.log'}", "s")
    live, dead, unleased = (store.ask({}, {}) for _ in range(3))
    for trial in (live, dead):
        store.annotate(trial, "owner", _foreign_owner(grace=0.6))
    store.annotate(unleased, "owner", _foreign_owner(grace=None))  # --heartbeat 0: never failed by a lease
    lease = Lease(store.beat, 0.1, at_hold=False)
    try:
        lease.hold(live.id)
        lease.hold(dead.id)
        time.sleep(0.3)
        lease.release(dead.id)  # its process died: nobody refreshes it any more
        started = time.monotonic()
        failed = _wait_for_stale(store, StaleWatch(default_grace=0.6))
        waited = time.monotonic() - started
    finally:
        lease.close()
    assert [t.number for t in failed] == [dead.number]
    assert waited >= 0.6
    states = {r.number: (r.state, r.status) for r in store.records()}
    assert states[dead.number] == ("FAIL", "interrupted")
    assert states[live.number][0] == states[unleased.number][0] == "RUNNING"


def test_a_database_trial_whose_heartbeat_stopped_is_failed_by_optunas_heartbeat_check(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s", heartbeat=1)
    assert store.has_heartbeat
    live, dead = store.ask({}, {}), store.ask({}, {})
    lease = Lease(store.beat, 1, at_hold=True)
    try:
        for trial in (live, dead):
            lease.hold(trial.id)  # the first heartbeat
            store.annotate(trial, "owner", _foreign_owner(grace=3))
            store.annotate(trial, "status", "running")
        lease.release(dead.id)
        failed = _wait_for_stale(store, StaleWatch(default_grace=3, owned=False))
    finally:
        lease.close()
    assert [t.number for t in failed] == [dead.number]
    states = {r.number: (r.state, r.status) for r in store.records()}
    assert states[dead.number] == ("FAIL", "interrupted")
    assert states[live.number] == ("RUNNING", "running")


def test_a_trial_failed_after_its_result_was_half_written_is_interrupted_and_spends_no_budget(tmp_path):
    # The status attribute is written just before the trial is told: a process killed in between leaves a running
    # trial that says "ok", which Optuna's heartbeat check then fails without a value.
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s", heartbeat=1)
    lease = Lease(store.beat, 1, at_hold=True)
    try:
        trial = store.ask({}, {})
        lease.hold(trial.id)
        store.annotate(trial, "owner", _foreign_owner(grace=3))
        store.annotate(trial, "status", "ok")
        store.annotate(trial, "hash", "h")
        assert [(r.state, r.status) for r in store.records()] == [("RUNNING", "running")]
        assert store.budget_used() == 1
        lease.release(trial.id)
        failed = _wait_for_stale(store, StaleWatch(default_grace=3, owned=False))
    finally:
        lease.close()
    assert [t.number for t in failed] == [trial.number]
    (record,) = store.records()
    assert (record.state, record.status, record.value, record.ok) == ("FAIL", "interrupted", None, False)
    assert store.budget_used() == 0 and store.evaluated() == {}


def test_an_orphan_already_found_a_duplicate_ends_a_duplicate_not_interrupted(tmp_path):
    # Its process was found to have asked a configuration another process runs, and died before telling the study.
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    duplicate, running = store.ask({}, {}), store.ask({}, {})
    for trial, status in ((duplicate, "duplicate"), (running, "running")):
        store.annotate(trial, "owner", {**owner(), "pid": int(dead.stdout)})
        store.annotate(trial, "status", status)
    failed = store.fail_stale(None, "mine")
    assert sorted(t.number for t in failed) == [duplicate.number, running.number]
    states = {r.number: (r.state, r.status) for r in store.records()}
    assert states == {duplicate.number: ("FAIL", "duplicate"), running.number: ("FAIL", "interrupted")}
    assert store.budget_used() == 0


def test_a_trial_failed_before_it_had_a_status_is_interrupted(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    trial = store.ask({}, {})  # its process died before it wrote anything
    store.fail(trial)
    assert [(r.state, r.status) for r in store.records()] == [("FAIL", "interrupted")]
    assert store.budget_used() == 0


def test_a_trial_killed_between_writing_its_configuration_and_its_hash_reads_with_the_configurations_hash(tmp_path):
    store, _ = ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    config = ExperimentConfiguration(grid=(32, 1, 1), block=(128, 1, 1), specialize=True)
    trial = store.ask({}, {})
    store.annotate(trial, "config", config.to_dict())  # its process died before it wrote "hash"
    store.fail(trial)
    (record,) = store.records()
    assert record.status == "interrupted" and record.hash == config.hash() != ""
