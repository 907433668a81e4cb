"""What --trials buys: distinct measured configurations; duplicates answered from the store for free; an
exhaustive search cut short by the budget that covers the space instead of its first corner."""

from __future__ import annotations

from tuning_sessions import experiment_hashes, run_session

from mneme.core.types import ExperimentConfiguration

POOL_WORKERS = 1  # the saxpy_pool fixture's (tests/core/tuning/conftest.py)


def test_trials_count_distinct_experiments_and_duplicates_spend_no_budget(saxpy_db, saxpy_pool, tmp_path):
    # 12 points; random draws repeat points long before 10 distinct ones are found.
    session, summary = run_session(
        saxpy_db,
        saxpy_pool,
        tmp_path,
        sampler="random",
        seed=4,
        trials=10,
        space="quick",
        space_options={"axes": "x", "max_block": 4},
        retime_top=0,
    )
    hashes = experiment_hashes(session.store)
    assert len(hashes) == len(set(hashes)) == 10
    counts = summary["counts"]
    assert counts["experiments"] == 10 and counts["duplicates"] > 0
    assert counts["duplicates"] == sum(r.status == "cached" for r in session.store.records())
    assert summary["stop"]["reason"] == "budget"


def test_a_budget_larger_than_the_space_measures_each_point_once_and_says_the_space_is_exhausted(
    saxpy_db, saxpy_pool, tmp_path
):
    session, summary = run_session(
        saxpy_db,
        saxpy_pool,
        tmp_path,
        sampler="random",
        seed=4,
        trials=30,
        space="quick",
        space_options={"axes": "x", "max_block": 4},
        retime_top=0,
    )
    hashes = experiment_hashes(session.store)
    assert len(hashes) == len(set(hashes)) == 12
    assert summary["stop"]["reason"] == "exhausted"


def test_configurations_equal_after_grounding_are_one_experiment(saxpy_db, saxpy_pool, tmp_path):
    # With specialize_dims on, the dimension assumptions say nothing more: both points ground to one.
    session, summary = run_session(
        saxpy_db,
        saxpy_pool,
        tmp_path,
        sampler="exhaustive",
        trials=100,
        space="quick",
        space_options={"axes": "x", "max_block": 4},
        retime_top=0,
    )
    configs = [
        ExperimentConfiguration.from_dict(r.config)
        for r in session.store.records()
        if r.status in ("ok", "failed", "unverified")
    ]
    grounded = [c.ground().hash() for c in configs]
    assert len(grounded) == len(set(grounded))


def test_exhaustive_over_a_space_larger_than_the_budget_covers_it_and_says_so(saxpy_db, saxpy_pool, tmp_path, caplog):
    caplog.set_level("INFO")
    session, summary = run_session(
        saxpy_db,
        saxpy_pool,
        tmp_path,
        sampler="exhaustive",
        trials=10,
        space="quick",
        space_options={"axes": "x"},
        retime_top=0,
    )
    blocks = sorted({r.config["block"]["x"] for r in session.store.records() if r.config})
    assert len(experiment_hashes(session.store)) == 10
    # Not the 10 smallest block sizes (1, 2, 4, ...): the budget spans the range.
    assert blocks[0] <= 4 and blocks[-1] >= 512 and len(blocks) >= 5
    assert "space-filling" in caplog.text and "44" in caplog.text
    assert any("space-filling" in note for note in summary["notes"])
