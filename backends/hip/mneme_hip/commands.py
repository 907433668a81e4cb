"""CLI commands of the HIP backend (`mneme hip info`, `mneme hip build-recorder`, `mneme hip record`: an alias of
`mneme record --backend hip`) and its recorder."""

from __future__ import annotations

from pathlib import Path

import click

from mneme.core.errors import EXIT_CODES_HELP
from mneme.core.recorder.command import record_command
from mneme.core.recorder.recorders import Recorder


@click.group("hip")
def hip_group() -> None:
    """The HIP backend: its native recorder (not yet run on an AMD GPU)."""


class HipRecorder(Recorder):
    """The HIP recorder: programs that link the HIP runtime or carry a HIP fat binary."""

    name = "hip"
    description = "records launches of programs that use the HIP runtime API"
    priority = 20  # as its backend
    libraries = ("libamdhip64.so",)
    sections = (".hip_fatbin",)

    def options(self) -> list:
        return [
            click.Option(
                ["--arch"],
                default="gfx90a",
                show_default=True,
                help="HIP: the GPU the application ran on (gfxNNN): whose code object and IR the databases hold.",
            )
        ]

    def record(self, rdb: Path, command, ir_files, *, arch: str | None = None, **settings) -> int:
        """Run `command` under the HIP recorder, then finalize (`mneme_hip.recorder.main_record`).

        `settings`: the options every recorder takes, by name (`Recorder.record`).
        """
        from mneme_hip import recorder

        return recorder.main_record(rdb, command, ir_files, arch=arch or recorder.DEFAULT_ARCH, **settings)


hip_group.add_command(record_command("hip"))


@hip_group.command(
    "info",
    epilog="Exit codes: 0 ok (also when no device is usable: the report says why); "
    "1 internal error; 2 invalid options.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def info_command(as_json: bool) -> None:
    """Show whether the HIP backend's device layer is usable here, and the recorder's status."""
    from mneme_hip import recorder
    from mneme_hip.backend import HipBackend

    availability = HipBackend().availability()
    report = {
        "usable": availability.usable,
        "reason": "" if availability.usable else availability.reason,
        "recorder": recorder.status()[1],
    }
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
