"""`mneme --help` lists every command without loading plugins (issue 27, start-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("llvmlite", "numpy", "optuna", "mneme.core.build", "mneme.core.ir")

_PROBE = """
import json, sys
from mneme.core.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("llvmlite", "numpy", "optuna")
                        or m in ("mneme.core.build", "mneme.core.ir"))), file=sys.stderr)
"""


def _help(cache_dir) -> tuple[str, list[str]]:
    env = dict(os.environ, MNEME_CACHE_DIR=str(cache_dir), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return proc.stdout, json.loads(proc.stderr.strip().splitlines()[-1])


def test_help_after_the_first_imports_no_heavy_module(tmp_path):
    first, _ = _help(tmp_path)
    second, heavy = _help(tmp_path)
    assert heavy == []
    assert second == first
    for name in ("capture", "replay", "tune", "plugins", "ir", "results"):
        assert f"\n  {name} " in second


def test_index_follows_a_changed_command_source(tmp_path):
    _help(tmp_path)
    index_path = tmp_path / "command-index.json"
    data = json.loads(index_path.read_text())
    data["commands"]["tune"]["help"] = "a stale line"
    path = next(p for p in data["files"] if p.endswith("tune_commands.py"))
    data["files"][path] -= 1  # as if the file changed after the index was written
    index_path.write_text(json.dumps(data))
    text, _ = _help(tmp_path)
    assert "a stale line" not in text
    assert "Autotune one recorded kernel launch" in text


def test_index_is_used_when_valid(tmp_path):
    _help(tmp_path)
    index_path = tmp_path / "command-index.json"
    data = json.loads(index_path.read_text())
    data["commands"]["tune"]["help"] = "from the index"
    index_path.write_text(json.dumps(data))
    text, _ = _help(tmp_path)
    assert "from the index" in text


_RUN = """
import json, sys
from mneme.core.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

# What listing must not import: LLVM, numpy, Optuna, the device bindings, the backends' and the
# other commands' modules (docs/design/interfaces.md "CLI commands").
LISTING_HEAVY = ("llvmlite", "numpy", "optuna", "cuda", "hip", "cattrs")


def _run(cache_dir, *args) -> tuple[str, set[str]]:
    env = dict(os.environ, MNEME_CACHE_DIR=str(cache_dir), COLUMNS="250")
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], env=env, capture_output=True, text=True, check=True)
    return proc.stdout, set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(
        m
        for m in modules
        if m.split(".")[0] in LISTING_HEAVY
        or m
        in (
            "mneme.core.build",
            "mneme.core.ir",
            "mneme.core.records",
            "mneme.core.tuning",
            "mneme.plugins.backends.host.backend",
            "mneme_cuda.backend",
            "mneme_hip.backend",
        )
    )


def test_an_index_written_by_another_copy_of_the_package_is_not_used(tmp_path):
    # Another checkout of the same version (a second clone, PYTHONPATH) defines other commands.
    _help(tmp_path)
    index_path = tmp_path / "command-index.json"
    data = json.loads(index_path.read_text())
    assert any(str(part).endswith("mneme") and os.path.isdir(str(part)) for part in data["key"])
    data["key"] = [
        ("/elsewhere/mneme" if str(part).endswith("mneme") and os.path.isdir(str(part)) else part)
        for part in data["key"]
    ]
    data["commands"]["tune"]["help"] = "from another checkout"
    index_path.write_text(json.dumps(data))
    text, _ = _help(tmp_path)
    assert "from another checkout" not in text
    assert "Autotune one recorded kernel launch" in text


def test_plugins_lists_every_kind_without_importing_what_it_lists(tmp_path):
    first, _ = _run(tmp_path, "plugins", "--json")
    second, modules = _run(tmp_path, "plugins", "--json")
    assert json.loads(second) == json.loads(first)
    assert _heavy(modules) == []
    assert not {"mneme.plugins.tune_commands", "mneme.plugins.ir_commands"} & modules
    rows = {(r["kind"], r["name"]): r for r in json.loads(second)}
    for kind, name in [
        ("sampler", "optuna"),
        ("sampler", "random"),
        ("space", "standard"),
        ("transform", "prune"),
        ("ir-source", "embedded"),
        ("command", "tune"),
        ("command", "plugins"),
    ]:
        assert (kind, name) in rows
    assert rows[("backend", "host")]["status"] == "usable"


def test_a_command_runs_after_a_listing_from_the_index(tmp_path):
    _run(tmp_path, "plugins")
    text, modules = _run(tmp_path, "samplers", "--help")
    assert "Search strategies" in text or "Usage" in text
    assert "mneme.plugins.tune_commands" in modules and "mneme.plugins.ir_commands" not in modules


def test_ir_passes_lists_passes_and_transforms_without_llvm(tmp_path):
    from mneme.core import plugins
    from mneme.core.passes import PASSES

    _run(tmp_path, "ir", "passes", "--json")
    text, modules = _run(tmp_path, "ir", "passes", "--json")
    assert _heavy(modules) == []
    data = json.loads(text)
    assert set(data["passes"]) == set(PASSES)
    # The descriptions listed are the transform classes' own.
    assert data["transforms"] == {name: cls.description for name, cls in plugins.registry("transform").items()}


def test_every_described_builtin_matches_what_it_describes():
    from mneme.core import plugins
    from mneme.core.backend import Availability

    described = [item for item in plugins.provided() if isinstance(item.ref, plugins.Described)]
    assert {item.kind for item in described} >= {"backend", "sampler", "space", "transform", "ir-source"}
    for item in described:
        obj = item.obj  # raises PluginError when the name or description differs from the class's
        assert obj.name == item.name
    host = next(item for item in described if item.name == "host")
    assert plugins.availability(host) == host.obj().availability()
    assert isinstance(plugins.availability(host), Availability)


def test_a_described_name_that_differs_from_the_class_is_a_plugin_error():
    import pytest

    from mneme.core.errors import PluginError
    from mneme.core.plugins import Described

    with pytest.raises(PluginError, match="described with name 'exhaustive'"):
        Described("exhaustive", "mneme.plugins.samplers.basic:RandomSampler").load()


def test_piped_ir_passes_draws_its_tables_without_importing_rich(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["MNEME_CACHE_DIR"] = str(tmp_path)
    for _ in range(2):  # the first run writes the command index
        proc = subprocess.run(
            [sys.executable, "-c", _RUN, "ir", "passes"], env=env, capture_output=True, text=True, check=True
        )
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert not [m for m in modules if m.split(".")[0] == "rich"]
    assert proc.stdout.startswith("passes (comma-separated") and "┃ transform" in proc.stdout
    assert "\nlevels: default<O0>, " in proc.stdout


def test_help_from_the_index_loads_no_plugin_manager_attrs_or_rich(tmp_path):
    _run(tmp_path, "--help")  # writes the index
    text, modules = _run(tmp_path, "--help")
    assert "\n  tune " in text
    assert not [
        m
        for m in modules
        if m.split(".")[0] in ("pluggy", "attr", "attrs", "rich") or m in ("mneme.core.plugins", "mneme.core.hookspecs")
    ]
