"""The statistics behind every speedup `mneme tune` reports: t quantiles, interval coverage, outliers, drift,
and the rule that puts a configuration in best.json."""

from __future__ import annotations

import numpy as np
import pytest

from mneme.core.tuning import stats
from mneme.core.tuning.report import choose_best


@pytest.mark.parametrize(
    "df, expected", [(1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423), (1000, 1.9623)]
)
def test_t_quantiles_match_the_tables(df, expected):
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)
    assert stats.t_quantile(0.025, df) == pytest.approx(-expected, abs=5e-4)


def test_paired_intervals_cover_the_true_ratio_95_percent_of_the_time_under_drifting_load():
    rng = np.random.default_rng(7)
    true, covered, trials = 1.25, 0, 2000
    for _ in range(trials):
        load = np.exp(np.cumsum(rng.normal(0, 0.05, 30)))  # the machine drifts; both sides of a pair share it
        slowed = np.where(rng.random(30) < 0.2, 1.6, 1.0)  # a fifth of the runs wait for a core
        base = 10e-6 * load * np.exp(rng.normal(0, 0.03, 30)) * slowed
        cand = 10e-6 / true * load * np.exp(rng.normal(0, 0.03, 30)) * slowed[::-1]
        interval = stats.paired_ratio(base.tolist(), cand.tolist())
        covered += interval.low <= true <= interval.high
    assert 0.94 <= covered / trials <= 0.99  # at least 95% (order statistics step: a little more)


def test_equal_times_are_no_significant_difference_and_a_clear_one_is():
    rng = np.random.default_rng(1)
    same = 5e-6 * np.exp(rng.normal(0, 0.05, 12))
    other = 5e-6 * np.exp(rng.normal(0, 0.05, 12))
    null = stats.paired_ratio(same.tolist(), other.tolist())
    assert null.low < 1.0 < null.high and not null.significant and null.verdict() == "no significant difference"
    faster = stats.paired_ratio((same * 1.5).tolist(), same.tolist())
    assert faster.significant and faster.verdict() == "faster" and faster.ratio == pytest.approx(1.5)
    assert stats.paired_ratio([1.0], [2.0]) is None  # one pair: no interval
    few = stats.paired_ratio([2.0] * 4, [1.0] * 4)  # four pairs cannot reach 95%: unbounded, not significant
    assert few.high == float("inf") and not few.significant


def test_unpaired_interval_widens_with_the_spread():
    rng = np.random.default_rng(2)
    a = np.exp(rng.normal(0, 0.01, 20))
    tight = stats.unpaired_ratio(a.tolist(), (a / 1.1).tolist())
    loose = stats.unpaired_ratio((a * np.exp(rng.normal(0, 0.3, 20))).tolist(), (a / 1.1).tolist())
    assert tight.width < loose.width and tight.significant


def test_outliers_and_drift_are_found_and_steady_series_are_left_alone():
    assert stats.outliers([1.0, 1.01, 0.99, 1.0, 1.02, 3.0]) == [5]
    assert stats.outliers([1.0, 1.01, 0.99, 1.0, 1.02]) == []
    assert stats.drift([1.0, 1.01, 0.99, 1.0, 1.6, 1.62, 1.58, 1.61]) == pytest.approx(1.6, rel=0.02)
    rng = np.random.default_rng(3)
    assert stats.drift(np.exp(rng.normal(0, 0.02, 20)).tolist()) is None


def _candidate(speedup, low, high, baseline=False):
    return {
        "speedup": speedup,
        "speedup_ci": [low, high],
        "significant": low > 1.0 or high < 1.0,
        "baseline": baseline,
        "method": "interleaved, 8 pairs",
        "time": 1.0 / speedup,
    }


def test_best_json_stays_the_recorded_configuration_without_a_significant_speedup():
    recorded = _candidate(1.0, 1.0, 1.0, baseline=True)
    recorded["significant"] = False
    lucky = _candidate(1.08, 0.97, 1.2)
    best, decision = choose_best([lucky, recorded])
    assert best is recorded and "no significant difference" in decision
    best, decision = choose_best([lucky, recorded], accept_insignificant=True)
    assert best is lucky and "--accept-insignificant" in decision
    real = _candidate(1.05, 1.02, 1.08)
    best, _ = choose_best([lucky, real, recorded])
    assert best is real  # the fastest that is significantly faster, not the fastest point estimate
