"""LLVM IR emitted by Triton (collected on the GPU machine by scripts/gpu/triton_llir.py) goes
through the IR toolkit like clang's: it loads, its kernel and parameters are found, every
transform applies, and it compiles to PTX that ptxas accepts; the `triton` IR source finds it
in a real Triton cache entry by kernel name and by the loaded cubin."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mneme_cuda import codegen as cuda_codegen
from mneme_cuda.backend import CudaBackend

from mneme.core import ir, pipeline
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.ir_sources.triton import TritonCacheIRSource
from paths import DATA

TRITON = DATA / "triton"
ENTRIES = sorted(p for p in TRITON.iterdir() if p.is_dir()) if TRITON.is_dir() else []


def test_triton_test_data_is_present():
    names = {p.name for p in ENTRIES}
    assert {"add_kernel", "softmax_kernel"} <= names, f"missing Triton cache entries in {TRITON}"


def _kernel(entry: Path) -> tuple[Path, str]:
    meta = json.loads((entry / f"{entry.name}.json").read_text())
    return entry / f"{entry.name}.llir", meta["name"]


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_triton_ir_loads_and_its_kernel_and_parameters_are_found(entry):
    llir, name = _kernel(entry)
    module = ir.load(llir)
    assert name in ir.kernels(module)
    params = ir.kernel_params(module, name)
    assert params and all(p.size > 0 for p in params)
    assert any(p.kind == "pointer" for p in params)


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_triton_ir_goes_through_every_transform_to_ptx_that_ptxas_accepts(entry):
    if shutil.which("ptxas") is None:
        pytest.skip("needs ptxas: the CUDA toolkit")
    llir, name = _kernel(entry)
    module = ir.link([llir], name)
    config = ExperimentConfiguration(
        grid=64,
        block=128,
        specialize_dims=True,
        set_launch_bounds=True,
        max_threads=128,
        min_blocks_per_sm=2,
        passes="default<O3>",
    )
    pre = pipeline.preprocess(module, name, config, target="nvptx")
    CudaBackend().optimize(pre.module, config, "sm_90")
    ptx = cuda_codegen.codegen(ir.clone(pre.module), name, config, "sm_90", emit="ptx")
    text = ptx.data.decode()
    assert f".entry {name}" in text
    # Triton fixes the block (num_warps * 32 = 128 threads): launch bounds keep .reqntid, add no .maxntid.
    assert ".reqntid 128" in text and ".maxntid" not in text
    assert ".minnctapersm 2" in text
    assert "%ntid.x" not in text
    cubin = cuda_codegen.codegen(pre.module, name, config, "sm_90")
    assert cubin.kind == "cubin" and cubin.data[:4] == b"\x7fELF"
    assert cubin.resources.registers > 0


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_triton_source_finds_the_real_cache_entry_by_name_and_by_loaded_cubin(entry, tmp_path):
    _, name = _kernel(entry)
    cache = tmp_path / "cache"
    shutil.copytree(entry, cache / "HASH0")
    source = TritonCacheIRSource(cache)
    found = source.find(name, arch="sm_90")
    assert found and found[0].kernel_name == name
    cubin = (entry / f"{entry.name}.cubin").read_bytes()
    assert source.find(name, arch="sm_90", image=cubin)[0].source.endswith(".llir")
    other = bytearray(cubin)
    other[len(other) // 2] ^= 0xFF
    assert source.find(name, arch="sm_90", image=bytes(other)) is None


@pytest.mark.parametrize("entry", ENTRIES[:1], ids=[p.name for p in ENTRIES[:1]])
def test_launch_bounds_below_the_block_a_triton_kernel_requires_are_refused(entry):
    from mneme.core.errors import UsageError

    llir, name = _kernel(entry)
    config = ExperimentConfiguration(grid=64, block=64, set_launch_bounds=True, max_threads=64)
    with pytest.raises(UsageError, match="exactly 128 threads"):
        pipeline.preprocess(ir.link([llir], name), name, config, target="nvptx")
