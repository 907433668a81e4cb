"""The result store is a plugin (issue 37, point 2): the core reaches it through the `Store` protocol and the
``mneme_store_for_url`` hook; the optuna plugin's store opens the studies written so far and resumes them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mneme.core import plugins
from mneme.core.errors import PluginError
from mneme.core.hookspecs import hookimpl
from mneme.core.tuning.storage import NoStoreError, Store, TrialState, open_store
from mneme.core.tuning.store import COUNTED, ResultStore, storage_url
from paths import DATA, ROOT

DRIFT = DATA / "studies" / "host-same-code-drift"
V1 = DATA / "config-v1" / "results"


def _mneme(*args, env=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mneme", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


def _copy_study(source: Path, tmp_path: Path) -> Path:
    """A results folder copied from a committed one, its session pointing at the copy's study.db."""
    results = tmp_path / "results"
    shutil.copytree(source, results)
    session = json.loads((results / "session.json").read_text())
    session["storage"] = f"sqlite:///{results / 'study.db'}"
    (results / "session.json").write_text(json.dumps(session))
    return results


def _rows(store: ResultStore) -> list[tuple]:
    return [(r.number, r.state, r.status, r.value, r.hash, r.cached_from) for r in store.records()]


def test_the_default_store_of_a_sqlite_url_is_a_store_and_its_trials_carry_the_cores_states(tmp_path):
    backing = open_store(storage_url(None, tmp_path), "s", create=True)
    assert isinstance(backing, Store) and backing.created and not backing.has_heartbeat
    trial = backing.ask({}, {})
    backing.set_trial_attr(trial.id, "status", "ok")
    backing.tell(trial.id, 2.5)
    (told,) = backing.trials({TrialState.COMPLETE})
    assert (told.number, told.state, told.value, told.user_attrs["status"]) == (0, TrialState.COMPLETE, 2.5, "ok")
    assert backing.trials({TrialState.RUNNING}) == []
    again = open_store(storage_url(None, tmp_path), None, create=False)
    assert not again.created and again.study_name == "s" and again.trials()[0].value == 2.5


def test_every_committed_study_opens_through_the_store_protocol_with_its_trials(tmp_path):
    for folder, trials, measured in ((DRIFT, 6, 1), (V1, 3, 3)):
        session = json.loads((folder / "session.json").read_text())
        copy = tmp_path / folder.parent.name / "study.db"  # opening may write (WAL files); keep the fixture as is
        copy.parent.mkdir()
        shutil.copy(folder / "study.db", copy)
        store = ResultStore.load(f"sqlite:///{copy}", session["study"])
        records = store.records()
        assert len(records) == trials, folder
        assert sum(r.status in COUNTED - {"cached"} for r in records) == measured, folder
        assert store.meta["static_hash"] == session["static_hash"] and store.baseline["hash"]


@pytest.mark.slow
def test_a_committed_study_resumes_with_the_same_counts(tmp_path):
    """The drift study's exhaustive space is spent (1 measured, 5 answered from the store): resuming runs the
    baseline again, proposes nothing new, and keeps every trial as it was."""
    results = _copy_study(DRIFT, tmp_path)
    before = _rows(ResultStore.load(f"sqlite:///{results / 'study.db'}"))
    recording = ROOT / "examples" / "recordings" / "saxpy-4k" / "55e5213b2a493837.json"
    run = _mneme(
        "tune",
        "-rdb",
        recording,
        "--backend",
        "host",
        "--space",
        ROOT / "benchmarks" / "spaces" / "host-same-code.yaml",
        "--sampler",
        "exhaustive",
        "--trials",
        6,
        "--iterations",
        2,
        "--retime-top",
        0,
        "--results",
        results,
        "--resume",
        "--force",
        "--json",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    assert summary["stop"]["reason"] == "exhausted"
    assert (summary["counts"]["trials"], summary["counts"]["duplicates"], summary["counts"]["ok"]) == (1, 5, 1)
    assert _rows(ResultStore.load(f"sqlite:///{results / 'study.db'}")) == before
    report = _mneme("results", results, "--json")
    assert report.returncode == 0, report.stderr[-2000:]
    assert json.loads(report.stdout)["counts"]["trials"] == 1


def test_without_the_optuna_plugin_no_store_answers_and_the_command_says_so(tmp_path):
    results = _copy_study(DRIFT, tmp_path)
    run = _mneme("-p", "no:optuna", "results", results)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "no plugin keeps tuning results at storage 'sqlite:///" in run.stderr
    assert "plugins disabled in this process: optuna" in run.stderr and "Traceback" not in run.stderr


def test_without_a_store_plugin_opening_a_study_is_a_no_store_error(tmp_path, monkeypatch):
    monkeypatch.setenv(plugins.DISABLE_ENV, "optuna")
    plugins.reset()
    try:
        with pytest.raises(NoStoreError, match="disabled in this process: optuna"):
            ResultStore.create_or_load(storage_url(None, tmp_path), "s")
        assert not (tmp_path / "study.db").exists()
    finally:
        monkeypatch.delenv(plugins.DISABLE_ENV)
        plugins.reset()


class _WrongAnswer:
    """A plugin whose store hook answers with something that is not a Store (the error path only)."""

    @hookimpl(tryfirst=True)
    def mneme_store_for_url(self, url, study_name, create, heartbeat):
        return {"url": url}


def test_a_plugin_answering_with_no_store_is_a_plugin_error_naming_what_it_returned(tmp_path):
    plugins.register(_WrongAnswer(), "wrong-store")
    try:
        with pytest.raises(PluginError, match="returned dict .* not a Store"):
            ResultStore.create_or_load(storage_url(None, tmp_path), "s")
    finally:
        plugins.reset()


def test_without_a_plugin_that_draws_study_plots_only_the_speedups_are_written(tmp_path, monkeypatch, caplog):
    pytest.importorskip("matplotlib")
    from mneme.core.tuning.report import build_summary, write_plots

    results = _copy_study(DRIFT, tmp_path)
    store = ResultStore.load(f"sqlite:///{results / 'study.db'}")  # opened while the optuna plugin is loaded
    summary = build_summary(store)
    monkeypatch.setenv(plugins.DISABLE_ENV, "optuna")
    plugins.reset()
    try:
        with caplog.at_level("WARNING", logger="mneme.core.tuning.report"):
            written = write_plots(store, tmp_path / "plots", "png", summary=summary)
    finally:
        monkeypatch.delenv(plugins.DISABLE_ENV)
        plugins.reset()
    assert written == [tmp_path / "plots" / "speedups.png"]
    assert "no study plots: no plugin draws them" in caplog.text
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["speedups.png"]
