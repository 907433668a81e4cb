"""Third-party kernels in lockstep groups on the host backend (lanes.py, issue 40 item 4): llama.cpp's
grid-stride broadcast kernels (k_bin_bcast, 3D grid and block) from the llama-cpp-python sdist, built
for CUDA (tests/hip_corpus.py), give the bytes of thread after thread (``MNEME_HOST_LANES=0``, and the
grid-stride and block-step forms off) and of NumPy. Fetched and built on first use, cached; skips where PyPI or the toolchains cannot be reached."""

from __future__ import annotations

import hip_corpus as hc
import kernel_corpus as kc
import numpy as np
import pytest
from skips import needs

from mneme import capture
from mneme.plugins.backends.host import block_steps, grid_stride, lanes

pytestmark = [needs("clang++-19"), pytest.mark.slow]

NE0, NE1, NE2, NE10 = 1000, 6, 2, 250  # src1 broadcast 4 times along the row


@pytest.fixture(scope="module")
def cuda_ir():
    try:
        return hc.build_cuda_ir(kc.fetch(hc.LLAMA_HIP))
    except kc.CorpusUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("op,numpy_op", [("op_add", np.add), ("op_mul", np.multiply), ("op_div", np.divide)])
def test_llama_cpp_broadcast_kernels_in_lockstep_match_thread_after_thread_and_numpy(
    cuda_ir, tmp_path, monkeypatch, op, numpy_op
):
    kernel = f"_ZL11k_bin_bcastIXadL_ZL6{op}ffEEfffEvPKT0_PKT1_PT2_iiiiiiiiiiiiii"
    rng = np.random.default_rng(5)
    src0 = rng.uniform(-2, 2, (NE2, NE1, NE0)).astype(np.float32)
    src1 = rng.uniform(0.5, 2, (NE2, NE1, NE10)).astype(np.float32)
    # ne0..ne3, ne10..ne13, s1..s3, s11..s13 (strides in elements)
    ints = [NE0, NE1, NE2, 1, NE10, NE1, NE2, 1, NE0, NE0 * NE1, NE0 * NE1 * NE2, NE10, NE10 * NE1, NE10 * NE1 * NE2]
    results = {}
    for width in ("16", "0"):
        monkeypatch.setenv(lanes.ENV, width)
        for other in (grid_stride.ENV, block_steps.ENV):  # "0": every form of issue 40 off
            monkeypatch.setenv(other, "1" if width != "0" else "0")
        outputs: dict = {}
        capture.capture(
            str(cuda_ir),
            kernel,
            (2, 3, 2),
            (64, 2, 1),
            [src0, src1, np.zeros_like(src0), *ints],
            tmp_path / width,
            backend="host",
            outputs=outputs,
        )
        results[width] = outputs[2]
    assert results["16"].tobytes() == results["0"].tobytes()
    np.testing.assert_array_equal(results["16"].reshape(src0.shape), numpy_op(src0, np.tile(src1, (1, 1, NE0 // NE10))))
