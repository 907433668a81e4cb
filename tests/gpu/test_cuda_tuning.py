"""`mneme tune` on CUDA, end to end (issue 8): the commands and assertions of the host run in CI."""

from __future__ import annotations

import pytest

from tune_end_to_end import tune_then_replay


@pytest.mark.gpu
def test_a_short_tuning_run_exports_a_best_configuration_that_replays_verified(tmp_path):
    tune_then_replay(tmp_path, "cuda")
