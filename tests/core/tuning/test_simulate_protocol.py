"""A simulated run ends as `mneme tune` ends (issue 39, point 2): its leading candidates compared with the
recorded configuration by the session's own interleaving code, and the pick is what best.json would hold; it
follows `mneme tune`'s defaults, prefetch included. The sweeps are the committed H100 measurements."""

from __future__ import annotations

import numpy as np
import pytest
from paths import DATA

from mneme.core.tuning import simulate as simulation
from mneme.core.tuning.measure import WIDTH_PAIRS, Looks, interleave
from mneme.core.tuning.options import TuneOptions
from mneme.core.tuning.simulate import Protocol, simulate
from mneme.core.tuning.sweep import Sweep

# saxpy as the H100 measured it on 2026-12-05: its optimum and recorded launch overlap in their measured runs
# (the re-measured sweep of 2026-12-07 tells them apart at once, so it cannot show the later looks at work)
SAXPY = DATA / "sweeps" / "2026-12-05" / "h100-saxpy-16k-quick.json"
VECTOR_ADD = DATA / "sweeps" / "h100-vector-add-16k-quick.json"


@pytest.fixture(scope="module")
def saxpy():
    sweep = Sweep.load(SAXPY)
    return sweep, sweep.load_space()


def test_the_simulated_protocol_is_mneme_tunes_defaults():
    tune = TuneOptions(record_db="unused")
    protocol = Protocol()
    assert (protocol.iterations, protocol.retime_top, protocol.retime_repeats, protocol.ci_target) == (
        tune.iterations,
        tune.retime_top,
        tune.retime_repeats,
        tune.ci_target,
    )
    assert protocol.max_pairs == tune.max_pairs == 960
    assert protocol.accept_insignificant is tune.accept_insignificant is False
    assert tune.prefetch is None and protocol.in_flight == 2  # one worker, and as many experiments prefetched


def test_without_noise_each_leader_is_confirmed_in_twenty_pairs_and_the_optimum_is_picked():
    sweep = Sweep.load(VECTOR_ADD)
    run = simulate(sweep, "exhaustive", len(sweep.points), 0, noise=False)
    optimum = min((p.value, h) for h, p in sweep.points.items() if p.ok)[1]
    # Constant ratios: the median's order-statistic interval at the first look (1 - 5%/3/2: half of each
    # candidate's error rate, the rest kept for later looks) is bounded from 8 pairs and is then a point (width 0);
    # the width may end the first look from WIDTH_PAIRS (20) pairs on, which ends each of the three comparisons;
    # none needs a later look.
    assert WIDTH_PAIRS == 20
    assert (run.compared, run.pairs, run.extra_pairs) == (3, 60, 0)
    assert run.pick == run.search_pick == optimum and run.fraction == 1.0
    assert run.decision.startswith("significantly faster")


def test_an_open_verdict_earns_more_pairs_until_saxpys_optimum_is_told_from_the_recorded_launch(saxpy):
    # saxpy's optimum (1568 ns) and the recorded launch (1664 ns) overlap in their measured runs (1568-1696 and
    # 1536-1696 ns): 60 pairs (the fixed comparison, --max-pairs 60) seldom separate them (about one comparison
    # in ten), and best.json then stays the recorded configuration; with later looks the optimum is decided.
    sweep, space = saxpy
    fixed = [simulate(sweep, "guided", 9, seed, space=space, protocol=Protocol(max_pairs=60)) for seed in range(4)]
    kept = [r for r in fixed if r.pick == sweep.baseline_hash]
    assert len(kept) >= 3 and all(r.extra_pairs == 0 for r in fixed)
    assert all(r.decision.startswith("no significant difference") for r in kept)
    assert all(r.fraction == pytest.approx(sweep.optimum / sweep.baseline.value) for r in kept)
    looked = [simulate(sweep, "guided", 9, seed, space=space) for seed in range(4)]
    assert all(r.fraction == 1.0 and r.decision.startswith("significantly faster") for r in looked)
    assert all(0 < r.extra_pairs <= 3 * 900 for r in looked)  # the cost, counted: pairs beyond the first looks


def test_with_retime_top_0_best_json_stays_the_recorded_configuration_as_mneme_tune_decides(saxpy):
    sweep, space = saxpy
    run = simulate(sweep, "guided", 9, 0, noise=False, space=space, protocol=Protocol(retime_top=0))
    assert run.compared == 0 and run.pairs == 0
    assert run.pick == sweep.baseline_hash and "--retime-top" in run.decision
    assert run.search_fraction == 1.0  # the search found the optimum; only a comparison would let it through


def test_the_sampler_proposes_its_next_point_while_one_experiment_is_in_flight(saxpy, monkeypatch):
    sweep, space = saxpy
    outstanding: list[int] = []

    def spied(spec, seed=None):
        sampler = simulation_create(spec, seed=seed)
        asked, told = [0], [0]
        ask, tell = sampler.ask, sampler.tell

        def counting_ask():
            outstanding.append(asked[0] - told[0])
            asked[0] += 1
            return ask()

        def counting_tell(a, value):
            told[0] += 1
            tell(a, value)

        sampler.ask, sampler.tell = counting_ask, counting_tell
        return sampler

    simulation_create = simulation.create_sampler
    monkeypatch.setattr(simulation, "create_sampler", spied)
    simulate(sweep, "guided", 9, 0, noise=False, space=space)
    assert max(outstanding) == 1  # one answer still out at each ask after the first
    outstanding.clear()
    simulate(sweep, "guided", 9, 0, noise=False, space=space, protocol=Protocol(in_flight=1))
    assert max(outstanding) == 0


def test_the_looks_are_fixed_by_the_cap_and_share_the_error_rate_so_it_adds_up():
    looks = Looks(0.05, 960)
    assert looks.later == (120, 240, 480, 960) and looks.first == 60
    # half at the first look; the other half split between 4 later looks, each judged by two intervals
    assert looks.first_confidence == pytest.approx(0.975)
    assert looks.later_confidence == pytest.approx(1 - 0.025 / 4 / 2)
    spent = (1 - looks.first_confidence) + 2 * len(looks.later) * (1 - looks.later_confidence)
    assert spent == pytest.approx(0.05)
    assert Looks(0.05, 100).later == (100,)
    fixed = Looks(0.05, 60)  # --max-pairs 60: the fixed comparison, all of the error rate at its one look
    assert fixed.later == () and fixed.first_confidence == pytest.approx(0.95)
    assert Looks(0.05, 20).first == 20


def _noise(rng, shift=1.0):
    # a run is slowed by a burst of load a fifth of the time (heavy-tailed, as on a busy host)
    return lambda: float(shift * np.exp(rng.normal(0, 0.05)) * (1.6 if rng.random() < 0.2 else 1.0))


def _coin(rng):
    return lambda: bool(rng.random() < 0.5)  # each pair's order, from the test's seed


def test_repeated_looks_at_the_same_code_claim_a_difference_no_more_often_than_the_stated_rate():
    # Every comparison forced to every look (`beyond` 0: always open), 300 comparisons of one distribution
    # against itself: the looks together stay within the 5% the candidate is given (judging every look at
    # 95% would claim about three times as many).
    rng = np.random.default_rng(11)
    false = looks = 0
    for _ in range(300):
        pairs = interleave(
            _noise(rng),
            _noise(rng),
            repeats=2,
            ci_target=0.02,
            confidence=0.95,
            out_of_time=lambda: False,
            max_pairs=480,
            beyond=0.0,
            coin=_coin(rng),
        )
        false += pairs.interval.significant
        looks += pairs.looks
    assert looks > 3.5 * 300  # most comparisons went through all four looks
    assert false / 300 <= 0.06


def test_a_clear_difference_stops_at_the_first_look_that_decides_and_no_plausible_speedup_stops_at_once():
    rng = np.random.default_rng(3)
    # 3% faster under 5% noise and bursts: not decided in 60 pairs, decided at a later look, not at the cap
    found = interleave(
        _noise(rng),
        _noise(rng, 1 / 1.03),
        repeats=2,
        ci_target=0.02,
        confidence=1 - 0.05 / 3,
        out_of_time=lambda: False,
        max_pairs=960,
        coin=_coin(rng),
    )
    assert found.first == 60 and found.stopped == "decided" and found.interval.ratio > 1.0
    assert 60 < len(found.cand) < 960 and found.extra == len(found.cand) - 60
    # 10% slower: no speedup beyond 2% is plausible after the first look, so no pairs are added
    slower = interleave(
        _noise(rng),
        _noise(rng, 1.10),
        repeats=2,
        ci_target=0.02,
        confidence=1 - 0.05 / 3,
        out_of_time=lambda: False,
        max_pairs=960,
        coin=_coin(rng),
    )
    assert slower.extra == 0 and slower.looks == 1


def test_the_time_cap_ends_a_later_look_where_it_is_and_judges_there():
    rng = np.random.default_rng(4)
    calls = [0]

    def out_of_time():
        calls[0] += 1
        return calls[0] > 80

    found = interleave(
        _noise(rng),
        _noise(rng, 1 / 1.02),
        repeats=2,
        ci_target=0.0001,
        confidence=0.95,
        out_of_time=out_of_time,
        max_pairs=960,
        beyond=0.0,
        coin=_coin(rng),
    )
    # 58 checks in the first look (pairs 3 to 60), then one per pair: the 81st comes at pair 83
    assert (len(found.cand), found.stopped, found.looks) == (83, "time cap", 2)
    assert found.interval.samples == 83 and found.interval.confidence > 0.95  # judged as the second look
