"""A crafted bitcode module is a format error, never the death of the process reading it (issue 36).

llvmlite's LLVM has assertions on, and its bitcode reader asserts on some corrupt files: a recording
whose `.bc` module was replaced aborted `mneme tune` with SIGABRT and no message. Bitcode is read
first in a forked child (`mneme.core.ir._probe`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ROOT

from mneme.core import ir
from mneme.core.errors import MalformedIRError

CRAFTED = ROOT / "tests" / "data" / "corrupt" / "saxpy-reader-asserts.bc"
# A fuzzer's mutation of the saxpy bitcode (CI, 2026-12-06): LLVM's error message quotes bytes that are not UTF-8.
UNDECODABLE = ROOT / "tests" / "data" / "corrupt" / "saxpy-undecodable-message.bc"
SAXPY = ROOT / "examples" / "saxpy" / "saxpy.ll"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe forks")


def test_bitcode_that_kills_llvms_reader_is_a_format_error_naming_the_file_and_the_signal(tmp_path):
    path = tmp_path / "k.bc"
    path.write_bytes(CRAFTED.read_bytes())
    with pytest.raises(MalformedIRError, match=r"k\.bc: cannot read LLVM bitcode: LLVM's reader dies on it \(SIG"):
        ir.load(path)
    assert ir.load(SAXPY).get_function("saxpy")  # this process goes on reading IR


def test_the_crafted_file_does_kill_a_process_that_reads_it_unprobed():
    # what the probe stands between: the same bytes read directly end the reading process by a signal
    code = f"import llvmlite.binding as l; l.parse_bitcode(open({str(CRAFTED)!r}, 'rb').read()).verify()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    if proc.returncode >= 0:
        pytest.skip("this LLVM reads the file without dying (built without assertions)")
    assert proc.returncode < 0


def test_good_bitcode_still_loads_through_the_probe(tmp_path):
    path = tmp_path / "saxpy.bc"
    path.write_bytes(bytes(ir.load(SAXPY).as_bitcode()))
    assert ir.load(path).get_function("saxpy")


def test_bitcode_whose_target_triple_is_not_text_is_malformed_ir_not_a_decode_error():
    """Found by the CI fuzzer: LLVM reads the module, but its triple record holds bytes that are not UTF-8."""
    data = (ROOT / "tests" / "data" / "corrupt" / "saxpy-triple-not-text.bc").read_bytes()
    with pytest.raises(MalformedIRError, match="target triple is not text"):
        ir.load(data)


def test_bitcode_whose_error_message_is_not_text_is_a_format_error_naming_the_file(tmp_path):
    path = tmp_path / "m.bc"
    path.write_bytes(UNDECODABLE.read_bytes())
    with pytest.raises(MalformedIRError, match=r"m\.bc: cannot read LLVM bitcode: .*message that is not text"):
        ir.load(path)
    assert ir.load(SAXPY).get_function("saxpy")
