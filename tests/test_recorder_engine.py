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
    subprocess.run([*CXX.split(), "-std=c++17", f"-I{native.RECORDER_SOURCES}", str(source), "-o", str(program)],
                   check=True, capture_output=True)  # fmt: skip
    out = json.loads(subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout)
    assert (out["ok"], out["rejected"], out["negative"]) == (True, True, True)
    assert out["policies"][0]["tag"] == 'output "buffer"' and out["policies"][0]["norm"] == "L2"
    manifest = {"regions": [[4096, 256], [8192, 64]], "policies": out["policies"]}
    assert region_policies(manifest) == {
        4096: RegionPolicy(dtype="f32", threshold=1e-5, relative=True, norm="L2"),
        8192: RegionPolicy(dtype="u8", threshold=0.0, relative=False, norm="none"),
    }
