"""Equivalent configurations are one experiment (issue 23): configurations that compile to the
same code, launched the same way, are answered from the first one's measurement and spend no budget."""

from __future__ import annotations

import json

from test_tune_cli import invoke
from tuning_sessions import capture_saxpy

from mneme.core.tuning.report import open_results
from mneme.core.tuning.session import TuneOptions, TuningSession
from mneme.core.tuning.store import EVALUATED
from mneme.core.workers import AsyncReplayExecutor

# saxpy has no loop to vectorize, and the host backend has no ptxas: all six points compile to
# the same code. (Unrolling is not a no-op on the host: its thread loop around the kernel unrolls.)
LOOP_SPACE = """name: loops
parameters:
  loop_vectorization: {choices: [true, false]}
  ptxas_opt: {choices: [0, 1, 2]}
"""


def test_a_loop_knob_space_on_a_loop_free_kernel_measures_one_configuration(tmp_path):
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
        5,
        "--results",
        results,
        "--retime-top",
        "1",
        "--retime-repeats",
        "1",
    )
    assert code == 0, out
    store, _ = open_results(results)
    trials = store.trials()
    measured = [t for t in trials if t.user_attrs.get("status") in EVALUATED]
    assert len(measured) == 1, [(t.params, t.user_attrs.get("status")) for t in trials]
    first = measured[0].number
    equivalent = [t for t in trials if (t.user_attrs.get("result") or {}).get("equivalent_to") == first]
    assert len(equivalent) == 5  # the other five points of the 2x3 space
    assert all(t.user_attrs["status"] == "cached" and t.value == measured[0].value for t in equivalent)
    summary = json.loads((results / "summary.json").read_text())
    assert "1/5 distinct configurations measured" in summary["stop"]["detail"]
    assert "5 compiled to code measured already" in summary["stop"]["detail"]


class _ObservedPool(AsyncReplayExecutor):
    """The real pool with one compile-ahead process, noting the results it finishes without a device run."""

    def __init__(self, **kwargs):
        super().__init__(compile_workers=1, **kwargs)
        self.wait_ready()  # until its compile worker is warm, the device worker builds for itself
        self.skipped: list[str] = []

    def _finish(self, job, result, worker):
        if result.skipped:
            self.skipped.append(result.code_hash)
        super()._finish(job, result, worker)


def test_built_ahead_code_measured_already_never_reaches_the_device(tmp_path):
    """With compile-ahead (as on GPU backends), an equivalent is known once built: its device run is saved."""
    db = capture_saxpy(tmp_path / "rec")
    space = tmp_path / "loops.yaml"
    space.write_text(LOOP_SPACE)
    pools: list[_ObservedPool] = []

    def factory(**kwargs):
        pools.append(_ObservedPool(**kwargs))
        return pools[-1]

    options = TuneOptions(
        record_db=str(db),
        results=str(tmp_path / "run"),
        space=str(space),
        sampler="exhaustive",
        trials=5,
        retime_top=1,
        retime_repeats=1,
        prefetch=0,
    )
    summary = TuningSession(options, pool_factory=factory).run()
    assert "5 compiled to code measured already" in summary["stop"]["detail"]
    store, _ = open_results(tmp_path / "run")
    trials = store.trials()
    measured = [t for t in trials if t.user_attrs.get("status") in EVALUATED]
    assert len(measured) == 1
    equivalent = [t for t in trials if (t.user_attrs.get("result") or {}).get("equivalent_to") == measured[0].number]
    assert len(equivalent) == 5
    # Every equivalent was answered when its binary was built: five device runs saved, none spent.
    (pool,) = pools
    assert len(pool.skipped) == 5
    assert set(pool.skipped) == {measured[0].user_attrs["result"]["code_hash"]}
