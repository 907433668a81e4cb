"""Test-wide fixtures, the `gpu` and `amdgpu` markers (GPU tests skip cleanly where no GPU is present), and the
one-line summary of what skipped tests lacked.

A test that needs a tool says so in its skip reason as ``needs TOOL[, TOOL...][: how to get it]``
(tests/skips.py makes such marks); the summary counts skipped tests per missing tool.
"""

from __future__ import annotations

import collections
import functools
import re
import sys
from pathlib import Path

import pytest

# Tests mirror the packages in folders (docs/design/interfaces.md, "Where the tests live"), imported
# by pytest's default "prepend" mode. tests/ (this folder: the shared helpers, irbuild, skips, paths)
# and every folder of test modules go on sys.path, as when the tests were one flat folder, so a test
# module imports another's helpers (`from test_records_fixtures import make_recording`) from any folder,
# in any order of collection. Test file names are unique across folders.
_HERE = Path(__file__).resolve().parent
for _folder in [
    _HERE,
    *sorted(
        {
            p.parent
            for p in _HERE.glob("*/**/test_*.py")
            if "data" not in p.relative_to(_HERE).parts and not (p.parent / "__init__.py").exists()
        }
    ),
]:
    if str(_folder) not in sys.path:
        sys.path.insert(1, str(_folder))


NEEDS_GPU = "needs a GPU"


@functools.lru_cache(maxsize=1)
def gpu_available() -> tuple[bool, str]:
    try:
        from cuda.bindings import driver
    except ImportError:
        return False, "cuda-bindings is not installed"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # cuda-bindings installed but no driver library (CI)
        return False, f"no CUDA driver ({type(exc).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {err}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "no CUDA device"
    return True, ""


@functools.lru_cache(maxsize=1)
def amdgpu_available() -> tuple[bool, str]:
    try:
        from mneme_hip import hipapi
    except ImportError:
        return False, "mneme-hip is not installed"
    availability = hipapi.availability()
    return availability.usable, availability.reason


def pytest_collection_modifyitems(config, items):
    if any(item.get_closest_marker("amdgpu") for item in items):
        usable, reason = amdgpu_available()
        if not usable:
            for item in items:
                if item.get_closest_marker("amdgpu"):
                    item.add_marker(pytest.mark.skip(reason=f"needs an AMD GPU: {reason}"))
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    usable, reason = gpu_available()
    if usable:
        return
    skip = pytest.mark.skip(reason=f"{NEEDS_GPU}: {reason}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def missing_tools(reason: str) -> list[str]:
    """The tools a skip reason names as missing (``needs A, B and C: ...``); none for other skips."""
    if reason.startswith(NEEDS_GPU):
        return []
    found = re.match(r"could not import '([^']+)'", reason)
    if found:  # pytest.importorskip without a reason of its own
        return [f"python:{found.group(1)}"]
    found = re.match(r"needs (.+?)(?::|$)", reason)
    if not found:
        return []
    return [tool.strip() for tool in re.split(r",|\band\b", found.group(1)) if tool.strip()]


def pytest_unconfigure(config):
    """End the run with one line: each missing tool and how many tests it skipped; GPU tests apart."""
    terminalreporter = config.pluginmanager.get_plugin("terminalreporter")
    if terminalreporter is None or hasattr(config, "workerinput") or config.option.collectonly:
        return  # an xdist worker, or nothing ran
    skipped = terminalreporter.stats.get("skipped", [])
    tools: collections.Counter[str] = collections.Counter()
    gpu = other = 0
    for report in skipped:
        reason = _skip_reason(report)
        names = missing_tools(reason)
        tools.update(names)
        gpu += reason.startswith(NEEDS_GPU)
        other += not names and not reason.startswith(NEEDS_GPU)
    listed = ", ".join(f"{tool} ({count})" for tool, count in sorted(tools.items(), key=lambda kv: (-kv[1], kv[0])))
    line = f"skipped for missing tools: {listed or 'none'}; needs a GPU: {gpu}"
    if other:
        line += f"; other skips: {other} (-rs lists them)"
    terminalreporter.write_line(line, yellow=bool(tools), bold=True)
