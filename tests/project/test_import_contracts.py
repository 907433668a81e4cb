"""The layout's import rules (docs/design/interfaces.md, "Layers and import contracts").

`lint-imports` checks the contracts of `.importlinter` (the core imports no optimizer library:
tests/core/test_vendor_neutral.py checks it names none); this file checks what import-linter
cannot express: that plugins and backends use no `_private` name of another package.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

# Each folder holds one package whose private names are its own.
PACKAGES = {
    ROOT / "mneme" / "plugins": "mneme.plugins",
    ROOT / "mneme" / "compat": "mneme.compat",
    ROOT / "mneme" / "instrument": "mneme.instrument",
    ROOT / "backends" / "cuda" / "mneme_cuda": "mneme_cuda",
    ROOT / "backends" / "hip" / "mneme_hip": "mneme_hip",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_private_uses(path: Path, package: str) -> list[str]:
    """`from other import _x` and `other._x` where `other` was imported from outside `package`."""
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    foreign: set[str] = set()  # local names bound to another package's modules or objects
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            own = node.module == package or node.module.startswith(package + ".")
            if own or not node.module.startswith("mneme"):
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
                foreign.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("mneme") and not (
                    alias.name == package or alias.name.startswith(package + ".")
                ):
                    foreign.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            if node.value.id in foreign:
                found.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_plugins_and_backends_use_no_private_name_of_another_package():
    found = [
        use
        for folder, package in PACKAGES.items()
        for path in sorted(folder.rglob("*.py"))
        for use in foreign_private_uses(path, package)
    ]
    assert found == [], "make these names public in the package that owns them:\n" + "\n".join(found)


def test_the_check_finds_a_private_name_taken_from_another_package(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "from mneme.core import ir\nfrom mneme.core.tuning.space import as_bool, _x\n"
        "from mneme.plugins.spaces import _own\nir._unquote('a')\nir.unquote('a')\n"
    )
    uses = [use.split(": ", 1)[1] for use in foreign_private_uses(plugin, "mneme.plugins")]
    assert uses == ["from mneme.core.tuning.space import _x", "ir._unquote"]


@pytest.mark.skipif(
    shutil.which("lint-imports") is None and not Path(sys.executable).with_name("lint-imports").exists(),
    reason="import-linter not installed (pip install -e '.[test]')",
)
def test_import_contracts_hold():
    command = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    proc = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_no_import_circles():
    """Runtime imports (annotation-only ones left out) form no circle among Mneme's modules."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("mneme", "mneme_cuda", "mneme_hip", cache_dir=None, exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert circles == []
