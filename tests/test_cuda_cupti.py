"""The kernel timer's CPU side (mneme_cuda.cupti): building its helper, finding libcupti, saying why not.

The timer itself needs a GPU (tests/gpu/test_cuda_timing.py); each case here runs in a fresh
process, since libcupti's activity buffers, and the helper's state, are one per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

cupti = pytest.importorskip("mneme_cuda.cupti")

needs_headers = pytest.mark.skipif(cupti.headers() is None, reason="CUPTI's cupti.h (CUDA toolkit) not installed")


def _timer_in_a_fresh_process(env: dict[str, str]) -> dict:
    code = ("import json; from mneme_cuda import cupti; timer, why = cupti.kernel_timer(); "
            "print(json.dumps({'timer': timer is not None, 'why': why}))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_headers
def test_the_helper_builds_with_its_sources_hash_in_its_name(tmp_path):
    built = cupti.build(tmp_path)
    assert built.name == cupti.library_name() and built.stat().st_size > 0
    assert cupti.library_name().startswith("libmneme_cuptitime-")
    assert cupti.build(tmp_path) == built  # built once


@needs_headers
def test_a_libcupti_that_cannot_be_opened_is_named_in_the_reason(tmp_path):
    env = {**os.environ, "MNEME_CUPTI_LIB": str(tmp_path / "libcupti.so.13"), "MNEME_CACHE_DIR": str(tmp_path)}
    (tmp_path / "libcupti.so.13").write_bytes(b"not an ELF file")
    out = _timer_in_a_fresh_process(env)
    assert not out["timer"] and "cannot open" in out["why"] and str(tmp_path / "libcupti.so.13") in out["why"]


def test_libcupti_is_looked_for_where_the_environment_says_first(tmp_path, monkeypatch):
    lib = tmp_path / "libcupti.so.13"
    lib.write_bytes(b"")
    monkeypatch.setenv("MNEME_CUPTI_LIB", str(lib))
    assert cupti.cupti_library() == lib
    monkeypatch.setenv("MNEME_CUPTI_LIB", str(tmp_path / "missing.so"))
    assert cupti.cupti_library() is None  # an explicit path that does not exist: none, not another one
