"""`mneme record`: run a program under the native recorder of the backend that owns its GPU API.

The command belongs to the core (registered by the ``core-commands`` plugin); each backend adds
its recorder (hook ``mneme_recorders``) with the options of its own (a timer, an architecture),
which appear in `mneme record --help` once that recorder is installed. A backend may mount the
same command under its group with the backend fixed (an alias, ``mneme NAME record``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from mneme.core.errors import EXIT_CODES_HELP, UsageError

log = logging.getLogger(__name__)

HELP = """Run COMMAND under a native recorder and write one database per recorded kernel (`-- ./app args`).

The recorder is the one of the backend that owns the program's GPU API, as the libraries the
program links or the device code it carries show (`mneme plugins` lists the installed recorders);
--backend picks one by name. Each database holds the kernel's IR when it is found and the code image the
application loaded. While the application runs, a progress line shows what was recorded so far; a
table of the databases follows. Exits with the application's code.
"""


class _RecordCommand(click.Command):
    """A record command whose options (the shared ones, then each recorder's) are made when it is first
    parsed or shown.

    Listing commands (`mneme --help`, `mneme plugins`) builds the command without importing the
    recorder package or any recorder; `backend` fixes the recorder (an alias under a backend's group).
    """

    def __init__(self, *args, backend: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.backend = backend
        self._owners: dict[str, set[str]] | None = None

    def owners(self) -> dict[str, set[str]]:
        """Option name -> the recorders that declare it; makes the options on first call."""
        if self._owners is None:
            from mneme.core import plugins

            self._owners = {}
            self.params = _shared_params(self.backend)
            names = [self.backend] if self.backend else plugins.names("recorder")
            for name in names:
                for option in _recorder(name).options():
                    if option.name not in self._owners:
                        self.params.insert(len(self.params) - 1, option)  # before the COMMAND argument
                    self._owners.setdefault(option.name, set()).add(name)
        return self._owners

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self.owners()
        return super().get_params(ctx)


def _recorder(name: str):
    from mneme.core import plugins

    known = plugins.names("recorder")
    if name not in known:  # the user's --backend: invalid input (exit 2), not a broken plugin
        raise UsageError(
            f"unknown recorder {name!r}; known: {', '.join(known) or 'none'} (`mneme plugins` lists "
            "the installed backends)"
        )
    return plugins.lookup("recorder", name, what=f"the {name} recorder")()


def _run(
    ctx: click.Context,
    backend_name: str | None,
    rdb: Path,
    kernel: str | None,
    skip: int,
    max_recordings: int,
    record_ranks: str | None,
    ir_files: tuple[Path, ...],
    epilogue_format: str,
    compression: str,
    progress: bool | None,
    command: tuple[str, ...],
    **own,
) -> None:
    from mneme.core import plugins

    self: _RecordCommand = ctx.command  # type: ignore[assignment]
    backend_name = self.backend or backend_name
    if backend_name:
        recorder = _recorder(backend_name)
    else:
        from mneme.core.recorder.program import inspect

        program = inspect(command)
        recorders = plugins.registry("recorder")
        recorder = plugins.hook().mneme_recorder_for_program(program=program, recorders=recorders)
        if recorder is None:
            raise UsageError(
                "no recorder is installed: install a GPU backend's distribution; "
                "`mneme plugins` lists what is installed"
            )
        if recorder.claims(program):
            log.info("recording with the %s recorder (%s uses its GPU API)", recorder.name, command[0])
        elif len(recorders) > 1:
            log.warning(
                "%s names no GPU library or device code that a recorder knows; recording with the %s "
                "recorder (choose with --backend %s)",
                command[0],
                recorder.name,
                "|".join(sorted(recorders)),
            )
    mine = {option.name for option in recorder.options()}
    for name in own:
        if name not in mine and ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            owners = " or ".join(sorted(self.owners().get(name, ())))
            raise UsageError(
                f"--{name.replace('_', '-')} is an option of the {owners} recorder, but {command[0]} "
                f"records with the {recorder.name} recorder; drop it, or choose one with --backend"
            )
    code = recorder.record(
        rdb,
        command,
        ir_files,
        kernel=kernel,
        skip=skip,
        max_recordings=max_recordings,
        record_ranks=record_ranks,
        epilogue_format=epilogue_format,
        compression=compression,
        progress=progress,
        **{k: v for k, v in own.items() if k in mine},
    )
    sys.exit(code)


def _shared_params(backend: str | None) -> list[click.Parameter]:
    """The options every recorder takes (`mneme.core.recorder.options`), --backend, and the COMMAND argument."""
    from mneme.core.recorder.options import progress_option, selection_options, snapshot_options

    @selection_options
    @click.option(
        "--ir",
        "ir_files",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Device LLVM IR (.ll/.bc) of the application's kernels; repeat for several files. Optional: "
        "IR that mneme-cc embedded, or Triton's cache, is found without it.",
    )
    @snapshot_options
    @progress_option
    def options():
        pass

    params: list[click.Parameter] = list(reversed(options.__click_params__))  # click stores them bottom-up
    if backend is None:
        params.append(
            click.Option(
                ["--backend", "backend_name"],
                default=None,
                metavar="NAME",
                help="The recorder to use (a backend's name; `mneme plugins` lists the installed "
                "ones) instead of the one that owns the program's GPU API.",
            )
        )
    params.append(click.Argument(["command"], nargs=-1, required=True, type=click.UNPROCESSED))
    return params


def record_command(backend: str | None = None) -> click.Command:
    """The `record` command (`backend`: always this backend's recorder, for an alias under its group)."""
    help_text = HELP if backend is None else f"Alias of `mneme record --backend {backend}`.\n\n" + HELP

    @click.pass_context
    def callback(ctx: click.Context, **values) -> None:
        values.setdefault("backend_name", None)
        _run(ctx, **values)

    return _RecordCommand(
        "record",
        callback=callback,
        help=help_text,
        epilog=EXIT_CODES_HELP,
        context_settings={"ignore_unknown_options": True},
        backend=backend,
    )
