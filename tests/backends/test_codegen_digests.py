"""Code generation of the corpus gives the outputs recorded in `tests/data/codegen_digests.json`.

The file was written by `tests/codegen_digests.py` before code generation moved from the core into
the backends (issue 26); an entry is compared where its input IR and toolchain are the ones that
wrote it (another clang, LLVM, assembler or CPU makes other, equally valid code). Rewritten once
since, on purpose: the CUDA PTX header now names the ISA its functions were compiled for
(`.version 8.5` where LLVM wrote 7.8; tests/backends/cuda/test_cuda_retarget.py), which changed
the cuda "ptx" digests and nothing else (inputs, cubin resources, hsaco, host objects). It holds
one set per machine that wrote one (`--add`): the first from a znver4 CPU, a second from a znver5
CPU whose ROCm headers give other HIP input IR (CI runs on either). The host's block-loop form 3
(guards split) changed ten host objects: the znver5 set was rewritten, the znver4 set kept its CUDA
and HIP entries and lost its host ones (to be written again on such a machine with `--add`).
"""

from __future__ import annotations

import pytest
from codegen_digests import entries, matching, recorded_sets, toolchains
from irbuild import cuda_available, hip_available

SETS = recorded_sets()
HERE = toolchains()
USABLE = {"cuda": cuda_available(), "hip": hip_available(), "host": cuda_available()}


@pytest.mark.parametrize(
    "backend,source,kernel,config,make", list(entries()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_code_generation_of_the_corpus_is_unchanged(backend, source, kernel, config, make):
    usable, reason = USABLE[backend]
    if not usable:
        pytest.skip(reason)
    key = f"{backend}/{source}/{kernel}/{config}"
    if not any(s["toolchains"][backend] == HERE[backend] for s in SETS):
        recorded = [s["toolchains"][backend] for s in SETS]
        pytest.skip(f"the fixture's sets were written with {recorded}, this machine has {HERE[backend]}")
    got = make()
    same_input = matching(SETS, backend, key, HERE[backend], got)
    if not same_input:
        pytest.skip("clang made other input IR here than when the fixture's sets were written")
    assert got in same_input
