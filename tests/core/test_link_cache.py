"""`ir.link` links a recording's files once per process and gives each kernel only what it reaches (issue 28, point 7)."""

from __future__ import annotations

import os
import time

import pytest
from irbuild import build_cuda_ir, cuda_available

from mneme.core import ir
from mneme.core.errors import IRError
from mneme.core.ir import _linking

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])

MANY = "\n".join(
    ["__device__ float helper(float x, int k) { float s = 0; for (int j = 0; j < k; ++j) s += x * j; return s; }"]
    + [
        f'extern "C" __global__ void k{i}(float* x, int n) {{ int t = threadIdx.x; if (t < n) x[t] = helper(x[t], {i % 3 + 1}) + {i}; }}'
        for i in range(40)
    ]
    + ['extern "C" __global__ void lone(float* x) { x[threadIdx.x] = 1.0f; }']
)


@pytest.fixture
def many(tmp_path):
    src = tmp_path / "many.cu"
    src.write_text(MANY + "\n")
    path = tmp_path / "many.ll"  # a copy: a test edits it, and build_cuda_ir's result is shared
    path.write_bytes(build_cuda_ir(src).read_bytes())
    ir.clear_link_cache()
    yield str(path)
    ir.clear_link_cache()


def _uncached(path: str, kernel: str, **kw):
    os.environ["MNEME_LINK_CACHE"] = "0"
    try:
        return ir.link([path], kernel, **kw)
    finally:
        del os.environ["MNEME_LINK_CACHE"]


def test_the_files_are_read_and_linked_once_for_every_kernel(many, monkeypatch):
    loads = []
    real = ir.load
    # where link reads its files (mneme.core.ir._linking), every read is counted
    monkeypatch.setattr(_linking, "load", lambda *a, **kw: loads.append(a[0]) or real(*a, **kw))
    for i in range(40):
        ir.link([many], f"k{i}")
    assert len(loads) == 1


@pytest.mark.parametrize("kernel", ["k0", "k17", "lone"])
@pytest.mark.parametrize("prune,internalize", [(True, True), (True, False), (False, False)])
def test_each_kernel_gets_the_same_module_as_an_uncached_link(many, kernel, prune, internalize):
    cached = ir.link([many], kernel, prune=prune, internalize=internalize)
    again = ir.link([many], kernel, prune=prune, internalize=internalize)
    plain = _uncached(many, kernel, prune=prune, internalize=internalize)
    assert ir.module_hash(cached) == ir.module_hash(plain) == ir.module_hash(again)
    if prune:
        assert ir.defined_functions(cached) == ir.defined_functions(plain)
        assert "helper" not in " ".join(ir.defined_functions(cached)) or kernel != "lone"
    cached.close()  # each caller owns its module: closing one leaves the cache intact
    assert ir.link([many], kernel, prune=prune, internalize=internalize).get_function(kernel)


def test_a_changed_file_is_read_again(many):
    assert "k3" in ir.kernels(ir.link([many], "k3", prune=False))
    text = open(many).read().replace("@lone(", "@renamed(").replace("@lone,", "@renamed,")
    time.sleep(0.01)
    with open(many, "w") as f:
        f.write(text)
    assert "renamed" in ir.kernels(ir.link([many], "k3", prune=False))


def test_an_unknown_kernel_names_the_kernels_present(many):
    ir.link([many], "k0")
    with pytest.raises(IRError, match="nope"):
        ir.link([many], "nope")
