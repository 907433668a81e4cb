"""The replay report names the assembler of the replayed binary (issue 28, point 2)."""

from __future__ import annotations

import json

from mneme.core.types import ExperimentConfiguration, ExperimentResult
from mneme.plugins.replay_commands import result_json, result_rows

CONFIG = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))


def test_json_and_table_carry_the_assembler_when_the_build_has_one():
    result = ExperimentResult(exec_time=[1.0], verified=True, executed=True, reg_usage=32, shared_mem_usage=4224)
    data = json.loads(
        result_json(result, CONFIG, database="db.json", record_id="abc", kernel="k", assembler="nvjitlink 13.5.37")
    )
    assert data["assembler"] == "nvjitlink 13.5.37"
    assert ("assembler", "nvjitlink 13.5.37") in result_rows(result, CONFIG, assembler="nvjitlink 13.5.37")
    plain = json.loads(result_json(result, CONFIG, database="db.json", record_id="abc", kernel="k"))
    assert "assembler" not in plain and all(label != "assembler" for label, _ in result_rows(result, CONFIG))
