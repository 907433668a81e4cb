"""Skip marks that name what a test needs, in the form the run's last line counts (tests/conftest.py).

A reason reads ``needs TOOL[, TOOL...][: how to get it]``, naming only the tools that are missing.
"""

from __future__ import annotations

import shutil

import pytest


def reason(*tools: str, hint: str = "") -> str:
    """The skip reason for `tools` missing, with an optional hint (how to install them)."""
    return f"needs {', '.join(tools)}" + (f": {hint}" if hint else "")


def needs(*executables: str, hint: str = "") -> pytest.MarkDecorator:
    """Skip unless every executable is on PATH; the reason names the missing ones."""
    missing = [name for name in executables if shutil.which(name) is None]
    return pytest.mark.skipif(bool(missing), reason=reason(*missing, hint=hint))


def needs_all(conditions: dict[str, bool], hint: str = "") -> pytest.MarkDecorator:
    """Skip unless every named condition holds (`{"xxhash.h": found, ...}`); the reason names the failing ones."""
    missing = [name for name, present in conditions.items() if not present]
    return pytest.mark.skipif(bool(missing), reason=reason(*missing, hint=hint))
