"""Names from a recording, made safe to print: control characters shown as escapes.

A kernel name, argument name or instance key is data from someone else (docs/security.md).
Printed raw, a newline in it starts a fake line of output ("all verified") and an escape
sequence clears the screen or moves the cursor. Every name the CLI prints (tables, logs,
errors) goes through `printable`; text bound for rich markup also through `markup`.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import Any

# Control (Cc), format (Cf: bidi overrides, zero-width) and line/paragraph separators.
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: Any) -> str:
    """`value` as text in which every control or invisible format character is an escape (``\\x1b``)."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # the common case: nothing to do (also true for plain spaces)
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNSAFE else c for c in text)


def markup(value: Any) -> str:
    """`printable(value)` with rich markup escaped, for text printed through a rich console."""
    from rich.markup import escape

    return escape(printable(value))


class EscapingFilter(logging.Filter):
    """Escape control characters in a log record's arguments (names from recordings reach logs there)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: printable(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True
