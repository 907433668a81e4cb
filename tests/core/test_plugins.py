"""The plugin system seen from outside: third-party distributions installed for real with pip.

Two small distributions are built from source in a temporary folder and installed with
`pip install --target`; `mneme` then runs in a subprocess with that folder on PYTHONPATH,
so the plugins are found the way every installed plugin is, through their entry points.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = '''
import click

from mneme.core.hookspecs import hookimpl


class {cls}:
    """Proposes the golden-section point of every integer range it is asked about."""

    name = "golden"

    def __init__(self, low, high):
        self.low, self.high = low, high

    def ask(self):
        return self.low + round((self.high - self.low) * 0.618)


@click.command("{command}")
@click.argument("low", type=int)
@click.argument("high", type=int)
def {command_fn}(low, high):
    """Print what the golden sampler proposes in [LOW, HIGH]."""
    click.echo(f"golden proposes {{{cls}(low, high).ask()}}")


@hookimpl
def mneme_samplers():
    return [{cls}]


@hookimpl
def mneme_cli_commands():
    return [{command_fn}]
'''


def write_distribution(root, dist: str, version: str, package: str, cls: str, command: str):
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "plugin.py").write_text(
        PLUGIN.format(cls=cls, command=command, command_fn=command.replace("-", "_"))
    )
    (root / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"
        dependencies = ["mneme-gpu"]

        [project.entry-points.mneme]
        {package} = "{package}.plugin"

        [tool.setuptools]
        packages = ["{package}"]
        """)
    )
    return root


def _offline_build_possible() -> bool:
    """setuptools can build a wheel without fetching anything (it needs bdist_wheel)."""
    import setuptools

    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder where pip installed two third-party plugin distributions."""
    src = tmp_path_factory.mktemp("plugin-src")
    target = tmp_path_factory.mktemp("plugin-site")
    golden = write_distribution(src / "golden", "mneme-golden", "1.2.3", "mneme_golden", "GoldenSampler", "golden")
    clash = write_distribution(src / "clash", "mneme-clash", "0.4.0", "mneme_clash", "OtherGolden", "clash-golden")
    clash_target = tmp_path_factory.mktemp("plugin-site-clash")
    isolation = ["--no-build-isolation"] if _offline_build_possible() else []
    installs = [
        subprocess.Popen(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "--target", str(where), str(dist)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for where, dist in ((target, golden), (clash_target, clash))
    ]
    for pip in installs:  # both build at once
        output, _ = pip.communicate(timeout=300)
        assert pip.returncode == 0, output.decode(errors="replace")
    return target, clash_target


def mneme(*args: str, path: list, code: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path), COLUMNS="200")
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "mneme", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_installed_plugin_is_listed_with_its_distribution_and_version(site):
    golden, _ = site
    result = mneme("plugins", path=[golden])
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "mneme-golden" in line]
    assert any("sampler" in r and "golden" in r and "1.2.3" in r for r in rows), result.stdout
    assert any("command" in r and "golden" in r for r in rows), result.stdout
    # The built-in commands are listed the same way, from the mneme-gpu distribution.
    assert any("command" in line and "inspect" in line and "mneme-gpu" in line for line in result.stdout.splitlines())


def test_installed_plugin_command_and_sampler_are_usable(site):
    golden, _ = site
    result = mneme("golden", "0", "100", path=[golden])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "golden proposes 62"
    code = (
        "from mneme.core import plugins; cls = plugins.lookup('sampler', 'golden'); "
        "print(cls.__module__, cls(10, 20).ask())"
    )
    result = mneme(path=[golden], code=code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["mneme_golden.plugin", "16"]


def test_two_plugins_providing_one_name_is_a_clear_plugin_error(site):
    golden, clash = site
    code = (
        "from mneme.core import plugins\n"
        "from mneme.core.errors import PluginError\n"
        "try:\n    plugins.lookup('sampler', 'golden')\n"
        "except PluginError as exc:\n    print(exc)\n    raise SystemExit(3)\n"
    )
    result = mneme(path=[golden, clash], code=code)
    assert result.returncode == 3, result.stdout + result.stderr
    message = result.stdout.strip()
    assert "sampler 'golden'" in message and "mneme-golden" in message and "mneme-clash" in message
    assert "uninstall one of them" in message


def test_unknown_plugin_name_lists_the_known_ones(site):
    golden, _ = site
    code = (
        "from mneme.core import plugins\n"
        "try:\n    plugins.lookup('sampler', 'nope')\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    result = mneme(path=[golden], code=code)
    assert result.stdout.startswith("PluginError unknown sampler 'nope'; known:") and "golden" in result.stdout


def test_a_plugin_that_fails_to_import_is_listed_as_broken_and_the_rest_still_work(tmp_path):
    """One broken third-party plugin must not take `mneme` down; `mneme plugins` names it."""
    import subprocess
    import sys
    import textwrap

    site = tmp_path / "site"
    dist_info = site / "brokenplugin-0.3.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplugin\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text("[mneme]\nbroken = brokenplugin_mod\n")
    (site / "brokenplugin_mod.py").write_text(textwrap.dedent("raise ImportError('needs libfoo')\n"))
    env = {**__import__("os").environ, "PYTHONPATH": str(site), "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "mneme", "plugins"], capture_output=True, text=True, env=env, check=True
    )
    assert "brokenplugin" in out.stdout
    assert "needs libfoo" in out.stdout
    assert "exhaustive" in out.stdout  # the built-in plugins are still there


def test_entry_points_are_found_as_importlib_metadata_finds_them_without_importing_it(site):
    golden, clash = site
    root = Path(__file__).resolve().parents[2]  # this checkout's mneme first, as the other tests' interpreter has it
    code = (
        "import json, sys\nfrom mneme.core.entrypoints import entry_points\n"
        "mine = sorted([d, v, e.name, e.value] for d, v, e in entry_points())\n"
        "imported = 'importlib.metadata' in sys.modules\n"
        "import importlib.metadata as md\n"
        "std = sorted([d.metadata['name'], d.metadata['version'], e.name, e.value] for d in md.distributions()\n"
        "             for e in d.entry_points if e.group == 'mneme')\n"
        "print(json.dumps([mine, std, imported]))\n"
    )
    result = mneme(path=[root, golden, clash], code=code)
    assert result.returncode == 0, result.stderr
    mine, std, imported = json.loads(result.stdout)
    assert mine == std and not imported
    assert any(row[:2] == ["mneme-golden", "1.2.3"] for row in mine)


def test_the_entry_point_group_is_the_hook_project():
    from mneme.core import entrypoints, hookspecs

    assert entrypoints.GROUP == hookspecs.PROJECT == "mneme"
