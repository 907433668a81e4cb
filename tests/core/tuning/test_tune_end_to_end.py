"""`mneme tune` on the host backend, end to end: the best configuration it exports replays verified."""

from __future__ import annotations

from tune_end_to_end import tune_then_replay


def test_a_short_tuning_run_exports_a_best_configuration_that_replays_verified(tmp_path):
    tune_then_replay(tmp_path, "host")
