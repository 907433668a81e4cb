"""A simulated run ends as `mneme tune` ends (issue 39, point 2): its leading candidates compared with the
recorded configuration by the session's own interleaving code, and the pick is what best.json would hold; it
follows `mneme tune`'s defaults, prefetch included. The sweeps are the committed H100 measurements."""

from __future__ import annotations

import pytest
from paths import DATA

from mneme.core.tuning import simulate as simulation
from mneme.core.tuning.measure import interleave
from mneme.core.tuning.options import TuneOptions
from mneme.core.tuning.simulate import Protocol, simulate
from mneme.core.tuning.sweep import Sweep

SAXPY = DATA / "sweeps" / "h100-saxpy-16k-quick.json"
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
    assert protocol.accept_insignificant is tune.accept_insignificant is False
    assert tune.prefetch is None and protocol.in_flight == 2  # one worker, and as many experiments prefetched


def test_without_noise_each_leader_is_confirmed_in_seven_pairs_and_the_optimum_is_picked():
    sweep = Sweep.load(VECTOR_ADD)
    run = simulate(sweep, "exhaustive", len(sweep.points), 0, noise=False)
    optimum = min((p.value, h) for h, p in sweep.points.items() if p.ok)[1]
    # Constant ratios: the median's order-statistic interval at 1 - 5%/3 needs 7 pairs to be bounded, and is
    # then a point (width 0), which ends each of the three comparisons.
    assert (run.compared, run.pairs) == (3, 21)
    assert run.pick == run.search_pick == optimum and run.fraction == 1.0
    assert run.decision.startswith("significantly faster")


def test_a_candidate_the_comparison_cannot_tell_from_the_recorded_one_leaves_best_json_at_the_recorded_one(saxpy):
    # saxpy's optimum (1568 ns) and the recorded launch (1664 ns) overlap in their measured runs (1568-1696 and
    # 1536-1696 ns): the interleaved comparison seldom separates them at the stated confidence.
    sweep, space = saxpy
    runs = [simulate(sweep, "guided", 9, seed, space=space) for seed in range(4)]
    assert all(r.pick == sweep.baseline_hash for r in runs)
    assert all(r.decision.startswith("no significant difference") for r in runs)
    assert any(r.search_pick != sweep.baseline_hash for r in runs)  # what the search alone would have picked
    assert all(r.fraction == pytest.approx(sweep.optimum / sweep.baseline.value) for r in runs)


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


def test_interleaved_pairs_alternate_their_order_and_stop_at_the_first_failed_run():
    calls: list[str] = []
    answers = iter([1.0, 2.0, 2.0, 1.0, 1.0, None])

    def timer(side):
        def run():
            calls.append(side)
            return next(answers)

        return run

    pairs = interleave(
        timer("base"), timer("cand"), repeats=2, ci_target=0.02, confidence=0.95, out_of_time=lambda: False
    )
    assert calls == ["base", "cand", "cand", "base", "base", "cand"]
    assert (pairs.base, pairs.cand, pairs.stopped) == ([1.0, 1.0], [2.0, 2.0], "a run failed")
