"""The distributions as users install them: one version everywhere, every run-time file in the wheel."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import zipfile

import pytest

import mneme
from paths import ROOT

tomllib = pytest.importorskip("tomllib", reason="needs Python 3.11 (tomllib)")
BACKENDS = sorted(ROOT.glob("backends/*/pyproject.toml"))


def _tracked(prefix: str) -> list[str]:
    proc = subprocess.run(["git", "ls-files", prefix], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip("needs git: the checkout's file list")
    return proc.stdout.split()


def test_the_core_distribution_is_mneme_gpu_at_the_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "mneme-gpu" and "version" in project["dynamic"]
    assert importlib.metadata.version("mneme-gpu") == mneme.__version__
    assert (ROOT / "LICENSE").read_text().count("Apache License") >= 1
    assert project["license"] == "Apache-2.0"


@pytest.mark.parametrize("pyproject", BACKENDS, ids=[p.parent.name for p in BACKENDS])
def test_every_backend_has_the_core_version_and_pins_the_core_to_it(pyproject):
    project = tomllib.loads(pyproject.read_text())["project"]
    assert project["version"] == mneme.__version__, f"{pyproject}: run scripts/set-version {mneme.__version__}"
    pins = [d for d in project["dependencies"] if re.match(r"mneme(-gpu)?\b", d)]
    assert pins == [f"mneme-gpu=={mneme.__version__}"], pyproject
    for init in pyproject.parent.glob("mneme_*/__init__.py"):
        declared = re.search(r'^__version__ = "([^"]*)"', init.read_text(), re.MULTILINE)
        assert declared is None or declared.group(1) == mneme.__version__, init


def test_nothing_looks_the_distribution_up_by_its_old_name():
    pattern = re.compile(r"""(version|distribution|metadata)\(\s*["']mneme["']\s*\)""")
    # (scripts/setup names the old distribution on purpose: it uninstalls a stale install of it.)
    offenders = [
        path
        for path in _tracked(".")
        if path.endswith(".py")
        if (ROOT / path).is_file() and pattern.search((ROOT / path).read_text(errors="replace"))
    ]
    assert offenders == []


def test_the_core_wheel_ships_every_file_the_package_needs_at_run_time(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("mneme_gpu-*-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"mneme/plugins/backends/host/runtime.c", "mneme/py.typed", "mneme/_version.py"} <= names
    package_data = [path for path in _tracked("mneme") if not path.endswith(".py")]
    assert package_data and [path for path in package_data if path not in names] == []
    metadata = zipfile.ZipFile(wheel).read(f"mneme_gpu-{mneme.__version__}.dist-info/METADATA").decode()
    assert "Name: mneme-gpu" in metadata and "License-Expression: Apache-2.0" in metadata
    assert any(name.endswith("dist-info/licenses/LICENSE") for name in names)
