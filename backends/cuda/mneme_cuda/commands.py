"""CLI commands of the CUDA backend: `mneme record` and `mneme cuda ...`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mneme.core.console import current as _console
from mneme.core.errors import EXIT_CODES_HELP
from mneme.core.recorder.options import progress_option, selection_options, snapshot_options
from mneme_cuda import cupti


@click.command("record", epilog=EXIT_CODES_HELP, context_settings={"ignore_unknown_options": True})
@selection_options
@click.option("--ir", "ir_files", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Device LLVM IR (.ll/.bc) of the application's kernels; repeat for several files. Optional: "
                   "IR that mneme-cc embedded, or Triton's cache, is found without it.")
@snapshot_options
@click.option("--timer", type=click.Choice(cupti.TIMERS), default="auto", show_default=True,
              help="How the launches timed inside the application are timed: cupti (the kernel's own GPU "
                   "timestamps), events (CUDA events on its stream), auto (cupti where libcupti opens).")
@progress_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record_command(rdb: Path, kernel: str | None, skip: int, max_recordings: int, record_ranks: str | None,
                   ir_files: tuple[Path, ...], epilogue_format: str, compression: str, timer: str,
                   progress: bool | None, command: tuple[str, ...]) -> None:  # fmt: skip
    """Run COMMAND under the CUDA recorder and write one database per recorded kernel (`-- ./app args`).

    Each database holds the kernel's IR when it is found and the cubin/PTX the driver loaded;
    kernels without IR replay with `mneme replay --mode cubin`. While the application runs, a
    progress line shows what was recorded so far; a table of the databases follows. Exits with
    the application's code.
    """
    from mneme_cuda import recorder

    code = recorder.main_record(rdb, command, ir_files, kernel, skip, max_recordings, record_ranks=record_ranks,
                                epilogue_format=epilogue_format, progress=progress,
                                compression=compression, timer=timer)  # fmt: skip
    sys.exit(code)


@click.group("cuda")
def cuda_group() -> None:
    """The CUDA backend: device, driver and recorder status."""


@cuda_group.command("info", epilog="Exit codes: 0 ok (also when no device is usable: the report says why); "
                                   "1 internal error; 2 invalid options.")  # fmt: skip
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


COMMANDS = [record_command, cuda_group]
