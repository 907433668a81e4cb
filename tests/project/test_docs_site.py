"""The documentation site builds with warnings as errors, with the README as its user guide and an API reference."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ROOT


def test_the_site_builds_strictly_with_the_guide_and_the_api_reference(tmp_path):
    pytest.importorskip("mkdocstrings", reason="needs mkdocstrings: the docs extra (pip install -e '.[docs]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    guide = (tmp_path / "index.html").read_text()
    assert "Capture a kernel without an application" in guide  # a README section, included at build time
    api = (tmp_path / "reference" / "api" / "index.html").read_text()
    for name in (
        "mneme.api.replay",
        "mneme.api.tune",
        "mneme.capture.capture",
        "mneme.core.types.ExperimentConfiguration",
        "mneme.core.executor.BaseExecutor",
        "mneme.core.tuning.session.TuningSession",
    ):
        assert f'id="{name}"' in api, name
    assert (tmp_path / "design" / "interfaces" / "index.html").is_file() and (tmp_path / "formats").is_dir()


def test_the_guide_keeps_the_readme_links_that_resolve_on_the_site():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_hook", ROOT / "docs" / "hooks" / "readme.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = type("Page", (), {"file": type("File", (), {"src_uri": "index.md"})()})()
    guide = hook.on_page_markdown("", page)
    assert guide.startswith("# Mneme")  # the README, read at build time
    relinked = hook._LINK.sub(
        hook._relink,
        "[formats](docs/formats.md) [app](examples/saxpy/README.md) [site](https://example.org/a) [here](#install)",
    )
    assert relinked == (
        "[formats](formats.md) app (`examples/saxpy/README.md`) [site](https://example.org/a) [here](#install)"
    )
