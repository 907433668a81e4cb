"""Every launch entry point of the CUDA driver reaches the recorder, without a GPU.

A test double of the driver (`cuda_double/cuda_double.c`, built as libcuda.so.1) counts launches and
names kernels; `cuda_double/launch_paths.c` launches one kernel per entry point, as cudart reaches
them (dlopen + dlsym of cuGetProcAddress_v2, legacy and per-thread default stream) and as a program
linked against libcuda calls them by name (cuLaunchKernel, the _ptsz flavours, cuGetProcAddress_v2
itself). With every launch skipped (MNEME_RECORD_SKIP) the recorder needs no device memory, and its
counts file says which launches it saw. `cuda_double/record_scale.c` records launches for real on the
double's host memory: the engine's record of a launch through the CUDA recorder, without a GPU.
`cuda_double/graph_record.c` launches CUDA graphs (the double's graph model, `graph_double.c`): built
with the node API and by stream capture, with a node the recorder cannot run alone, and updated after
instantiation; their kernel nodes are recorded as launches are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

recorder = pytest.importorskip("mneme_cuda.recorder")

from mneme.core.errors import MnemeError
from mneme.core.recorder.finalize import unrecorded_warnings

HERE = Path(__file__).resolve().parent / "cuda_double"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
LAUNCHES = 3  # per path, as launch_paths.c makes them
PATHS = (
    "rt_legacy",
    "rt_per_thread",
    "rt_ex",
    "rt_ex_per_thread",
    "rt_coop",
    "rt_coop_per_thread",
    "plain",
    "plain_ptsz",
    "plain_ex_ptsz",
    "plain_coop_ptsz",
    "getproc_by_name",
)


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    """(folder, recorder): the recorder and the driver double (folder/libcuda.so.1), built once."""
    include = recorder.cuda_include()
    if CC is None or include is None:
        pytest.skip("needs a C compiler and the CUDA toolkit's cuda.h")
    folder = tmp_path_factory.mktemp("double")
    try:
        library = recorder.build(folder / "recorder")
    except MnemeError as exc:
        pytest.skip(f"needs the CUDA recorder's build: {exc}")
    # -Bsymbolic: the double's own references bind inside it, as libcuda's do (not to the recorder's exports).
    subprocess.run(
        [
            CC,
            "-shared",
            "-fPIC",
            "-O1",
            f"-I{include}",
            "-Wl,-Bsymbolic",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            folder / "libcuda.so.1",
            HERE / "cuda_double.c",
            HERE / "graph_double.c",
        ],
        check=True,
    )
    (folder / "libcuda.so").symlink_to("libcuda.so.1")
    return folder, library


def program(folder: Path, name: str) -> Path:
    """cuda_double/<name>.c built against the double."""
    subprocess.run(
        [
            CC,
            "-O1",
            f"-I{recorder.cuda_include()}",
            "-o",
            folder / name,
            HERE / f"{name}.c",
            f"-L{folder}",
            "-lcuda",
            "-ldl",
        ],
        check=True,
    )
    return folder / name


@pytest.fixture(scope="module")
def run_paths(double):
    folder, library = double
    program(folder, "launch_paths")

    def run(raw: Path, **extra: str) -> tuple[str, dict]:
        raw.mkdir()
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(folder),
            "LD_PRELOAD": str(library),
            "MNEME_RECORD_DIR": str(raw),
            "MNEME_RECORD_SKIP": "1000",
            "MNEME_RECORD_TIMER": "events",
            **extra,
        }
        proc = subprocess.run(
            [folder / "launch_paths"], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        (counts,) = raw.glob("counts-*.json")
        return proc.stdout, json.loads(counts.read_text())

    return run


def test_every_launch_entry_point_reaches_the_recorder_and_the_driver(run_paths, tmp_path):
    out, counts = run_paths(tmp_path / "raw")
    made, resets = map(int, out.split())
    assert made == (len(PATHS) + 1) * LAUNCHES  # every launch still ran: the recorder passed each to the driver
    assert resets == 1  # the primary context reset went through the recorder's hook to the driver
    seen = {kernel: entry["seen"] for kernel, entry in counts["kernels"].items()}
    assert {path: seen.get(path, 0) for path in PATHS} == {path: LAUNCHES for path in PATHS}


def test_a_launch_into_a_capturing_stream_goes_to_the_driver_and_is_not_counted_as_a_launch(run_paths, tmp_path):
    out, counts = run_paths(tmp_path / "raw")
    assert int(out.split()[0]) == (len(PATHS) + 1) * LAUNCHES  # the captured launches reached the driver too
    captured = counts["kernels"].get("captured", {})
    assert captured.get("seen", 0) == 0 and not captured.get("unrecorded")  # it runs, and counts, at cuGraphLaunch


def test_record_warns_for_each_kernel_that_ran_but_was_never_recorded_and_says_why(run_paths, tmp_path):
    raw = tmp_path / "raw"
    run_paths(raw)
    (raw / "launch-1-000000.tmp").mkdir()  # a launch whose writer the process did not wait for
    lines = unrecorded_warnings(recorder.FORMAT, raw)
    for path in PATHS:
        (line,) = [line for line in lines if line.startswith(f"kernel {path} ran")]
        assert f"({LAUNCHES} launches)" in line and f"{LAUNCHES} skipped (MNEME_RECORD_SKIP, --skip)" in line
    assert any("1 recorded launch was never completed (launch-1-000000.tmp" in line for line in lines)
    assert lines[-1].startswith("the program ran kernels but nothing was recorded")


def test_the_kernel_regex_selects_which_launches_are_counted_on_every_path(run_paths, tmp_path):
    _, counts = run_paths(tmp_path / "raw", MNEME_RECORD_KERNEL="^plain")
    assert {kernel: entry["seen"] for kernel, entry in counts["kernels"].items()} == {
        "plain": LAUNCHES,
        "plain_ptsz": LAUNCHES,
        "plain_ex_ptsz": LAUNCHES,
        "plain_coop_ptsz": LAUNCHES,
    }


def test_a_launch_on_the_double_is_recorded_once_per_argument_set_between_prologue_and_epilogue(double, tmp_path):
    """The engine's record of a launch (record.h) through the CUDA recorder: placement, shadows, the
    launch timed with events from a flushed L2, the epilogue, the manifest and the counts."""
    from mneme.core.recorder.rawdir import launches, occurrences, recorded_times
    from mneme.core.snapshot import Snapshot

    raw = tmp_path / "raw"
    (statuses, placed, runs), counts_file = _record_scale(double, raw)
    assert statuses == "0 0 0 0" and placed == f"{hex(recorder.DEFAULT_VA_BASE)} 60"  # 1 * 2 * 2 * 3 * 5
    assert runs == "1 2 4 12"  # each launch ran once
    recorded = launches(recorder.FORMAT, raw)
    assert [(m["kernel"], m["occurrence"]) for _, m in recorded] == [("scale", 0), ("scale", 2)]
    i = np.arange(1024, dtype=np.float32)
    for (launch, manifest), (before, after) in zip(recorded, [(1, 2), (4, 12)], strict=True):
        assert manifest["regions"] == [[recorder.DEFAULT_VA_BASE, 4096]] and manifest["capture"] == "device shadow"
        with Snapshot.open(launch / "prologue.mneme") as pro, Snapshot.open(launch / "epilogue.mneme", base=pro) as epi:
            assert np.array_equal(np.frombuffer(pro.read_region(recorder.DEFAULT_VA_BASE), np.float32), before * i)
            assert np.array_equal(np.frombuffer(epi.read_region(recorder.DEFAULT_VA_BASE), np.float32), after * i)
    keys = [m["instance_key"] for _, m in recorded]
    counts = {key: n for (kernel, key), n in occurrences(recorder.FORMAT, raw).items()}
    assert counts[keys[0]] == 2 and counts[keys[1]] == 1 and sorted(counts.values()) == [1, 1, 2]
    assert {key: cache for (_, key), (_, cache) in recorded_times(raw).items()} == {
        keys[0]: "flushed",
        keys[1]: "flushed",
    }
    assert "retimed_time" not in counts_file["kernels"]["scale"]  # MNEME_RECORD_RETIME is off


def test_the_shadow_pool_is_given_back_only_between_recordings_never_between_a_capture_and_its_launch(double, tmp_path):
    """The pool that holds the shadows keeps its memory through synchronizations (the driver's default would
    unmap it at the synchronize right before the timed launch), and the writer thread trims it only while no
    recording runs: an unmap right before a launch makes the kernel walk its page tables again (about 10%
    on the H100, benchmarks/gpu/probes/mapping_probe.cu). The double makes each device copy take 20 ms,
    so the writer finishes the first recording's drain while the second is capturing."""
    log = tmp_path / "pool.log"
    _record_scale(double, tmp_path / "raw", "linger", CUDA_DOUBLE_POOL_LOG=str(log))
    events = log.read_text().splitlines()
    assert f"attribute 4 {2**64 - 1}" in events  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: keep it all
    sequence = [e for e in events if e in ("copy", "launch", "trim")]
    assert "trim" in sequence, sequence  # given back once idle
    launches = [i for i, e in enumerate(sequence) if e == "launch"]
    assert len(launches) == 4, sequence
    for recorded in (launches[0], launches[2]):  # factor 2's first launch and factor 3's (record_scale.c)
        prologue = max(i for i in range(recorded) if sequence[i] == "copy")
        assert "trim" not in sequence[prologue:recorded], sequence


def _record_scale(double, raw: Path, *args: str, **extra: str) -> tuple[list[str], dict]:
    """record_scale.c under the recorder (MNEME_RECORD_MAX=2): its output lines and its counts file."""
    folder, library = double
    raw.mkdir()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(folder),
        "LD_PRELOAD": str(library),
        "MNEME_RECORD_DIR": str(raw),
        "MNEME_RECORD_MAX": "2",
        "MNEME_RECORD_TIMER": "events",
        **extra,
    }
    proc = subprocess.run(
        [program(folder, "record_scale"), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    (counts,) = raw.glob("counts-*.json")
    return proc.stdout.splitlines(), json.loads(counts.read_text())


def test_retime_runs_each_recorded_launch_again_from_its_prologue_and_leaves_the_application_its_results(
    double, tmp_path
):
    """MNEME_RECORD_RETIME=1: the recorded launch runs a second time on its restored prologue, timed from a
    flushed L2, and the application then finds what its own launch left (x scaled once, not twice)."""
    from mneme.core.recorder.rawdir import launches, recorded_times, retimed_times
    from mneme.core.snapshot import Snapshot

    raw = tmp_path / "raw"
    (statuses, placed, runs), counts = _record_scale(double, raw, MNEME_RECORD_RETIME="1")
    assert statuses == "0 0 0 0" and placed == f"{hex(recorder.DEFAULT_VA_BASE)} 60"  # as without the retime
    # The recorded launches (x[1] = 1, then 4) each ran again on the same input; the repeat and 5 did not.
    assert runs == "1 1 2 4 4 12"
    recorded = launches(recorder.FORMAT, raw)
    i = np.arange(1024, dtype=np.float32)
    for (launch, _), (before, after) in zip(recorded, [(1, 2), (4, 12)], strict=True):  # snapshots unchanged
        with Snapshot.open(launch / "prologue.mneme") as pro, Snapshot.open(launch / "epilogue.mneme", base=pro) as epi:
            assert np.array_equal(np.frombuffer(pro.read_region(recorder.DEFAULT_VA_BASE), np.float32), before * i)
            assert np.array_equal(np.frombuffer(epi.read_region(recorder.DEFAULT_VA_BASE), np.float32), after * i)
    keys = {m["instance_key"] for _, m in recorded}
    retimed = retimed_times(raw)
    assert {key for _, key in retimed} == keys and {cache for _, cache in retimed.values()} == {"flushed"}
    assert all(seconds > 0 for seconds, _ in retimed.values())
    assert {key for _, key in recorded_times(raw)} == keys  # the first time is still there, apart
    assert "retime_skipped" not in counts["kernels"]["scale"]


def test_the_image_retime_says_why_it_could_not_load_the_image_and_keeps_the_second_time(double, tmp_path):
    """MNEME_RECORD_RETIME=image on a driver with no modules (the double): the second time is taken as with
    =1, the third is skipped with why, and the application's results are its own."""
    from mneme.core.recorder.rawdir import retimed_image_times, retimed_times

    raw = tmp_path / "raw"
    (statuses, _, runs), counts = _record_scale(double, raw, MNEME_RECORD_RETIME="image")
    assert statuses == "0 0 0 0" and runs == "1 1 2 4 4 12"
    assert len(retimed_times(raw)) == 2 and retimed_image_times(raw) == {}
    assert counts["kernels"]["scale"]["retime_skipped"] == {"through its recorded image: its module is unknown": 2}


def test_retime_is_skipped_with_why_when_the_capture_is_synchronous(double, tmp_path):
    """No device shadow of the prologue (MNEME_RECORD_SYNC=1): nothing to restore, so no second launch."""
    from mneme.core.recorder.rawdir import retimed_times

    raw = tmp_path / "raw"
    (statuses, placed, runs), counts = _record_scale(double, raw, MNEME_RECORD_RETIME="1", MNEME_RECORD_SYNC="1")
    assert statuses == "0 0 0 0" and placed == f"{hex(recorder.DEFAULT_VA_BASE)} 60" and runs == "1 2 4 12"
    assert retimed_times(raw) == {}
    assert counts["kernels"]["scale"]["retime_skipped"] == {
        "its capture was synchronous (no device copy of its prologue to restore)": 2
    }


# ---- CUDA graphs ----------------------------------------------------------------------------------

N = 256  # floats per buffer in graph_record.c
GRAPH_LAUNCHES = 3


@pytest.fixture(scope="module")
def run_graphs(double):
    """Run graph_record.c in one of its modes under the recorder: (its output lines, counts, raw, stderr)."""
    folder, library = double
    program(folder, "graph_record")

    def run(mode: str, raw: Path, **extra: str) -> tuple[list[str], dict, Path, str]:
        raw.mkdir()
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(folder),
            "LD_PRELOAD": str(library),
            "MNEME_RECORD_DIR": str(raw),
            "MNEME_RECORD_TIMER": "events",
            **extra,
        }
        proc = subprocess.run(
            [folder / "graph_record", mode], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        (counts,) = raw.glob("counts-*.json")
        return proc.stdout.splitlines(), json.loads(counts.read_text()), raw, proc.stderr

    return run


def _recorded(raw: Path) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per launch folder: kernel, and x and y in its prologue and its epilogue."""
    from mneme.core.recorder.rawdir import launches
    from mneme.core.snapshot import Snapshot

    x, y = recorder.DEFAULT_VA_BASE, recorder.DEFAULT_VA_BASE + (2 << 20)  # two placed allocations, 2 MiB apart
    out = []
    for launch, manifest in launches(recorder.FORMAT, raw):
        assert manifest["regions"] == [[x, 4 * N], [y, 4 * N]]
        with Snapshot.open(launch / "prologue.mneme") as pro, Snapshot.open(launch / "epilogue.mneme", base=pro) as epi:
            read = [np.frombuffer(snap.read_region(addr), np.float32) for snap in (pro, epi) for addr in (x, y)]
        out.append((manifest["kernel"], *read))
    return out


@pytest.mark.parametrize("mode", ["explicit", "captured"])
def test_a_graph_of_two_dependent_kernels_and_a_copy_is_recorded_node_by_node_then_launched_as_a_graph(
    run_graphs, tmp_path, mode
):
    """scale(x, 2) -> copy x to y -> offset(y, 1), launched 3 times: the first launch runs node by node
    (each kernel recorded between its prologue and epilogue, the copy between them), the others as graphs."""
    lines, counts, raw, _ = run_graphs(mode, tmp_path / "raw")
    i = np.arange(N, dtype=np.float32)
    # Nothing ran while the graph was captured; the application's results are its own (8 = 2**3, y = x + 1).
    assert lines[0] == "1 0"
    x1, y1, graphs, kernels, _ = lines[1].split()
    assert (x1, y1) == ("8", "9")
    assert (int(graphs), int(kernels)) == (GRAPH_LAUNCHES - 1, 2 * GRAPH_LAUNCHES)  # the 2nd and 3rd: cuGraphLaunch
    (scale, x0, y0, x_after, y_after), (offset, x2, y2, x2_after, y2_after) = _recorded(raw)
    assert scale == "scale" and offset == "offset"
    assert np.array_equal(x0, i) and np.array_equal(y0, 0 * i)
    assert np.array_equal(x_after, 2 * i) and np.array_equal(y_after, 0 * i)
    assert np.array_equal(x2, 2 * i) and np.array_equal(y2, 2 * i)  # the copy node ran between the two kernels
    assert np.array_equal(x2_after, 2 * i) and np.array_equal(y2_after, 2 * i + 1)
    for kernel in ("scale", "offset"):  # every launch an occurrence of the recorded argument set
        entry = counts["kernels"][kernel]
        assert entry["seen"] == GRAPH_LAUNCHES and list(entry["instances"].values()) == [GRAPH_LAUNCHES]
        assert entry["graph_launches"] == 0 and entry["unrecorded"] == {}


def test_a_graph_with_a_node_that_cannot_run_alone_runs_as_a_graph_and_is_counted_with_the_reason(run_graphs, tmp_path):
    lines, counts, raw, stderr = run_graphs("host", tmp_path / "raw")
    x1, y1, graphs, kernels, host_calls = lines[1].split()
    assert (x1, y1, graphs, kernels, host_calls) == ("8", "9", "3", "6", "3")  # every launch the driver's graph
    assert not list(raw.glob("launch-*"))
    for kernel in ("scale", "offset"):
        entry = counts["kernels"][kernel]
        assert entry["seen"] == 0 and entry["graph_launches"] == GRAPH_LAUNCHES
        ((why, n),) = entry["unrecorded"].items()
        assert n == GRAPH_LAUNCHES and "cannot run node by node: a host node" in why
        assert stderr.count(f"kernel {kernel} runs inside a CUDA graph") == 1  # warned once, with the reason
    lines = unrecorded_warnings(recorder.FORMAT, raw)
    (line,) = [line for line in lines if line.startswith("kernel scale ran")]
    assert "(0 launches and 3 inside CUDA graphs)" in line and "a host node" in line


def test_with_graphs_turned_off_every_graph_launch_is_the_drivers_and_counted_with_that_reason(run_graphs, tmp_path):
    lines, counts, raw, _ = run_graphs("explicit", tmp_path / "raw", MNEME_RECORD_GRAPHS="0")
    assert lines[1].split()[:3] == ["8", "9", str(GRAPH_LAUNCHES)]  # every launch the driver's graph
    assert not list(raw.glob("launch-*"))
    for kernel in ("scale", "offset"):
        assert counts["kernels"][kernel]["graph_launches"] == GRAPH_LAUNCHES
        assert list(counts["kernels"][kernel]["unrecorded"]) == [
            "inside a CUDA graph the recorder cannot run node by node: MNEME_RECORD_GRAPHS=0"
        ]


def test_updates_of_the_executable_graph_after_instantiation_are_recorded_with_the_parameters_they_set(
    run_graphs, tmp_path
):
    """scale's factor: 2 at instantiation, 3 by cuGraphExecKernelNodeSetParams, 5 by cuGraphExecUpdate;
    each new argument set is recorded when the graph runs it, and the launch after the last runs as a graph."""
    lines, counts, raw, _ = run_graphs("update", tmp_path / "raw")
    x1, y1, graphs, _, _ = lines[1].split()
    assert (x1, y1, graphs) == ("150", "151", "1")  # 2 * 3 * 5 * 5; only the 4th launch was the driver's graph
    i = np.arange(N, dtype=np.float32)
    scales = [(x0, x_after) for kernel, x0, _, x_after, _ in _recorded(raw) if kernel == "scale"]
    assert len(scales) == 3
    for (before, after), (b, a) in zip(scales, [(1, 2), (2, 6), (6, 30)], strict=True):
        assert np.array_equal(before, b * i) and np.array_equal(after, a * i)
    assert sorted(counts["kernels"]["scale"]["instances"].values()) == [1, 1, 2]


def test_a_child_graph_a_memset_event_and_empty_nodes_and_a_disabled_node_run_node_by_node_as_in_the_graph(
    run_graphs, tmp_path
):
    """memset y = 1 -> child { scale(x, 2) } -> event record -> empty -> event wait -> offset(y, 1) ->
    offset(y, 100), disabled in the exec; after the second launch the child graph becomes { scale(x, 3) } (cuGraphExecChildGraphNodeSetParams)."""
    lines, counts, raw, _ = run_graphs("nested", tmp_path / "raw")
    x1, y1, graphs, kernels, _ = lines[1].split()
    assert (x1, y1) == ("12", "2")  # 2 * 2 * 3; the disabled node never ran, node by node or as a graph
    assert (int(graphs), int(kernels)) == (1, 2 * GRAPH_LAUNCHES)  # the second launch: the driver's graph
    i = np.arange(N, dtype=np.float32)
    (scale, x0, _, x_after, _), (offset, _, y2, _, y2_after), (scale3, x3, _, x3_after, _) = _recorded(raw)
    assert (scale, offset, scale3) == ("scale", "offset", "scale")
    assert np.array_equal(x0, i) and np.array_equal(x_after, 2 * i)  # the child graph's kernel
    assert np.array_equal(y2, 1 + 0 * i) and np.array_equal(y2_after, 2 + 0 * i)  # after the memset node
    assert np.array_equal(x3, 4 * i) and np.array_equal(x3_after, 12 * i)  # the child graph's new parameters
    assert list(counts["kernels"]["offset"]["instances"].values()) == [GRAPH_LAUNCHES]


def test_a_launch_on_another_stream_while_a_capture_is_in_progress_runs_unrecorded_with_why(run_graphs, tmp_path):
    """Recording it would synchronize the context, which invalidates a capture in progress; the
    captured graph's kernels are still recorded when it is launched."""
    lines, counts, raw, _ = run_graphs("concurrent", tmp_path / "raw")
    assert lines[0] == "1 7"  # "beside" ran on the other stream, during the capture
    assert lines[1].split()[:2] == ["8", "9"]
    assert [kernel for kernel, *_ in _recorded(raw)] == ["scale", "offset"]  # the graph's kernels only
    ((why, n),) = counts["kernels"]["beside"]["unrecorded"].items()
    assert n == 1 and "while a stream was being captured" in why
    (line,) = [line for line in unrecorded_warnings(recorder.FORMAT, raw) if line.startswith("kernel beside ran")]
    assert "(1 launch)" in line and "1 launched while a stream was being captured" in line


def test_retime_is_skipped_with_why_when_an_argument_points_outside_the_recorded_memory(double, tmp_path):
    """x in pinned host memory: a second run would scale it again, and no shadow could undo it."""
    from mneme.core.recorder.rawdir import retimed_times

    raw = tmp_path / "raw"
    (statuses, placed, runs), counts = _record_scale(double, raw, "host", MNEME_RECORD_RETIME="1")
    assert statuses == "0 0 0 0" and placed.endswith(" 60") and runs == "1 2 4 12"  # each launch ran once
    assert retimed_times(raw) == {}
    (why,) = counts["kernels"]["scale"]["retime_skipped"]
    assert why.startswith("an argument points outside the recorded memory")
