"""The `mneme` command. Subcommands come from plugins (hook `mneme_cli_commands`), built-ins included."""

from __future__ import annotations

import logging
import sys

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from mneme import __version__
from mneme.core import plugins
from mneme.core.errors import MnemeError

console = Console()
err_console = Console(stderr=True)


class PluginGroup(click.Group):
    """A click group whose subcommands are the ones plugins provide."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # -p no:NAME must act before anything lists or loads plugins (--help does, while parsing).
        _disable_plugins(_plugin_options(args))
        return super().parse_args(ctx, args)

    def _plugin_commands(self) -> dict[str, click.Command]:
        return {p.name: p.obj for p in plugins.provided("command")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._plugin_commands()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return super().get_command(ctx, name) or self._plugin_commands().get(name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except MnemeError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            ctx.exit(exc.exit_code)


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


def _disable_plugins(values: list[str]) -> None:
    names = []
    for value in values:
        if not value.startswith("no:") or not value[3:]:
            raise click.UsageError(f"-p {value}: use -p no:NAME to disable the plugin NAME (see `mneme plugins`)")
        names.append(value[3:])
    if names:
        plugins.disable(names)


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mneme")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("-p", "plugin_options", multiple=True, metavar="no:NAME",
              help="Disable the plugin NAME (repeatable; also MNEME_DISABLE_PLUGINS=a,b). `mneme plugins` lists them.")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int, plugin_options: tuple[str, ...]) -> None:
    """Record GPU kernel launches, replay them as verified experiments, and autotune them."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    # What commands print to: plugins take these from the context, never from this module.
    ctx.obj["console"] = console
    ctx.obj["err_console"] = err_console
    level = logging.WARNING - 10 * min(verbose, 2)
    if debug:
        level = logging.DEBUG
    logging.basicConfig(level=level, format="%(message)s", handlers=[RichHandler(console=err_console)], force=True)


def main(argv: list[str] | None = None) -> None:
    from mneme.compat.cli_aliases import rewrite  # the original Mneme's option spellings

    argv = rewrite(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=argv, prog_name="mneme")
    except MnemeError as exc:  # raised while loading plugins, before a subcommand runs
        if "--debug" in (argv if argv is not None else sys.argv):
            raise
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
