"""A table for output that is not a terminal, drawn without rich (start-up, issue 27).

Piped or redirected output has no width to fit and no colour, so rich's layout engine
(~25 ms for `mneme plugins`' table, plus its import) buys nothing there: `render` draws the
same characters rich draws for such a console (heavy head box, title flush left, no wrapping).
A terminal, or a pipe given COLUMNS narrower than the table, still gets rich, which fits and
styles it (docs/cli.md, "Output").
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence


def cell_width(text: str) -> int:
    """Terminal columns `text` takes: wide East Asian characters two, combining marks none."""
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The columns the drawn table takes (its widest line)."""
    widths = _widths(columns, rows)
    return sum(widths) + 3 * len(widths) + 1


def _widths(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([cell_width(c)] + [cell_width(row[i]) for row in rows]) for i, c in enumerate(columns)]


def _line(cells: Sequence[str], widths: Sequence[int], edge: str, inner: str) -> str:
    padded = (f" {cell}{' ' * (w - cell_width(cell))} " for cell, w in zip(cells, widths))
    return edge + inner.join(padded) + edge


def _rule(widths: Sequence[int], left: str, fill: str, cross: str, right: str) -> str:
    return left + cross.join(fill * (w + 2) for w in widths) + right


def render(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The table as text, newline-terminated: `title` on its own line, then the boxed rows."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = _widths(columns, rows)
    lines = [title] if title else []
    lines.append(_rule(widths, "┏", "━", "┳", "┓"))
    lines.append(_line(columns, widths, "┃", "┃"))
    lines.append(_rule(widths, "┡", "━", "╇", "┩"))
    lines += [_line(row, widths, "│", "│") for row in rows]
    lines.append(_rule(widths, "└", "─", "┴", "┘"))
    return "\n".join(lines) + "\n"


def print_table(console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print to `console` (a rich console; None: the command's, `mneme.core.console.current()`):
    plain text when it is no terminal and the table fits, else rich."""
    from mneme.core import console as consoles

    rows = [[str(cell) for cell in row] for row in rows]
    if console is None:
        if consoles.piped() and width(columns, rows) <= consoles.PIPE_WIDTH:
            sys.stdout.write(render(title, columns, rows))  # what the pipe's console would print, without rich
            sys.stdout.flush()
            return
        console = consoles.current()
    if not console.is_terminal and console.soft_wrap and width(columns, rows) <= console.width:
        if not console.quiet:
            console.file.write(render(title, columns, rows))
            console.file.flush()
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
