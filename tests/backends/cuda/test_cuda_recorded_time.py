"""The recorded launch's own in-application time reaches its instance (RecordedTime, RecordedCache)."""

from __future__ import annotations

import json

import pytest

recorder = pytest.importorskip("mneme_cuda.recorder")

from raw_launches import needs_nvcc, write_counts, write_saxpy_launch

from mneme.core.errors import FormatError
from mneme.core.recorder.rawdir import recorded_times, retimed_times
from mneme.core.records import RecordedExecution

KEY = "00000000000000aa"


def test_the_recorded_launchs_time_and_cache_state_are_read_apart_from_the_repeats(tmp_path):
    raw = tmp_path / "raw"
    write_counts(
        raw,
        1,
        {
            "bfs": {
                "seen": 9,
                "instances": {KEY: 9},
                "kernel_times": {KEY: [4.0e-5, 1.0e-5]},
                "recorded_time": {KEY: {"seconds": 4.0e-5, "cache": "flushed"}},
            }
        },
    )
    write_counts(raw, 2, {"bfs": {"seen": 1, "instances": {"bb": 1}}})  # an older recorder: none
    assert recorded_times(raw) == {("bfs", KEY): (4.0e-5, "flushed")}


@pytest.mark.parametrize(
    "timing", [{"seconds": -1.0, "cache": "flushed"}, {"seconds": 1e-6, "cache": "hot"}, [1e-6, "flushed"]]
)
def test_a_malformed_recorded_time_is_an_error_naming_the_file_and_field(tmp_path, timing):
    raw = tmp_path / "raw"
    write_counts(raw, 7, {"bfs": {"seen": 1, "instances": {KEY: 1}, "recorded_time": {KEY: timing}}})
    with pytest.raises(FormatError) as err:
        recorded_times(raw)
    assert (
        str(err.value).startswith(str(raw / "counts-7.json")) and err.value.field == f"kernels.bfs.recorded_time.{KEY}"
    )


def test_the_second_time_of_a_retimed_launch_is_read_apart_and_checked_as_the_first(tmp_path):
    raw = tmp_path / "raw"
    entry = {
        "seen": 1,
        "instances": {KEY: 1},
        "recorded_time": {KEY: {"seconds": 4.0e-5, "cache": "flushed"}},
        "retimed_time": {KEY: {"seconds": 4.4e-5, "cache": "flushed"}},
    }
    write_counts(raw, 1, {"bfs": entry})
    assert retimed_times(raw) == {("bfs", KEY): (4.4e-5, "flushed")}
    assert recorded_times(raw) == {("bfs", KEY): (4.0e-5, "flushed")}
    write_counts(raw, 2, {"bfs": {**entry, "retimed_time": {KEY: {"seconds": 0, "cache": "flushed"}}}})
    with pytest.raises(FormatError) as err:
        retimed_times(raw)
    assert err.value.field == f"kernels.bfs.retimed_time.{KEY}"


@needs_nvcc
def test_finalize_gives_the_instance_its_recorded_launchs_time_which_survives_a_reload(tmp_path):
    raw = tmp_path / "raw"
    write_saxpy_launch(raw, tmp_path, KEY)
    write_counts(
        raw,
        5,
        {
            "saxpy": {
                "seen": 3,
                "instances": {KEY: 3},
                "kernel_times": {KEY: [3.0e-6, 2.0e-6, 2.1e-6]},
                "recorded_time": {KEY: {"seconds": 3.0e-6, "cache": "warm"}},
            }
        },
    )
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    data = json.loads(db.read_text())
    (entry,) = data["instances"].values()
    assert data["SchemaVersion"] == 5 and entry["RecordedTime"] == 3.0e-6 and entry["RecordedCache"] == "warm"
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.recorded_time == 3.0e-6 and inst.recorded_cache == "warm" and inst.app_timer == "cupti"
