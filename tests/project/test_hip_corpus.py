"""Third-party HIP kernels from PyPI (llama.cpp's GPU back end in llama-cpp-python 0.2.56, built as HIP
by `mneme-cc clang++ -x hip` for gfx90a, gfx942 and gfx1100): every architecture's IR is embedded,
every kernel clang built has IR and a code object through the hip backend, and the host backend runs
at least 95% of them, naming what it refuses (issue 40).

The sdist (tests/hip_corpus.py) is downloaded and built on first use and cached under
~/.cache/mneme/corpus; the tests skip, saying why, where PyPI or the HIP toolchain cannot be reached.
Code objects and the CUDA/HIP cross-check take a fixed spread of the kernels (MNEME_FULL_CORPUS=1: all of
them, as benchmarks/bench_hip_corpus.py does for benchmarks/results/hip-corpus.md).
"""

from __future__ import annotations

import os

import hip_corpus as hc
import kernel_corpus as kc
import pytest
from skips import needs

pytestmark = [
    needs("clang++-19", "llvm-objcopy-19", "ld.lld-19"),
    pytest.mark.skipif(not hc.available()[0], reason=hc.available()[1]),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def built():
    try:
        root = kc.fetch(hc.LLAMA_HIP)
    except kc.CorpusUnavailable as exc:
        pytest.skip(str(exc))
    done = hc.build(root)
    assert done.ok, done.messages[-3000:]
    return done


@pytest.fixture(scope="module")
def verdicts(built):
    return hc.host_verdicts(built)


def test_the_unit_builds_as_hip_and_carries_ir_for_each_architecture(built):
    by_arch = {entry.arch: entry for entry in built.entries()}
    assert sorted(by_arch) == sorted(hc.ARCHS)
    clang_kernels = hc.code_object_kernels(built.obj)
    assert sorted(clang_kernels) == sorted(hc.ARCHS)
    for arch, entry in by_arch.items():
        assert entry.language == "hip"
        assert len(entry.kernels) > 250, arch  # llama.cpp 0.2.56's ggml-cuda.cu has 307 kernels on gfx90a
        assert set(entry.kernels) == clang_kernels[arch], arch  # every kernel clang built has its IR


def _sample(items, every):
    """Every `every`-th item (all of them with MNEME_FULL_CORPUS=1): CI checks a spread of the corpus, and
    benchmarks/bench_hip_corpus.py all of it, into benchmarks/results/hip-corpus.md."""
    return list(items) if os.environ.get("MNEME_FULL_CORPUS") == "1" else list(items)[::every]


@pytest.mark.parametrize("arch", hc.ARCHS)
def test_every_kernel_gets_a_code_object_through_the_hip_backend(built, arch):
    entry = next(e for e in built.entries() if e.arch == arch)
    kernels = _sample(sorted(entry.kernels), 10)
    failed = hc.code_objects_through_hip(entry, arch, kernels)
    assert not failed, "\n".join(failed[:20])


def test_the_host_backend_runs_95_percent_and_names_what_it_refuses(verdicts):
    assert sorted(verdicts) == sorted(hc.ARCHS)
    for arch, found in verdicts.items():
        assert len(found) > 250, arch
        runnable = sum(v.runnable for v in found)
        refused = [f"{v.kernel}: {'; '.join(v.unsupported)}" for v in found if not v.runnable]
        assert runnable >= 0.95 * len(found), f"{arch}: {runnable} of {len(found)}\n" + "\n".join(refused[:30])
        assert all(v.unsupported and all(u.strip() for u in v.unsupported) for v in found if not v.runnable)


@pytest.fixture
def both_builds(built, tmp_path):
    """(the sdist's root, the CUDA build's IR, the gfx90a build's IR) of the same release."""
    root = kc.fetch(hc.LLAMA_HIP)
    try:
        cuda_ir = hc.build_cuda_ir(root)
    except kc.CorpusUnavailable as exc:
        pytest.skip(str(exc))
    hip_ir = tmp_path / "gfx90a.bc"
    hip_ir.write_bytes(next(e for e in built.entries() if e.arch == "gfx90a").bitcode)
    return root, cuda_ir, hip_ir


def test_cuda_and_hip_builds_of_the_same_kernels_agree_on_the_host(both_builds, tmp_path):
    # the same release's ggml-cuda.cu built for CUDA and for HIP, run on the host with the same inputs:
    # bit for bit, but for kernels calling the vendors' math libraries (libdevice vs ocml: a few ulp)
    _, cuda_ir, hip_ir = both_builds
    full = os.environ.get("MNEME_FULL_CORPUS") == "1"
    found = hc.cross_check(cuda_ir, hip_ir, tmp_path / "captures", every=1 if full else 6)
    report = "\n".join(f"{a.status} {a.kernel} {a.detail}" for a in found)
    assert len(found) >= (30 if full else 5), report
    assert sum(a.status == "identical" for a in found) >= (20 if full else 1), report
    for a in found:
        if a.status == "differs":
            assert any(m in a.kernel for m in hc.VENDOR_MATH) and a.ulps <= hc.MATH_ULPS, report
    assert sum(a.status == "not captured" for a in found) <= len(found) // 10, report


def test_cuda_and_hip_builds_of_the_quantized_kernels_agree_bit_for_bit_on_the_host(both_builds, tmp_path):
    # the int8 dot products (dp4a inline PTX on CUDA, sdot4 on gfx90a), the SIMD byte subtractions and compares
    # (vsub4/vset4 on CUDA) and the dequantizations, launched as each build's launcher shapes them; with the
    # floating-point contraction the source leaves open removed from both builds, every buffer bit for bit
    root, cuda_ir, hip_ir = both_builds
    full = os.environ.get("MNEME_FULL_CORPUS") == "1"
    found = hc.cross_check(
        cuda_ir,
        hip_ir,
        tmp_path / "captures",
        every=1 if full else 7,
        quantized=True,
        source=hc.source(root),
        strict=True,
    )
    report = "\n".join(f"{a.status} {a.kernel} {a.detail}" for a in found)
    names = " ".join(a.kernel for a in found)
    assert len(found) >= (70 if full else 10), report
    assert "mul_mat_q" in names and "mul_mat_vec_q" in names and "dequantize_block" in names, report
    assert all(a.status == "identical" for a in found), report
