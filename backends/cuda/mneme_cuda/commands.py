"""CLI commands of the CUDA backend (`mneme cuda ...`) and its recorder, which `mneme record` runs."""

from __future__ import annotations

from pathlib import Path

import click

from mneme.core.console import current as _console
from mneme.core.errors import EXIT_CODES_HELP
from mneme.core.recorder.recorders import Recorder


class CudaRecorder(Recorder):
    """The CUDA recorder: programs that link the CUDA runtime or driver, or carry a CUDA fat binary."""

    name = "cuda"
    description = "records launches of programs that use the CUDA runtime or driver API"
    priority = 30  # as its backend: chosen over HIP when a program claims neither
    libraries = ("libcudart.so", "libcuda.so")
    sections = (".nv_fatbin", "__nv_relfatbin")

    def options(self) -> list:
        from mneme_cuda import cupti

        return [
            click.Option(
                ["--timer"],
                type=click.Choice(cupti.TIMERS),
                default="auto",
                show_default=True,
                help="CUDA: how the launches timed inside the application are timed: cupti (the "
                "kernel's own GPU timestamps), events (CUDA events on its stream), auto (cupti "
                "where libcupti opens).",
            )
        ]

    def record(self, rdb: Path, command, ir_files, *, timer: str = "auto", **settings) -> int:
        """Run `command` under the CUDA recorder, then finalize (`mneme_cuda.recorder.main_record`).

        `settings`: the options every recorder takes, by name (`Recorder.record`).
        """
        from mneme_cuda import recorder

        return recorder.main_record(rdb, command, ir_files, timer=timer, **settings)


@click.group("cuda")
def cuda_group() -> None:
    """The CUDA backend: device, driver and recorder status."""


@cuda_group.command(
    "info",
    epilog="Exit codes: 0 ok (also when no device is usable: the report says why); "
    "1 internal error; 2 invalid options.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def info_command(as_json: bool) -> None:
    """Show the CUDA device, driver, bindings and whether the recorder is built."""
    from mneme_cuda import recorder
    from mneme_cuda.backend import CudaBackend

    backend = CudaBackend()
    availability = backend.availability()
    report = {"usable": availability.usable, "reason": "" if availability.usable else availability.reason}
    report["fingerprint"] = {key: str(value) for key, value in backend.fingerprint().items()}
    if availability.usable:
        report["arch"], report["devices"] = backend.arch(0), backend.device_count()
    report["recorder"] = recorder.status()[1]
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
        return
    _console().print(f"backend: {'usable' if availability.usable else 'unusable: ' + availability.reason}")
    for key, value in report["fingerprint"].items():
        _console().print(f"{key}: {value}")
    if availability.usable:
        _console().print(f"arch: {report['arch']}; devices: {report['devices']}")
    _console().print(f"recorder: {report['recorder']}")


@cuda_group.command("build-recorder", epilog=EXIT_CODES_HELP)
@click.option("--force", is_flag=True, help="Rebuild even when the library is up to date.")
def build_recorder_command(force: bool) -> None:
    """Compile the native recorder (needs a C++ compiler and the CUDA toolkit's cuda.h)."""
    from mneme_cuda import recorder

    _console().print(f"built {recorder.build(force=force)}")


COMMANDS = [cuda_group]
