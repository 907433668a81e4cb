"""Third-party kernels from PyPI (llama.cpp's ggml-cuda, PyCUDA): mneme-cc keeps their IR, the host backend
runs at least 90% of them, and the ones given a NumPy reference here match it (issue 28, Done when).

The corpus (tests/kernel_corpus.py) is downloaded and built on first use and cached under
~/.cache/mneme/corpus; the tests skip, saying why, where PyPI or nvcc cannot be reached.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
from irbuild import cuda_available
from skips import needs

import kernel_corpus as kc
from mneme import capture
from mneme.plugins.check_commands import check

pytestmark = [
    needs("nvcc", "clang++-19", "llvm-objcopy-19"),
    pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1]),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def corpus():
    try:
        ggml = kc.GGML_UNITS if os.environ.get("MNEME_CORPUS_FULL") else kc.GGML_CI_UNITS
        return kc.build(kc.units(ggml=ggml))
    except kc.CorpusUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def verdicts(corpus):
    found = {}
    for built in corpus:
        if built.ir_embedded:
            found[built.unit] = check((str(built.obj),), None, None, "host")
    return found


def _unit(corpus, project: str, name: str) -> kc.Built:
    return next(b for b in corpus if b.unit.project == project and b.unit.name == name)


def test_every_unit_nvcc_compiles_carries_ir(corpus):
    from mneme.instrument.fatbin import iter_cubins, kernel_names

    compiled = [b for b in corpus if b.nvcc_ok]
    assert {b.unit.project for b in compiled} == {"llama.cpp", "pycuda"}
    # a unit of host code only (llama.cpp's set.cu calls the kernels cpy.cu defines) has no device code to embed
    with_kernels = [b for b in compiled if any(kernel_names(c) for c in iter_cubins(str(b.obj)))]
    missing = [
        f"{b.unit.project}/{b.unit.name}: {b.messages.strip()[-300:]}" for b in with_kernels if not b.ir_embedded
    ]
    assert not missing, "\n".join(missing)


def test_every_kernel_nvcc_compiles_has_embedded_ir_under_nvccs_name(corpus):
    from mneme.instrument.fatbin import iter_cubins, kernel_names

    compiled = [b for b in corpus if b.nvcc_ok]
    missing = []
    for b in compiled:
        by_nvcc = {k for cubin in iter_cubins(str(b.obj)) for k in kernel_names(cubin)}
        with_ir = {k for entry in b.entries() for k in entry.kernels}
        if by_nvcc - with_ir:
            missing.append(
                f"{b.unit.project}/{b.unit.name}: {sorted(by_nvcc - with_ir)[:5]} {b.messages.strip()[-300:]}"
            )
    assert not missing, "\n".join(missing)


def test_the_corpus_has_150_kernels_from_two_projects_and_the_host_runs_90_percent(verdicts):
    per_project = collections.Counter(unit.project for unit, vs in verdicts.items() for _ in vs)
    assert len(per_project) == 2 and sum(per_project.values()) >= 150, per_project
    every = [v for vs in verdicts.values() for v in vs]
    accepted = sum(v.runnable for v in every)
    refused = collections.Counter(c for v in every for c in v.unsupported)
    assert accepted >= 0.9 * len(every), f"{accepted}/{len(every)} accepted; refused: {refused.most_common(10)}"


def test_every_kernel_the_check_accepts_compiles_on_the_host(corpus, verdicts, tmp_path):
    from mneme.core import build, ir
    from mneme.core.backend import get_backend
    from mneme.core.types import ExperimentConfiguration

    host = get_backend("host")
    config = ExperimentConfiguration(grid=(4, 1, 1), block=(128, 1, 1))
    failures = []
    for built in corpus:
        for v in verdicts.get(built.unit, ()):
            if not v.runnable:
                continue
            entry = next(e for e in built.entries() if v.kernel in e.kernels)
            path = tmp_path / f"{built.unit.name}.bc"
            path.write_bytes(entry.bitcode)
            try:
                build.compile(ir.link([path], v.kernel), v.kernel, config, host.arch(), backend=host, cache=False)
            except Exception as exc:  # collected: the assertion names every kernel that failed
                failures.append(f"{v.kernel}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not failures, "\n".join(failures)


def _run(built: kc.Built, kernel: str, grid, block, args, tmp_path, name: str) -> dict:
    entry = next(e for e in built.entries() if kernel in e.kernels)
    bc = tmp_path / f"{name}.bc"
    bc.write_bytes(entry.bitcode)
    outputs: dict = {}
    capture.capture(str(bc), kernel, grid, block, args, tmp_path / name, backend="host", outputs=outputs)
    return outputs


def _kernel(built: kc.Built, stem: str) -> str:
    """The mangled name of the kernel whose name contains `stem` (the only one, or the first)."""
    names = [k for e in built.entries() for k in e.kernels if stem in k]
    assert names, f"no kernel like {stem!r} in {built.unit.name}: {[k for e in built.entries() for k in e.kernels]}"
    return sorted(names, key=len)[0]


def test_pycuda_kernels_match_numpy(corpus, tmp_path):
    rng = np.random.default_rng(11)
    a = rng.uniform(-2, 2, (4, 4)).astype(np.float32)
    out = _run(_unit(corpus, "pycuda", "examples_demo_19"), "doublify", 1, (4, 4), [a], tmp_path, "doublify")
    np.testing.assert_array_equal(out[0].reshape(4, 4), a * 2)

    x, y = rng.uniform(-1, 1, 400).astype(np.float32), rng.uniform(-1, 1, 400).astype(np.float32)
    out = _run(
        _unit(corpus, "pycuda", "examples_hello_gpu_9"),
        "multiply_them",
        1,
        400,
        [np.zeros(400, np.float32), x, y],
        tmp_path,
        "multiply",
    )
    np.testing.assert_array_equal(out[0], x * y)

    r, g, b = (rng.uniform(0, 1, 256 * 256).astype(np.float32) for _ in range(3))
    out = _run(
        _unit(corpus, "pycuda", "examples_from-wiki_simple_rgb2gray_15"),
        "rgb2gray",
        256,
        256,
        [np.zeros(256 * 256, np.float32), r, g, b],
        tmp_path,
        "gray",
    )
    expect = (0.299 * r.astype(np.float64) + 0.587 * g + 0.114 * b).astype(np.float32)
    np.testing.assert_allclose(out[0], expect, rtol=2.5e-7)  # double FMA contraction or not: one float ulp

    n = 32
    cells = (rng.uniform(0, 1, (n, n)) < 0.3).astype(np.int32)
    out = _run(
        _unit(corpus, "pycuda", "examples_from-wiki_game_of_life_37"),
        "step",
        (2, 2),
        (16, 16),
        [cells, np.zeros((n, n), np.int32)],
        tmp_path,
        "life",
    )
    neighbours = sum(np.roll(np.roll(cells, dy, 0), dx, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)) - cells
    expect = np.where(neighbours == 3, 1, np.where(neighbours == 2, cells, 0))
    np.testing.assert_array_equal(out[1].reshape(n, n), expect)


def test_llama_cpp_kernels_match_numpy(corpus, tmp_path):
    rng = np.random.default_rng(12)
    n = 1000
    x = rng.uniform(-4, 4, n).astype(np.float32)

    clamp = _unit(corpus, "llama.cpp", "clamp")
    out = _run(
        clamp,
        _kernel(clamp, "op_clamp_kernelIf"),
        4,
        256,
        [x, np.zeros(n, np.float32), np.float32(-1.5), np.float32(2.0), n],
        tmp_path,
        "clamp",
    )
    np.testing.assert_array_equal(out[1], np.clip(x, -1.5, 2.0))

    scale = _unit(corpus, "llama.cpp", "scale")
    out = _run(
        scale,
        _kernel(scale, "scale_f32If"),
        2,
        128,
        [x, np.zeros(n, np.float32), np.float32(0.25), np.float32(3.0), np.int64(n)],
        tmp_path,
        "scale",
    )
    np.testing.assert_allclose(out[1], np.float32(0.25) * x + np.float32(3.0), rtol=1e-6)  # FMA or not

    arange = _unit(corpus, "llama.cpp", "arange")
    out = _run(
        arange,
        _kernel(arange, "arange_f32"),
        4,
        256,
        [np.zeros(n, np.float32), n, np.float32(-2.0), np.float32(0.5)],
        tmp_path,
        "arange",
    )
    np.testing.assert_allclose(out[0], np.float32(-2.0) + np.float32(0.5) * np.arange(n, dtype=np.float32), rtol=1e-6)

    softcap = _unit(corpus, "llama.cpp", "softcap")
    out = _run(
        softcap,
        _kernel(softcap, "softcap_f32"),
        4,
        256,
        [x, np.zeros(n, np.float32), np.float32(0.3), np.float32(5.0), n],
        tmp_path,
        "softcap",
    )
    np.testing.assert_allclose(out[1], np.tanh(np.float32(0.3) * x) * 5.0, rtol=2e-6, atol=1e-6)


def test_llama_cpp_softmax_split_across_blocks_by_grid_syncs_matches_numpy(corpus, tmp_path):
    """soft_max_f32_parallelize_cols (a cooperative launch: one block per SM, cooperative groups' grid.sync()
    between each row's block maxima and sums), on the host with every block resident."""
    softmax = _unit(corpus, "llama.cpp", "softmax")
    rng = np.random.default_rng(13)
    rows, ncols, blocks = 2, 9000, 8
    x = rng.uniform(-6, 6, (rows, ncols)).astype(np.float32)
    fields = [
        ("nheads", "<i8"),
        ("n_head_log2", "<u4"),
        *[
            (f, "<i8")
            for f in (
                "ncols",
                "nrows_x",
                "nrows_y",
                "ne00",
                "ne01",
                "ne02",
                "ne03",
                "nb11",
                "nb12",
                "nb13",
                "ne12",
                "ne13",
            )
        ],
        *[(f, "<f4") for f in ("scale", "max_bias", "m0", "m1")],
    ]
    params = np.zeros((), np.dtype(fields, align=True))  # struct soft_max_params as nvcc lays it out
    for name, value in (
        ("nheads", 1),
        ("ncols", ncols),
        ("nrows_x", rows),
        ("nrows_y", rows),
        ("ne00", ncols),
        ("ne01", rows),
        ("ne02", 1),
        ("ne03", 1),
        ("scale", 1.0),
        ("m0", 1.0),
        ("m1", 1.0),
    ):
        params[name] = value
    args = [x, np.zeros_like(x), np.zeros(blocks, np.float32), np.zeros(blocks, np.float32), params.tobytes()]
    out = _run(softmax, _kernel(softmax, "soft_max_f32_parallelize_cols"), blocks, 256, args, tmp_path, "softmax")
    wide = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out[1].reshape(rows, ncols), wide / wide.sum(axis=1, keepdims=True), rtol=2e-5)
