"""An IR variant reproduces the application's binary bit for bit where the numerics decide (issue 38, 4).

numerics_app computes sqrtf(a / b): the bits are those of the division and square-root instructions
the build chose. Built with `mneme-cc nvcc` (scripts/gpu-suite --prepare) with nvcc's defaults (div.rn,
sqrt.rn: clang's own IR would take sqrt.approx), with -prec-div=false -prec-sqrt=false (div.full,
sqrt.approx: flags mneme-cc cannot pass to clang) and with -use_fast_math (whose fast_math_mix kernel
takes expf, tanhf, sinf... as nvcc's approximations), finalize gives the IR the numerics read from the
recorded PTX, and the IR replay must verify exactly, as the recorded cubin does.
"""

from __future__ import annotations

import pytest
from gpu_corpus import ROOT

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("app", "kernel", "behaviour"),
    [
        ("numerics_app_ir", "ratio_root", "ftz=false prec-div=true prec-sqrt=true fmad=true"),
        ("numerics_app_fast_ir", "ratio_root", "ftz=false prec-div=full prec-sqrt=false fmad=true"),
        ("numerics_app_usefast_ir", "ratio_root", "ftz=true prec-div=approx prec-sqrt=false fmad=true"),
        # -use_fast_math's expf, sinf, cosf, tanhf, logf, powf as nvcc's approximations (ggml's softmax, GELU, RoPE)
        ("numerics_app_usefast_ir", "fast_math_mix", "ftz=true prec-div=approx prec-sqrt=false fmad=true"),
    ],
)
def test_the_ir_replay_of_the_applications_float_arithmetic_matches_the_binary_bit_for_bit(
    recorder_library, tmp_path, caplog, app, kernel, behaviour
):
    import logging

    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution

    program = ROOT / ".gpu" / "bin" / app
    if not program.exists():
        pytest.skip(f"{app} is built by scripts/gpu-suite --prepare (mneme-cc needs clang-19)")
    with caplog.at_level(logging.INFO, logger="mneme.core.recorder.finalize"):
        code = recorder.main_record(tmp_path / "db", [str(program)], [], kernel=kernel, library=recorder_library)
    assert code == 0
    assert any(f"nvcc {behaviour}, read from its PTX" in r.getMessage() for r in caplog.records)
    (db,) = (tmp_path / "db").glob("*.json")
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files and rec.llvm_files[0].name.endswith(".numerics.bc")
    for mode in ("cubin", "ir"):
        with BaseExecutor(db, backend="cuda", iterations=1, mode=mode) as ex:
            result = ex.execute(ex.default_config())
        assert result.verified, f"{mode}: {result.error}"  # exact: no policy on the output region


def test_a_float_atomic_sum_is_found_nondeterministic_and_verifies_under_its_derived_bound(recorder_library, tmp_path):
    """Issue 38, point 3: the total's bits change from run to run; the deterministic y does not."""
    import shutil
    import subprocess
    from pathlib import Path

    from mneme_cuda import recorder

    from mneme.core.executor import BaseExecutor, pointer_args
    from mneme.core.nondeterminism import analyze
    from mneme.core.records import RecordedExecution
    from mneme.plugins.replay_commands import annotate

    app = ROOT / ".gpu" / "bin" / "atomic_sum_app"
    if not app.exists():
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        if not Path(nvcc).exists():
            pytest.skip("no prebuilt atomic_sum_app and no nvcc")
        app = tmp_path / "atomic_sum_app"
        source = Path(__file__).parent / "programs" / "atomic_sum_app.cu"
        subprocess.run([nvcc, "-arch=sm_90", "-o", str(app), str(source)], check=True, capture_output=True)
    assert recorder.main_record(tmp_path / "db", [str(app)], [], kernel="scale_and_sum", library=recorder_library) == 0
    (db,) = (tmp_path / "db").glob("*.json")
    (dynamic_hash,) = RecordedExecution.from_json(db).kernel_instances
    with BaseExecutor(db, backend="cuda", iterations=1, mode="cubin", cache="warm") as ex:
        findings = analyze(ex, runs=5)
        pointers = pointer_args(ex.rec, ex.args, ex.epilogue.regions)

    def holding(arg):  # the written region that holds argument `arg`'s buffer (the recorder may merge neighbours)
        found = next((f for f in findings if f.addr <= pointers[arg] < f.addr + f.size), None)
        assert found is not None, (arg, hex(pointers[arg]), [(hex(f.addr), f.size) for f in findings])
        return found

    total, y = holding(2), holding(1)
    assert total.order_dependent and not (total.matches_recording and not total.runs_differ)
    assert total.policy is not None and total.policy.relative and 0 < total.policy.threshold < 1e-3
    if y.addr != total.addr:  # y = 2x on its own region is deterministic
        assert not y.order_dependent and y.matches_recording and y.policy is None
    annotate(db, total.policy, record_id=dynamic_hash, address=total.addr)
    for _ in range(3):  # under the bound, whatever order the blocks take
        with BaseExecutor(db, backend="cuda", iterations=1, mode="cubin") as ex:
            result = ex.execute(ex.default_config())
        assert result.verified, result.error
