"""Cooperative groups' grid-wide barrier (`cg::this_grid().sync()`) on the host backend: every block resident
at once, results against NumPy, a deadlock reported rather than hung on, a grid too large refused."""

from __future__ import annotations

import time

import numpy as np
import pytest
from irbuild import build_cuda_ir, cuda_available
from paths import DATA

from mneme import capture
from mneme.core.errors import ExperimentError
from mneme.plugins.backends.host import inline_ptx

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
SOURCE = DATA / "realkernels" / "grid_sync.cu"


@pytest.fixture(scope="module")
def ir() -> str:
    return str(build_cuda_ir(SOURCE))


def _run(ir: str, kernel: str, grid, block, args: list, folder) -> dict:
    outputs: dict = {}
    capture.capture(ir, kernel, grid, block, args, folder, backend="host", outputs=outputs)
    return outputs


@pytest.mark.parametrize("sandbox", ["1", "0"])  # kernel code on a helper thread, or on the calling one
def test_after_a_grid_sync_each_thread_reads_what_another_block_wrote(ir, tmp_path, monkeypatch, sandbox):
    monkeypatch.setenv("MNEME_HOST_SANDBOX", sandbox)
    grid, block = (3, 2, 2), 64
    n = 12 * block
    got = _run(ir, "rotate_after_sync", grid, block, [np.zeros(n, np.int32), np.zeros(n, np.int32), n], tmp_path)
    np.testing.assert_array_equal(got[0], np.arange(n))
    np.testing.assert_array_equal(got[1], np.roll(np.arange(n), -block))


def test_a_grid_sync_in_a_loop_separates_every_round(ir, tmp_path):
    blocks, block, rounds = 7, 96, 6
    n = blocks * block
    x = np.random.default_rng(11).standard_normal(n).astype(np.float32)
    got = _run(ir, "rounds_of_sums", blocks, block, [x.copy(), np.zeros(n, np.float32), n, rounds], tmp_path)
    want = [x, np.zeros(n, np.float32)]
    for r in range(rounds):
        want[1 - r % 2] = want[r % 2] + np.roll(want[r % 2], -block)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_block_maxima_by_warp_shuffles_then_a_grid_sync_give_the_grid_maximum(ir, tmp_path):
    blocks, block = 5, 128
    x = np.random.default_rng(12).uniform(-100, 100, blocks * block).astype(np.float32)
    got = _run(ir, "minus_grid_max", blocks, block, [x, np.zeros(blocks, np.float32), np.zeros_like(x)], tmp_path)
    np.testing.assert_array_equal(got[1], x.reshape(blocks, block).max(axis=1))
    np.testing.assert_array_equal(got[2], x - x.max())


def test_split_arrive_and_wait_let_a_block_work_between_them(ir, tmp_path):
    blocks, block = 6, 64
    values = np.random.default_rng(13).integers(-1000, 1000, blocks * block).astype(np.int32)
    args = [values, np.zeros(blocks, np.int32), np.zeros(1, np.int32), np.zeros_like(values)]
    got = _run(ir, "arrive_then_wait", blocks, block, args, tmp_path)
    np.testing.assert_array_equal(got[1], values.reshape(blocks, block).sum(axis=1))
    assert got[2][0] == values.sum()
    np.testing.assert_array_equal(got[3], 2 * values)


def test_a_grid_sync_launch_replays_verified(ir, tmp_path):
    from mneme.core.executor import BaseExecutor

    blocks, block = 4, 128
    n = blocks * block
    db = capture.capture(
        ir,
        "rotate_after_sync",
        blocks,
        block,
        [np.zeros(n, np.int32), np.zeros(n, np.int32), n],
        tmp_path,
        backend="host",
    )
    with BaseExecutor(db, iterations=3) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok and result.verified, result.error


def test_a_thread_polling_memory_lets_the_other_blocks_run(ir, tmp_path):
    # block 0's thread 0 polls a flag that only the last block sets
    got = _run(ir, "poll_flag", 4, 64, [np.zeros(1, np.uint32), np.zeros(1, np.uint32), 1], tmp_path)
    assert got[1][0] == 7


def test_blocks_that_never_meet_at_the_grid_sync_fail_as_a_deadlock_at_once(ir, tmp_path):
    start = time.monotonic()
    with pytest.raises(
        ExperimentError,
        match=r"deadlock at a grid-wide barrier: no thread can go on, 2 of the grid's "
        r"4 blocks wait and 2 finished; every block must reach each",
    ) as failure:
        _run(ir, "half_the_blocks_sync", 4, 32, [np.zeros(128, np.int32)], tmp_path)
    assert failure.value.kind == "fault"
    assert time.monotonic() - start < 60  # long before the default time limit (600 s)


def test_a_poll_that_nothing_answers_ends_at_the_time_limit(ir, tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_LIMIT_TIMEOUT_SECONDS", "1")
    start = time.monotonic()
    with pytest.raises(ExperimentError, match="timed out after 1 s") as failure:
        _run(ir, "poll_flag", 4, 64, [np.zeros(1, np.uint32), np.zeros(1, np.uint32), 0], tmp_path)
    assert failure.value.kind == "timeout"
    assert time.monotonic() - start < 60


def test_a_grid_larger_than_the_host_keeps_resident_is_refused_as_a_cooperative_launch_is(ir, tmp_path):
    blocks, block = 129, 1024  # 132096 threads, over the runtime's 131072
    with pytest.raises(
        ExperimentError,
        match=r"synchronizes its whole grid .* all 132096 threads of grid \(129, 1, 1\) "
        r"x block \(1024, 1, 1\) must be resident at once; the host backend keeps "
        r"at most \d+ .*Launch at most \d+ blocks of 1024 threads",
    ) as failure:
        _run(ir, "rotate_after_sync", blocks, block, [np.zeros(16, np.int32), np.zeros(16, np.int32), 16], tmp_path)
    assert failure.value.kind == "invalid"  # a configuration that cannot launch, as the CUDA backend says too


def test_a_kernel_that_names_the_grid_without_syncing_it_runs_a_grid_of_any_size(ir, tmp_path):
    blocks, block = 160, 1024  # more threads than a grid launch keeps resident
    n = blocks * block
    got = _run(ir, "grid_rank_only", blocks, block, [np.zeros(n, np.uint64)], tmp_path)
    np.testing.assert_array_equal(got[0], np.arange(n, dtype=np.uint64) + n)


def test_ordered_loads_and_atomics_read_as_their_ptx_says():
    poll = inline_ptx.body("ld.acquire.gpu.u32 $0,[$1];", "i32", ["ptr"])
    assert poll == ["%t1 = call i32 @__mneme_poll32(ptr %a0)", "ret i32 %t1"]
    assert inline_ptx.body("ld.relaxed.sys.global.u64 $0, [$1];", "i64", ["i64"]) is not None
    assert inline_ptx.body("ld.acquire.cta.u32 $0,[$1];", "i32", ["ptr"]) is None  # a block-local poll: not here
    add = inline_ptx.body("atom.add.release.gpu.u32 $0,[$1],$2;", "i32", ["ptr", "i32"])
    assert add == ["%t1 = atomicrmw add ptr %a0, i32 %a1 release", "ret i32 %t1"]
    assert (
        "atomicrmw min ptr %a0, i64 %a1 monotonic"
        in inline_ptx.body("atom.global.min.s64 $0,[$1],$2;", "i64", ["ptr", "i64"])[0]
    )
    cas = inline_ptx.body("atom.acq_rel.gpu.cas.b32 $0,[$1],$2,$3;", "i32", ["ptr", "i32", "i32"])
    assert cas[0] == "%t1 = cmpxchg ptr %a0, i32 %a1, i32 %a2 acq_rel acquire"
    assert inline_ptx.body("atom.shared.add.u32 $0,[$1],$2;", "i32", ["ptr", "i32"]) is None  # a shared address
    assert inline_ptx.body("atom.add.f32 $0,[$1],$2;", "float", ["ptr", "float"]) is None  # PTX flushes subnormals
    assert inline_ptx.body("atom.add.gpu.gpu.u32 $0,[$1],$2;", "i32", ["ptr", "i32"]) is None


def test_a_capture_description_says_the_launch_is_cooperative_and_the_recording_keeps_it(ir, tmp_path):
    """A grid.sync() kernel captured without an application: `cooperative: true` in its description lands in
    the database, so a GPU replay launches it so; clusters, which the host cannot launch, are refused by name."""
    import json

    from mneme.capture import capture_spec
    from mneme.core.errors import FormatError, UsageError
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    import shutil

    shutil.copyfile(ir, tmp_path / "grid_sync.ll")  # a description's IR lies in its folder
    spec = {
        "ir": "grid_sync.ll",
        "kernel": "rotate_after_sync",
        "grid": [4],
        "block": [64],
        "cooperative": True,
        "args": [
            {"zeros": {"dtype": "int32", "shape": [256]}, "output": True},
            {"zeros": {"dtype": "int32", "shape": [256]}, "output": True},
            256,
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    db = capture_spec(path, tmp_path / "rec", backend="host")
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.cooperative and inst.cluster_dim is None
    with BaseExecutor(db, iterations=1) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok and result.verified, result.error
    for bad, message in (
        ({"cooperative": "yes"}, "field 'cooperative': true or false"),
        ({"cluster": [3]}, "field 'cluster': clusters of \\(3, 1, 1\\) blocks do not divide"),
    ):
        path.write_text(json.dumps({**spec, **bad}))
        with pytest.raises(FormatError, match=message):
            capture_spec(path, tmp_path / "bad", backend="host")
    path.write_text(json.dumps({**spec, "cluster": [2]}))
    with pytest.raises(UsageError, match="the host backend cannot launch with cluster"):
        capture_spec(path, tmp_path / "clustered", backend="host")
