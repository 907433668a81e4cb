"""The replay's reference is the recorded launch's own in-application time; later launches are context."""

from __future__ import annotations

import json

from mneme.core.types import ExperimentConfiguration, ExperimentResult
from mneme.plugins.replay_commands import InApplication, result_json, result_rows

CONFIG = ExperimentConfiguration(grid=4, block=128)
RESULT = ExperimentResult(exec_time=[2.1e-5, 2.0e-5, 2.2e-5], verified=True, executed=True, timer="cupti")
# A graph kernel: its recorded launch had the whole frontier (40 us), later ones ever less to do.
APP = InApplication(times=(4.0e-5, 1.2e-5, 0.9e-5, 0.6e-5), timer="cupti", recorded=4.0e-5, cache="flushed")


def test_the_recorded_launch_is_the_reference_and_the_later_launches_are_labelled_context():
    rows = dict(result_rows(RESULT, CONFIG, app=APP, cache="flushed"))
    assert rows["recorded launch"] == (
        "40.0 us in the application, from a flushed cache, timed by cupti; replay / recorded launch 0.525"
    )
    assert rows["later launches (context)"] == (
        "9.0 us median of 3 later launches with the same arguments; they "
        "may do different work than the recorded one; replay / these 2.333"
    )
    assert "in the application" not in rows


def test_a_replay_from_another_cache_state_than_the_recorded_launch_says_it_is_not_like_for_like():
    row = dict(result_rows(RESULT, CONFIG, app=APP, cache="primed"))["recorded launch"]
    assert "(this replay from --cache primed: not like for like)" in row
    warm = InApplication(times=(4.0e-5,), timer="cupti", recorded=4.0e-5, cache="warm")
    rows = dict(result_rows(RESULT, CONFIG, app=warm, cache="warm"))
    assert "not like for like" not in rows["recorded launch"] and "from a warm cache" in rows["recorded launch"]
    assert "later launches (context)" not in rows  # a launch made once has no later ones


def test_the_json_compares_the_replay_with_the_recorded_launch_and_keeps_the_later_median():
    data = json.loads(
        result_json(RESULT, CONFIG, database="db.json", record_id="abc", kernel="k", app=APP, cache="flushed")
    )
    assert data["recorded_time"] == 4.0e-5 and data["recorded_cache"] == "flushed" and data["cache"] == "flushed"
    assert abs(data["replay_vs_app"] - 2.1e-5 / 4.0e-5) < 1e-12
    assert abs(data["app_median_time"] - 0.9e-5) < 1e-18
