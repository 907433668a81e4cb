"""The CUDA backend's compare and LZ4 kernels without a GPU: checked-in PTX, packed arguments, host-side decisions."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

from mneme.core.errors import UnsupportedError

cmp = pytest.importorskip("mneme_cuda.compare")

KERNELS = Path(cmp.__file__).parent / "kernels"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if Path("/usr/local/cuda/bin/ptxas").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc: the CUDA toolkit")
@pytest.mark.parametrize("name", ["compare", "lz4"])
def test_checked_in_ptx_is_what_nvcc_makes_of_its_source(tmp_path, name):
    out = tmp_path / f"{name}.ptx"
    subprocess.run(
        [NVCC, "-ptx", "-arch=compute_75", "-O3", "-o", str(out), str(KERNELS / f"{name}.cu")],
        check=True,
        capture_output=True,
    )
    strip = lambda text: [line for line in text.splitlines() if not line.startswith("//")]
    assert strip(out.read_text()) == strip((KERNELS / f"{name}.ptx").read_text())


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas: the CUDA toolkit")
@pytest.mark.parametrize("name", ["compare", "lz4"])
def test_checked_in_ptx_assembles_for_hopper_without_spills(tmp_path, name):
    proc = subprocess.run(
        [PTXAS, "-arch=sm_90", "-v", str(KERNELS / f"{name}.ptx"), "-o", str(tmp_path / "c.cubin")],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "0 bytes spill stores" in proc.stderr and " spill stores" in proc.stderr
    assert not re.search(r"[1-9]\d* bytes spill stores", proc.stderr)
    assert (tmp_path / "c.cubin").stat().st_size > 0


def _ptx_params(entry: str, text: str | None = None) -> list[str]:
    text = text or cmp.ptx().decode()
    block = re.search(rf"\.entry {entry}\((.*?)\)", text, re.DOTALL).group(1)
    return re.findall(r"\.param \.(\w+)", block)


@pytest.mark.parametrize("key", sorted(cmp.KERNELS))
def test_packed_compare_arguments_match_the_ptx_parameter_layout(key):
    sizes = {"u64": 8, "f64": 8, "u32": 4, "b32": 4, "s32": 4}
    offset = 0
    for kind in _ptx_params(cmp.KERNELS[key]):
        size = sizes[kind]
        offset = -(-offset // size) * size + size  # natural alignment, as the driver lays parameters out
    assert len(cmp.pack_args(key, 1, 2, 3, 0.5, True, 4)) == offset


def test_packed_restore_kernel_arguments_match_their_ptx_parameters():
    from mneme_cuda import devdecode

    text = devdecode.ptx().decode()
    assert _ptx_params(devdecode.DECODE_KERNEL, text) == ["u64", "u32", "u64"]
    assert len(devdecode.pack_decode_args(1, 2, 3)) == 24  # 8, 4 (+4 to align the pointer), 8
    assert _ptx_params(devdecode.UNSHUFFLE_KERNEL, text) == ["u64"]
    assert len(devdecode.pack_unshuffle_args(1)) == 8


def test_packed_copy_arguments_match_the_copy_kernels_ptx_parameters():
    # mneme_copy(dst, src, n): three 64-bit parameters, in that order
    assert _ptx_params(cmp.COPY_KERNEL) == ["u64", "u64", "u64"]
    assert struct.unpack("<QQQ", cmp.pack_copy_args(0x1000, 0x2000, 77)) == (0x1000, 0x2000, 77)


def _words(count=0, first=None, max_abs=0.0, max_rel=0.0, nan=0, ssd=0.0, ssr=0.0, sad=0.0, sar=0.0, max_ref=0.0):
    row = cmp.initial_out(1)[0]
    row[0] = count
    if first is not None:
        row[1] = first
    f = row.view(np.float64)
    f[2], f[3], f[5], f[6], f[7], f[8], f[9] = max_abs, max_rel, ssd, ssr, sad, sar, max_ref
    row[4] = nan
    return row


def _request(size=4096):
    return cmp.CompareRequest(expected=0x1000, actual=0x2000, size=size)


def test_exact_compare_reports_bytes_and_first_offset():
    diff = cmp.decide(_request(), "bytes", 0.0, False, "none", _words(count=3, first=17))
    assert (diff.ok, diff.differing_bytes, diff.first_offset, diff.dtype) == (False, 3, 17, "u8")
    assert cmp.decide(_request(), "bytes", 0.0, False, "none", _words()).ok


def test_float_compare_counts_elements_in_bytes():
    diff = cmp.decide(_request(), "f32", 1e-6, True, "none", _words(count=2, first=10, max_abs=0.5, max_rel=0.25))
    assert (diff.ok, diff.differing_bytes, diff.first_offset) == (False, 8, 40)
    assert (diff.max_abs, diff.max_rel) == (0.5, 0.25)


def test_relative_l2_policy_accepts_small_noise_and_rejects_nan_mismatch():
    noisy = _words(count=5, first=0, max_abs=1e-3, ssd=1e-8, ssr=1.0)  # elements over 1e-6, but ||d||/||e|| = 1e-4
    assert cmp.decide(_request(), "f32", 1e-3, True, "L2", noisy).ok
    assert not cmp.decide(_request(), "f32", 1e-5, True, "L2", noisy).ok
    assert not cmp.decide(_request(), "f32", 1e-3, True, "L2", _words(count=1, first=0, nan=1, ssr=1.0)).ok


def test_relative_linf_and_absolute_l1_policies():
    words = _words(count=1, first=3, max_abs=0.2, sad=0.3, sar=10.0, max_ref=4.0)
    assert cmp.decide(_request(), "f64", 0.06, True, "Linf", words).ok  # 0.2 / 4.0
    assert not cmp.decide(_request(), "f64", 0.04, True, "Linf", words).ok
    assert cmp.decide(_request(), "f64", 0.3, False, "L1", words).ok
    assert not cmp.decide(_request(), "f64", 0.29, False, "L1", words).ok


def test_a_differing_tail_fails_a_float_region():
    diff = cmp.decide(_request(4099), "f32", 1.0, False, "none", _words(), tail_differs=1, tail_first=4097)
    assert (diff.ok, diff.differing_bytes, diff.first_offset) == (False, 1, 4097)


def test_policy_plans():
    assert cmp.plan(None) == ("bytes", 0.0, False, "none")
    exact_int = types.SimpleNamespace(dtype="i32", threshold=0.0, relative=False, norm="none")
    assert cmp.plan(exact_int)[0] == "bytes"
    f16 = types.SimpleNamespace(dtype="f16", threshold=1e-2, relative=True, norm="L2")
    assert cmp.plan(f16) == ("f16", 1e-2, True, "L2")
    with pytest.raises(UnsupportedError, match="i32"):
        cmp.plan(types.SimpleNamespace(dtype="i32", threshold=1.0, relative=False, norm="none"))


def test_compare_grid_fills_the_device_but_never_exceeds_the_work():
    assert cmp.grid_for(10, sm_count=132) == 1
    assert cmp.grid_for(1 << 30, sm_count=132) == 132 * 4
