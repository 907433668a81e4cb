"""Code generation of the corpus gives the outputs recorded in `tests/data/codegen_digests.json`.

The file was written by `tests/codegen_digests.py` before code generation moved from the core into
the backends (issue 26); an entry is compared where its input IR and toolchain are the ones that
wrote it (another clang, LLVM, assembler or CPU makes other, equally valid code). Rewritten once
since, on purpose: the CUDA PTX header now names the ISA its functions were compiled for
(`.version 8.5` where LLVM wrote 7.8; tests/backends/cuda/test_cuda_retarget.py), which changed
the cuda "ptx" digests and nothing else (inputs, cubin resources, hsaco, host objects).
"""

from __future__ import annotations

import json

import pytest
from codegen_digests import FIXTURE, entries, toolchains
from irbuild import cuda_available, hip_available

RECORDED = json.loads(FIXTURE.read_text())
HERE = toolchains()
USABLE = {"cuda": cuda_available(), "hip": hip_available(), "host": cuda_available()}


@pytest.mark.parametrize(
    "backend,source,kernel,config,make", list(entries()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_code_generation_of_the_corpus_is_unchanged(backend, source, kernel, config, make):
    usable, reason = USABLE[backend]
    if not usable:
        pytest.skip(reason)
    recorded_tools = RECORDED["toolchains"][backend]
    if recorded_tools != HERE[backend]:
        pytest.skip(f"the fixture was written with {recorded_tools}, this machine has {HERE[backend]}")
    expected = RECORDED["digests"][f"{backend}/{source}/{kernel}/{config}"]
    got = make()
    if got["input"] != expected["input"]:
        pytest.skip("clang made other input IR here than when the fixture was written")
    assert got == expected
