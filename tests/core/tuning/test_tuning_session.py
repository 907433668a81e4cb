"""Tuning sessions on the host backend with real captured kernels: every sampler, the store, penalties."""

from __future__ import annotations

import json

import optuna
import pytest
from tuning_sessions import N, SharedPool, capture_vector_add, experiment_hashes, run_session

from mneme.core.tuning.session import PENALTY_FACTOR, TuneOptions, TuningSession
from mneme.core.tuning.store import EVALUATED
from mneme.core.types import ExperimentConfiguration

optuna.logging.set_verbosity(optuna.logging.WARNING)

SAMPLERS = [
    "guided",
    "exhaustive",
    "random",
    "optuna:tpe",
    "optuna:cmaes",
    "optuna:nsga2",
    "optuna:qmc",
    "nevergrad:NGOpt",
    "nevergrad:OnePlusOne",
    "nevergrad:TwoPointsDE",
]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_tunes_a_captured_kernel_and_exports_a_reproducible_best(saxpy_db, saxpy_pool, tmp_path, sampler):
    session, summary = run_session(
        saxpy_db, saxpy_pool, tmp_path, sampler=sampler, trials=6, seed=1, space="quick", space_options={"axes": "x"}
    )
    assert summary["counts"]["trials"] == 6
    hashes = experiment_hashes(session.store)
    assert len(hashes) == len(set(hashes))  # no configuration ran twice
    best = ExperimentConfiguration.from_dict(json.loads((tmp_path / "best.json").read_text()))
    assert best.is_valid() and best.hash() == summary["best"]["hash"]
    assert summary["best"]["speedup"] > 0
    # The best configuration replays and verifies.
    assert saxpy_pool.evaluate(best).ok
    proteus = json.loads((tmp_path / "tuned-kernels.json").read_text())["saxpy"]
    assert proteus["SpecializeArgs"] == best.specialize and proteus["CodeGenOptLevel"] == best.codegen_opt
    assert proteus["Mneme"]["block"] == best.block.to_dict()
    for record in session.store.records():
        if record.status == "ok":
            assert record.result["verified"] and record.owner["pid"] > 0 and record.env == session.env_digest


def test_a_configuration_already_evaluated_is_answered_from_the_store(saxpy_db, saxpy_pool, tmp_path):
    # A space of 12 points, a budget of 30: every repeated proposal is a cache hit, measured once.
    session, summary = run_session(
        saxpy_db,
        saxpy_pool,
        tmp_path,
        sampler="random",
        seed=4,
        trials=30,
        space="quick",
        space_options={"axes": "x", "max_block": 4},
    )
    hashes = experiment_hashes(session.store)
    assert len(hashes) == len(set(hashes)) == 12
    assert summary["counts"]["cached"] == summary["counts"]["duplicates"] > 0
    by_number = {r.number: r for r in session.store.records()}
    for record in by_number.values():
        if record.status == "cached":
            source = by_number[record.cached_from]
            assert record.value == source.value and record.hash == source.hash


def test_unverified_configurations_get_a_penalty_and_never_become_best(tmp_path):
    db = capture_vector_add(tmp_path / "rec")
    session = TuningSession(
        TuneOptions(
            record_db=str(db),
            results=str(tmp_path / "res"),
            sampler="exhaustive",
            trials=40,
            space="launch",
            space_options={"grid_stride": True, "launch_bounds": False, "max_block": 256},
            retime_top=1,
            retime_repeats=1,
        )
    )
    summary = session.run()
    records = session.store.records()
    unverified = [r for r in records if r.status == "unverified"]
    assert unverified, "shrinking the grid of a kernel that does not loop must fail verification"
    penalty = session.store.baseline["value"] * PENALTY_FACTOR
    assert all(r.value == pytest.approx(penalty) for r in unverified)
    assert summary["best"]["hash"] not in {r.hash for r in unverified}
    assert summary["counts"]["failures"]["verify"] == len(unverified)
    best = ExperimentConfiguration.from_dict(summary["best"]["config"])
    assert best.grid.x * best.block.x >= N


def test_infeasible_points_are_told_without_running(saxpy_db, saxpy_pool, tmp_path):
    # Launch bounds below the block are invalid configurations: TPE meets some and learns from them.
    session, summary = run_session(
        saxpy_db, saxpy_pool, tmp_path, sampler="random", seed=0, trials=8, space="launch", space_options={"axes": "x"}
    )
    infeasible = [r for r in session.store.records() if r.status == "infeasible"]
    assert infeasible and summary["counts"]["infeasible"] == len(infeasible)
    assert all(r.result is None and r.config is None for r in infeasible)
    assert summary["counts"]["trials"] == 8


def test_timeout_stops_asking_and_several_workers_share_the_device(saxpy_db, tmp_path):
    session = TuningSession(
        TuneOptions(
            record_db=str(saxpy_db),
            results=str(tmp_path),
            sampler="random",
            seed=2,
            trials=10_000,
            timeout=2.0,
            workers_per_device=2,
            devices=[0],
            space="quick",
            space_options={"axes": "x"},
            retime_top=0,
        )
    )
    summary = session.run()
    assert len(session.pool.device_workers) == 2
    assert 0 < summary["counts"]["trials"] < 10_000
    assert summary["best"] and (tmp_path / "best.json").is_file()


ORPHAN = """
import json, os, sys
from mneme.core.tuning.store import ResultStore, owner
from mneme.core.tuning import distributions
url, study, domains, params, config, digest = json.loads(sys.stdin.read())
store = ResultStore.load(url, study)
trial = store.ask({name: getattr(distributions, kind)(**fields) for name, kind, fields in domains}, params)
for k, v in params.items():
    assert trial.params[k] == v
store.annotate(trial, "owner", {**owner(), "session": "dead"})
store.annotate(trial, "config", config)
store.annotate(trial, "hash", digest)
store.annotate(trial, "status", "running")
os._exit(9)  # dies mid-experiment, leaving its trial running
"""


def test_resume_reruns_the_experiment_a_dead_tuner_left_running(saxpy_db, saxpy_pool, tmp_path):
    import subprocess
    import sys

    import attrs

    session, _ = run_session(
        saxpy_db, saxpy_pool, tmp_path, sampler="exhaustive", trials=2, space="quick", space_options={"axes": "x"}
    )
    done = set(experiment_hashes(session.store))
    space = session.space
    point = next(e for e in space.sample_exhaustive() if space.derived(space.decode(e)).hash() not in done)
    config = space.derived(space.decode(point))
    # Queue the point for the dying process: a store hands queued points out before the one asked.
    session.store.enqueue(point)
    domains = [[name, type(d).__name__, attrs.asdict(d)] for name, d in space.distributions().items()]
    payload = json.dumps([session.store.url, session.store.study_name, domains, point, config.to_dict(), config.hash()])
    dead = subprocess.run([sys.executable, "-c", ORPHAN], check=False, input=payload, text=True, capture_output=True)
    assert dead.returncode == 9, dead.stderr
    resumed, _ = run_session(
        saxpy_db,
        saxpy_pool,
        tmp_path,
        sampler="exhaustive",
        trials=4,
        resume=True,
        space="quick",
        space_options={"axes": "x"},
    )
    records = resumed.store.records()
    assert [r.status for r in records if r.owner.get("session") == "dead"] == ["interrupted"]
    ran = experiment_hashes(resumed.store)
    assert ran.count(config.hash()) == 1 and len(ran) == len(set(ran)) == 4


def test_a_worker_killed_mid_experiment_fails_that_trial_and_tuning_goes_on(saxpy_db, tmp_path):
    import os
    import signal
    import threading
    import time

    session = TuningSession(
        TuneOptions(
            record_db=str(saxpy_db),
            results=str(tmp_path),
            sampler="exhaustive",
            trials=12,
            space="quick",
            space_options={"axes": "x"},
            retime_top=0,
        )
    )
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("summary", session.run()), daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while session.progress.phase != "tuning" and time.monotonic() < deadline:
        time.sleep(0.01)
    crashed = []
    while not crashed and runner.is_alive() and time.monotonic() < deadline:
        worker = session.pool.busy_worker()
        os.kill(worker.pid, signal.SIGKILL)
        time.sleep(0.5)
        crashed = [r for r in session.store.records() if (r.result or {}).get("error_kind") == "crash"]
    runner.join(180)
    summary = outcome["summary"]
    assert crashed and all(r.status == "failed" for r in crashed)
    assert summary["counts"]["failures"]["crash"] >= 1
    assert summary["counts"]["trials"] == 12  # the pool respawned the worker and the run finished
    assert summary["best"]["hash"] not in {r.hash for r in crashed}


class RelabelingPool(SharedPool):
    """The real pool, but every result after the first `keep` says another timer measured it (as when
    the kernel timer is lost in a worker and it falls back to events): a fake only for that label."""

    def __init__(self, pool, timer: str, keep: int):
        super().__init__(pool)
        self.timer, self.keep, self.submitted = timer, keep, 0

    def submit(self, config):
        import concurrent.futures

        import attrs

        self.submitted += 1
        inner = self.pool.submit(config)
        if self.submitted <= self.keep:
            return inner
        outer: concurrent.futures.Future = concurrent.futures.Future()
        inner.add_done_callback(lambda f: outer.set_result(attrs.evolve(f.result(), timer=self.timer)))
        return outer


def test_results_by_another_timer_than_the_study_s_never_count_and_a_resume_that_times_otherwise_is_refused(
    saxpy_db, saxpy_pool, tmp_path
):
    from mneme.core.errors import UsageError

    mixed = RelabelingPool(saxpy_pool.pool, "events", keep=1)  # the baseline by the host clock, the rest not
    session, summary = run_session(
        saxpy_db,
        mixed,
        tmp_path,
        sampler="exhaustive",
        trials=4,
        space="quick",
        space_options={"axes": "x"},
        retime_top=0,
    )
    assert session.store.baseline["result"]["timer"] == "host-clock"
    trials = [r for r in session.store.records() if r.status in EVALUATED]
    assert trials and all(r.status == "failed" for r in trials)
    assert all("timed by events, the study by host-clock" in r.result["error"] for r in trials)
    # The final comparison's results too: its runs alone (after the baseline's and the 4 trials') by another timer.
    plain = RelabelingPool(saxpy_pool.pool, "events", keep=10**9)
    first, _ = run_session(
        saxpy_db,
        plain,
        tmp_path / "plain",
        sampler="exhaustive",
        trials=4,
        space="quick",
        space_options={"axes": "x"},
        retime_top=2,
    )
    compared = [e for e in first.store.retime.values() if not e["baseline"]]
    assert len(compared) == 2 and all(entry["median"] is not None for entry in compared)
    late = RelabelingPool(saxpy_pool.pool, "events", keep=5)
    session, summary = run_session(
        saxpy_db,
        late,
        tmp_path / "late",
        sampler="exhaustive",
        trials=4,
        space="quick",
        space_options={"axes": "x"},
        retime_top=2,
    )
    assert all(r.status == "ok" for r in session.store.records() if r.status in EVALUATED)
    entries = list(session.store.retime.values())
    assert len(entries) == 2  # no baseline entry: no pair was measured
    assert all(entry["median"] is None and entry["errors"] == ["invalid"] for entry in entries)
    assert not any(c["retimed"] and not c["baseline"] for c in summary["ranking"])  # flaky: no winners
    relabeled = RelabelingPool(saxpy_pool.pool, "events", keep=0)  # this run's baseline too
    with pytest.raises(UsageError, match="the study's times were taken by host-clock, this run's by events"):
        run_session(
            saxpy_db,
            relabeled,
            tmp_path,
            sampler="exhaustive",
            trials=6,
            space="quick",
            space_options={"axes": "x"},
            resume=True,
        )
