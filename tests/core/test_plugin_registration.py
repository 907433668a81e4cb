"""Plugins at the granularity users think in: one per sampler family and per transform, each
listed, disabled (-p no:NAME, MNEME_DISABLE_PLUGINS) or replaced by name; hooks that hand
plugins the click group and the registry; missing extras named in one line.

The replacing plugin is a real distribution, built and installed with pip into a folder that
`mneme` then finds through its entry points, as every installed plugin is found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from paths import DATA, ROOT
from test_plugins import _offline_build_possible

V1 = DATA / "config-v1"

REPLACER = '''
import click

from mneme.core.hookspecs import hookimpl

mneme_replaces = ("random",)


class QuasiRandom:
    """A third party's `random` sampler family, in place of the built-in one."""

    name = "random"

    def __init__(self, variant="", *, seed=None, **options):
        self.variant = variant


@hookimpl
def mneme_samplers():
    return [QuasiRandom]


@hookimpl
def mneme_cli_commands(cli, registry):
    @cli.command("sampler-families")
    def sampler_families():
        """Print the sampler families the registry knows."""
        click.echo(" ".join(registry.names("sampler")))
'''


@pytest.fixture(scope="module")
def replacer_site(tmp_path_factory):
    src = tmp_path_factory.mktemp("replacer-src")
    target = tmp_path_factory.mktemp("replacer-site")
    (src / "mneme_quasirandom").mkdir()
    (src / "mneme_quasirandom" / "__init__.py").write_text("")
    (src / "mneme_quasirandom" / "plugin.py").write_text(REPLACER)
    (src / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "mneme-quasirandom"
        version = "0.2.0"
        dependencies = ["mneme-gpu"]

        [project.entry-points.mneme]
        quasirandom = "mneme_quasirandom.plugin"

        [tool.setuptools]
        packages = ["mneme_quasirandom"]
        """)
    )
    isolation = ["--no-build-isolation"] if _offline_build_possible() else []
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "--target", str(target), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return target


def run(*args: str, path=(), env: dict | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    environ = dict(os.environ, COLUMNS="250", **(env or {}))
    if path:
        environ["PYTHONPATH"] = os.pathsep.join(map(str, path))
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "mneme", *args]
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=240, check=False)


def rows(output: str, kind: str) -> dict[str, list[str]]:
    """`mneme plugins` rows of one kind: name -> the row's cells."""
    found = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if cells and cells[0] == kind:
            found[cells[1] or cells[2]] = cells
    return found


def test_each_sampler_family_and_transform_is_its_own_plugin():
    out = run("plugins").stdout
    samplers, transforms = rows(out, "sampler"), rows(out, "transform")
    for family in ("guided", "exhaustive", "random", "optuna", "nevergrad"):
        assert samplers[family][2] == family, out  # provided by the plugin of the same name
    for name in (
        "internalize",
        "prune",
        "remove_auto_init",
        "specialize_args",
        "specialize_dims",
        "specialize_dims_assume",
        "set_launch_bounds",
        "fast_math",
    ):
        assert transforms[name][2] == name, out


def test_plugins_are_disabled_by_name_on_the_command_line_and_by_the_environment():
    out = run("-p", "no:nevergrad", "-p", "no:fast_math", "plugins").stdout
    assert "nevergrad" not in rows(out, "sampler") and "fast_math" not in rows(out, "transform")
    assert {"nevergrad", "fast_math"} <= set(rows(out, "disabled")), out
    assert "fast_math" not in rows(out, "parameter")  # the transform's knob goes with it
    out = run("plugins", env={"MNEME_DISABLE_PLUGINS": "optuna, remove_auto_init"}).stdout
    assert "optuna" not in rows(out, "sampler") and "remove_auto_init" not in rows(out, "transform")
    assert "exhaustive" in rows(out, "sampler")
    helped = run("-p", "no:fast_math", "ir", "show", "--help").stdout
    assert "--fast-math" not in helped and "--ptxas-opt" in helped
    code = (
        "import sys; from mneme.core.tuning.samplers import create_sampler\n"
        "try:\n    create_sampler('nevergrad:NGOpt')\nexcept Exception as exc:\n    print(type(exc).__name__, exc)"
    )
    out = run(code=code, env={"MNEME_DISABLE_PLUGINS": "nevergrad"}).stdout
    assert out.startswith("UsageError unknown sampler 'nevergrad:NGOpt'") and "nevergrad," not in out
    bad = run("-p", "nevergrad", "plugins")
    assert bad.returncode == 2 and "use -p no:NAME" in bad.stderr


def test_a_third_party_plugin_replaces_a_builtin_one_and_gets_the_click_group_and_registry(replacer_site):
    out = run("plugins", path=[replacer_site]).stdout
    assert rows(out, "sampler")["random"][2:4] == ["quasirandom", "mneme-quasirandom"], out
    assert "replaced by plugin 'quasirandom'" in " ".join(rows(out, "replaced")["random"]), out
    code = "from mneme.core.tuning.samplers import create_sampler\nprint(type(create_sampler('random')).__module__)"
    assert run(code=code, path=[replacer_site]).stdout.strip() == "mneme_quasirandom.plugin"
    # The command the plugin added to the group it was handed, asking the registry it was handed.
    listed = run("sampler-families", path=[replacer_site])
    assert listed.returncode == 0 and listed.stdout.split() == ["exhaustive", "guided", "nevergrad", "optuna", "random"]
    # Disabling the replacer brings the built-in one back.
    out = run("-p", "no:quasirandom", "plugins", path=[replacer_site]).stdout
    assert rows(out, "sampler")["random"][2:4] == ["random", "mneme-gpu"], out


# -- missing extras: the import is blocked in the process, as if the extra were not installed ----------

BLOCKED = "import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\nfrom mneme.core.cli import main\nmain(sys.argv[1:])\n"


def one_line_error(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.fixture(scope="module")
def saxpy_example(tmp_path_factory):
    from mneme import capture

    return capture.capture_spec(
        ROOT / "examples" / "saxpy" / "capture.yaml", tmp_path_factory.mktemp("saxpy"), backend="host"
    )


@pytest.mark.parametrize(
    "blocked, sampler, message",
    [
        (
            ("nevergrad",),
            "nevergrad:NGOpt",
            "nevergrad:NGOpt needs the nevergrad extra: pip install 'mneme-gpu[nevergrad]'",
        ),
        (("cmaes",), "optuna:cmaes", "optuna:cmaes needs the cmaes extra: pip install 'mneme-gpu[cmaes]'"),
    ],
)
def test_a_sampler_whose_extra_is_missing_says_which_extra_to_install(
    saxpy_example, tmp_path, blocked, sampler, message
):
    result = run(
        "tune",
        "-rdb",
        str(saxpy_example),
        "--sampler",
        sampler,
        "--print-space",
        "--results",
        str(tmp_path / "r"),
        code=BLOCKED.format(blocked=blocked),
    )
    one_line_error(result, message)


def test_mneme_plugins_names_the_extra_a_sampler_family_needs():
    out = run("plugins", code=BLOCKED.format(blocked=("nevergrad",))).stdout
    assert "needs the nevergrad extra: pip install 'mneme-gpu[nevergrad]'" in " ".join(
        rows(out, "sampler")["nevergrad"]
    )


def _results_copy(tmp_path: Path, storage: str | None = None) -> Path:
    results = tmp_path / "results"
    shutil.copytree(V1 / "results", results)
    session = json.loads((results / "session.json").read_text())
    session["storage"] = storage or f"sqlite:///{results / 'study.db'}"
    (results / "session.json").write_text(json.dumps(session))
    return results


def test_plots_without_the_plots_extra_say_which_extra_to_install(tmp_path):
    results = _results_copy(tmp_path)
    result = run(
        "results",
        str(results),
        "--plots",
        str(tmp_path / "plots"),
        code=BLOCKED.format(blocked=("matplotlib", "plotly")),
    )
    one_line_error(result, "PNG and HTML plots need the plots extra: pip install 'mneme-gpu[plots]'")
    assert not (tmp_path / "plots").exists()


def test_a_postgresql_storage_without_the_postgres_extra_says_which_extra_to_install(tmp_path):
    results = _results_copy(tmp_path, "postgresql://mneme@127.0.0.1:9/study")
    result = run("results", str(results), code=BLOCKED.format(blocked=("psycopg",)))
    one_line_error(result, "storage postgresql:// needs the postgres extra: pip install 'mneme-gpu[postgres]'")
