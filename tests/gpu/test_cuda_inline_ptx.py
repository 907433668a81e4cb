"""The inline PTX the host backend reads (issue 28, point 1) gives the GPU's bits: the same kernels run on the
host and on CUDA, on the same inputs, and their outputs are compared byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_corpus import EXTRA, cuda_ir

from mneme import capture

pytestmark = pytest.mark.gpu
[SOURCE] = [s for s in EXTRA if s.stem == "ptx_blocks"]


def _both(tmp_path, kernel: str, grid: int, block: int, args: list) -> tuple[dict, dict]:
    ir = str(cuda_ir(SOURCE))
    host: dict = {}
    cuda: dict = {}
    capture.capture(ir, kernel, grid, block, args, tmp_path / "host", backend="host", outputs=host)
    capture.capture(ir, kernel, grid, block, args, tmp_path / "cuda", backend="cuda", outputs=cuda)
    return host, cuda


def test_fp8_conversions_match_the_gpu_bit_for_bit(tmp_path):
    rng = np.random.default_rng(4)
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    x = np.concatenate(
        [
            every_half,
            rng.normal(0, 300, 4096).astype(np.float32),
            np.float32([np.inf, -np.inf, np.nan, -np.nan, 3e38, 1e-30]),
        ]
    )
    x = np.append(x, np.float32(0)) if x.size % 2 else x
    n = x.size // 2
    halves = np.arange(n, dtype=np.uint32) * 2654435761 & 0xFFFFFFFF  # spread over every f16 pair
    host, cuda = _both(
        tmp_path,
        "to_fp8",
        (n + 127) // 128,
        128,
        [x, halves.astype(np.uint32), *(np.zeros(n, np.uint16) for _ in range(4)), n],
    )
    for index in (2, 3, 4, 5):
        np.testing.assert_array_equal(host[index], cuda[index])
    pairs = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    host, cuda = _both(
        tmp_path / "wide",
        "fp8_to_half",
        512,
        128,
        [pairs, np.zeros(1 << 16, np.uint32), np.zeros(1 << 16, np.uint32), 1 << 16],
    )
    for index in (1, 2):
        np.testing.assert_array_equal(host[index], cuda[index])


@pytest.mark.parametrize("width", [32, 8])
def test_predicated_shuffle_blocks_match_the_gpu(tmp_path, width):
    rng = np.random.default_rng(width)
    n = 256
    args = [
        rng.uniform(-10, 10, n).astype(np.float32),
        rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
        rng.integers(0, 2**63, n, dtype=np.uint64),
        rng.integers(-99, 99, n, dtype=np.int32),
        rng.integers(-99, 99, n, dtype=np.int32),
        np.zeros(n, np.float32),
        np.zeros(n, np.uint32),
        np.zeros(n, np.uint64),
        np.zeros(n, np.int32),
        width,
    ]
    host, cuda = _both(tmp_path, "segment_sums", 4, 64, args)
    for index in (5, 6, 7, 8):
        np.testing.assert_array_equal(host[index], cuda[index])
