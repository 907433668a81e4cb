"""`mneme ir ... -rdb` on a recording made on the host backend, and launch-dimension flags (issue 28, point 6)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from irbuild import build_cuda_ir, cuda_available

from mneme import capture
from mneme.core.cli import cli

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])


def run(*args: str):
    return CliRunner().invoke(cli, ["ir", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def host_recording(tmp_path_factory):
    n = 1000
    x = np.linspace(-1, 1, n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    out = tmp_path_factory.mktemp("hostrec")
    return str(
        capture.capture(str(build_cuda_ir("saxpy")), "saxpy", 2, 128, [n, np.float32(2.0), x, y], out, backend="host")
    )


def test_resources_of_a_host_recording_build_for_the_irs_gpu(host_recording):
    result = run("resources", "-rdb", host_recording, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["arch"] == "sm_90" and data["resources"]["registers"] > 0 and data["resources"]["assembler"]
    assert "its IR targets nvptx64-nvidia-cuda, so this builds for sm_90" in " ".join(result.stderr.split())


def test_compile_and_diff_of_a_host_recording(host_recording, tmp_path):
    out = tmp_path / "k.cubin"
    result = run("compile", "-rdb", host_recording, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x7fELF" and "(sm_90, cuda backend, cubin)" in result.stderr
    result = run("diff", "-rdb", host_recording, "-a", "specialize_dims=false", "-b", "specialize_dims=true")
    assert result.exit_code == 0, result.output
    assert "--- A.ptx" in result.stdout


def test_show_optimized_and_an_explicit_host_arch(host_recording, tmp_path):
    result = run("show", "-rdb", host_recording, "--optimized")
    assert result.exit_code == 0, result.output
    assert "define" in result.stdout and "@saxpy" in result.stdout
    result = run("resources", "-rdb", host_recording, "--arch", "x86_64", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["arch"] == "x86_64"


@pytest.mark.parametrize(
    "args,missing",
    [
        (["show", "--specialize-dims"], "add --grid N and --block N"),
        (["show", "--specialize-dims-assume", "--grid", "8"], "add --block N"),
        (["diff", "-a", "specialize_dims=false", "-b", "specialize_dims=true"], "add --grid N and --block N"),
    ],
)
def test_specializing_dims_without_dims_is_refused_naming_the_flags(args, missing):
    result = run(*args[:1], str(build_cuda_ir("saxpy")), *args[1:])
    assert result.exit_code == 2, result.output
    assert "needs the launch dimensions" in result.output and missing in result.output


def test_a_recording_supplies_the_dims(host_recording):
    result = run("show", "-rdb", host_recording, "--specialize-dims", "--optimized")
    assert result.exit_code == 0, result.output
    assert "sreg.ntid" not in result.stdout
