"""The engine's record of a launch (mneme/core/recorder/native/record.h), run on the host.

Both native recorders (CUDA, HIP) record a launch through `admit` and `record_admitted`; here a
small program does the same over a host device (`device_ops` on host memory: a fixed-address
mapping, memcpy copies, streams and events that complete at once), launching a "kernel" that
scales a placed buffer. What it writes is read back by the Python side: the launch folders, the
prologue and epilogue snapshots, the counts of what was not recorded and why.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from mneme.core import native
from mneme.core.recorder.rawdir import RawFormat, launches, occurrences, unrecorded
from mneme.core.snapshot import Snapshot

CXX = native.cxx_compiler()
XXH = native.xxhash_include()
pytestmark = pytest.mark.skipif(CXX is None or XXH is None, reason="needs a C++ compiler and xxhash.h")

VA_BASE = 0x5A0000000000
N = 1024

PROGRAM = r"""
#include <sys/mman.h>
#include "engine.h"
using namespace mneme_engine;

namespace {
// A host "device": memory at fixed addresses in this process, copies are memcpy, work completes at once.
int current_device(int *d) { *d = 0; return 0; }
int granularity(int, size_t *b) { *b = 1 << 16; return 0; }
int address_reserve(uint64_t *got, size_t size, uint64_t at) {
    void *p = mmap((void *)at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) return 2;
    *got = (uint64_t)p;
    return 0;
}
void address_free(uint64_t a, size_t s) { munmap((void *)a, s); }
int mem_create(uint64_t *h, size_t, int) { *h = 1; return 0; }
int mem_map(uint64_t a, size_t s, uint64_t) { return mprotect((void *)a, s, PROT_READ | PROT_WRITE) ? 2 : 0; }
int mem_set_access(uint64_t, size_t, int) { return 0; }
void mem_unmap(uint64_t a, size_t s) { mprotect((void *)a, s, PROT_NONE); }
void mem_release(uint64_t) {}
int mem_info(size_t *f, size_t *t) { *f = *t = 64ull << 30; return 0; }
int synchronize() { return 0; }
void *current_context() { return nullptr; }
void set_context(void *) {}
int handle(void **h) { *h = (void *)1; return 0; }
int done(void *) { return 0; }
int wait_event(void *, void *) { return 0; }
void destroy(void *) {}
int host_alloc(void **h, size_t s) { *h = malloc(s); return *h ? 0 : 2; }
int to_host(void *d, uint64_t s, size_t n) { memcpy(d, (void *)s, n); return 0; }
int to_host_async(void *d, uint64_t s, size_t n, void *) { memcpy(d, (void *)s, n); return 0; }
int on_device(uint64_t d, uint64_t s, size_t n, void *) { memcpy((void *)d, (void *)s, n); return 0; }
int pool_create(void **p, int) { *p = (void *)1; return 0; }
int pool_alloc(uint64_t *p, size_t s, void *, void *) { *p = (uint64_t)malloc(s); return *p ? 0 : 2; }
int free_async(uint64_t p, void *) { free((void *)p); return 0; }
void pool_trim(void *) {}

float scale_global = 0.5f;  // a "device global" of the module

// One launch of `kernel`, which multiplies the buffer by `factor` (or fails with `status`), recorded
// as a backend's recorder records it.
int launch(const char *kernel, float *x, float factor, int status) {
    std::lock_guard<std::mutex> lock(mu());
    unsigned grid[3] = {1, 1, 1}, block[3] = {N, 1, 1};
    auto run = [=]() -> int {
        if (status) return status;
        for (int i = 0; i < N; ++i) x[i] *= factor;
        return 0;
    };
    LaunchRecord r;
    r.args.assign((const char *)&x, sizeof x);
    r.args.append((const char *)&factor, sizeof factor);
    r.layout = {{0, 8}, {8, 4}};
    KernelCounts &kc = counts()[kernel];
    uint64_t key = instance_key(grid, block, 0, r.args);
    if (admit(kc, key, r.index) != Admission::Record) return run();
    r.format = "test-raw";
    r.kernel = kernel;
    r.key = key;
    for (int i = 0; i < 3; ++i) r.grid[i] = grid[i], r.block[i] = block[i];
    r.regions = live_regions();
    LaunchHooks<int> hooks;
    hooks.run = run;
    hooks.launch = run;
    hooks.error_name = [](int s) { return s == 7 ? "TEST_ERROR_LAUNCH_FAILED" : "TEST_ERROR_OTHER"; };
    hooks.describe = [](LaunchRecord &rec) { rec.globals.push_back(GlobalVar{"scale_global", (uint64_t)&scale_global, 4}); };
    return record_admitted(kc, r, hooks);
}
}  // namespace

const mneme_device_ops &mneme_engine::device_ops() {
    static const mneme_device_ops ops = {
        "host", "mneme-engine-test", 2, 600, current_device, granularity, address_reserve, address_free,
        mem_create, mem_map, mem_set_access, mem_unmap, mem_release, mem_info, synchronize, current_context,
        set_context, handle, done, wait_event, handle, wait_event, done, done, destroy, host_alloc, to_host,
        to_host_async, on_device, pool_create, pool_alloc, free_async, pool_trim};
    return ops;
}

int main(int argc, char **argv) {
    uint64_t addr = 0;
    {
        std::lock_guard<std::mutex> lock(mu());
        if (!reserve_range() || zone_alloc(&addr, N * sizeof(float)) != 0) return 3;
    }
    float *x = (float *)addr;
    for (int i = 0; i < N; ++i) x[i] = (float)i;
    int rc[6] = {
        launch("scale", x, 2, 0),   // recorded: x 1i -> 2i
        launch("scale", x, 2, 0),   // the same argument set: run, not recorded (2i -> 4i)
        launch("scale", x, 3, 0),   // recorded: 4i -> 12i
        launch("scale", x, 5, 0),   // MNEME_RECORD_MAX=2 argument sets: run (12i -> 60i)
        launch("fail", x, 7, 7),    // the launch fails: not recorded, the application sees its status
        launch("fail", x, 7, 0),    // the argument set is free again: recorded, 60i -> 420i
    };
    wait_for_writer();
    std::string counts_file = std::string(argv[1]) + "/counts-" + std::to_string(getpid()) + ".json";
    std::string text = "{\"format\": \"test-counts\", \"version\": 1, \"kernels\": " + kernels_json(counts()) + "}";
    write_atomic(counts_file, text.data(), text.size());
    printf("[%d, %d, %d, %d, %d, %d]\n", rc[0], rc[1], rc[2], rc[3], rc[4], rc[5]);
    return 0;
}
"""

FORMAT = RawFormat(
    backend="test",
    manifest="test-raw",
    counts="test-counts",
    granularity=1 << 16,
    default_arch="",
    kernel_image=lambda *a: None,
)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("record")
    source, binary = folder / "record.cpp", folder / "record"
    source.write_text(PROGRAM)
    snapshot = native.SNAPSHOT_SOURCES
    subprocess.run(
        [
            *CXX.split(),
            "-std=c++17",
            "-O1",
            f"-DN={N}",
            f"-I{native.RECORDER_SOURCES}",
            f"-I{snapshot}",
            f"-I{XXH}",
            str(source),
            str(snapshot / "snapshot_writer.cpp"),
            "-o",
            str(binary),
            "-ldl",
            "-lpthread",
        ],
        check=True,
        capture_output=True,
    )
    return binary


@pytest.mark.parametrize("capture", ["device shadow", "synchronous"])
def test_each_argument_set_is_recorded_once_between_its_prologue_and_epilogue(program, tmp_path, capture):
    raw = tmp_path / "raw"
    raw.mkdir()
    env = {
        "MNEME_RECORD_DIR": str(raw),
        "MNEME_RECORD_MAX": "2",
        "MNEME_RECORD_VA_BASE": hex(VA_BASE),
        "MNEME_RECORD_VA_SIZE": hex(1 << 30),
        **({"MNEME_RECORD_SYNC": "1"} if capture == "synchronous" else {}),
    }
    proc = subprocess.run([str(program), str(raw)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [0, 0, 0, 0, 7, 0]  # the failed launch's status reaches the application
    recorded = launches(FORMAT, raw)
    assert [(m["kernel"], m["occurrence"]) for _, m in recorded] == [("scale", 0), ("scale", 2), ("fail", 1)]
    i = np.arange(N, dtype=np.float32)
    for (folder, manifest), (before, after) in zip(recorded, [(1, 2), (4, 12), (60, 420)], strict=True):
        assert manifest["capture"] == capture and manifest["regions"] == [[VA_BASE, N * 4]]
        assert manifest["params"] == [[0, 8], [8, 4]] and manifest["globals"][0][0] == "scale_global"
        with Snapshot.open(folder / "prologue.mneme") as pro, Snapshot.open(folder / "epilogue.mneme", base=pro) as epi:
            assert np.array_equal(np.frombuffer(pro.read_region(VA_BASE), np.float32), before * i)
            assert np.array_equal(np.frombuffer(epi.read_region(VA_BASE), np.float32), after * i)
    scale = {key: n for (kernel, key), n in occurrences(FORMAT, raw).items() if kernel == "scale"}
    assert sorted(scale.values()) == [1, 1, 2]  # three argument sets, the first launched twice
    assert unrecorded(FORMAT, raw) == []  # every kernel has a record
    counts = json.loads(next(raw.glob("counts-*.json")).read_text())["kernels"]
    assert counts["fail"]["unrecorded"] == {"the launch failed (TEST_ERROR_LAUNCH_FAILED)": 1}
    assert not list(raw.glob("launch-*.tmp"))  # the failed launch's folder is gone
