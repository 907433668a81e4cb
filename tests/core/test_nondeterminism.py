"""Order-dependent outputs: found in the IR and by replays, explained, and verified by a derived bound.

The host backend's helper threads seldom change their order between runs, so its replays mostly agree
with each other; the recording here is what a GPU gave: the float atomicAdd's total summed in another
order (the same numbers, reversed), as the recorder would have written it.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from irbuild import build_cuda_ir

from mneme import capture
from mneme.core.executor import BaseExecutor
from mneme.core.nondeterminism import analyze, derive_policy
from mneme.core.divergence import float_divergence
from mneme.core.order_dependence import order_dependent_params
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import RegionPolicy, Snapshot, SnapshotType, SnapshotWriter
from mneme.plugins.replay_commands import nondeterminism_command

ATOMICS = """// Outputs that follow the order threads run in, and one that does not.
extern "C" __global__ void scale_and_sum(const float* x, float* y, float* total, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = 2.0f * x[i];
    atomicAdd(total, x[i]);
  }
}
extern "C" __global__ void last_writer(const int* x, int* winner, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicExch(winner, x[i]);
}
extern "C" __global__ void compact(const float* x, float* out, int* count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0.5f) {
    int slot = atomicAdd(count, 1);
    out[slot] = x[i];
  }
}
extern "C" __global__ void histogram(const int* x, int* bins, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[x[i] & 15], 1);
}
"""
N = 4096


@pytest.fixture(scope="module")
def atomics_ir(tmp_path_factory):
    source = tmp_path_factory.mktemp("atomics") / "atomics.cu"
    source.write_text(ATOMICS)
    return build_cuda_ir(source)


def test_a_float_atomic_add_makes_its_accumulator_order_dependent_and_nothing_else(atomics_ir, tmp_path):
    # Read from the optimized module, as a replay builds it (the front end's IR keeps parameters in allocas).
    x = np.zeros(8, np.float32)
    db = capture.capture(
        atomics_ir,
        "scale_and_sum",
        1,
        8,
        [x, x.copy(), np.zeros(1, np.float32), 8],
        tmp_path,
        backend="host",
        names=["x", "y", "total", "n"],
    )
    with BaseExecutor(db, iterations=1) as ex:
        reasons = order_dependent_params(ex.optimized_ir(ex.default_config()), "scale_and_sum")
    assert list(reasons) == [2]  # total, not y
    assert reasons[2][0].startswith("a float atomic fadd (atomicrmw) accumulates into it")


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ("last_writer", {1: "atomic exchange"}),
        ("compact", {1: "index an atomic returned"}),  # out; the count itself is a commutative integer sum
        ("histogram", {}),  # integer atomicAdd: the same bins whatever the order
    ],
)
def test_exchanges_and_atomic_indexes_are_order_dependent_and_integer_sums_are_not(
    atomics_ir, tmp_path, kernel, expected
):
    ints = np.arange(64, dtype=np.int32)
    floats = np.linspace(0, 1, 64, dtype=np.float32)
    args = {
        "last_writer": [ints, np.zeros(1, np.int32), 64],
        "compact": [floats, np.zeros(64, np.float32), np.zeros(1, np.int32), 64],
        "histogram": [ints, np.zeros(16, np.int32), 64],
    }[kernel]
    db = capture.capture(atomics_ir, kernel, 1, 64, args, tmp_path, backend="host")
    with BaseExecutor(db, iterations=1) as ex:
        found = order_dependent_params(ex.optimized_ir(ex.default_config()), kernel)
    assert {k: v[0] for k, v in found.items()}.keys() == expected.keys()
    for index, words in expected.items():
        assert words in found[index][0]


@pytest.fixture()
def gpu_ordered_sum(atomics_ir, tmp_path):
    """scale_and_sum recorded on the host, its total replaced by the same floats summed in reverse order."""
    x = np.random.default_rng(11).uniform(0, 1, N).astype(np.float32)
    db = capture.capture(
        atomics_ir,
        "scale_and_sum",
        N // 256,
        256,
        [x, np.zeros_like(x), np.zeros(1, np.float32), N],
        tmp_path / "db",
        backend="host",
        names=["x", "y", "total", "n"],
    )
    reverse = np.float32(0)
    for value in x[::-1]:
        reverse = np.float32(reverse + value)
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    with Snapshot.open(inst.prologue_path) as prologue, Snapshot.open(inst.epilogue_path, base=prologue) as old:
        regions = {r.addr: bytes(old.read_region(r.addr)) for r in old.regions}
        args, static, dynamic, globals_ = bytes(old.args), old.static_hash, old.dynamic_hash, dict(old.globals)
    total_addr = next(a for a, data in regions.items() if len(data) == 4)
    assert regions[total_addr] != reverse.tobytes()  # the host's order gives other bits: the case at hand
    regions[total_addr] = reverse.tobytes()
    with SnapshotWriter(inst.epilogue_path, SnapshotType.EPILOGUE, static_hash=static, dynamic_hash=dynamic) as w:
        w.set_args(args)
        for addr, data in regions.items():
            w.add_region(addr, data)
        for name, data in globals_.items():
            w.add_global(name, data)
    return db, inst.dynamic_hash, total_addr


def test_a_failed_replay_says_the_region_is_order_dependent_and_how_to_derive_its_bound(gpu_ordered_sum):
    db, record_id, total_addr = gpu_ordered_sum
    with BaseExecutor(db, iterations=1) as ex:
        result = ex.execute(ex.default_config())
    (line,) = result.mismatches
    assert "[arg 2 (total)]" in line and "order-dependent (a float atomic fadd" in line
    assert f"mneme nondeterminism -rdb {db} -rid {record_id}" in line


def test_the_replays_spread_gives_a_bounded_policy_that_is_stored_and_then_verifies(gpu_ordered_sum):
    db, record_id, total_addr = gpu_ordered_sum
    with BaseExecutor(db, iterations=1, cache="warm") as ex:
        findings = analyze(ex, runs=2, margin=4.0)
    total = findings[0]
    assert total.addr == total_addr and total.arg == 2 and total.order_dependent and not total.matches_recording
    assert total.reasons  # the IR's witness; the replays' is the recording (the host's threads may or may not
    # change their order from run to run: the bound covers both spreads either way)
    assert total.policy.dtype == "f32" and total.policy.relative
    assert total.vs_recording.max_rel * 4 <= total.policy.threshold < 1e-4  # a bound, not a blanket tolerance
    y = next(f for f in findings if f.arg == 1)
    assert not y.order_dependent and y.policy is None and y.matches_recording

    # The command itself (its registration is the plugin manager's, tested with the other commands).
    outcome = CliRunner().invoke(nondeterminism_command, ["-rdb", str(db), "--runs", "2", "--apply"])
    assert outcome.exit_code == 0, outcome.output
    assert "stored in the recording" in outcome.output and "float atomic fadd" in outcome.output
    with Snapshot.open(next(iter(RecordedExecution.from_json(db).kernel_instances.values())).prologue_path) as p:
        inst = RecordedExecution.from_json(db).select(record_id)
        with Snapshot.open(inst.epilogue_path, base=p) as epilogue:
            assert epilogue.region(total_addr).policy == total.policy  # stored where mneme annotate overrides it
    with BaseExecutor(db, iterations=1) as ex:
        again = ex.execute(ex.default_config())
    assert again.verified, again.error


def test_a_spread_far_beyond_rounding_is_called_a_race_and_gets_no_policy():
    expected = np.full(16, 10.0, np.float32)
    actual = expected.copy()
    actual[3] = 13.0
    policy, why = derive_policy([float_divergence(expected.tobytes(), actual.tobytes())], 4.0)
    assert policy is None and "a race, not rounding" in why
    small = expected.copy()
    small[3] = np.nextafter(small[3], np.float32(20))
    policy, _ = derive_policy([None, float_divergence(expected.tobytes(), small.tobytes())], 4.0)
    assert policy == RegionPolicy(dtype="f32", threshold=policy.threshold, relative=True) and policy.threshold > 0
