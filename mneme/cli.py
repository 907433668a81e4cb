"""The original Mneme API's `mneme.cli`: `main(argv)` runs the `mneme` command and returns its exit code."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from mneme.core.cli import main as core_main

    try:
        core_main(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


__all__ = ["main"]
