"""The host backend runs HIP kernels: clang-19 AMDGPU IR (gfx90a, wave64, ROCm device libraries)
captured on the CPU, checked against NumPy, replayed verified and tuned."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from irbuild import build_hip_ir, hip_available

from mneme import capture
from mneme.core.errors import UnsupportedError
from mneme.core.types import ExperimentConfiguration
from paths import DATA

pytestmark = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])

WAVE_OPS = DATA / "hip" / "wave_ops.hip"
rng = np.random.default_rng(7)


def _replay_verifies(db, iterations=1):
    from mneme.core.executor import BaseExecutor

    with BaseExecutor(db, iterations=iterations) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok and result.verified, result.error
    return result


def _capture(tmp_path, source, kernel, grid, block, args, **kwargs):
    outputs = {}
    ir = source if str(source).endswith(".ll") else build_hip_ir(source)
    db = capture.capture(ir, kernel, grid, block, args, tmp_path, backend="host", outputs=outputs, **kwargs)
    return db, outputs


# -- the shared corpus (tests/data/kernels/*.hip) ------------------------------------------------------


def test_vector_add_and_saxpy_match_numpy_and_replay_verified(tmp_path):
    n = 1000
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    db, out = _capture(tmp_path / "va", "vector_add", "vector_add", 4, 256, [a, b, np.zeros(n, np.float32), n])
    np.testing.assert_array_equal(out[2], a + b)
    _replay_verifies(db)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    db, out = _capture(tmp_path / "sx", "saxpy", "saxpy", 2, 128, [n, np.float32(1.5), x, y])
    np.testing.assert_allclose(out[3], 1.5 * x + y, rtol=1e-6)
    _replay_verifies(db)


def test_stencil_reads_block_and_grid_sizes_from_the_dispatch_packet(tmp_path):
    nx, ny = 70, 45
    grid_in = rng.random((ny, nx), dtype=np.float32)
    db, out = _capture(tmp_path, "stencil2d", "stencil2d", (5, 12), (16, 4), [grid_in, np.zeros_like(grid_in), nx, ny])
    want = grid_in.copy()
    want[1:-1, 1:-1] = np.float32(0.2) * (
        grid_in[1:-1, 1:-1] + grid_in[1:-1, :-2] + grid_in[1:-1, 2:] + grid_in[:-2, 1:-1] + grid_in[2:, 1:-1]
    )
    np.testing.assert_allclose(out[1], want, rtol=1e-6)
    _replay_verifies(db)


@pytest.mark.parametrize("block", [64, 256])
def test_lds_reduction_with_barriers_sums_every_block(tmp_path, block):
    n = 3000
    x = rng.random(n, dtype=np.float32)
    blocks = (n + block - 1) // block
    db, out = _capture(tmp_path, "reduce_sum", "reduce_sum", blocks, block, [x, np.zeros(blocks, np.float32), n])
    want = np.add.reduceat(np.pad(x, (0, blocks * block - n)), np.arange(0, blocks * block, block))
    np.testing.assert_allclose(out[1], want, rtol=1e-5)
    _replay_verifies(db)


def test_templated_kernels_run_under_their_mangled_names(tmp_path):
    data = np.arange(100, dtype=np.int32)
    _, out = _capture(tmp_path / "i", "scale_template", "_Z5scaleIiEvPT_S0_i", 2, 64, [data, 3, 100])
    np.testing.assert_array_equal(out[0], data * 3)


def test_ocml_float_math_matches_numpy(tmp_path):
    n = 500
    x = rng.uniform(-3, 3, n).astype(np.float32)
    db, out = _capture(
        tmp_path,
        "math_funcs",
        "math_funcs",
        8,
        64,
        [x, np.zeros(n, np.float32), n],
        tolerances={1: {"dtype": "f32", "threshold": 1e-5}},
    )
    v = x.astype(np.float64)
    want = np.sin(v) + np.exp(-v * v) + np.sqrt(np.abs(v)) + np.log(1 + v * v) + np.abs(v) ** 1.5
    np.testing.assert_allclose(out[1], want, rtol=2e-6, atol=2e-6)
    _replay_verifies(db)


def test_device_globals_are_captured_and_restored_on_replay(tmp_path):
    data = np.arange(100, dtype=np.float32)
    db, out = _capture(tmp_path, "device_global", "add_bias", 4, 64, [data, 100], globals={"bias": np.float32(2.5)})
    np.testing.assert_array_equal(out[0], data + 2.5)
    from mneme.core.records import RecordedExecution

    assert RecordedExecution.from_json(db).globals == {"bias": 4, "launch_count": 4}
    _replay_verifies(db, iterations=2)


def test_atomic_histogram_counts_every_value(tmp_path):
    values = rng.integers(-5, 40, 5000).astype(np.int32)
    db, out = _capture(tmp_path, "histogram", "histogram", 20, 256, [values, np.zeros(32, np.uint32), 5000, 32])
    np.testing.assert_array_equal(out[1], np.bincount(np.clip(values, 0, 31), minlength=32))
    _replay_verifies(db)


def test_shuffle_reduction_over_32_lane_segments_of_a_wave64(tmp_path):
    n = 1000
    x = rng.integers(0, 10, n).astype(np.float32)
    _, out = _capture(tmp_path, "warp_reduce", "warp_reduce", 4, 256, [x, np.zeros(1, np.float32), n])
    assert out[1][0] == x.sum()


# -- our HIP kernels (tests/data/hip/wave_ops.hip) --------------------------------------------------


def test_wave64_shuffles_reach_across_the_whole_wave(tmp_path):
    n = 256
    v = rng.integers(-1000, 1000, n).astype(np.int32)
    zeros = [np.zeros(n, np.int32) for _ in range(4)]
    db, out = _capture(tmp_path, WAVE_OPS, "wave_shuffles", 2, 128, [v, *zeros])
    lane = np.arange(n) % 64
    base = np.arange(n) - lane
    np.testing.assert_array_equal(out[1], v[base + (lane ^ 33)])
    np.testing.assert_array_equal(out[2], np.where(lane >= 5, v[np.arange(n) - 5], v))
    np.testing.assert_array_equal(out[3], v[base + 63 - lane])
    seg = lane % 16
    np.testing.assert_array_equal(out[4], np.where(seg + 3 < 16, v[np.minimum(np.arange(n) + 3, n - 1)], v))
    _replay_verifies(db)


def test_ballots_are_64_bit_masks_and_any_all_vote_over_the_wave(tmp_path):
    n = 256
    v = rng.integers(-3, 3, n).astype(np.int32)
    v[128:192] = 1  # a wave where every lane votes yes
    db, out = _capture(
        tmp_path,
        WAVE_OPS,
        "wave_votes",
        2,
        128,
        [v, np.zeros(4, np.uint64), *[np.zeros(n, np.int32) for _ in range(3)]],
    )
    pred = (v > 0).reshape(4, 64)
    masks = [sum(1 << lane for lane in range(64) if pred[w, lane]) for w in range(4)]
    assert out[1].tolist() == masks
    assert out[1][2] == (1 << 64) - 1
    np.testing.assert_array_equal(out[2], np.repeat(pred.any(axis=1), 64).astype(np.int32))
    np.testing.assert_array_equal(out[3], np.repeat(pred.all(axis=1), 64).astype(np.int32))
    np.testing.assert_array_equal(out[4], np.repeat(pred.sum(axis=1), 64))
    _replay_verifies(db)


def test_ds_swizzle_quad_permute_and_bitmask_modes(tmp_path):
    n = 128
    v = np.arange(n, dtype=np.int32) * 7
    _, out = _capture(tmp_path, WAVE_OPS, "wave_swizzle", 1, 128, [v, np.zeros(n, np.int32), np.zeros(n, np.int32)])
    idx = np.arange(n)
    np.testing.assert_array_equal(out[1], v[(idx & ~3) | (3 - (idx & 3))])
    np.testing.assert_array_equal(out[2], v[idx ^ 1])


def test_dynamic_lds_atomics_and_globals_in_one_kernel(tmp_path):
    n, block = 1000, 128
    blocks = (n + block - 1) // block
    x = rng.uniform(-4, 4, n).astype(np.float32)
    args = [
        x,
        np.zeros(n, np.float32),
        np.zeros(1, np.float32),
        np.zeros(1, np.int32),
        np.zeros(1, np.uint32),
        np.zeros(3, np.int32),
        n,
    ]
    db, out = _capture(
        tmp_path,
        WAVE_OPS,
        "block_atomics",
        blocks,
        block,
        args,
        shared_mem=block * 4,
        globals={"scale": np.float32(0.5)},
        tolerances={2: {"dtype": "f32", "threshold": 1e-3}},
    )
    scaled = x * np.float32(0.5)
    padded = np.pad(scaled, (0, blocks * block - n)).reshape(blocks, block)
    want_rev = padded[:, ::-1].reshape(-1)[:n]
    np.testing.assert_array_equal(out[1], want_rev)
    np.testing.assert_allclose(out[2][0], scaled.sum(), rtol=1e-4)
    assert out[3][0] == np.abs(scaled).max().view(np.int32)
    assert out[4][0] == n
    assert out[5].tolist() == [blocks, block, 100 + 10 + 1]
    _replay_verifies(db, iterations=2)


def test_ocml_single_and_double_math_match_numpy(tmp_path):
    n = 300
    x = rng.uniform(-2, 2, n).astype(np.float32)
    xd = rng.uniform(-2, 2, n)
    db, out = _capture(
        tmp_path,
        WAVE_OPS,
        "ocml_math",
        5,
        64,
        [x, np.zeros(n, np.float32), xd, np.zeros(n), n],
        tolerances={1: {"dtype": "f32", "threshold": 1e-5}},
    )
    import math

    v = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    want = np.cos(v) + np.tanh(v) + np.exp2(v) + np.log2(1 + v * v) + np.cbrt(v) + erf(v) + np.fmod(v, 0.75)
    np.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-5)
    want_d = (
        np.exp(xd) + np.log1p(xd * xd) + np.sqrt(np.abs(xd)) + np.abs(xd) ** 0.5 + np.tanh(xd) + np.arctan2(xd, 1.5)
    )
    np.testing.assert_allclose(out[3], want_d, rtol=1e-13, atol=1e-13)
    _replay_verifies(db)


def test_a_captured_hip_kernel_tunes_and_its_best_configuration_replays_verified(tmp_path):
    from click.testing import CliRunner

    from mneme.core.cli import cli

    n = 4096
    x = rng.random(n, dtype=np.float32)
    db, _ = _capture(tmp_path / "db", "reduce_sum", "reduce_sum", 16, 256, [x, np.zeros(16, np.float32), n])
    results = tmp_path / "run"
    args = [
        "tune",
        "-rdb",
        db,
        "--sampler",
        "random",
        "--trials",
        3,
        "--seed",
        1,
        "--results",
        results,
        "--space",
        "quick",
        "-o",
        "axes=x",
        "--retime-top",
        "1",
        "--retime-repeats",
        "1",
    ]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert (results / "best.json").is_file()
    result = CliRunner().invoke(cli, ["replay", "-rdb", str(db), "--config", str(results / "best.json"), "--json"])
    assert result.exit_code == 0, result.output
    assert '"verified": true' in result.output


# -- what the host cannot run is named -------------------------------------------------------------


def test_unsupported_amdgpu_intrinsics_are_refused_by_name():
    import llvmlite.binding as llvm

    from mneme.core.backend import get_backend

    text = (
        'target datalayout = "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-i64:64-v16:16-v24:32'
        '-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"\n'
        'target triple = "amdgcn-amd-amdhsa"\n'
        "declare i32 @llvm.amdgcn.s.getreg(i32)\n"
        "define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n"
        "  %d = call i32 @llvm.amdgcn.s.getreg(i32 6149)\n"
        "  store i32 %d, ptr addrspace(1) %p\n  ret void\n}\n"
    )
    backend = get_backend("host")
    with pytest.raises(UnsupportedError, match=r"llvm\.amdgcn\.s\.getreg.*'k'"):
        backend.compile(llvm.parse_assembly(text), "k", ExperimentConfiguration(grid=1, block=64), backend.arch())


def test_hip_kernel_parameters_are_read_at_their_kernarg_offsets(tmp_path):
    # saxpy(int n, float a, const float* x, float* y): x at 8 (pointer alignment), as hipModuleLaunchKernel packs it
    n = 64
    x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
    db, out = _capture(tmp_path, "saxpy", "saxpy", 1, 64, [n, np.float32(2.0), x, y])
    from mneme.core.records import RecordedExecution

    rec = RecordedExecution.from_json(db)
    assert [a.offset for a in rec.args] == [0, 4, 8, 16]
    assert struct.unpack_from("<if", rec.select().args, 0) == (n, 2.0)
    np.testing.assert_array_equal(out[3], 2.0 * x)


def test_double_trigonometry_reduces_huge_arguments_with_trig_preop(tmp_path):
    x = np.concatenate(
        [
            rng.uniform(-10, 10, 200),
            rng.uniform(-1e6, 1e6, 50),
            rng.uniform(-1e300, 1e300, 12),
            [1e22, 5.0e15, -3.0e200, 2.0**1000],
        ]
    )
    n = len(x)
    db, out = _capture(tmp_path, WAVE_OPS, "ocml_trig_double", 5, 64, [x, np.zeros(n), n])
    want = np.sin(x) + np.cos(x) * 0.5 + np.tan(x * 0.25)
    np.testing.assert_allclose(out[1], want, rtol=1e-14, atol=1e-14)
    _replay_verifies(db)


def test_mneme_capture_takes_a_yaml_description_of_a_hip_launch(tmp_path):
    import shutil

    from click.testing import CliRunner

    from mneme.core.cli import cli

    shutil.copyfile(build_hip_ir(WAVE_OPS), tmp_path / "wave_ops.ll")
    (tmp_path / "capture.yaml").write_text(
        "ir: wave_ops.ll\nkernel: block_atomics\ngrid: [4]\nblock: [128]\nshared_mem: 512\nbackend: host\nargs:\n"
        "  - {name: in, random: {dtype: float32, shape: [500], seed: 3}}\n"
        "  - {name: reversed, zeros: {dtype: float32, shape: [500]}}\n"
        "  - {name: sum, zeros: {dtype: float32, shape: [1]}, tolerance: {dtype: f32, threshold: 1.0e-4, relative: true}}\n"
        "  - {name: max_bits, zeros: {dtype: int32, shape: [1]}}\n"
        "  - {name: count, zeros: {dtype: uint32, shape: [1]}}\n"
        "  - {name: dims, zeros: {dtype: int32, shape: [3]}}\n"
        "  - {name: n, scalar: 500}\n"
    )
    result = CliRunner().invoke(cli, ["capture", str(tmp_path / "capture.yaml"), "-o", str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    (db,) = (tmp_path / "rec").glob("*.json")
    result = CliRunner().invoke(cli, ["replay", "-rdb", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert '"verified": true' in result.output


INTRINSICS_IR = """
target datalayout = "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @intrinsics(ptr addrspace(1) %in, ptr addrspace(1) %out) #0 {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %t64 = zext i32 %tid to i64
  %pin = getelementptr i32, ptr addrspace(1) %in, i64 %t64
  %v = load i32, ptr addrspace(1) %pin, align 4
  %ub = call i32 @llvm.amdgcn.ubfe.i32(i32 %v, i32 4, i32 7)
  %sb = call i32 @llvm.amdgcn.sbfe.i32(i32 %v, i32 3, i32 5)
  %ab = call i32 @llvm.amdgcn.alignbit(i32 %v, i32 %tid, i32 9)
  %rl = call i32 @llvm.amdgcn.readlane.i32(i32 %v, i32 17)
  %ws = call i32 @llvm.amdgcn.wavefrontsize()
  %f = sitofp i32 %v to float
  %med = call float @llvm.amdgcn.fmed3.f32(float %f, float 0.0, float 100.0)
  %medi = bitcast float %med to i32
  %b = call i64 @llvm.amdgcn.icmp.i64.i32(i32 %v, i32 0, i32 38)
  %blo = trunc i64 %b to i32
  %bsh = lshr i64 %b, 32
  %bhi = trunc i64 %bsh to i32
  %base = mul i64 %t64, 8
  %vals = insertelement <8 x i32> poison, i32 %ub, i32 0
  %v1 = insertelement <8 x i32> %vals, i32 %sb, i32 1
  %v2 = insertelement <8 x i32> %v1, i32 %ab, i32 2
  %v3 = insertelement <8 x i32> %v2, i32 %rl, i32 3
  %v4 = insertelement <8 x i32> %v3, i32 %ws, i32 4
  %v5 = insertelement <8 x i32> %v4, i32 %medi, i32 5
  %v6 = insertelement <8 x i32> %v5, i32 %blo, i32 6
  %v7 = insertelement <8 x i32> %v6, i32 %bhi, i32 7
  %pout = getelementptr i32, ptr addrspace(1) %out, i64 %base
  store <8 x i32> %v7, ptr addrspace(1) %pout, align 4
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.ubfe.i32(i32, i32, i32)
declare i32 @llvm.amdgcn.sbfe.i32(i32, i32, i32)
declare i32 @llvm.amdgcn.alignbit(i32, i32, i32)
declare i32 @llvm.amdgcn.readlane.i32(i32, i32)
declare i32 @llvm.amdgcn.wavefrontsize()
declare float @llvm.amdgcn.fmed3.f32(float, float, float)
declare i64 @llvm.amdgcn.icmp.i64.i32(i32, i32, i32)

attributes #0 = { "target-cpu"="gfx90a" }
"""


def test_bit_field_median_lane_reads_and_compares_follow_the_isa(tmp_path):
    (tmp_path / "k.ll").write_text(INTRINSICS_IR)
    n = 128
    v = rng.integers(-(1 << 31), (1 << 31) - 1, n, dtype=np.int64).astype(np.int32)
    v[5] = 50
    _, out = _capture(tmp_path / "db", tmp_path / "k.ll", "intrinsics", 1, n, [v, np.zeros(8 * n, np.int32)])
    res = out[1].reshape(n, 8)
    u = v.view(np.uint32).astype(np.uint64)
    tid = np.arange(n, dtype=np.uint64)
    np.testing.assert_array_equal(res[:, 0].view(np.uint32), (u >> 4) & 0x7F)
    field = ((u >> 3) & 0x1F).astype(np.int64)
    np.testing.assert_array_equal(res[:, 1], np.where(field >= 16, field - 32, field))
    np.testing.assert_array_equal(res[:, 2].view(np.uint32), (((u << 32) | tid) >> 9) & 0xFFFFFFFF)
    np.testing.assert_array_equal(res[:, 3], np.repeat(v[[17, 64 + 17]], 64))
    assert (res[:, 4] == 64).all()
    np.testing.assert_array_equal(res[:, 5].view(np.float32), np.clip(v.astype(np.float32), 0, 100))
    masks = [sum(1 << lane for lane in range(64) if v[w * 64 + lane] > 0) for w in range(2)]
    got = res[:, 6].view(np.uint32).astype(np.uint64) | (res[:, 7].view(np.uint32).astype(np.uint64) << 32)
    np.testing.assert_array_equal(got, np.repeat(np.array(masks, dtype=np.uint64), 64))


BLOCK_LOOP_SOURCE = r"""
#include <hip/hip_runtime.h>
extern "C" __global__ void scale(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) y[i] = a * (x[i - 1] + x[i] + x[i + 1]);
}
extern "C" __global__ void tile(int w, const float* x, float* y) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
  y[r * w + c] = 2.0f * x[r * w + c] + (float)(r - c);
}
extern "C" __global__ void lanes(float* y) {
  y[blockIdx.x * blockDim.x + threadIdx.x] = (float)__lane_id();
}
"""


def test_hip_kernels_without_barriers_run_a_block_per_call_and_match_numpy(tmp_path):
    """AMDGPU's work-item and work-group ids become the block loop's thread and block indices (retarget,
    block_loop.thread_indices_as_parameters): one call runs a block's threads in a loop LLVM vectorizes. A kernel
    that reads its lane (mbcnt) keeps one call per thread. Results as NumPy computes them either way."""
    import llvmlite.binding as llvm

    from mneme.plugins.backends.host import image
    from mneme.plugins.backends.host.backend import HostBackend

    src = tmp_path / "loops.hip"
    src.write_text(BLOCK_LOOP_SOURCE)
    text = build_hip_ir(src, opt="-O3").read_text()
    base, spacing = 0x7E6000000000, 16 << 20
    backend = HostBackend()
    dev = backend.open_device(0)
    try:
        dev.reserve(base, 1 << 28)
        modes = {}

        def run(kernel, grid, block, arrays, args):
            loaded = dev.load(
                backend.compile(llvm.parse_assembly(text), kernel, ExperimentConfiguration(grid=1, block=1), "x86_64")
            )
            modes[kernel] = loaded.mode
            for k, a in enumerate(arrays):
                dev.map(base + k * spacing, a.nbytes)
                dev.write(base + k * spacing, a.tobytes())
            dev.launch(loaded, grid, block, 0, args)
            return [np.frombuffer(dev.read(base + k * spacing, a.nbytes), a.dtype) for k, a in enumerate(arrays)]

        n = 5000
        x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        got = run("scale", (20,), (256,), [x, y], struct.pack("<ifQQ", n - 3, 0.5, base, base + spacing))[1]
        want = y.copy()
        i = np.arange(1, n - 4)
        want[i] = np.float32(0.5) * (x[i - 1] + x[i] + x[i + 1])
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert np.array_equal(got[n - 4 :], y[n - 4 :]) and got[0] == y[0]
        w, h = 96, 40
        x2 = rng.random(w * h, dtype=np.float32)
        got = run(
            "tile", (6, 10), (16, 4), [x2, np.zeros(w * h, np.float32)], struct.pack("<i4xQQ", w, base, base + spacing)
        )[1]
        r, c = np.divmod(np.arange(w * h), w)
        np.testing.assert_allclose(got, 2.0 * x2 + (r - c).astype(np.float32), rtol=1e-6)
        got = run("lanes", (3,), (128,), [np.zeros(384, np.float32)], struct.pack("<Q", base))[0]
        np.testing.assert_array_equal(got, (np.arange(384) % 64).astype(np.float32))  # wave64 lanes
    finally:
        dev.close()
    assert modes["scale"] in (2, image.MODE_BLOCK_RUNS) and modes["tile"] in (2, image.MODE_BLOCK_RUNS)
    assert modes["lanes"] not in (2, image.MODE_BLOCK_RUNS)
    # the stencil's two-sided guard is a range of the row: its block extent read from the implicit arguments
    from host_launches import retargeted

    from mneme.plugins.backends.host import row_ranges

    guard = row_ranges.find_guard(retargeted(text, "scale").text, "scale")
    assert guard is not None and sorted(guard.tests) == ["sgt", "slt"]
    assert "@__mneme.amdgcn.implicitarg.ptr()" in guard.span and "load i16" in guard.span
