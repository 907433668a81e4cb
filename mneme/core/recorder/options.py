"""The command-line options every backend's `record` command shares: where the databases go, which
launches are recorded, how snapshots are written, and the progress line. Each backend adds its own
options (a timer, an architecture) between them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from mneme.core.recorder.rawdir import COMPRESSIONS, EPILOGUE_FORMATS


def _apply(*decorators: Callable) -> Callable:
    def wrap(fn: Callable) -> Callable:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return wrap


selection_options = _apply(
    click.option(
        "-rdb",
        "--rdb",
        "rdb",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Folder for the recording databases.",
    ),
    click.option("--kernel", default=None, help="Record only kernels whose (mangled) name matches this regex."),
    click.option("--skip", default=0, show_default=True, help="Skip this many launches of each kernel first."),
    click.option("--max-recordings", default=4, show_default=True, help="Distinct instances recorded per kernel."),
    click.option(
        "--record-ranks",
        default=None,
        help="MPI ranks that record: 'all' or a list like 0,3 (default: rank 0 under a launcher).",
    ),
)
"""-rdb, --kernel, --skip, --max-recordings, --record-ranks."""

snapshot_options = _apply(
    click.option(
        "--epilogue-format",
        type=click.Choice(EPILOGUE_FORMATS),
        default="diff",
        show_default=True,
        help="Epilogue regions as a diff against the prologue, whole (compressed), or whichever fits each region.",
    ),
    click.option(
        "--compression",
        type=click.Choice(COMPRESSIONS),
        default="lz4",
        show_default=True,
        help="How snapshot regions are compressed: LZ4 restores about twice as fast as zstd for a few "
        "percent more disk; none stores them raw.",
    ),
)
"""--epilogue-format, --compression."""

progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="A live line (kernels, instances, bytes written) on stderr while the application runs "
    "[default: when stderr is a terminal].",
)
