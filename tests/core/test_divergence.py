"""A replay that does not reproduce the recorded floats says how far off it is and how to accept it."""

from __future__ import annotations

import re
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from mneme import capture
from mneme.core.divergence import float_divergence, round_up, ulp_distance
from mneme.core.executor import BaseExecutor
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotType, SnapshotWriter
from paths import ROOT

SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"
N = 2000


def test_ulps_count_the_representable_floats_between_two_values_across_zero():
    one = np.array([1.0], np.float32)
    assert ulp_distance(one, np.nextafter(one, np.float32(2)), "f32")[0] == 1
    assert ulp_distance(one, np.array([1.0 + 2**-21], np.float32), "f32")[0] == 4
    tiny = np.array([np.finfo(np.float32).smallest_subnormal], np.float32)
    assert ulp_distance(tiny, -tiny, "f32")[0] == 2  # +d, 0, -d: the two zeros count as one value
    assert ulp_distance(np.array([0.0]), np.array([-0.0]), "f64")[0] == 0


def test_float_errors_are_measured_and_the_policy_derived_accepts_exactly_what_was_seen():
    expected = np.linspace(1, 2, 1000, dtype=np.float32)
    actual = expected.copy()
    actual[10] = np.nextafter(actual[10], np.float32(3))
    actual[20] *= np.float32(1 + 3e-6)
    div = float_divergence(expected.tobytes(), actual.tobytes())
    assert div.dtype == "f32" and div.elements == 2 and div.nan_mismatch == 0
    assert div.max_ulp == int(ulp_distance(expected[20:21], actual[20:21], "f32")[0]) >= 10
    assert div.max_rel == pytest.approx(abs(actual[20] - expected[20]) / expected[20], rel=1e-6)
    policy = div.accepting_policy()
    assert policy.relative and policy.dtype == "f32" and div.max_rel <= policy.threshold < 1.1 * div.max_rel + 1e-12


def test_an_expected_zero_gets_an_absolute_bound_and_a_nan_none():
    expected = np.zeros(64, np.float32)
    actual = expected.copy()
    actual[3] = 2.5e-7
    policy = float_divergence(expected.tobytes(), actual.tobytes()).accepting_policy()
    assert policy == RegionPolicy(dtype="f32", threshold=2.5e-7, relative=False)
    actual[4] = np.nan
    assert float_divergence(expected.tobytes(), actual.tobytes()).accepting_policy() is None


def test_integers_are_not_read_as_floats():
    counts = np.arange(4096, dtype=np.int32)
    assert float_divergence(counts.tobytes(), (counts + 1).tobytes()) is None


@pytest.mark.parametrize(("value", "up"), [(1.234e-5, 1.3e-5), (1.2e-5, 1.2e-5), (0.991, 1.0), (7.0, 7.0)])
def test_thresholds_round_up_to_two_significant_digits(value, up):
    assert round_up(value) == up and round_up(value) >= value


def _perturbed(tmp_path, far: bool):
    """A saxpy recording whose epilogue holds y as another compiler's FMA would leave it, a few ulps off
    (or, `far`, with one element 1% off: a wrong result)."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, N).astype(np.float32)
    y = rng.uniform(0, 1, N).astype(np.float32)
    db = capture.capture(
        SAXPY_IR,
        "saxpy",
        8,
        256,
        [N, np.float32(3.0), x, y],
        tmp_path / "db",
        backend="host",
        names=["n", "a", "x", "y"],
    )
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    y_addr = max(epilogue.regions, key=lambda r: r.addr).addr
    out = np.frombuffer(bytes(epilogue.read_region(y_addr)), np.float32).copy()
    out[::7] = np.nextafter(out[::7], np.float32(10))  # one ulp up on every 7th element
    out[::50] = np.nextafter(out[::50], np.float32(10))  # two on every 350th
    if far:
        out[11] *= np.float32(1.01)
    # Rewrite the epilogue's y (as the recorder would have written it) with the perturbed values.
    regions = {r.addr: bytes(epilogue.read_region(r.addr)) for r in epilogue.regions}
    regions[y_addr] = out.tobytes()
    args, static, dynamic, globals_ = (
        bytes(epilogue.args),
        epilogue.static_hash,
        epilogue.dynamic_hash,
        epilogue.globals,
    )
    with SnapshotWriter(inst.epilogue_path, SnapshotType.EPILOGUE, static_hash=static, dynamic_hash=dynamic) as w:
        w.set_args(args)
        for addr, data in regions.items():
            w.add_region(addr, data)
        for name, data in globals_.items():
            w.add_global(name, data)
    return db, inst.dynamic_hash


@pytest.fixture()
def perturbed_saxpy(tmp_path):
    return _perturbed(tmp_path, far=False)


def test_a_replay_off_by_a_few_ulps_reports_its_errors_and_the_annotate_command_that_accepts_them(perturbed_saxpy):
    db, record_id = perturbed_saxpy
    with BaseExecutor(db, iterations=1) as ex:
        result = ex.execute(ex.default_config())
    assert not result.verified
    (line,) = result.mismatches  # one line per region: where, how many bytes, and how far off as floats
    assert line.startswith("region 0x") and "[arg 3 (y)]" in line and "as f32: " in line and "max 2 ulp" in line
    command = line.split("to accept it: ")[1]
    assert command.startswith(f"mneme annotate {db} -rid {record_id} --arg 3 --dtype f32 --threshold ")
    assert command.endswith(" --relative")
    # Running the command it printed makes the same replay verify.
    from mneme.core.cli import cli

    outcome = CliRunner().invoke(cli, shlex.split(command)[1:])
    assert outcome.exit_code == 0, outcome.output
    with BaseExecutor(db, iterations=1) as ex:
        again = ex.execute(ex.default_config())
    assert again.verified, again.error
    threshold = float(re.search(r"--threshold (\S+)", command).group(1))
    assert 0 < threshold < 1e-6  # two ulps of values in [0, 4): a bound, not a blanket tolerance


def test_a_wrong_result_gets_its_errors_but_no_command_to_accept_it(tmp_path):
    db, _ = _perturbed(tmp_path, far=True)  # one element 1% off: beyond any rounding difference
    with BaseExecutor(db, iterations=1) as ex:
        result = ex.execute(ex.default_config())
    (line,) = result.mismatches
    assert "as f32: " in line and "too far off for a rounding difference" in line and "mneme annotate" not in line
