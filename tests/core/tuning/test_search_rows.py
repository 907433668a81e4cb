"""Rows of the final table known from the search only never carry a verdict: their times were taken apart,
under machine states that drift, so only the interleaved comparison decides (issue 39, point 3)."""

from __future__ import annotations

import json
import shutil

from mneme.core.tuning import stats
from mneme.core.tuning.report import SEARCH_VERDICT, build_summary, choose_best
from mneme.core.tuning.store import ResultStore
from paths import DATA

DRIFT = DATA / "studies" / "host-same-code-drift"


def drift_store(tmp_path) -> ResultStore:
    shutil.copy(DRIFT / "study.db", tmp_path / "study.db")  # the store may write; keep the fixture as it is
    study = json.loads((DRIFT / "session.json").read_text())["study"]
    return ResultStore.load(f"sqlite:///{tmp_path / 'study.db'}", study)


def test_a_same_code_row_measured_apart_under_drift_gets_its_estimate_and_no_verdict(tmp_path):
    store = drift_store(tmp_path)
    (row,) = [r for r in store.records() if r.ok]
    base = store.baseline["result"]["exec_time"]
    # The fixture is a case the old table overstated: the same code, yet its times taken apart "differ".
    apart = stats.unpaired_ratio(base, row.result["exec_time"])
    assert apart.significant and apart.low > 1.2
    summary = build_summary(store)
    (candidate,) = [c for c in summary["ranking"] if not c["baseline"]]
    assert candidate["method"] == "search" and candidate["verdict"] == SEARCH_VERDICT
    assert candidate["significant"] is False and candidate["speedup_ci"] is None
    assert candidate["speedup"] == apart.ratio and candidate["search_ci"] == [apart.low, apart.high]
    assert summary["best"]["baseline"] and "no candidate was compared" in summary["decision"]


def test_no_search_row_of_any_stored_study_claims_a_difference(tmp_path):
    summary = build_summary(drift_store(tmp_path))
    assert all(not c["significant"] for c in summary["ranking"] if c["method"] == "search")
    assert all(
        c["verdict"] in (SEARCH_VERDICT, "recorded configuration", "no interval (one sample)")
        for c in summary["ranking"]
    )


def test_an_interleaved_row_decides_over_a_faster_looking_search_row():
    recorded = {
        "speedup": 1.0,
        "speedup_ci": [1.0, 1.0],
        "significant": False,
        "baseline": True,
        "method": "baseline",
        "time": 1.0,
    }
    searched = {
        "speedup": 2.24,
        "speedup_ci": None,
        "search_ci": [1.86, 2.68],
        "significant": False,
        "baseline": False,
        "method": "search",
        "time": 0.45,
    }
    compared = {
        "speedup": 1.30,
        "speedup_ci": [1.25, 1.35],
        "significant": True,
        "baseline": False,
        "method": "interleaved, 12 pairs",
        "time": 0.77,
    }
    best, decision = choose_best([compared, recorded, searched])
    assert best is compared and "interleaved" in decision
    best, decision = choose_best([recorded, searched])
    assert best is recorded and "no candidate was compared" in decision
    best, _ = choose_best([searched, recorded], accept_insignificant=True)
    assert best is searched


def test_mneme_results_prints_the_search_row_as_an_estimate_without_a_verdict(tmp_path):
    from click.testing import CliRunner

    from mneme.core.cli import cli

    drift_store(tmp_path)
    session = json.loads((DRIFT / "session.json").read_text())
    session["storage"] = f"sqlite:///{tmp_path / 'study.db'}"
    (tmp_path / "session.json").write_text(json.dumps(session))
    result = CliRunner().invoke(cli, ["results", str(tmp_path)])
    output = " ".join(result.output.split())
    assert result.exit_code == 0, output
    assert "~7.02x (search estimate, no interval)" in output and "not compared (search estimate)" in output
    assert "faster" not in output.replace("fastest", "")
    assert "no candidate was compared" in output
