"""Third-party HIP kernels from PyPI (llama.cpp's GPU back end in llama-cpp-python 0.2.56, built as HIP
by `mneme-cc clang++ -x hip` for gfx90a, gfx942 and gfx1100): every architecture's IR is embedded,
every kernel clang built has IR and a code object through the hip backend, and the host backend runs
at least 95% of them, naming what it refuses (issue 40).

The sdist (tests/hip_corpus.py) is downloaded and built on first use and cached under
~/.cache/mneme/corpus; the tests skip, saying why, where PyPI or the HIP toolchain cannot be reached.
"""

from __future__ import annotations

import collections

import pytest
from skips import needs

import hip_corpus as hc
import kernel_corpus as kc
from mneme.plugins.check_commands import check

pytestmark = [needs("clang++-19", "llvm-objcopy-19", "ld.lld-19"),
              pytest.mark.skipif(not hc.available()[0], reason=hc.available()[1]), pytest.mark.slow]  # fmt: skip


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
    return check((str(built.obj),), None, None, "host")


def test_the_unit_builds_as_hip_and_carries_ir_for_each_architecture(built):
    by_arch = {entry.arch: entry for entry in built.entries()}
    assert sorted(by_arch) == sorted(hc.ARCHS)
    clang_kernels = hc.code_object_kernels(built.obj)
    assert sorted(clang_kernels) == sorted(hc.ARCHS)
    for arch, entry in by_arch.items():
        assert entry.language == "hip"
        assert len(entry.kernels) > 250, arch  # llama.cpp 0.2.56's ggml-cuda.cu has 307 kernels on gfx90a
        assert set(entry.kernels) == clang_kernels[arch], arch  # every kernel clang built has its IR


@pytest.mark.parametrize("arch", hc.ARCHS)
def test_every_kernel_gets_a_code_object_through_the_hip_backend(built, arch):
    entry = next(e for e in built.entries() if e.arch == arch)
    failed = hc.code_objects_through_hip(entry, arch)
    assert not failed, "\n".join(failed[:20])


def test_the_host_backend_runs_95_percent_and_names_what_it_refuses(verdicts):
    by_arch = collections.defaultdict(list)
    for v in verdicts:
        by_arch[v.source.rsplit(":", 1)[1]].append(v)
    assert sorted(by_arch) == sorted(hc.ARCHS)
    for arch, found in by_arch.items():
        runnable = sum(v.runnable for v in found)
        refused = [f"{v.kernel}: {'; '.join(v.unsupported)}" for v in found if not v.runnable]
        assert runnable >= 0.95 * len(found), f"{arch}: {runnable} of {len(found)}\n" + "\n".join(refused[:30])
        assert all(v.unsupported and all(u.strip() for u in v.unsupported) for v in found if not v.runnable)
