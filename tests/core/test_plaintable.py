"""Tables drawn without rich for output that is no terminal match rich's own drawing (issue 27, start-up)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mneme.core import plaintable

COLUMNS = ("kind", "name", "plugin", "distribution", "version", "status")


def _rich(title: str, columns, rows, width: int = 10_000) -> str:
    """What rich draws for the console `mneme` makes for a pipe (mneme.core.console.make)."""
    out = io.StringIO()
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(str(cell)) for cell in row))
    Console(file=out, width=width, soft_wrap=True).print(table)
    return out.getvalue()


def _mneme(cache_dir, *args, columns: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, MNEME_CACHE_DIR=str(cache_dir))
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = columns
    probe = (
        "import json, sys\nfrom mneme.core.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    return subprocess.run([sys.executable, "-c", probe, *args], env=env, capture_output=True, text=True, check=True)


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [("backend", "host", "host-backend", "mneme-gpu", "0.1.0", "usable"), ("command", "tune", "t", "d", "1", "")],
        [("broken", "", "x", "dist", "2", "failed to load a.b:[bold]c[/]: ImportError: no [x] here")],
        [("wide", "中文名", "é", "ﬁ", "1", "combining e\u0301 and emoji \u2705")],
    ],
)
def test_render_draws_what_rich_draws_for_a_pipe(rows):
    assert plaintable.render("Mneme plugins", COLUMNS, rows) == _rich("Mneme plugins", COLUMNS, rows)


def test_piped_plugins_table_is_richs_table_of_the_json_rows_without_importing_rich(tmp_path):
    _mneme(tmp_path, "plugins")  # writes the command index
    listed = json.loads(_mneme(tmp_path, "plugins", "--json").stdout)
    proc = _mneme(tmp_path, "plugins")
    rows = [tuple(row[c] for c in COLUMNS) for row in listed]
    assert proc.stdout == _rich("Mneme plugins", COLUMNS, rows)
    assert not [m for m in json.loads(proc.stderr.strip().splitlines()[-1]) if m.split(".")[0] == "rich"]


def test_a_table_wider_than_columns_is_still_fitted_by_rich(tmp_path):
    proc = _mneme(tmp_path, "plugins", columns="100")
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100
    assert "rich.table" in json.loads(proc.stderr.strip().splitlines()[-1])


def test_print_table_falls_back_to_rich_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system=None)
    plaintable.print_table(console, "T", ("a", "b"), [("[x]", "y")])
    assert "[x]" in out.getvalue() and "┏" in out.getvalue()
