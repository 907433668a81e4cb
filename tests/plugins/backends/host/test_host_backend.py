"""The host backend runs real clang-19 CUDA kernel IR on the CPU and matches NumPy references."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest

from irbuild import RAW, build_cuda_ir, cuda_available

from mneme.core.backend import get_backend
from mneme.core.errors import ExperimentError, MnemeError, UnsupportedError
from mneme.core.types import ExperimentConfiguration
from paths import DATA

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])

HOST_KERNELS = DATA / "host"
BASE = 0x2A0000000000  # where the tests' device memory lives, as a recording would place it
SPAN = 1 << 32
_next = itertools.count()


@pytest.fixture(scope="module")
def backend():
    return get_backend("host")


@pytest.fixture(scope="module")
def device(backend):
    with backend.open_device() as dev:
        dev.reserve(BASE, SPAN)
        yield dev


@pytest.fixture(scope="module")
def compiled(backend):
    """Compile (source, kernel) once per test module."""
    cache = {}

    def get(source: str, kernel: str, opt: str = RAW, **config):
        key = (source, kernel, opt, tuple(sorted(config.items())))
        if key not in cache:
            import llvmlite.binding as llvm

            local = HOST_KERNELS / f"{source}.cu"
            path = build_cuda_ir(local if local.exists() else source, opt=opt)
            module = llvm.parse_assembly(path.read_text())
            cfg = ExperimentConfiguration(grid=1, block=1, **config)
            cache[key] = backend.compile(module, kernel, cfg, backend.arch())
        return cache[key]

    return get


class Memory:
    """Allocates device buffers inside the test reservation, 64 KiB apart (unmapped gaps in between)."""

    def __init__(self, device):
        self.device = device

    def put(self, array: np.ndarray) -> int:
        slot = next(_next)
        addr = BASE + slot * (16 << 20)
        assert addr + array.nbytes < BASE + SPAN
        self.device.map(addr, max(array.nbytes, 1))
        self.device.write(addr, np.ascontiguousarray(array).tobytes())
        return addr

    def get(self, addr: int, like: np.ndarray) -> np.ndarray:
        return np.frombuffer(self.device.read(addr, like.nbytes), like.dtype).reshape(like.shape)


@pytest.fixture
def mem(device):
    return Memory(device)


def run(device, binary, grid, block, args: bytes, shared_mem: int = 0):
    kernel = device.load(binary)
    device.launch(kernel, grid, block, shared_mem, args)
    return kernel


rng = np.random.default_rng(1234)


def test_vector_add_matches_numpy_for_a_size_that_is_not_a_multiple_of_the_block(device, compiled, mem):
    n = 100_003
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    pa, pb, pc = mem.put(a), mem.put(b), mem.put(np.zeros(n, np.float32))
    run(device, compiled("vector_add", "vector_add"), ((n + 255) // 256,), (256,), struct.pack("<QQQi", pa, pb, pc, n))
    np.testing.assert_array_equal(mem.get(pc, a), a + b)


@pytest.mark.parametrize("block", [32, 96, 1024])
def test_grid_stride_saxpy_gives_the_same_result_at_every_block_size(device, compiled, mem, block):
    n = 50_000
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    px, py = mem.put(x), mem.put(y)
    run(device, compiled("saxpy", "saxpy"), (7,), (block,), struct.pack("<ifQQ", n, 2.5, px, py))
    np.testing.assert_allclose(mem.get(py, y), np.float32(2.5) * x + y, rtol=1e-6)


def test_stencil_on_a_2d_grid_matches_numpy(device, compiled, mem):
    ny, nx = 45, 67
    grid_in = rng.random((ny, nx), dtype=np.float32)
    pin, pout = mem.put(grid_in), mem.put(np.zeros_like(grid_in))
    block = (16, 8)
    grid = ((nx + 15) // 16, (ny + 7) // 8)
    run(device, compiled("stencil2d", "stencil2d"), grid, block, struct.pack("<QQii", pin, pout, nx, ny))
    ref = grid_in.copy()
    ref[1:-1, 1:-1] = np.float32(0.2) * (
        grid_in[1:-1, 1:-1] + grid_in[1:-1, :-2] + grid_in[1:-1, 2:] + grid_in[:-2, 1:-1] + grid_in[2:, 1:-1]
    )
    np.testing.assert_allclose(mem.get(pout, grid_in), ref, rtol=1e-6)


@pytest.mark.parametrize("block", [64, 256])
def test_shared_memory_reduction_with_syncthreads_sums_every_block(device, compiled, mem, block):
    n = block * 300 - 5
    x = rng.random(n, dtype=np.float32)
    blocks = (n + block - 1) // block
    px, pout = mem.put(x), mem.put(np.zeros(blocks, np.float32))
    run(device, compiled("reduce_sum", "reduce_sum"), (blocks,), (block,), struct.pack("<QQi", px, pout, n))
    ref = np.pad(x, (0, blocks * block - n)).reshape(blocks, block).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(mem.get(pout, np.zeros(blocks, np.float32)), ref, rtol=1e-5)


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O3"])
def test_unoptimized_and_optimized_clang_ir_give_the_same_reduction(device, compiled, mem, opt):
    n, block = 128 * 40, 128
    x = rng.random(n, dtype=np.float32)
    px, pout = mem.put(x), mem.put(np.zeros(n // block, np.float32))
    binary = compiled("reduce_sum", "reduce_sum", opt=opt)
    run(device, binary, (n // block,), (block,), struct.pack("<QQi", px, pout, n))
    ref = x.reshape(-1, block).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(mem.get(pout, np.zeros(n // block, np.float32)), ref, rtol=1e-5)


def test_barrier_kernels_give_the_same_results_as_steps_and_as_fibers(backend, device, compiled, mem, monkeypatch):
    import llvmlite.binding as llvm

    block, blocks = 128, 9
    x = rng.random(block * blocks, dtype=np.float32)
    px = mem.put(x)
    outs = []
    for fibers in ("0", "1"):
        monkeypatch.setenv("MNEME_HOST_FIBERS", fibers)
        module = llvm.parse_assembly(build_cuda_ir(HOST_KERNELS / "modes.cu").read_text())
        binary = backend.compile(module, "rotate", ExperimentConfiguration(grid=1, block=1), backend.arch())
        py = mem.put(np.zeros_like(x))
        kernel = run(device, binary, (blocks,), (block,), struct.pack("<QQ", px, py), 4 * block)
        outs.append((kernel.mode, mem.get(py, x)))
    assert [mode for mode, _ in outs] == [3, 1]  # step form, then fibers
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


def test_templated_kernels_run_under_their_mangled_names(device, compiled, mem):
    n = 1000
    f = rng.random(n, dtype=np.float32)
    i = rng.integers(-1000, 1000, n, dtype=np.int32)
    pf, pi = mem.put(f), mem.put(i)
    run(device, compiled("scale_template", "_Z5scaleIfEvPT_S0_i"), (4,), (256,), struct.pack("<Qfi", pf, 3.0, n))
    run(device, compiled("scale_template", "_Z5scaleIiEvPT_S0_i"), (4,), (256,), struct.pack("<Qii", pi, -7, n))
    np.testing.assert_array_equal(mem.get(pf, f), f * np.float32(3.0))
    np.testing.assert_array_equal(mem.get(pi, i), i * -7)


def test_libdevice_float_math_matches_numpy(device, compiled, mem):
    n = 4096
    x = (rng.random(n, dtype=np.float32) * 8 - 4).astype(np.float32)
    px, py = mem.put(x), mem.put(np.zeros(n, np.float32))
    run(device, compiled("math_funcs", "math_funcs"), (n // 256,), (256,), struct.pack("<QQi", px, py, n))
    v = x.astype(np.float64)
    ref = np.sin(v) + np.exp(-v * v) + np.sqrt(np.abs(v)) + np.log1p(v * v) + np.abs(v) ** 1.5
    np.testing.assert_allclose(mem.get(py, x), ref, rtol=2e-6, atol=2e-6)


def test_libdevice_double_math_and_its_inline_ptx_match_numpy(device, compiled, mem):
    n = 1000
    x = rng.random(n) * 6 - 2
    px, py = mem.put(x), mem.put(np.zeros(n))
    run(device, compiled("math_double", "math_double"), (4,), (256,), struct.pack("<QQi", px, py, n))
    from math import erf

    xf = x.astype(np.float32).astype(np.float64)
    ref = (
        np.sin(x) * np.cos(x)
        + np.exp(-x)
        + np.log1p(x * x)
        + (x * x + 1.0) ** 0.3
        + np.tanh(x)
        + np.array([erf(v) for v in x])
        + 1.0 / np.sqrt(x * x + 2.0)
        + (x * x + 1.0)
        + np.cbrt(x)
        + np.arctan2(x, 2.0)
        + np.exp(xf)
        + np.tanh(xf)
    )
    np.testing.assert_allclose(mem.get(py, x), ref, rtol=1e-6)


def test_device_globals_are_set_and_read_by_name(device, compiled, mem):
    n = 700
    data = rng.random(n, dtype=np.float32)
    pd = mem.put(data)
    kernel = device.load(compiled("device_global", "add_bias"))
    assert struct.unpack("<f", device.read_global(kernel, "bias", 4)) == (1.0,)
    device.write_global(kernel, "bias", struct.pack("<f", 0.5))
    for _ in range(2):
        device.launch(kernel, (3,), (256,), 0, struct.pack("<Qi", pd, n))
    np.testing.assert_allclose(mem.get(pd, data), data + np.float32(1.0), rtol=1e-6)
    assert struct.unpack("<i", device.read_global(kernel, "launch_count", 4)) == (2,)
    with pytest.raises(MnemeError, match="no device global 'missing'.*bias"):
        device.read_global(kernel, "missing", 4)


def test_atomic_histogram_counts_every_value_across_parallel_blocks(device, compiled, mem):
    n, bins = 200_000, 37
    values = rng.integers(-5, bins + 5, n, dtype=np.int32)
    pv, pc = mem.put(values), mem.put(np.zeros(bins, np.uint32))
    run(device, compiled("histogram", "histogram"), ((n + 255) // 256,), (256,), struct.pack("<QQii", pv, pc, n, bins))
    ref = np.bincount(np.clip(values, 0, bins - 1), minlength=bins)
    np.testing.assert_array_equal(mem.get(pc, np.zeros(bins, np.uint32)), ref)


def test_cas_loops_integer_and_double_atomics_match_numpy(device, compiled, mem):
    n = 30_000
    x = rng.random(n, dtype=np.float32)
    pfmax = mem.put(np.array([-1.0], np.float32))
    pmin, pmax = mem.put(np.array([1 << 30], np.int32)), mem.put(np.array([-(1 << 30)], np.int32))
    pring, pdsum = mem.put(np.zeros(1, np.uint32)), mem.put(np.zeros(1))
    args = struct.pack("<Qi4xQQQQQ", mem.put(x), n, pfmax, pmin, pmax, pring, pdsum)
    run(device, compiled("atomics", "atomics"), ((n + 127) // 128,), (128,), args)
    scaled = (x * np.float32(1000.0)).astype(np.int32)
    assert mem.get(pfmax, np.zeros(1, np.float32))[0] == x.max()
    assert mem.get(pmin, np.zeros(1, np.int32))[0] == scaled.min()
    assert mem.get(pmax, np.zeros(1, np.int32))[0] == scaled.max()
    assert mem.get(pring, np.zeros(1, np.uint32))[0] == n % 100  # atomicInc wraps at 99
    assert mem.get(pdsum, np.zeros(1))[0] == pytest.approx(x.astype(np.float64).sum(), rel=1e-12)


@pytest.mark.parametrize("fibers", ["0", "1"])
def test_warp_shuffle_reduction_sums_every_warp_as_steps_and_as_fibers(backend, device, mem, monkeypatch, fibers):
    import llvmlite.binding as llvm

    monkeypatch.setenv("MNEME_HOST_FIBERS", fibers)
    n = 64 * 1000 + 17
    x = rng.random(n, dtype=np.float32)
    px, pt = mem.put(x), mem.put(np.zeros(1, np.float32))
    module = llvm.parse_assembly(build_cuda_ir("warp_reduce").read_text())
    binary = backend.compile(module, "warp_reduce", ExperimentConfiguration(grid=1, block=1), backend.arch())
    kernel = run(device, binary, ((n + 255) // 256,), (256,), struct.pack("<QQi", px, pt, n))
    assert kernel.mode == (1 if fibers == "1" else 3)  # fibers, or the step form with warp points
    assert mem.get(pt, np.zeros(1, np.float32))[0] == pytest.approx(x.astype(np.float64).sum(), rel=1e-5)


def _shfl_reference(v: np.ndarray, mode: str, b: int, width: int = 32) -> np.ndarray:
    """PTX shfl.sync for full warps, lane by lane (out-of-range sources keep the lane's own value)."""
    out = np.empty_like(v)
    for warp in range(len(v) // 32):
        lanes = v[warp * 32 : warp * 32 + 32]
        for lane in range(32):
            base = lane // width * width
            if mode == "up":
                src = lane - b if lane - b >= base else lane
            elif mode == "down":
                src = lane + b if lane + b < base + width else lane
            elif mode == "xor":
                src = lane ^ b
            else:
                src = base + b % width
            out[warp * 32 + lane] = lanes[src]
    return out


@pytest.mark.parametrize("fibers", ["0", "1"])
def test_votes_ballots_shuffles_and_barrier_reductions_follow_gpu_semantics(backend, device, mem, monkeypatch, fibers):
    import llvmlite.binding as llvm

    monkeypatch.setenv("MNEME_HOST_FIBERS", fibers)
    blocks, block = 3, 128
    n = blocks * block
    v = rng.integers(-3, 10, n, dtype=np.int32)
    v[block : 2 * block] = np.abs(v[block : 2 * block]) + 1  # block 1: all positive
    v[2 * block + 32 : 2 * block + 64] = -1  # block 2, warp 1: none positive
    pv = mem.put(v)
    pballot, pvotes = mem.put(np.zeros(n // 32, np.uint32)), mem.put(np.zeros(n, np.int32))
    pshuf, pcounts = mem.put(np.zeros(4 * n, np.int32)), mem.put(np.zeros(3 * blocks, np.int32))
    args = struct.pack("<QQQQQ", pv, pballot, pvotes, pshuf, pcounts)
    module = llvm.parse_assembly(build_cuda_ir(HOST_KERNELS / "warp_ops.cu").read_text())
    binary = backend.compile(module, "warp_ops", ExperimentConfiguration(grid=1, block=1), backend.arch())
    kernel = run(device, binary, (blocks,), (block,), args)
    assert kernel.mode == (1 if fibers == "1" else 3)  # fibers, or the step form

    positive = (v > 0).reshape(-1, 32)
    ballots = (positive * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    np.testing.assert_array_equal(mem.get(pballot, np.zeros(n // 32, np.uint32)), ballots)
    votes = np.repeat(positive.all(axis=1) * 2 + positive.any(axis=1), 32)
    np.testing.assert_array_equal(mem.get(pvotes, np.zeros(n, np.int32)), votes)
    shuffled = mem.get(pshuf, np.zeros(4 * n, np.int32)).reshape(n, 4)
    np.testing.assert_array_equal(shuffled[:, 0], _shfl_reference(v, "up", 3))
    np.testing.assert_array_equal(shuffled[:, 1], _shfl_reference(v, "xor", 5))
    np.testing.assert_array_equal(shuffled[:, 2], _shfl_reference(v, "idx", 7))
    np.testing.assert_array_equal(shuffled[:, 3], _shfl_reference(v, "down", 2, width=8))
    per_block = (v > 0).reshape(blocks, block)
    counts = np.stack([per_block.sum(axis=1), per_block.all(axis=1), per_block.any(axis=1)], axis=1).ravel()
    np.testing.assert_array_equal(mem.get(pcounts, np.zeros(3 * blocks, np.int32)), counts)


def test_shuffles_in_the_step_form_follow_gpu_semantics(device, compiled, mem):
    n = 3 * 96
    v = rng.integers(-1000, 1000, n, dtype=np.int32)
    pv, pshuf = mem.put(v), mem.put(np.zeros(4 * n, np.int32))
    kernel = run(device, compiled("warp_ops", "shuffles"), (3,), (96,), struct.pack("<QQ", pv, pshuf))
    assert kernel.mode == 3
    shuffled = mem.get(pshuf, np.zeros(4 * n, np.int32)).reshape(n, 4)
    np.testing.assert_array_equal(shuffled[:, 0], _shfl_reference(v, "up", 3))
    np.testing.assert_array_equal(shuffled[:, 1], _shfl_reference(v, "xor", 5))
    np.testing.assert_array_equal(shuffled[:, 2], _shfl_reference(v, "idx", 7))
    np.testing.assert_array_equal(shuffled[:, 3], _shfl_reference(v, "down", 2, width=8))


def test_dynamic_shared_memory_tiled_transpose(device, compiled, mem):
    rows, cols, tile = 70, 45, 16
    m = rng.random((rows, cols), dtype=np.float32)
    pin, pout = mem.put(m), mem.put(np.zeros((cols, rows), np.float32))
    grid = ((cols + tile - 1) // tile, (rows + tile - 1) // tile)
    shared = tile * (tile + 1) * 4
    args = struct.pack("<QQii", pin, pout, rows, cols)
    run(device, compiled("transpose_dyn", "transpose"), grid, (tile, tile), args, shared_mem=shared)
    np.testing.assert_array_equal(mem.get(pout, np.zeros((cols, rows), np.float32)), m.T)


def test_each_execution_mode_runs_its_kernel_correctly(device, compiled, mem):
    n = 1000
    pout = mem.put(np.zeros(n, np.int32))
    iota3 = run(device, compiled("modes", "iota3"), (4,), (256,), struct.pack("<Qi", pout, n))
    np.testing.assert_array_equal(mem.get(pout, np.zeros(n, np.int32)), 3 * np.arange(n))

    block, blocks = 128, 5
    x = rng.random(block * blocks, dtype=np.float32)
    px, py = mem.put(x), mem.put(np.zeros_like(x))
    rotate = run(device, compiled("modes", "rotate"), (blocks,), (block,), struct.pack("<QQ", px, py), 4 * block)
    tiles = x.reshape(blocks, block)
    ref = np.roll(tiles, -1, axis=1) + 2 * np.roll(tiles, -2, axis=1)
    np.testing.assert_allclose(mem.get(py, x).reshape(blocks, block), ref, rtol=1e-6)

    grid, blk = (2, 3, 2), (4, 3, 2)
    total = 12 * 24
    pc = mem.put(np.zeros(total, np.int32))
    coords = run(device, compiled("modes", "coords"), grid, blk, struct.pack("<Q", pc))
    t = np.arange(24)
    per_thread = (t % 4) + 10 * ((t // 4) % 3) + 100 * (t // 12)
    ref = (per_thread[None, :] + 1000 * np.arange(12)[:, None]).ravel()
    np.testing.assert_array_equal(mem.get(pc, np.zeros(total, np.int32)), ref)
    # per thread, step form, per run of blocks along x (5: retarget.FLAG_BLOCK_RUNS)
    assert (iota3.mode, rotate.mode, coords.mode) == (0, 3, 5)


@pytest.mark.parametrize("kernel", ["coords_shared", "coords_counted", "coords_counted_asm"])
def test_a_kernel_with_shared_memory_or_atomics_runs_block_after_block(device, compiled, mem, kernel):
    grid, block = (37,), (16, 4)  # 2D blocks: a run of blocks would interleave their rows
    pout, ptotal = mem.put(np.zeros(37 * 64, np.int32)), mem.put(np.zeros(1, np.int32))
    loaded = run(device, compiled("modes", kernel), grid, block, struct.pack("<QQ", pout, ptotal))
    ref = (1000 * np.arange(37)[:, None] + np.arange(64)[None, :]).ravel()
    np.testing.assert_array_equal(mem.get(pout, np.zeros(37 * 64, np.int32)), ref)
    assert loaded.mode == 2  # one call per block, not per run of blocks
    if kernel.startswith("coords_counted"):
        assert mem.get(ptotal, np.zeros(1, np.int32))[0] == 37 * 64


def test_struct_parameters_are_unpacked_at_cuda_param_offsets(device, compiled, mem):
    n = 300
    pout = mem.put(np.zeros(n, np.float32))
    params = struct.pack("<ifd", n, 0.5, 10.0)  # struct Params {int n; float scale; double offset;}
    run(device, compiled("warp_ops", "struct_param"), (2,), (256,), params + struct.pack("<Q", pout))
    np.testing.assert_array_equal(mem.get(pout, np.zeros(n, np.float32)), np.arange(n, dtype=np.float32) * 0.5 + 10)


def test_out_of_bounds_write_fails_the_launch_and_the_next_launch_runs(device, compiled, mem):
    data = np.zeros(64, np.float32)
    pd = mem.put(data)
    kernel = device.load(compiled("faults", "write_far"))
    with pytest.raises(ExperimentError, match=r"write_far.*invalid memory access \(SIGSEGV\) at address 0x") as info:
        device.launch(kernel, (4,), (64,), 0, struct.pack("<Qq", pd, 1 << 20))
    assert info.value.kind == "fault"
    device.launch(kernel, (1,), (64,), 0, struct.pack("<Qq", pd, 1))  # in bounds: runs
    np.testing.assert_array_equal(mem.get(pd, data), np.ones(64, np.float32))
    test_vector_add_matches_numpy_for_a_size_that_is_not_a_multiple_of_the_block(device, compiled, mem)


def test_a_short_argument_buffer_is_refused_before_launching(device, compiled):
    kernel = device.load(compiled("vector_add", "vector_add"))
    with pytest.raises(ExperimentError, match="'vector_add' takes 28 bytes of parameters; the argument buffer has 16"):
        device.launch(kernel, (1,), (32,), 0, bytes(16))


def test_a_forked_worker_process_launches_with_its_own_threads(device, compiled, mem):
    import os

    n = 5000
    a = rng.random(n, dtype=np.float32)
    pa, pc = mem.put(a), mem.put(np.zeros(n, np.float32))
    kernel = device.load(compiled("vector_add", "vector_add"))
    args = struct.pack("<QQQi", pa, pa, pc, n)
    device.launch(kernel, (20,), (256,), 0, args)  # the parent's helper threads exist now
    pid = os.fork()
    if pid == 0:  # the child: same memory, no helper threads until it launches
        try:
            device.write(pc, bytes(4 * n))
            device.launch(kernel, (20,), (256,), 0, args)
            ok = np.array_equal(np.frombuffer(device.read(pc, 4 * n), np.float32), a + a)
        finally:
            os._exit(0 if locals().get("ok") else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_device_side_assert_fails_the_launch_with_its_message(device, compiled, mem):
    flags = np.zeros(32, np.int32)
    flags[5] = 1
    kernel = device.load(compiled("faults", "checked"))
    with pytest.raises(
        ExperimentError, match=r"block \(0, 0, 0\).*faults.cu:\d+.*assertion .flags\[threadIdx.x\] == 0"
    ):
        device.launch(kernel, (1,), (32,), 0, struct.pack("<Q", mem.put(flags)))
    device.launch(kernel, (1,), (32,), 0, struct.pack("<Q", mem.put(np.zeros(32, np.int32))))


def test_a_failure_in_a_run_of_blocks_names_its_own_block(device, compiled, mem):
    flags = np.zeros((3 * 4, 9 * 8), np.int32)  # a grid of 9 x 3 blocks of 8 x 4 threads
    flags[2 * 4 + 1, 6 * 8 + 5] = 1  # thread (5, 1) of block (6, 2)
    kernel = device.load(compiled("faults", "checked_tiles"))
    assert kernel.mode == 5  # one call runs several blocks along x
    with pytest.raises(ExperimentError, match=r"block \(6, 2, 0\).*assertion .flags"):
        device.launch(kernel, (9, 3), (8, 4), 0, struct.pack("<Q", mem.put(flags)))
    device.launch(kernel, (9, 3), (8, 4), 0, struct.pack("<Q", mem.put(np.zeros_like(flags))))


@pytest.mark.parametrize(
    "kernel, construct",
    [("uses_fns", "llvm.nvvm.fns"), ("uses_ptx_asm", "inline assembly 'mov.u32 $0, %dynamic_smem_size;'")],
)
def test_unsupported_constructs_are_named_before_running(compiled, kernel, construct):
    with pytest.raises(
        UnsupportedError, match="not supported on the host backend: " + __import__("re").escape(construct)
    ):
        compiled("faults", kernel)


def test_device_printf_writes_to_stdout(device, compiled, capfd):
    run(device, compiled("faults", "prints"), (2,), (32,), struct.pack("<i", 7))
    out = capfd.readouterr().out
    assert "block 0 of 2, n=7, half=3.500000" in out and "block 1 of 2" in out


def test_compile_reports_stage_times_and_a_loadable_object(backend, compiled):
    binary = compiled("reduce_sum", "reduce_sum")
    assert binary.backend == "host" and binary.kind == "host-object" and binary.data[:4] == b"\x7fELF"
    assert set(binary.stage_times) == {"retarget", "optimize", "codegen"}
    assert binary.resources.shared_mem == 256 * 4
    unoptimized = compiled("reduce_sum", "reduce_sum", passes="default<O0>", codegen_opt=0)
    assert unoptimized.data != binary.data


def test_ir_for_another_target_is_refused_with_its_triple(backend):
    import llvmlite.binding as llvm

    module = llvm.parse_assembly('target triple = "spirv64-unknown-unknown"\ndefine void @k() { ret void }')
    with pytest.raises(UnsupportedError, match="spirv64-unknown-unknown.*nvptx"):
        backend.compile(module, "k", ExperimentConfiguration(grid=1, block=1), backend.arch())


def test_memory_lives_at_the_requested_addresses(device):
    addr = BASE + SPAN - (8 << 20)
    device.map(addr + 100, 5000)
    device.write(addr + 100, b"mneme" * 1000)
    device.copy(addr + 3000, addr + 100, 5)
    assert device.read(addr + 3000, 5) == b"mneme"
    import ctypes

    assert ctypes.string_at(addr + 100, 5) == b"mneme"  # the device address is the process address


def test_unmapped_device_addresses_are_refused_not_crashed(device):
    with pytest.raises(ExperimentError, match="not mapped"):
        device.read(BASE + SPAN - 4096, 16)
    with pytest.raises(ExperimentError, match="not mapped"):
        device.write(0x10, b"x")


def test_reserving_a_taken_range_names_the_address_and_its_holder(backend, device):
    with backend.open_device() as other:
        with pytest.raises(ExperimentError, match=rf"{BASE:#x}.*already held by") as info:
            other.reserve(BASE, 1 << 20)
        assert info.value.kind == "load"


def test_closing_a_device_releases_its_addresses_and_later_use_raises(backend):
    addr = 0x2C0000000000
    dev = backend.open_device()
    dev.reserve(addr, 1 << 20)
    dev.map(addr, 4096)
    dev.close()
    with pytest.raises(MnemeError, match="closed"):
        dev.read(addr, 4)
    with backend.open_device() as again:
        again.reserve(addr, 1 << 20)  # free again


def test_the_host_backend_is_a_registered_usable_plugin():
    from mneme.core import backend as core_backend

    assert "host" in core_backend.backends()
    host = core_backend.get_backend("host")
    assert host.availability().usable and host.device_count() == 1
    assert host.fingerprint()["backend"] == "host"


def test_gpu_ir_is_optimized_for_its_gpu_with_or_without_that_gpu_backend(backend, monkeypatch):
    """`mneme replay --output-ll` on the host shows the GPU IR optimized for the GPU it was written for."""
    from mneme.core import backend as backend_mod
    from mneme.core import ir

    cfg = ExperimentConfiguration(grid=1, block=1)
    source = ir.load(build_cuda_ir("saxpy"))
    with_cuda = ir.clone(source)
    backend.optimize(with_cuda, cfg, backend.arch())
    installed = backend_mod.backends()
    monkeypatch.setattr(backend_mod, "backends", lambda: {"host": installed["host"]})
    without = ir.clone(source)
    backend.optimize(without, cfg, backend.arch())
    assert str(without) == str(with_cuda) != str(source)
    assert with_cuda.triple.startswith("nvptx") and " alloca " not in str(with_cuda)
