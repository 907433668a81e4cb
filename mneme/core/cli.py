"""The `mneme` command. Subcommands come from plugins (hook `mneme_cli_commands`), built-ins included."""

from __future__ import annotations

import sys

import click

from mneme._version import __version__
from mneme.core import console, plugin_switches
from mneme.core.errors import FormatError, LimitError, MnemeError
from mneme.core.logs import configure as configure_logging
from mneme.core.printable import printable


class PluginGroup(click.Group):
    """A click group whose subcommands are the ones plugins provide."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # -p no:NAME and --trace-plugins must act before anything lists or loads plugins (--help does, while parsing).
        _disable_plugins(_plugin_options(args))
        if "--trace-plugins" in _global_options(args):
            plugin_switches.trace()
        return super().parse_args(ctx, args)

    def _plugin_commands(self) -> dict:
        from mneme.core import plugins  # the plugin manager: not needed to list commands from the index

        return {p.name: p for p in plugins.provided("command")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._plugin_commands()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        # Only the plugin that provides `name` is imported (the command index names it; issue 27).
        found = super().get_command(ctx, name)
        if found is None and name in (provided := self._plugin_commands()):
            found = provided[name].obj
        return found

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # `mneme --help` lists commands from the cached index, loading no plugin (issue 27, start-up).
        from mneme.core import command_index

        disabled = plugin_switches.disabled_names()
        # Plugins already loaded in this process (an embedding application's own) are listed as loaded.
        in_process = plugin_switches.loaded()
        index = None if in_process else command_index.load(disabled)
        if index is None:  # loads the plugins, which write the index again
            loaded = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
            index = {
                name: cmd.get_short_help_str(1000) for name, cmd in loaded.items() if cmd is not None and not cmd.hidden
            }
        if not index:
            return
        limit = formatter.width - 6 - max(len(name) for name in index)
        rows = [(name, click.utils.make_default_short_help(text, limit)) for name, text in sorted(index.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        words = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # the subcommand and its arguments
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the guard: one line, never a traceback (docs/security.md)
            if ctx.obj and ctx.obj.get("debug"):
                raise
            exc = resource_error(exc, words)
            _report(exc)
            ctx.exit(exc.exit_code if isinstance(exc, MnemeError) else 1)


def resource_error(exc: BaseException, words: list[str]) -> BaseException:
    """A MemoryError or OSError as the limit or file it is about; anything else unchanged.

    `words` are the command's arguments: the inputs among them (existing paths) are named, since
    one of them asked for the memory (docs/security.md, "Every failure is one line").
    """
    import os

    inputs = [w for w in words[1:] if not w.startswith("-") and os.path.exists(w)][:3]
    where = f"`mneme {words[0]}`" if words else "the command"
    if inputs:
        where += " on " + ", ".join(inputs)
    if isinstance(exc, MemoryError):
        from mneme.core import envvars, limits

        cap = envvars.get(limits.variable("worker_data_bytes"))
        held = f"the cap {limits.variable('worker_data_bytes')}={cap}" if cap else "the machine's memory"
        return LimitError(
            f"out of memory in {where}: the input asks for more memory than {held} allows "
            f"(RLIMIT_DATA); check the sizes it declares, or raise {limits.variable('worker_data_bytes')} "
            "if it is trusted"
        )
    if isinstance(exc, OSError) and not isinstance(exc, MnemeError):
        import errno

        name = exc.filename if exc.filename is not None else (inputs[0] if inputs else None)
        what = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            return MnemeError(f"{where}: {what}{f' ({name})' if name else ''}: a resource of this machine ran out")
        error = (
            FormatError(os.fsdecode(name), f"{what} (errno {exc.errno})")
            if name is not None
            else MnemeError(f"{where}: {what}")
        )
        if exc.errno not in (
            errno.ENOENT,
            errno.EACCES,
            errno.EPERM,
            errno.EISDIR,
            errno.ENOTDIR,
            errno.ELOOP,
            errno.ENAMETOOLONG,
        ):
            error.exit_code = 1  # the system failed, not the input
        return error
    return exc


def _report(exc: BaseException) -> None:
    """One line for an error: a MnemeError's message, or what went wrong unexpectedly."""
    err_console = console.current(err=True)
    if isinstance(exc, MnemeError):
        from rich.markup import escape

        # a message may quote names from a recording: control characters escaped, lines kept apart by indent
        text = "\n  ".join(printable(line) for line in str(exc).split("\n"))
        err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
        return
    text = printable(" ".join(str(exc).split())[:300].encode("utf-8", "backslashreplace").decode("utf-8"))
    err_console.print(
        f"error: unexpected {type(exc).__name__}: {text} (run with --debug for the traceback)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def _plugin_options(args: list[str]) -> list[str]:
    """The values of -p given before the subcommand."""
    values, i = [], 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "-p" and i + 1 < len(args):
            values.append(args[i + 1])
            i += 1
        elif args[i].startswith("-p") and not args[i].startswith("--"):
            values.append(args[i][2:])
        i += 1
    return values


def _global_options(args: list[str]) -> list[str]:
    """The options given before the subcommand."""
    found = []
    for arg in args:
        if not arg.startswith("-"):
            break
        found.append(arg)
    return found


def _disable_plugins(values: list[str]) -> None:
    names = []
    for value in values:
        if not value.startswith("no:") or not value[3:]:
            raise click.UsageError(f"-p {value}: use -p no:NAME to disable the plugin NAME (see `mneme plugins`)")
        names.append(value[3:])
    if names:
        plugin_switches.disable(names)


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mneme")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log output: -v info and the logs of libraries Mneme drives (result store, samplers), -vv debug.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only results and errors (no progress, no warnings).")
@click.option(
    "-p",
    "plugin_options",
    multiple=True,
    metavar="no:NAME",
    help="Disable the plugin NAME (repeatable; also MNEME_DISABLE_PLUGINS=a,b). `mneme plugins` lists them.",
)
@click.option(
    "--trace-plugins",
    is_flag=True,
    help="Print every plugin hook call, its arguments and results, to stderr (pluggy's tracing; "
    "also MNEME_TRACE_PLUGINS=1 or =FILE).",
)
@click.pass_context
def cli(
    ctx: click.Context, debug: bool, verbose: int, quiet: bool, plugin_options: tuple[str, ...], trace_plugins: bool
) -> None:
    """Record GPU kernel launches, replay them as verified experiments, and autotune them.

    Exit codes: 0 ok, 1 internal error, 2 invalid input (options, a malformed or unknown
    file), 3 not verified (the variant or the recorded baseline), 130 interrupted (143 on
    SIGTERM). docs/cli.md lists them per command.
    """
    if quiet and (verbose or debug):
        raise click.UsageError("-q/--quiet cannot be combined with -v/--verbose or --debug")
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["quiet"] = quiet
    # Commands print through mneme.core.console.current(); logging takes the same stderr console on a terminal.
    configure_logging(-1 if quiet else (2 if debug else verbose))


def main(argv: list[str] | None = None) -> None:
    from mneme.compat.cli_aliases import rewrite  # the original Mneme's option spellings

    try:
        argv = rewrite(sys.argv[1:] if argv is None else argv)
    except MnemeError as exc:  # an original option Mneme spells differently: say how, exit as invalid input
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    try:
        cli.main(args=argv, prog_name="mneme")
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - raised while loading plugins, before a subcommand runs
        if "--debug" in (argv if argv is not None else sys.argv):
            raise
        exc = resource_error(exc, [])
        _report(exc)
        sys.exit(exc.exit_code if isinstance(exc, MnemeError) else 1)
