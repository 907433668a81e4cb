"""__reduce_*_sync, __match_any_sync and %laneid read by inline asm, on the host backend, against NumPy (issue 28, point 1)."""

from __future__ import annotations


import numpy as np
import pytest
from irbuild import build_cuda_ir, cuda_available

from mneme import capture
from paths import DATA

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
SOURCE = DATA / "realkernels" / "warp_intrinsics.cu"


def test_warp_reductions_and_match_any_match_numpy(tmp_path):
    blocks, block = 2, 64
    n = blocks * block
    values = np.random.default_rng(3).integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros(n * 11, np.int32)
    outputs: dict = {}
    capture.capture(
        str(build_cuda_ir(SOURCE)),
        "warp_reduce_ops",
        blocks,
        block,
        [values, out],
        tmp_path,
        backend="host",
        outputs=outputs,
    )
    got = outputs[1].reshape(n, 11)
    for w in range(n // 32):
        lanes = values[w * 32 : (w + 1) * 32]
        rows = got[w * 32 : (w + 1) * 32]
        assert (
            (rows[:, 0] == lanes.sum()).all()
            and (rows[:, 1] == lanes.min()).all()
            and (rows[:, 2] == lanes.max()).all()
        )
        assert (rows[:, 3] == np.bitwise_or.reduce(lanes)).all()
        assert (rows[:, 7] == lanes.view(np.uint32).max().astype(np.int32)).all()
        keys = lanes & 3
        for lane in range(32):
            same = sum(1 << j for j in range(32) if keys[j] == keys[lane])
            assert rows[lane, 4] == np.int64(same).astype(np.uint32).astype(np.int32)
        assert (rows[:, 5] == np.arange(32)).all()
        assert (rows[:, 6] == np.bitwise_and.reduce(lanes | 0x100)).all()
        assert (rows[:, 8] == -1).all()  # 0xffffffff
        assert (rows[:, 9] == (2 if len(set(lanes)) == 1 else 0)).all()
        odd = lanes & 1
        for lane in range(32):
            same = sum(1 << j for j in range(32) if odd[j] == odd[lane])
            assert rows[lane, 10] == np.int64(same).astype(np.uint32).astype(np.int32)
