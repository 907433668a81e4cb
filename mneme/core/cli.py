"""The `mneme` command. Subcommands come from plugins (hook `mneme_cli_commands`), built-ins included."""

from __future__ import annotations

import logging
import sys

import click
from rich.console import Console
from rich.logging import RichHandler

from mneme import __version__
from mneme.core.errors import MnemeError

console = Console()
err_console = Console(stderr=True)


class PluginGroup(click.Group):
    """A click group whose subcommands are the ones plugins provide."""

    def _plugin_commands(self) -> dict[str, click.Command]:
        from mneme.core import plugins

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
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            ctx.exit(exc.exit_code)


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mneme")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int) -> None:
    """Record GPU kernel launches, replay them as verified experiments, and autotune them."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    level = logging.WARNING - 10 * min(verbose, 2)
    if debug:
        level = logging.DEBUG
    logging.basicConfig(level=level, format="%(message)s", handlers=[RichHandler(console=err_console)], force=True)


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="mneme")
    except MnemeError as exc:  # raised while loading plugins, before a subcommand runs
        if "--debug" in (argv if argv is not None else sys.argv):
            raise
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    from mneme.core.interrupt import main as guarded_main

    guarded_main()
