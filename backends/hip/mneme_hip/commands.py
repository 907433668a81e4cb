"""CLI commands of the HIP backend: `mneme hip record` and `mneme hip build-recorder`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mneme.core.errors import EXIT_CODES_HELP
from mneme.core.recorder.options import progress_option, selection_options, snapshot_options


@click.group("hip")
def hip_group() -> None:
    """The HIP backend: its native recorder (not yet run on an AMD GPU)."""


@hip_group.command("record", epilog=EXIT_CODES_HELP, context_settings={"ignore_unknown_options": True})
@selection_options
@click.option("--arch", default="gfx90a", show_default=True,
              help="The GPU the application ran on (gfxNNN): whose code object and IR the databases hold.")
@click.option("--ir", "ir_files", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Device LLVM IR (.ll/.bc) of the application's kernels; optional where mneme-cc embedded it.")
@snapshot_options
@progress_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record_command(rdb: Path, kernel: str | None, skip: int, max_recordings: int, record_ranks: str | None,
                   arch: str, ir_files: tuple[Path, ...], epilogue_format: str, compression: str,
                   progress: bool | None, command: tuple[str, ...]) -> None:  # fmt: skip
    """Run COMMAND under the HIP recorder and write one database per recorded kernel (`-- ./app args`).

    Each database holds the kernel's IR when mneme-cc embedded it (or --ir gives it) and the code
    object the application registered; it replays on the host backend without an AMD GPU.
    Exits with the application's code.
    """
    from mneme_hip import recorder

    code = recorder.main_record(rdb, command, ir_files, arch=arch, progress=progress, kernel=kernel, skip=skip,
                                max_recordings=max_recordings, record_ranks=record_ranks,
                                epilogue_format=epilogue_format, compression=compression)  # fmt: skip
    sys.exit(code)


@hip_group.command("info", epilog="Exit codes: 0 ok (also when no device is usable: the report says why); "
                                  "1 internal error; 2 invalid options.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def info_command(as_json: bool) -> None:
    """Show whether the HIP backend's device layer is usable here, and the recorder's status."""
    from mneme_hip import recorder
    from mneme_hip.backend import HipBackend

    availability = HipBackend().availability()
    report = {"usable": availability.usable, "reason": "" if availability.usable else availability.reason,
              "recorder": recorder.status()[1]}  # fmt: skip
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"backend: {'usable' if availability.usable else 'unusable: ' + availability.reason}")
    click.echo(f"recorder: {report['recorder']}")


@hip_group.command("build-recorder", epilog=EXIT_CODES_HELP)
@click.option("--force", is_flag=True, help="Rebuild even when the library is up to date.")
def build_recorder_command(force: bool) -> None:
    """Compile the HIP recorder (needs a C++ compiler and xxhash.h; no ROCm)."""
    from mneme_hip import recorder

    click.echo(f"built {recorder.build(force=force)}")


COMMANDS = [hip_group]
