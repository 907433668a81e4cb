"""Capture descriptions of real programs' inputs on the GPU (issue 28, point 4): padded buffers, pointers
into a pool, __constant__/__device__ globals and a struct by value record and replay verified on CUDA."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from gpu_corpus import cuda_ir
from paths import DATA

pytestmark = pytest.mark.gpu
SOURCE = DATA / "capture" / "real_inputs.cu"


@pytest.fixture(scope="module")
def ir() -> Path:
    return cuda_ir(SOURCE)  # prebuilt by scripts/gpu-suite --prepare (gpu_corpus.EXTRA): no clang on the GPU machine


def _capture(tmp_path: Path, ir: Path, kernel: str, grid: int, body: str) -> tuple[Path, dict]:
    from mneme import capture
    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    spec = tmp_path / "spec.yaml"
    shutil.copyfile(ir, tmp_path / ir.name)  # a description's IR lies in its folder
    spec.write_text(f"ir: {ir.name}\nkernel: {kernel}\ngrid: {grid}\nblock: 256\n{body}")
    db = capture.capture_spec(spec, tmp_path / "out", backend="cuda")
    with BaseExecutor(db, backend="cuda", iterations=2) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok and result.verified, result.error
    inst = RecordedExecution.from_json(db).select()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    after = {r.addr: np.frombuffer(epilogue.read_region(r.addr), np.uint8) for r in prologue.regions}
    args = [struct.unpack_from("<Q", inst.args, off)[0] for off in range(0, len(inst.args) - 7, 8)]
    return db, {"after": after, "args": args, "prologue": prologue, "epilogue": epilogue}


def _region(state: dict, addr: int) -> tuple[int, np.ndarray]:
    start = max(a for a in state["after"] if a <= addr)
    return start, state["after"][start]


def test_padded_buffers_read_outside_the_array_and_replay_verified(tmp_path, ir):
    body = """args:
  - {name: in, arange: {dtype: float32, shape: [4096]}, padding: {before: 1, after: 1, value: 2.0}}
  - {name: out, zeros: {dtype: float32, shape: [4096]}, tolerance: {dtype: f32, threshold: 1.0e-6, relative: true}}
  - 4096
"""
    _, state = _capture(tmp_path, ir, "stencil3", 16, body)
    x = np.concatenate([[2.0], np.arange(4096), [2.0]]).astype(np.float32)
    start, out = _region(state, state["args"][1])
    expected = 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]
    np.testing.assert_allclose(out.view(np.float32), expected, rtol=1e-6)
    in_start, _ = _region(state, state["args"][0])
    assert state["args"][0] - in_start == 4 and state["args"][0] % 256 == 0


def test_pointers_into_a_pool_at_an_offset(tmp_path, ir):
    body = """buffers:
  pool: {arange: {dtype: float32, shape: [8192]}}
args:
  - {ptr: pool, offset: 0}
  - {ptr: pool, offset: 4096}
  - 0.5
  - 4096
"""
    _, state = _capture(tmp_path, ir, "copy_scaled", 16, body)
    _, pool = _region(state, state["args"][0])
    expected = np.arange(8192, dtype=np.float32)
    expected[4096:] = 0.5 * expected[:4096]
    np.testing.assert_array_equal(pool.view(np.float32), expected)


def test_constant_and_device_globals_initial_values_reach_the_kernel(tmp_path, ir):
    body = """globals:
  conv_filter: {literal: {dtype: float32, values: [1, 2, 3, 2, 1]}}
  conv_bias: {scalar: 0.5, dtype: float32}
args:
  - {name: in, arange: {dtype: float32, shape: [2048]}}
  - {name: out, zeros: {dtype: float32, shape: [2048]}, tolerance: {dtype: f32, threshold: 1.0e-5, relative: true}}
  - 2048
"""
    _, state = _capture(tmp_path, ir, "conv1d", 8, body)
    assert state["prologue"].globals["conv_filter"] == np.array([1, 2, 3, 2, 1], np.float32).tobytes()
    x = np.arange(2048, dtype=np.float64)
    padded = np.concatenate([[0, 0], x, [0, 0]])
    expected = 0.5 + sum(w * padded[t : t + 2048] for t, w in enumerate([1, 2, 3, 2, 1]))
    _, out = _region(state, state["args"][1])
    np.testing.assert_allclose(out.view(np.float32), expected, rtol=1e-5)


def test_a_struct_by_value_with_a_pointer_field(tmp_path, ir):
    body = """buffers:
  xs: {arange: {dtype: float32, shape: [1024]}}
args:
  - struct:
      - {name: n, dtype: int32, value: 1024}
      - {name: alpha, dtype: float32, value: 2.0}
      - {name: x, ptr: xs}
      - {name: beta, dtype: float32, value: 0.5}
      - {name: offset, dtype: float64, value: 10.0}
  - {name: y, ones: {dtype: float32, shape: [1024]}}
"""
    _, state = _capture(tmp_path, ir, "axpby_struct", 4, body)
    _, y = _region(state, state["args"][4])  # the struct takes 32 bytes: y's pointer is the fifth word
    np.testing.assert_array_equal(y.view(np.float32), 2 * np.arange(1024, dtype=np.float32) + 0.5 + 10)
