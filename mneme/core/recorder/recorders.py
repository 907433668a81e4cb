"""A backend's recorder as `mneme record` sees it: which programs it records, its own options, how it runs.

Each backend registers one `Recorder` (hook ``mneme_recorders``). `mneme record` inspects the
program (`mneme.core.recorder.program`) and asks the hook ``mneme_recorder_for_program`` which
recorder records it; the core's own answer (`choose`) is the highest-priority recorder that claims
the program, and when none does (a script, a wrapper that names no ELF file), the highest-priority
installed one. ``--backend NAME`` picks one by name. docs/design/interfaces.md, "Recording".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from mneme.core.recorder.program import Program


class Recorder:
    """The recorder of one backend: what it claims, the options it adds to `mneme record`, and `record`.

    A subclass sets `name` (the backend's), `libraries` (name prefixes of the GPU API libraries
    whose programs it records: ``libvendorrt.so``), `sections` (device-code sections such programs carry
    even when linked statically) and `options` (`click.Option`s of its own, passed to
    `record` by their names), and implements `record`. Keep the module that defines it light: `mneme
    record --help` imports every installed recorder's.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    priority: ClassVar[int] = 0
    libraries: ClassVar[tuple[str, ...]] = ()
    sections: ClassVar[tuple[str, ...]] = ()

    def options(self) -> list:
        """The `click.Option`s this recorder adds to `mneme record` (none by default)."""
        return []

    def claims(self, program: Program) -> bool:
        """Whether `program` uses this recorder's GPU API (links one of `libraries`, carries one of `sections`)."""
        return program.links(self.libraries) or bool(program.sections & set(self.sections))

    def record(
        self,
        rdb: Path,
        command: Sequence[str],
        ir_files: Sequence[Path],
        *,
        kernel: str | None,
        skip: int,
        max_recordings: int,
        record_ranks: str | None,
        epilogue_format: str,
        compression: str,
        progress: bool | None,
        **options: Any,
    ) -> int:
        """Run `command` under the native recorder, write the databases into `rdb`; the application's exit code."""
        raise NotImplementedError


def choose(program: Program, recorders: Mapping[str, type[Recorder]]) -> Recorder | None:
    """The highest-priority recorder (then by name) that claims `program`, else the highest-priority one."""
    ordered = sorted(recorders.values(), key=lambda c: (-c.priority, c.name))
    instances = [cls() for cls in ordered]
    for recorder in instances:
        if recorder.claims(program):
            return recorder
    return instances[0] if instances else None
