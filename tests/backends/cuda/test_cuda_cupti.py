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

from mneme.core.native import c_compiler  # noqa: E402 - after the importorskip
from skips import needs_all  # noqa: E402

needs_headers = needs_all(
    {"cupti.h": cupti.headers() is not None, "a C compiler": c_compiler() is not None},
    hint="CUPTI's header is in the CUDA toolkit",
)


def _timer_in_a_fresh_process(env: dict[str, str]) -> dict:
    code = (
        "import json; from mneme_cuda import cupti; timer, why = cupti.kernel_timer(); "
        "print(json.dumps({'timer': timer is not None, 'why': why}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_headers
def test_the_helper_builds_with_its_sources_hash_in_its_name(tmp_path):
    built = cupti.build(tmp_path)
    assert built.name == cupti.library_name() and built.stat().st_size > 0
    assert cupti.library_name().startswith("libmneme_cuptitime-")
    stamp = built.stat().st_mtime_ns
    assert cupti.build(tmp_path) == built and built.stat().st_mtime_ns == stamp  # built once, not again


@needs_headers
@pytest.mark.parametrize("content", [b"not an ELF file", None])  # a broken library, and a missing one
def test_a_libcupti_that_cannot_be_opened_is_named_in_the_reason(tmp_path, content):
    lib = tmp_path / "libcupti.so.13"
    if content is not None:
        lib.write_bytes(content)
    env = {**os.environ, "MNEME_CUPTI_LIB": str(lib), "MNEME_CACHE_DIR": str(tmp_path)}
    out = _timer_in_a_fresh_process(env)
    assert not out["timer"] and "cannot open" in out["why"] and str(lib) in out["why"]


def test_libcupti_is_looked_for_where_the_environment_says_first(tmp_path, monkeypatch):
    monkeypatch.setenv("MNEME_CUPTI_LIB", str(tmp_path / "missing.so"))
    assert cupti.cupti_library() == tmp_path / "missing.so"  # as given: opening it then fails, naming it
    monkeypatch.delenv("MNEME_CUPTI_LIB")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path))
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libcupti.so.13").write_bytes(b"")
    assert cupti.cupti_library() == tmp_path / "lib64" / "libcupti.so.13"  # the toolkit's, CUDA_PATH first


@needs_headers
def test_the_helper_and_libcupti_load_through_the_core_loader(tmp_path):
    code = (
        "import json, ctypes; from mneme_cuda import cupti; lib = cupti.LOADER.load(); "
        "print(json.dumps({'abi': lib.mneme_cupti_abi(), 'dropped': lib.mneme_cupti_dropped.restype is "
        "ctypes.c_uint64, 'timer': cupti.kernel_timer()[0] is not None}))"
    )
    env = {**os.environ, "MNEME_CACHE_DIR": str(tmp_path)}
    if cupti.cupti_library() is None:
        pytest.skip("libcupti is not in the CUDA toolkit here (set MNEME_CUPTI_LIB)")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"abi": cupti.ABI, "dropped": True, "timer": True}


HARNESS = r"""
#include "cupti_timer.h"
static void keep(const char *name, uint64_t start, uint64_t end) {
    mct_run *run = &mct.runs[mct.runs_next++ % MCT_RUNS];
    run->name_hash = mct_hash(name);
    run->start = start;
    run->end = end;
}
int main(void) {
    uint64_t ns = 0, start = 0, end = 0;
    keep("k", 100, 150);                    /* a run before the point */
    uint64_t seq = mct_seq();
    printf("%d\n", mct_take_since("k", seq, &ns, &start, &end)); /* nothing since: 0 */
    keep("flush", 200, 260);
    keep("k", 10, 30);                      /* timestamps behind the host's window: found all the same */
    int found = mct_take_since("k", seq, &ns, &start, &end);
    printf("%d %llu %llu\n", found, (unsigned long long)ns, (unsigned long long)start);
    keep("k", 5, 8);                        /* a primed run's record delivered late: the latest end wins */
    found = mct_take_since("k", seq, &ns, &start, &end);
    printf("%d %llu\n", found, (unsigned long long)ns);
    keep("k", 40, 90);                      /* a later record ending later: it is the latest */
    found = mct_take_since("k", seq, &ns, &start, &end);
    printf("%d %llu\n", found, (unsigned long long)ns);
    for (int i = 0; i < MCT_RUNS + 5; i++) keep("other", 1, 2); /* the point fell out of the ring */
    printf("%d\n", mct_take_since("k", seq, &ns, &start, &end));
    return 0;
}
"""


@needs_headers
def test_a_launch_record_is_found_by_the_order_records_came_not_by_their_timestamps(tmp_path):
    # The replay's windows (cupti.KernelTimer.window): flush, note how many records came, launch, flush, and take
    # the kernel's records kept since; several: the one that ended last. Built against CUPTI's real header.
    native = cupti.NATIVE
    (tmp_path / "harness.c").write_text(HARNESS)
    exe = tmp_path / "harness"
    subprocess.run(
        [
            c_compiler(),
            "-O1",
            f"-I{native}",
            f"-I{cupti.headers()}",
            str(tmp_path / "harness.c"),
            "-o",
            str(exe),
            "-ldl",
            "-lpthread",
        ],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0] == "0"
    assert out[1] == "1 20 10"
    assert out[2] == "2 20"
    assert out[3] == "3 50"
    assert out[4] == "0"
