"""The statistics behind every speedup `mneme tune` reports: t quantiles, interval coverage, outliers, drift,
and the rule that puts a configuration in best.json."""

from __future__ import annotations

import math

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


def test_signed_rank_bounds_match_the_tables_and_hold_their_level_on_heavy_tailed_pairs():
    # Wilcoxon's two-sided 5% critical values: T+ <= 8 for 10 pairs, <= 52 for 20 (so the 9th and 53rd
    # Walsh averages from each end bound the interval); 5 pairs cannot reach 95%.
    assert stats._signed_rank_rank(10, 0.95) == 9 and stats._signed_rank_rank(20, 0.95) == 53
    assert stats.signed_rank_ratio([2.0] * 5, [1.0] * 5).high == float("inf")
    rng = np.random.default_rng(5)
    false = 0
    for _ in range(1000):
        base = np.exp(rng.normal(0, 0.05, 40)) * np.where(rng.random(40) < 0.2, 1.6, 1.0)
        cand = np.exp(rng.normal(0, 0.05, 40)) * np.where(rng.random(40) < 0.2, 1.6, 1.0)
        false += stats.signed_rank_ratio(base.tolist(), cand.tolist()).significant
    assert 0.02 <= false / 1000 <= 0.07
    faster = stats.signed_rank_ratio([1.1, 1.2, 1.0, 1.3, 1.1, 1.2, 1.05, 1.15], [1.0] * 8)
    assert faster.significant and faster.estimator == "signed-rank" and 1.1 < faster.ratio < 1.2


def test_signed_rank_sees_a_tick_sized_difference_the_signs_of_pairs_cannot():
    # Timers that tick in steps: one side's runs 1568, 1696, 1568 ns, the other's 1696, 1664, 1536 (saxpy's
    # optimum and recorded launch on the H100), each experiment the median of 3. Many pairs tie or flip by a
    # tick; the sizes of the wins tell them apart in 240 pairs, the signs alone do not.
    rng = np.random.default_rng(0)
    optimum, recorded = np.array([1568, 1696, 1568.0]), np.array([1696, 1664, 1536.0])
    base = np.median(rng.choice(recorded, (240, 3)), axis=1).tolist()
    cand = np.median(rng.choice(optimum, (240, 3)), axis=1).tolist()
    assert stats.signed_rank_ratio(base, cand, 0.99).low > 1.0
    assert not stats.paired_ratio(base, cand, 0.99).significant


def test_the_medians_interval_is_computed_for_thousands_of_pairs():
    # 2**n overflows a float past 1023 pairs; a long sequential comparison reaches that
    rng = np.random.default_rng(6)
    same = np.exp(rng.normal(0, 0.05, 2000))
    interval = stats.paired_ratio((same * 1.01).tolist(), same.tolist())
    assert interval.samples == 2000 and interval.low == pytest.approx(1.01) == interval.high
    assert stats._median_rank(2000, 0.95) == pytest.approx(1000 - 1.96 * math.sqrt(2000) / 2, abs=2)
