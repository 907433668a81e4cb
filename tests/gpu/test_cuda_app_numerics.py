"""An IR variant reproduces the application's binary bit for bit where the numerics decide (issue 38, 4).

numerics_app computes sqrtf(a / b): the bits are those of the division and square-root instructions
the build chose. Built with `mneme-cc nvcc` (scripts/gpu-suite --prepare) with nvcc's defaults (div.rn,
sqrt.rn: clang's own IR would take sqrt.approx) and with -prec-div=false -prec-sqrt=false (div.full,
sqrt.approx: flags mneme-cc cannot pass to clang), finalize gives the IR the numerics read from the
recorded PTX, and the IR replay must verify exactly, as the recorded cubin does.
"""

from __future__ import annotations

import pytest
from gpu_corpus import ROOT

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def recorder_library(tmp_path_factory):
    from mneme_cuda import recorder

    from mneme.core.errors import MnemeError

    prebuilt = ROOT / ".gpu" / "lib" / recorder.library_name()
    if prebuilt.exists():
        return prebuilt
    try:
        return recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize(("app", "behaviour"), [
    ("numerics_app_ir", "ftz=false prec-div=true prec-sqrt=true fmad=true"),
    ("numerics_app_fast_ir", "ftz=false prec-div=full prec-sqrt=false fmad=true"),
])  # fmt: skip
def test_the_ir_replay_of_a_division_and_square_root_matches_the_binary_bit_for_bit(recorder_library, tmp_path,
                                                                                  caplog, app, behaviour):  # fmt: skip
    import logging

    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    program = ROOT / ".gpu" / "bin" / app
    if not program.exists():
        pytest.skip(f"{app} is built by scripts/gpu-suite --prepare (mneme-cc needs clang-19)")
    with caplog.at_level(logging.INFO, logger="mneme.core.recorder.finalize"):
        code = recorder.main_record(tmp_path / "db", [str(program)], [], kernel="ratio_root", library=recorder_library)
    assert code == 0
    assert any(f"nvcc {behaviour}, read from its PTX" in r.getMessage() for r in caplog.records)
    (db,) = (tmp_path / "db").glob("*.json")
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files and rec.llvm_files[0].name.endswith(".numerics.bc")
    for mode in ("cubin", "ir"):
        with BaseExecutor(db, backend="cuda", iterations=1, mode=mode) as ex:
            result = ex.execute(ex.default_config())
        assert result.verified, f"{mode}: {result.error}"  # exact: no policy on the output region
