"""The IR-source plugins as the finalizer sees them: registered by name, found by kernel name."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skips import needs

from mneme.core import plugins
from mneme.core.elf import elf_files_from_maps, loaded_elf_files
from mneme.core.irsource import ArchitectureMismatch, IRSource, arch_rank, runs_on
from mneme.instrument.launcher import write_standins
from mneme.instrument.symbols import module_symbols
from mneme.plugins.ir_sources.embedded import EmbeddedIRSource
from mneme.plugins.ir_sources.triton import TritonCacheIRSource

ADD_KERNEL = """
extern "C" __global__ void add_kernel(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}
"""

needs_cuda_tools = needs("nvcc", "clang++-19")


def test_both_sources_are_registered_plugins():
    sources = plugins.registry("ir-source")
    assert sources["embedded"] is EmbeddedIRSource and sources["triton"] is TritonCacheIRSource
    assert all(issubclass(cls, IRSource) for cls in sources.values())


def test_loaded_elf_files_lists_the_executable_first_then_its_libraries():
    files = loaded_elf_files()
    assert os.path.realpath(files[0]) == os.path.realpath(sys.executable)
    assert any("libc.so" in f or "libc-" in f for f in files)


def test_saved_maps_listing_gives_existing_elf_files_executable_first(tmp_path):
    (tmp_path / "data.bin").write_bytes(b"not elf")
    maps = Path("/proc/self/maps").read_text() + (
        f"7f0000000000-7f0000001000 r--p 00000000 00:00 0 {tmp_path / 'data.bin'}\n"
        "7f0000001000-7f0000002000 r--p 00000000 00:00 0 /gone/libold.so (deleted)\n"
        "7f0000002000-7f0000003000 rw-p 00000000 00:00 0 [heap]\n"
    )
    files = elf_files_from_maps(maps, executable=sys.executable)
    assert os.path.realpath(files[0]) == os.path.realpath(sys.executable)
    assert not {str(tmp_path / "data.bin"), "/gone/libold.so", "[heap]"} & set(files)
    assert len(files) == len(set(files)) > 1


def test_architecture_rules_follow_the_cuda_loader():
    assert runs_on("sm_80", "sm_86") and not runs_on("sm_86", "sm_80") and not runs_on("sm_80", "sm_90")
    assert runs_on("compute_80", "sm_90") and not runs_on("sm_90a", "sm_90")
    assert runs_on("gfx90a:xnack-", "gfx90a") and not runs_on("gfx90a", "gfx942")
    assert arch_rank("sm_90", ("sm_90",), "sm_90") == 2
    assert arch_rank("sm_80", ("sm_80", "compute_80"), "sm_90") == 1
    assert arch_rank("sm_80", ("sm_80",), "sm_90") == 0


def _triton_build(folder: Path, block: int, arch: str) -> None:
    """One Triton-cache-shaped build: <hash>/add_kernel.{llir,cubin,json} from real compilers."""
    folder.mkdir(parents=True)
    src = folder / "add_kernel.cu"
    src.write_text(ADD_KERNEL)
    standins = write_standins(str(folder))
    subprocess.run(
        [
            "clang++-19",
            "-x",
            "cuda",
            "--cuda-device-only",
            f"--cuda-gpu-arch={arch}",
            "-S",
            "-emit-llvm",
            "-O2",
            f"-DBLOCK={block}",
            "--cuda-path=/usr/local/cuda",
            "-Wno-unknown-cuda-version",
            "-isystem",
            "/usr/local/cuda/include/cccl",
            "-idirafter",
            standins,
            str(src),
            "-o",
            str(folder / "add_kernel.llir"),
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["nvcc", "-cubin", f"-arch={arch}", f"-DBLOCK={block}", str(src), "-o", str(folder / "add_kernel.cubin")],
        check=True,
        capture_output=True,
    )
    meta = {"name": "add_kernel", "num_warps": 4, "target": {"backend": "cuda", "arch": int(arch[3:]), "warp_size": 32}}
    (folder / "add_kernel.json").write_text(json.dumps(meta))
    shutil.rmtree(folder / "standins")
    src.unlink()


@pytest.fixture(scope="module")
def triton_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("triton_cache")
    _triton_build(cache / "AAAAhash128", 128, "sm_90")
    _triton_build(cache / "BBBBhash256", 256, "sm_90")
    os.utime(cache / "AAAAhash128" / "add_kernel.llir", (1, 1))  # BBBB is the newest build
    return cache


@needs_cuda_tools
def test_triton_source_finds_the_llir_of_the_loaded_image(triton_cache):
    image = (triton_cache / "AAAAhash128" / "add_kernel.cubin").read_bytes()
    (module,) = TritonCacheIRSource(triton_cache).find("add_kernel", arch="sm_90", image=image)
    assert module.origin == str(triton_cache / "AAAAhash128" / "add_kernel.llir")
    assert (module.kind, module.arch, module.ir_source) == ("text", "sm_90", "triton")
    assert "add_kernel" in module_symbols(module.data).kernels
    assert module.data == (triton_cache / "AAAAhash128" / "add_kernel.llir").read_bytes()


@needs_cuda_tools
def test_triton_source_without_image_takes_the_newest_build_and_warns(triton_cache, caplog):
    with caplog.at_level(logging.WARNING):
        (module,) = TritonCacheIRSource(triton_cache).find("add_kernel", arch="sm_90")
    assert "BBBBhash256" in module.origin
    assert "2 cached builds" in caplog.text


@needs_cuda_tools
def test_triton_source_answers_none_for_an_image_or_kernel_it_does_not_have(triton_cache, tmp_path):
    source = TritonCacheIRSource(triton_cache)
    assert source.find("add_kernel", arch="sm_90", image=b"\x7fELF not this one") is None
    assert source.find("mul_kernel", arch="sm_90") is None
    assert TritonCacheIRSource(tmp_path / "no-cache-here").find("add_kernel") is None


@needs_cuda_tools
def test_triton_kernel_cached_for_another_architecture_is_a_clear_error(triton_cache):
    with pytest.raises(ArchitectureMismatch, match=r"add_kernel is cached in .* for sm_90 only.*device is sm_80"):
        TritonCacheIRSource(triton_cache).find("add_kernel", arch="sm_80")


@needs_cuda_tools
def test_triton_source_reads_triton_cache_dir_from_the_environment(triton_cache, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
    source = plugins.lookup("ir-source", "triton")()
    image = (triton_cache / "BBBBhash256" / "add_kernel.cubin").read_bytes()
    (module,) = source.find("add_kernel", arch="sm_90", image=image)
    assert "BBBBhash256" in module.origin


@needs_cuda_tools
def test_extracted_module_writes_as_bitcode_or_text(triton_cache, tmp_path):
    image = (triton_cache / "BBBBhash256" / "add_kernel.cubin").read_bytes()
    (module,) = TritonCacheIRSource(triton_cache).find("add_kernel", arch="sm_90", image=image)
    bc = module.write(tmp_path / "k.bc").read_bytes()
    assert bc[:4] == b"BC\xc0\xde"
    assert "add_kernel" in module_symbols(bc).kernels
    assert "define" in module.write(tmp_path / "k.ll").read_text()
