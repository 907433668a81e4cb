"""Kernels launched through CUDA graphs are recorded and replay verified, on a real GPU (issue 38, point 1).

`programs/graph_record_app.cu` launches a graph made by stream capture (two kernels and a copy), one
made with the graph API (a memset, a kernel, a child graph holding another kernel), updated after
instantiation (cudaGraphExecKernelNodeSetParams), and one with a host node, which the recorder cannot
run node by node; while the first is captured, a kernel runs on another stream, which the recorder must
leave unrecorded (its synchronize would invalidate the capture). The program checks its own results (recording must not change them) and prints how
often each kernel node ran; the recorder's counts must match, every graph kernel but the host node's
must be recorded, and every instance must replay verified from the application's binary.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from gpu_corpus import ROOT

pytestmark = pytest.mark.gpu

SOURCE = Path(__file__).parent / "programs" / "graph_record_app.cu"


@pytest.fixture(scope="module")
def graph_app(tmp_path_factory) -> Path:
    """graph_record_app: from .gpu/bin (scripts/gpu-suite --prepare builds every program there), else nvcc here."""
    prebuilt = ROOT / ".gpu" / "bin" / "graph_record_app"
    if prebuilt.exists():
        return prebuilt
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no prebuilt graph_record_app in .gpu/bin and no nvcc to build it")
    out = tmp_path_factory.mktemp("graph_record") / "graph_record_app"
    subprocess.run([nvcc, "-arch=sm_90", "-o", str(out), str(SOURCE)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def recorded(graph_app, recorder_library, tmp_path_factory):
    """graph_record_app run under the recorder: (launches it printed per kernel, raw folder, databases, stderr)."""
    from mneme_cuda import recorder

    folder = tmp_path_factory.mktemp("graph_recording")
    raw = folder / "raw"
    raw.mkdir()
    env = recorder.environment(raw, library=recorder_library, max_recordings=8)
    proc = subprocess.run([str(graph_app)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "graph_record_app OK" in proc.stdout, proc.stdout + proc.stderr[-4000:]
    launched = {
        line.split()[1]: int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("launches ")
    }
    return launched, raw, recorder.finalize(raw, folder / "db", arch="sm_90"), proc.stderr


def test_graph_kernels_from_capture_and_the_graph_api_are_recorded_and_counted_as_the_program_ran_them(recorded):
    from mneme.core.records import RecordedExecution

    launched, _, databases, stderr = recorded
    instances = {}
    for db in databases:
        rec = RecordedExecution.from_json(db)
        instances[rec.kernel_name] = sorted(inst.occ for inst in rec.kernel_instances.values())
    # The updated axpy node is a second argument set; square (in the child graph) keeps one.
    assert instances == {"scale": [4], "offset": [4], "axpy": [1, 3], "square": [4]}, stderr
    assert {k: sum(v) for k, v in instances.items()} == {
        k: n for k, n in launched.items() if k not in ("hosted", "beside")
    }


def test_a_kernel_launched_on_another_stream_during_a_capture_is_left_unrecorded_and_the_capture_holds(recorded):
    from mneme_cuda import recorder

    from mneme.core.recorder.finalize import unrecorded_warnings

    _, raw, _, _ = recorded  # the program checked that the capture ended and beside's result
    (line,) = [line for line in unrecorded_warnings(recorder.FORMAT, raw) if line.startswith("kernel beside ran")]
    assert "while a stream was being captured" in line


def test_a_graph_with_a_host_node_runs_as_a_graph_and_the_recorder_says_why_it_was_not_recorded(recorded):
    from mneme_cuda import recorder

    from mneme.core.recorder.finalize import unrecorded_warnings

    launched, raw, _, stderr = recorded
    assert stderr.count("kernel hosted runs inside a CUDA graph") == 1 and "a host node" in stderr, stderr
    assert recorder.in_application(raw)[1] == {"hosted": launched["hosted"]}
    (line,) = [line for line in unrecorded_warnings(recorder.FORMAT, raw) if line.startswith("kernel hosted ran")]
    assert "a host node" in line


def test_every_recorded_graph_kernel_replays_verified_from_the_applications_binary(recorded):
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    _, _, databases, _ = recorded
    outcomes = []
    for db in databases:
        rec = RecordedExecution.from_json(db)
        for dynamic_hash in rec.kernel_instances:
            with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=1, mode="cubin") as ex:
                result = ex.execute(ex.default_config())
            outcomes.append((rec.kernel_name, result.ok, result.error))
    assert len(outcomes) == 5
    assert [o for o in outcomes if not o[1]] == []


def test_a_pytorch_cuda_graphs_kernels_are_recorded_at_its_first_replay_and_replay_verified(recorder_library, tmp_path):
    """torch.cuda.graph captures two ATen elementwise kernels (mul, add_), which ran directly before on
    other tensors; the graph is replayed 5 times. Each of its two kernel nodes is an instance launched
    5 times (the first replay run node by node and recorded, the others the driver's graph); every
    instance of every elementwise kernel (arange's and ones_like's too) replays verified."""
    import sys

    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    pytest.importorskip("torch")
    script = Path(__file__).parent / "programs" / "torch_graph_app.py"
    code = recorder.main_record(
        tmp_path / "db", [sys.executable, str(script)], [], kernel="elementwise_kernel", library=recorder_library
    )
    assert code == 0
    occurrences, failures = [], []
    for db in sorted((tmp_path / "db").glob("*.json")):
        rec = RecordedExecution.from_json(db)
        mode = "cubin" if any(b.kind == "cubin" for b in rec.binary_blobs) else "ptx"
        for dynamic_hash, inst in rec.kernel_instances.items():
            occurrences.append(inst.occ)
            with BaseExecutor(db, record_id=dynamic_hash, backend="cuda", iterations=1, mode=mode) as ex:
                result = ex.execute(ex.default_config())
            if not result.ok:
                failures.append(f"{rec.kernel_name}: {result.error}")
    assert occurrences.count(5) == 2, occurrences  # the graph's two kernel nodes, replayed 5 times
    assert failures == []
