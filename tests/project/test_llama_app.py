"""The application corpus's llama.cpp program (benchmarks/gpu/apps, issue 38 point 7): built here with
`mneme-cc nvcc` from the llama-cpp-python sdist, it carries the device IR of every kernel its machine code
holds, so the GPU machine (no clang there) records it with IR and replays it in cubin and IR modes.

The sdist is downloaded and built on first use and cached under ~/.cache/mneme/corpus; the tests skip,
saying why, where PyPI or nvcc cannot be reached.
"""

from __future__ import annotations

import sys
from pathlib import Path

import kernel_corpus as kc
import pytest
from irbuild import cuda_available
from skips import needs

pytestmark = [
    needs("nvcc", "clang++-19", "llvm-objcopy-19"),
    pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1]),
    pytest.mark.slow,
]

APPS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "apps"


@pytest.fixture(scope="module")
def llama_build():
    sys.path.insert(0, str(APPS))
    try:
        import llama_build

        yield llama_build
    finally:
        sys.path.remove(str(APPS))


@pytest.fixture(scope="module")
def app(llama_build, tmp_path_factory) -> Path:
    try:
        return llama_build.build(tmp_path_factory.mktemp("llama") / "ggml_ops_app")
    except kc.CorpusUnavailable as exc:
        pytest.skip(str(exc))


def test_the_llama_app_embeds_sm90_ir_of_each_ggml_cuda_unit_it_links(app, llama_build):
    from mneme.instrument import section

    entries = list(section.read_entries(app))
    assert sorted(Path(e.source).stem for e in entries) == sorted(llama_build.UNITS)
    assert {e.arch for e in entries} == {kc.ARCH}


def test_every_kernel_in_the_llama_apps_machine_code_has_its_ir(app):
    from mneme.instrument import section
    from mneme.instrument.fatbin import iter_cubins, kernel_names

    machine_code = {k for cubin in iter_cubins(app) for k in kernel_names(cubin)}
    with_ir = {k for entry in section.read_entries(app) for k in entry.kernels}
    # the operators the program runs: normalization, softmax (one block a row, and across the GPU), scale,
    # the unary functions, row gathers of float and quantized types, f32 -> f16 copies, rotary embedding
    for kernel in (
        "norm_f32",
        "rms_norm_f32",
        "soft_max_f32I",
        "soft_max_f32_parallelize_cols",
        "scale_f32",
        "unary_op_kernel",
        "k_get_rows_float",
        "k_get_rowsI",
        "cpy_scalar",
        "rope_norm",
    ):
        assert any(kernel in name for name in machine_code), kernel
    assert machine_code and machine_code <= with_ir, sorted(machine_code - with_ir)[:5]


def test_a_missing_llama_app_is_a_skip_naming_what_builds_it(tmp_path, monkeypatch):
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
    monkeypatch.syspath_prepend(str(bench))
    import bench_app_corpus

    built_by = "benchmarks/gpu/apps/llama_build.py"
    monkeypatch.setitem(bench_app_corpus.EXECUTABLES, "llama.cpp", (tmp_path / "absent", built_by))
    command, why = bench_app_corpus.program_command("llama.cpp", tmp_path)
    assert command == [] and "is not built" in why and "llama_build.py" in why
