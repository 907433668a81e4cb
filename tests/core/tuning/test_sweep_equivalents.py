"""A sweep exported from a study where configurations compiled to code measured already (one experiment,
issue 23) holds every configuration, each equivalent with the measurement it shares, so a simulation sees
what the device search saw instead of a missing point (a failure)."""

from __future__ import annotations

from test_tune_cli import invoke
from test_tune_equivalent import LOOP_SPACE
from tuning_sessions import capture_saxpy

from mneme.core.tuning.outcome import PENALTY_FACTOR
from mneme.core.tuning.simulate import simulate
from mneme.core.tuning.sweep import Sweep, export_sweep


def test_equivalent_configurations_are_exported_with_the_measurement_they_share(tmp_path):
    db = capture_saxpy(tmp_path / "rec")
    space = tmp_path / "loops.yaml"
    space.write_text(LOOP_SPACE)
    results = tmp_path / "run"
    code, out = invoke(
        "tune",
        "-rdb",
        db,
        "--space",
        space,
        "--sampler",
        "exhaustive",
        "--trials",
        6,
        "--results",
        results,
        "--retime-top",
        "0",
    )
    assert code == 0, out
    data = export_sweep(results)
    points = data["points"]
    assert len(points) == 6  # one measured, five that compiled to its code
    measured = [h for h, p in points.items() if "equivalent_to" not in p]
    assert len(measured) == 1
    for point in points.values():
        assert point["times"] == points[measured[0]]["times"] and point["status"] == "ok"
    sweep = Sweep.from_dict(data, results)
    run = simulate(sweep, "exhaustive", 6, 0, noise=False)
    # As in the device search: one experiment, the five others answered from its code without budget (none
    # missing), and only the measured one is a candidate for the final comparison.
    assert (run.trials, run.equivalent, run.missing) == (1, 5, 0)
    assert sweep.points[run.search_pick].value == points[measured[0]]["value"]
    # the measured one is compared unless its time counts as a failure's (100 baseline times: on a loaded machine a
    # host launch can wait a scheduler slice, 4 ms, for a helper whose CPU another process holds, against 20 us)
    eligible = points[measured[0]]["value"] < sweep.baseline.value * PENALTY_FACTOR
    assert run.compared == int(eligible) and run.pick in (*points, sweep.baseline_hash)
