"""The native recorder on a real GPU: real applications recorded, and every recorded launch replayed verified.

The C++ programs (tests/gpu/programs/*.cu) are built by `scripts/gpu-suite --prepare` into
.gpu/bin/ with nvcc's defaults (static cudart); `stencil_app_ir` is the same stencil built with
`mneme-cc nvcc`, so its device IR is embedded. Where no prebuilt program exists, nvcc builds it.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_corpus import ROOT, cuda_ir

pytestmark = pytest.mark.gpu

VA_BASE = 0x153940000000


@pytest.fixture(scope="module")
def saxpy_app(tmp_path_factory):
    prebuilt = ROOT / ".gpu" / "bin" / "saxpy_app"
    if prebuilt.exists():
        return prebuilt
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc not found and no prebuilt saxpy_app in .gpu/bin")
    out = tmp_path_factory.mktemp("app") / "saxpy_app"
    source = Path(__file__).parent / "programs" / "saxpy_app.cu"
    subprocess.run([nvcc, "-arch=sm_90", "-o", str(out), str(source)], check=True, capture_output=True)
    return out


def test_application_runs_unchanged_with_its_allocations_at_the_fixed_base(recorder_library, saxpy_app, tmp_path):
    from mneme_cuda import recorder

    env = recorder.environment(tmp_path / "raw", kernel="saxpy", library=recorder_library)
    proc = subprocess.run([str(saxpy_app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    words = proc.stdout.split()
    assert words[:2] == ["saxpy_app", "OK"], proc.stdout
    pointers = [int(w, 16) for w in words[2:4]]
    assert all(VA_BASE <= p < VA_BASE + (1 << 40) for p in pointers), proc.stdout
    assert len(recorder.launches(tmp_path / "raw")) == 3  # three launches, three argument sets


def test_without_a_selected_kernel_nothing_is_written_and_the_result_is_the_same(recorder_library, saxpy_app, tmp_path):
    from mneme_cuda import recorder

    env = recorder.environment(tmp_path / "raw", kernel="^no_such_kernel$", library=recorder_library)
    proc = subprocess.run([str(saxpy_app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "saxpy_app OK" in proc.stdout, proc.stderr
    assert recorder.launches(tmp_path / "raw") == []


def test_every_recorded_launch_replays_verified_at_the_recorded_addresses(recorder_library, saxpy_app, tmp_path):
    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    code = recorder.main_record(
        tmp_path / "db", [str(saxpy_app)], [cuda_ir("saxpy")], kernel="saxpy", library=recorder_library
    )
    assert code == 0
    (db,) = (tmp_path / "db").glob("*.json")
    rec = RecordedExecution.from_json(db)
    assert rec.va_addr == VA_BASE and len(rec.kernel_instances) == 3
    for dynamic_hash in rec.kernel_instances:
        with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=2) as ex:
            result = ex.execute(ex.default_config())
        assert result.ok, result.error


def test_when_the_recording_cannot_be_written_the_application_runs_on_after_one_message(
    recorder_library, saxpy_app, tmp_path
):
    from mneme_cuda import recorder

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the recording folder should be")
    env = recorder.environment(blocked / "raw", kernel="saxpy", library=recorder_library)
    proc = subprocess.run([str(saxpy_app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "saxpy_app OK" in proc.stdout, proc.stderr
    assert proc.stderr.count("recording stops, the application continues") == 1, proc.stderr


# -- the test programs ---------------------------------------------------------------------------

PROGRAMS = Path(__file__).parent / "programs"


def program(name: str, tmp_path_factory) -> Path:
    """A test program from .gpu/bin (built by --prepare), else built here with nvcc."""
    prebuilt = ROOT / ".gpu" / "bin" / name
    if prebuilt.exists():
        return prebuilt
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    source = PROGRAMS / f"{name}.cu"
    if not Path(nvcc).exists() or not source.exists():
        pytest.skip(f"no prebuilt {name} in .gpu/bin and no nvcc (or source) to build it")
    out = tmp_path_factory.mktemp(name) / name
    subprocess.run([nvcc, "-arch=sm_90", "-o", str(out), str(source)], check=True, capture_output=True)
    return out


def record(command, tmp_path, kernel, library, **options):
    """Run `command` under the recorder (`mneme record`'s path); returns (exit code, databases)."""
    from mneme_cuda import recorder

    code = recorder.main_record(
        tmp_path / "db", [str(c) for c in command], [], kernel=kernel, library=library, **options
    )
    return code, sorted((tmp_path / "db").glob("*.json"))


def replay_all(databases):
    """Replay every instance of every database (IR when the recording has it, else the cubin/PTX)."""
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    outcomes = []
    for db in databases:
        rec = RecordedExecution.from_json(db)
        mode = "ir" if rec.llvm_files else ("cubin" if any(b.kind == "cubin" for b in rec.binary_blobs) else "ptx")
        for dynamic_hash in rec.kernel_instances:
            with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=1, mode=mode) as ex:
                result = ex.execute(ex.default_config())
            outcomes.append((rec.kernel_name, mode, result))
    return outcomes


def assert_all_verified(outcomes, expected_count=None):
    assert outcomes, "nothing was recorded"
    failures = [f"{name} ({mode}): {result.error}" for name, mode, result in outcomes if not result.ok]
    assert not failures, failures
    if expected_count is not None:
        assert len(outcomes) == expected_count


def test_a_2d_stencil_without_ir_replays_from_its_loaded_cubin(recorder_library, tmp_path_factory, tmp_path):
    from mneme.core.records import RecordedExecution

    app = program("stencil_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "stencil2d", recorder_library)
    assert code == 0
    (db,) = dbs
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files == [] and [b.kind for b in rec.binary_blobs] == ["cubin"]
    (a, b) = rec.kernel_instances.values()  # 33 launches, two argument sets (swapped buffers)
    assert sorted([a.occ, b.occ]) == [16, 17] and (a.block_dim.x, a.block_dim.y) == (32, 8)
    assert_all_verified(replay_all(dbs), 2)


def test_an_application_built_with_mneme_cc_is_recorded_with_its_ir(recorder_library, tmp_path):
    from mneme.core.records import RecordedExecution

    app = ROOT / ".gpu" / "bin" / "stencil_app_ir"
    if not app.exists():
        pytest.skip("stencil_app_ir is built by scripts/gpu-suite --prepare (mneme-cc needs clang-19)")
    code, dbs = record([app], tmp_path, "stencil2d", recorder_library)
    assert code == 0
    (db,) = dbs
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files and rec.binary_blobs
    assert_all_verified(replay_all(dbs), 2)


def test_a_shared_memory_reduction_replays_verified(recorder_library, tmp_path_factory, tmp_path):
    app = program("reduce_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "reduce_sum", recorder_library)
    assert code == 0
    assert_all_verified(replay_all(dbs), 3)


def test_device_globals_are_recorded_by_name_and_restored_on_replay(recorder_library, tmp_path_factory, tmp_path):
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    app = program("global_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "add_bias", recorder_library)
    assert code == 0
    (db,) = dbs
    rec = RecordedExecution.from_json(db)
    assert rec.globals == {"bias": 4, "launch_count": 4}
    # 17 launches with the same arguments: one instance, its state the first launch's.
    (inst,) = rec.kernel_instances.values()
    assert inst.occ == 17
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    assert struct.unpack("<f", prologue.globals["bias"]) == (2.0,)
    assert struct.unpack("<i", prologue.globals["launch_count"]) == (0,)
    assert struct.unpack("<i", epilogue.globals["launch_count"]) == (1,)
    assert_all_verified(replay_all(dbs), 1)


def test_a_linked_list_in_device_memory_replays_at_its_recorded_addresses(recorder_library, tmp_path_factory, tmp_path):
    app = program("list_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "walk_lists", recorder_library)
    assert code == 0
    assert_all_verified(replay_all(dbs), 1)


def test_launches_from_two_host_threads_on_two_streams_are_all_counted_and_replay(
    recorder_library, tmp_path_factory, tmp_path
):
    from mneme.core.records import RecordedExecution

    app = program("streams_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "saxpy", recorder_library)
    assert code == 0
    (db,) = dbs
    rec = RecordedExecution.from_json(db)
    assert len(rec.kernel_instances) == 2  # one argument set per thread
    assert sum(i.occ for i in rec.kernel_instances.values()) == 2 * 17
    assert_all_verified(replay_all(dbs), 2)


def test_launches_completed_before_a_crash_stay_readable_and_replay(recorder_library, tmp_path_factory, tmp_path):
    from mneme_cuda import recorder

    app = program("crash_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "saxpy", recorder_library)
    assert code == 128 + signal.SIGSEGV  # the application's own fate, passed on
    assert len(recorder.launches(tmp_path / "db" / "raw")) == 3
    assert not list((tmp_path / "db" / "raw").glob("launch-*.tmp"))
    assert_all_verified(replay_all(dbs), 3)


def _python_app(name: str, modules: tuple[str, ...]) -> Path:
    for module in modules:
        pytest.importorskip(module)
    return PROGRAMS / f"{name}.py"


def _addresses_in_the_recorded_range(stdout: str, tag: str) -> None:
    words = stdout.split()
    index = words.index(tag)
    assert words[index + 1] == "OK", stdout
    pointers = [int(w, 16) for w in words[index + 2 : index + 4]]
    assert all(VA_BASE <= p < VA_BASE + (1 << 40) for p in pointers), stdout


def test_a_triton_kernel_in_a_python_process_is_placed_recorded_and_replayed(recorder_library, tmp_path):
    from mneme_cuda import recorder

    script = _python_app("triton_app", ("torch", "triton"))
    env = recorder.environment(tmp_path / "probe", kernel="^$", library=recorder_library)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    _addresses_in_the_recorded_range(proc.stdout, "triton_app")
    code, dbs = record([sys.executable, script], tmp_path, "add_kernel", recorder_library)
    assert code == 0
    assert_all_verified(replay_all(dbs), 1)  # two launches, one argument set


def test_a_pytorch_op_in_a_python_process_is_placed_recorded_and_replayed(recorder_library, tmp_path):
    from mneme_cuda import recorder

    script = _python_app("torch_app", ("torch",))
    env = recorder.environment(tmp_path / "probe", kernel="^$", library=recorder_library)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    _addresses_in_the_recorded_range(proc.stdout, "torch_app")
    code, dbs = record([sys.executable, script], tmp_path, "elementwise_kernel", recorder_library)
    assert code == 0
    assert_all_verified(replay_all(dbs))


def test_a_buffer_annotated_by_the_application_carries_its_policy_into_the_snapshots(
    recorder_library, tmp_path_factory, tmp_path
):
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import RegionPolicy, Snapshot
    from mneme.core.snapshot.format import EXACT

    app = program("annotate_app", tmp_path_factory)  # mneme_annotate(out, "f32", 1e-5, relative, "none", "output")
    code, dbs = record([app], tmp_path, "scale_add", recorder_library)
    assert code == 0
    ((_, manifest),) = recorder.launches(tmp_path / "db" / "raw")
    in_ptr, out_ptr = struct.unpack_from("<QQ", bytes.fromhex(manifest["args"]), 0)
    assert [(p["addr"], p["tag"]) for p in manifest["policies"]] == [(out_ptr, "output")]
    (db,) = dbs
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    policies = {region.addr: region.policy for region in epilogue.regions}
    assert policies[out_ptr] == RegionPolicy(dtype="f32", threshold=1e-5, relative=True, norm="none")
    assert policies[in_ptr] == EXACT
    assert_all_verified(replay_all(dbs), 1)


# -- pitched, stream-ordered and application-mapped memory, graphs, in-application times ---------

ZONE = VA_BASE + (1 << 40)  # the application's own reservations land above the placed range


def _run(command, env):
    proc = subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    return proc


def test_pitched_allocations_are_placed_with_the_drivers_pitch_and_replay(recorder_library, tmp_path_factory, tmp_path):
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution

    app = program("pitch_app", tmp_path_factory)
    plain = _run([app], {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")})
    under = _run([app], recorder.environment(tmp_path / "probe", kernel="^$", library=recorder_library))
    assert "not placed" not in under.stderr, under.stderr
    words = under.stdout.split()
    assert words[:2] == ["pitch_app", "OK"] and words[4] == plain.stdout.split()[4]  # the same pitch
    assert all(VA_BASE <= int(w, 16) < ZONE for w in words[2:4]), under.stdout
    code, dbs = record([app], tmp_path, "scale_add_2d", recorder_library)
    assert code == 0
    (db,) = dbs
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.occ == 20
    assert len(inst.app_times) == 17 and all(0 < t < 0.1 for t in inst.app_times)  # recorded launch + 16 more
    assert_all_verified(replay_all(dbs), 1)


def test_stream_ordered_allocations_are_placed_freed_in_stream_order_and_replay(
    recorder_library, tmp_path_factory, tmp_path
):
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution

    app = program("async_app", tmp_path_factory)
    under = _run([app], recorder.environment(tmp_path / "probe", kernel="^$", library=recorder_library))
    assert "not placed" not in under.stderr, under.stderr
    words = under.stdout.split()
    assert words[:2] == ["async_app", "OK"], under.stdout
    pointers = [int(w, 16) for w in words[2:6]]
    assert all(VA_BASE <= p < ZONE for p in pointers) and len(set(pointers)) == 4, under.stdout
    code, dbs = record([app], tmp_path, "saxpy", recorder_library)
    assert code == 0
    (db,) = dbs
    rec = RecordedExecution.from_json(db)
    assert sorted(i.occ for i in rec.kernel_instances.values()) == [1, 20]
    assert_all_verified(replay_all(dbs), 2)


def test_a_pytorch_op_with_expandable_segments_is_placed_in_the_zone_recorded_and_replayed(
    recorder_library, tmp_path, monkeypatch
):
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution

    script = _python_app("torch_app", ("torch",))
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env = recorder.environment(tmp_path / "probe", kernel="^$", library=recorder_library)
    proc = _run([sys.executable, script], env)
    words = proc.stdout.split()
    index = words.index("torch_app")
    pointers = [int(w, 16) for w in words[index + 2 : index + 4]]
    assert all(ZONE <= p < ZONE + (2 << 40) for p in pointers), proc.stdout + proc.stderr[-2000:]
    code, dbs = record([sys.executable, script], tmp_path, "elementwise_kernel", recorder_library)
    assert code == 0
    for db in dbs:
        rec = RecordedExecution.from_json(db)
        assert rec.va_addr <= min(pointers) and max(pointers) < rec.va_addr + rec.va_size
    assert_all_verified(replay_all(dbs))


def test_a_kernel_launched_directly_and_through_a_captured_graph_is_recorded_in_both(
    recorder_library, tmp_path_factory, tmp_path
):
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution

    app = program("graph_app", tmp_path_factory)
    raw = tmp_path / "raw"
    proc = _run([app], recorder.environment(raw, kernel="^saxpy$", library=recorder_library))
    assert "graph_app OK" in proc.stdout  # the graph's results are the application's own
    assert "inside a CUDA graph" not in proc.stderr, proc.stderr
    assert recorder.in_application(raw)[1] == {}  # no launch ran unrecorded inside a graph
    assert len(recorder.launches(raw)) == 2  # the direct launch, and the graph's first launch node by node
    code, dbs = record([app], tmp_path, "^saxpy$", recorder_library)
    assert code == 0
    (db,) = dbs
    assert sorted(inst.occ for inst in RecordedExecution.from_json(db).kernel_instances.values()) == [1, 5]
    assert_all_verified(replay_all(dbs), 2)


@pytest.mark.parametrize(
    ("env", "epilogue_format", "capture", "encodings", "compression"),
    [
        ({}, "diff", "device shadow", ["diff", "diff"], "lz4"),
        ({}, "best", "device shadow", ["diff", "lz4"], "lz4"),  # x unchanged, y rewritten; LZ4 is the default
        ({}, "best", "device shadow", ["diff", "zstd"], "zstd"),
        ({"MNEME_RECORD_PENDING_MIB": "0"}, "diff", "synchronous", ["lz4", "lz4"], "lz4"),  # no room for shadows
    ],
)
def test_each_capture_path_and_epilogue_format_writes_snapshots_that_replay(
    recorder_library, saxpy_app, tmp_path, monkeypatch, env, epilogue_format, capture, encodings, compression
):
    from mneme_cuda import recorder

    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, dbs = record(
        [saxpy_app], tmp_path, "saxpy", recorder_library, epilogue_format=epilogue_format, compression=compression
    )
    assert code == 0
    manifests = [m for _, m in recorder.launches(tmp_path / "db" / "raw")]
    assert [(m["version"], m["capture"], m["epilogue_format"]) for m in manifests] == [
        (2, capture, epilogue_format)
    ] * 3
    assert all(m["write_seconds"] > 0 and m["stored_bytes"] > 0 for m in manifests)
    (db,) = dbs
    for inst in RecordedExecution.from_json(db).kernel_instances.values():
        with (
            Snapshot.open(inst.prologue_path) as prologue,
            Snapshot.open(inst.epilogue_path, base=prologue, verify=True) as epilogue,
        ):
            assert [r.encoding for r in sorted(epilogue.regions, key=lambda r: r.addr)] == encodings
            assert {r.encoding for r in prologue.regions} == {compression}
            assert prologue.version == (2 if compression == "lz4" else 1)  # only LZ4 needs format version 2
    assert_all_verified(replay_all(dbs), 3)


def test_pointers_into_pinned_host_and_managed_memory_are_warned_about_once_each_naming_the_allocation(
    recorder_library, tmp_path_factory, tmp_path
):
    from mneme_cuda import recorder

    app = program("hostmem_app", tmp_path_factory)
    raw = tmp_path / "raw"
    proc = _run([app], recorder.environment(raw, kernel="^saxpy$", max_recordings=8, library=recorder_library))
    words = proc.stdout.split()
    assert words[:2] == ["hostmem_app", "OK"], proc.stdout
    pinned, managed = (int(w, 16) for w in words[2:4])
    warnings = [line for line in proc.stderr.splitlines() if "points into" in line]
    assert len(warnings) == 2, proc.stderr
    assert (
        f"argument 2 points into pinned host memory (cuMemHostAlloc) of {4 << 16} bytes at {pinned:#x}" in warnings[0]
    ), warnings
    assert (
        f"argument 2 points into managed memory (cuMemAllocManaged) of {4 << 16} bytes at {managed:#x}" in warnings[1]
    ), warnings
    assert "registered host memory" not in proc.stderr  # registered, but no kernel is given it
    assert len(recorder.launches(raw)) == 6  # warned about, and recorded all the same


# -- launches with attributes: cooperative, clusters -----------------------------------------------


def _replay_cli(db: Path, *extra: str) -> subprocess.CompletedProcess:
    """`mneme replay` in its own process: a launch made the wrong way may fault, which ends a CUDA context."""
    return subprocess.run(
        [sys.executable, "-m", "mneme", "replay", "-rdb", str(db), "--iterations", "1", *extra],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_cooperative_launch_is_recorded_as_one_and_replays_cooperatively_verified(
    recorder_library, tmp_path_factory, tmp_path
):
    """grid.sync() holds only in a cooperative launch: the recording says it was one, the replay repeats it,
    and a geometry too large to be resident at once is an invalid configuration, not a fault."""
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    app = program("coop_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "grid_rotate", recorder_library)
    assert code == 0
    (db,) = dbs
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.cooperative and inst.cluster_dim is None
    assert_all_verified(replay_all(dbs), 1)
    with BaseExecutor(db, backend="cuda", iterations=1, mode="cubin") as ex:
        too_many = ex.default_config().replace(grid=(ex.instance.grid_dim.x * 1000, 1, 1))
        result = ex.execute(too_many)
        assert result.failed and result.error_kind == "invalid", result.error
        assert "cooperative launch needs every block resident" in result.error
        again = ex.execute(ex.default_config())  # the device is fine afterwards
        assert again.ok, again.error


def test_a_cooperative_kernel_built_with_mneme_cc_replays_from_its_ir_cooperatively(recorder_library, tmp_path):
    from mneme.core.records import RecordedExecution

    app = ROOT / ".gpu" / "bin" / "coop_app_ir"
    if not app.exists():
        pytest.skip("coop_app_ir is built by scripts/gpu-suite --prepare (mneme-cc needs clang-19)")
    code, dbs = record([app], tmp_path, "grid_rotate", recorder_library)
    assert code == 0
    (db,) = dbs
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files and all(i.cooperative for i in rec.kernel_instances.values())
    outcomes = replay_all(dbs)
    assert [mode for _, mode, _ in outcomes] == ["ir"]
    assert_all_verified(outcomes, 1)
    from mneme.core.executor import BaseExecutor

    # The host runs it too: every block resident at once, as the cooperative launch promised.
    with BaseExecutor(db, backend="host", iterations=1) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok, result.error


def test_a_launch_with_block_clusters_is_recorded_with_them_and_needs_them_to_verify(
    recorder_library, tmp_path_factory, tmp_path
):
    import json

    from mneme.core.records import RecordedExecution
    from mneme.core.types import dim3

    app = program("cluster_app", tmp_path_factory)
    code, dbs = record([app], tmp_path, "cluster_swap", recorder_library)
    assert code == 0
    (db,) = dbs
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.cluster_dim == dim3(2, 1, 1) and not inst.cooperative
    assert_all_verified(replay_all(dbs), 1)
    # The same recording with the clusters taken out: each block is then a cluster of its own, its
    # partner's shared memory is not reachable, and the replay does not verify.
    data = json.loads(db.read_text())
    for entry in data["instances"].values():
        del entry["ClusterDims"]
    db.write_text(json.dumps(data))
    plain = _replay_cli(db)
    assert plain.returncode != 0, plain.stdout + plain.stderr


def test_a_grid_sync_kernel_captured_cooperatively_on_the_gpu_matches_numpy_and_the_host(tmp_path):
    """`capture(..., cooperative=True)` on CUDA launches it cooperatively (a plain launch has no grid
    workspace), the result is NumPy's, and the recording replays verified on the GPU and on the host."""
    import numpy as np

    from mneme import capture
    from mneme.core.executor import BaseExecutor

    ir = cuda_ir(ROOT / "tests" / "data" / "realkernels" / "grid_sync.cu")
    blocks, block = 32, 256
    n = blocks * block
    outputs: dict = {}
    db = capture.capture(
        ir,
        "rotate_after_sync",
        blocks,
        block,
        [np.zeros(n, np.int32), np.zeros(n, np.int32), n],
        tmp_path / "rec",
        backend="cuda",
        cooperative=True,
        outputs=outputs,
    )
    expected = np.roll(np.arange(n, dtype=np.int32), -block)
    assert np.array_equal(outputs[1], expected)
    for backend in ("cuda", "host"):
        with BaseExecutor(db, backend=backend, iterations=1) as ex:
            result = ex.execute(ex.default_config())
        assert result.ok and result.verified, (backend, result.error)


@pytest.mark.parametrize("retime", ["1", "image"])
def test_retime_times_each_recorded_launch_again_and_the_program_still_checks_its_own_results(
    recorder_library, saxpy_app, tmp_path, retime
):
    """MNEME_RECORD_RETIME=1 (issue 38, point 5): each recorded saxpy (y += a * x: run twice on the same data it
    would be wrong) runs again from its restored prologue, timed from a flushed L2; the program's own check of y
    passes, and every instance still replays verified. =image: a third time, through the recorded image loaded
    anew in the application's process, the same work."""
    from mneme_cuda import recorder

    from mneme.core.recorder.rawdir import launches, recorded_times, retime_facts, retimed_image_times, retimed_times

    raw = tmp_path / "raw"
    env = {**recorder.environment(raw, kernel="saxpy", library=recorder_library), "MNEME_RECORD_RETIME": retime}
    proc = subprocess.run([str(saxpy_app)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "saxpy_app OK" in proc.stdout, proc.stdout + proc.stderr
    keys = {m["instance_key"] for _, m in launches(recorder.FORMAT, raw)}
    retimed, first = retimed_times(raw), recorded_times(raw)
    assert len(keys) == 3 and {key for _, key in retimed} == keys == {key for _, key in first}
    assert {cache for _, cache in retimed.values()} == {"flushed"}
    # Same kernel, same data, same cache state: within a factor of two of the first (they are the same work).
    for instance, (seconds, _) in retimed.items():
        assert 0.5 < seconds / first[instance][0] < 2.0, (seconds, first[instance])
    imaged = retimed_image_times(raw)
    if retime == "image":
        assert set(imaged) == set(retimed), retime_facts(raw)
        for instance, (seconds, cache) in imaged.items():
            assert cache == "flushed" and 0.5 < seconds / first[instance][0] < 2.0, (seconds, first[instance])
        assert "context stack size" in retime_facts(raw)["saxpy"]
    else:
        assert imaged == {}
    databases = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    assert_all_verified(replay_all(databases), 3)


def test_a_replay_mapped_at_the_recommended_granularity_verifies(recorder_library, saxpy_app, tmp_path):
    """MNEME_CUDA_MAP_GRANULARITY=recommended: the recorded ranges mapped at the driver's recommended granularity
    (a fresh process: the device's granularity is read when it opens)."""
    from mneme.core.records import RecordedExecution

    code, (db,) = record([saxpy_app], tmp_path, "saxpy", recorder_library)
    assert code == 0
    dynamic_hash = next(iter(RecordedExecution.from_json(db).kernel_instances))
    script = (
        "import pathlib, sys\n"
        "from mneme.core.executor import BaseExecutor\n"
        "from mneme_cuda.memory import allocation_granularity\n"
        "db, key = pathlib.Path(sys.argv[1]), sys.argv[2]\n"
        "with BaseExecutor(db, record_id=key, backend='cuda', iterations=2, mode='cubin') as ex:\n"
        "    r = ex.execute(ex.default_config())\n"
        "    print(r.ok, ex.device.granularity, allocation_granularity(0, 'recommended'), r.error)\n"
    )
    env = {**os.environ, "MNEME_CUDA_MAP_GRANULARITY": "recommended"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(db), dynamic_hash],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    ok, used, recommended, *_ = proc.stdout.split()
    assert ok == "True" and used == recommended, proc.stdout
