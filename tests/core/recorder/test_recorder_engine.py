"""The recorder engine every backend compiles (mneme/core/recorder/native), run on the host.

A small program includes the engine's headers as a backend's recorder does; what it writes is
read back by the Python side (`mneme.core.recorder.rawdir`), so the two halves of a contract
are checked against each other.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from mneme.core import native
from mneme.core.recorder.rawdir import region_policies
from mneme.core.snapshot import RegionPolicy

CXX = native.cxx_compiler()
INCLUDES = [f"-I{native.RECORDER_SOURCES}", f"-I{native.SNAPSHOT_SOURCES}"]  # as a backend's recorder builds
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")

PROGRAM = r"""
#include "engine.h"
using namespace mneme_engine;

int main() {
    Annotation good, bad, plain;
    bool ok = parse_annotation("f32", 1e-5, 1, "l2", "output \"buffer\"", good);
    bool rejected = !parse_annotation("f33", 1e-5, 0, "none", "", bad);
    bool negative = !parse_annotation("f64", -1, 0, nullptr, nullptr, bad);
    parse_annotation("u8", 0, 0, nullptr, nullptr, plain);
    std::string entries = annotation_json(4096, good) + ", " + annotation_json(8192, plain);
    printf("{\"ok\": %s, \"rejected\": %s, \"negative\": %s, \"policies\": [%s]}\n", ok ? "true" : "false",
           rejected ? "true" : "false", negative ? "true" : "false", entries.c_str());
    return 0;
}
"""


def test_annotations_the_engine_writes_are_the_policies_finalize_reads(tmp_path):
    source, program = tmp_path / "annotations.cpp", tmp_path / "annotations"
    source.write_text(PROGRAM)
    subprocess.run(
        [*CXX.split(), "-std=c++17", *INCLUDES, str(source), "-o", str(program)], check=True, capture_output=True
    )
    out = json.loads(subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout)
    assert (out["ok"], out["rejected"], out["negative"]) == (True, True, True)
    assert out["policies"][0]["tag"] == 'output "buffer"' and out["policies"][0]["norm"] == "L2"
    manifest = {"regions": [[4096, 256], [8192, 64]], "policies": out["policies"]}
    assert region_policies(manifest) == {
        4096: RegionPolicy(dtype="f32", threshold=1e-5, relative=True, norm="L2"),
        8192: RegionPolicy(dtype="u8", threshold=0.0, relative=False, norm="none"),
    }


COUNTS = r"""
#include "engine.h"
using namespace mneme_engine;

int main() {
    KernelCounts &saxpy = counts()["_Z5saxpyfPfS_"];
    saxpy.seen = 5;
    saxpy.occurrences[0xabc] = 3;
    saxpy.occurrences[0xdef] = 2;
    saxpy.app_times[0xabc] = {1.5e-6, 1.25e-6};
    counts()["scale"].kernel_times[0x1] = {2e-6};
    counts()["scale"].graph_launches = 7;
    printf("{\"format\": \"test-counts\", \"version\": 1, \"kernels\": %s}\n", kernels_json(counts()).c_str());
    return 0;
}
"""


def test_the_counts_the_engine_writes_are_the_occurrences_and_times_finalize_reads(tmp_path):
    from mneme.core.recorder.rawdir import RawFormat, in_application, occurrences

    source, program = tmp_path / "counts.cpp", tmp_path / "counts"
    source.write_text(COUNTS)
    subprocess.run(
        [*CXX.split(), "-std=c++17", *INCLUDES, str(source), "-o", str(program)], check=True, capture_output=True
    )
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "counts-1.json").write_text(
        subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    )
    fmt = RawFormat(
        backend="test",
        manifest="test-raw",
        counts="test-counts",
        granularity=1 << 21,
        default_arch="",
        kernel_image=lambda *a: None,
        kernel_timer="device",
    )
    key = "0000000000000abc"
    assert occurrences(fmt, tmp_path / "raw") == {("_Z5saxpyfPfS_", key): 3, ("_Z5saxpyfPfS_", "0000000000000def"): 2}
    times, graphs, timers = in_application(fmt, tmp_path / "raw")
    assert times == {("_Z5saxpyfPfS_", key): [1.5e-6, 1.25e-6], ("scale", "0000000000000001"): [2e-6]}
    assert graphs == {"scale": 7}
    assert timers == {("_Z5saxpyfPfS_", key): "events", ("scale", "0000000000000001"): "device"}


MANIFEST = r"""
#include <sys/stat.h>
#include "engine.h"
using namespace mneme_engine;

int main(int argc, char **argv) {
    std::string raw = argv[1];
    LaunchManifest m;
    m.format = "test-raw";
    m.kernel = "_Z5saxpyfPfS_";
    m.occurrence = 2;
    m.instance_key = 0xabc;
    m.grid[0] = 4, m.grid[1] = m.grid[2] = 1;
    m.block[0] = 256, m.block[1] = m.block[2] = 1;
    m.va_base = 0x153940000000ull;
    m.args = std::string("\x01\x02\xff", 3);
    m.params = {{0, 4}, {8, 8}};
    m.regions = {{0x153940000000ull, 1024}};
    m.globals.emplace_back("scale", 0x7000, 4);
    Annotation a;
    parse_annotation("f32", 0.5, 0, "L2", "x", a);
    m.policies = annotation_json(0x153940000000ull, a);
    std::string tmp = raw + "/launch-1-0.tmp";
    mkdir(tmp.c_str(), 0755);
    return publish_launch(manifest_head(m), tmp, raw + "/launch-1-0", "synchronous", 0.25, 1234);
}
"""


def test_a_manifest_the_engine_publishes_is_a_launch_finalize_reads(tmp_path):
    from mneme.core.recorder.rawdir import RawFormat, launches

    source, program, raw = tmp_path / "manifest.cpp", tmp_path / "manifest", tmp_path / "raw"
    source.write_text(MANIFEST)
    subprocess.run(
        [*CXX.split(), "-std=c++17", *INCLUDES, str(source), "-o", str(program)], check=True, capture_output=True
    )
    raw.mkdir()
    subprocess.run([str(program), str(raw)], check=True)
    fmt = RawFormat(
        backend="test",
        manifest="test-raw",
        counts="test-counts",
        granularity=1 << 21,
        default_arch="",
        kernel_image=lambda *a: None,
    )
    [(folder, manifest)] = launches(fmt, raw)
    assert folder.name == "launch-1-0" and not (raw / "launch-1-0.tmp").exists()
    assert manifest["kernel"] == "_Z5saxpyfPfS_" and manifest["instance_key"] == "0000000000000abc"
    assert (manifest["grid"], manifest["block"], manifest["args"]) == ([4, 1, 1], [256, 1, 1], "0102ff")
    assert manifest["params"] == [[0, 4], [8, 8]] and manifest["regions"] == [[0x153940000000, 1024]]
    assert manifest["globals"] == [["scale", 0x7000, 4]] and manifest["policies"][0]["norm"] == "L2"
    assert (manifest["capture"], manifest["epilogue_format"], manifest["stored_bytes"]) == ("synchronous", "diff", 1234)
    assert (manifest["prologue"], manifest["epilogue"]) == ("prologue.mneme", "epilogue.mneme")
