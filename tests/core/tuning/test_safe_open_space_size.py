"""A search space file is small data (issue 36): YAML costs ~300 bytes of memory per byte read, so a
space file is bounded by space_bytes (1 MiB) before it is read, and its nodes by json_nodes while it
is composed - an 8 MB space no longer takes 2.2 GB and two minutes."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from mneme.core.errors import LimitError
from mneme.core.tuning.space import load_space


def test_a_space_file_over_space_bytes_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("parameters:\n  block_x: {choices: [" + ", ".join(["64"] * 600_000) + "]}\n")  # 2.4 MB
    with pytest.raises(LimitError, match="space_bytes=1048576.*MNEME_LIMIT_SPACE_BYTES"):
        load_space(str(path), None, None)


def test_a_space_within_space_bytes_but_over_json_nodes_is_refused_while_composed(tmp_path, monkeypatch):
    path = tmp_path / "many.yaml"
    path.write_text("parameters:\n  block_x: {choices: [" + ", ".join(["1"] * 3000) + "]}\n")
    monkeypatch.setenv("MNEME_LIMIT_JSON_NODES", "2000")
    with pytest.raises(LimitError, match="json_nodes"):
        load_space(str(path), None, None)


def test_reading_the_largest_space_file_allowed_stays_under_512_MiB(tmp_path):
    path = tmp_path / "edge.yaml"
    values = ", ".join(["1"] * 340_000)  # just under 1 MiB of flow-style values: the costliest YAML per byte
    path.write_text("parameters:\n  block_x: {choices: [" + values + "]}\n")
    assert path.stat().st_size < 1 << 20
    probe = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
        "from mneme.core.tuning.space import load_space; from mneme.core.errors import MnemeError\n"
        "try:\n    load_space(sys.argv[1], None, None)\nexcept MnemeError as exc:\n    print('refused', exc)\n"
        "print('done')" % ((512 << 20) + (1 << 30), resource.RLIM_INFINITY)
    )  # 1 GiB for the interpreter
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]
