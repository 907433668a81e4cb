"""The recorder's progress, read from the raw folder it fills (no help from the native side)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import attrs


@attrs.frozen
class ProgressState:
    """What the recorder has written so far: recorded kernels, instances (complete launch
    folders), bytes on disk (launch folders, in-flight ones included, and code images), and
    launches being written now."""

    kernels: int = 0
    instances: int = 0
    bytes: int = 0
    in_flight: int = 0

    def line(self, seconds: float | None = None) -> str:
        text = (
            f"recording: {self.kernels} kernel{'s' if self.kernels != 1 else ''}, {self.instances} "
            f"instance{'s' if self.instances != 1 else ''}, {_human(self.bytes)} written"
        )
        if self.in_flight:
            text += f", {self.in_flight} launch{'es' if self.in_flight != 1 else ''} being written"
        if seconds is not None:
            text += f" ({seconds:.0f} s)"
        return text


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def _folder_bytes(folder: str) -> int:
    total = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:  # renamed or removed meanwhile
                    pass
    except (FileNotFoundError, NotADirectoryError):
        pass
    return total


class ProgressPoller:
    """Reads the recorder's progress from its folder, without any help from the native side.

    Complete launch folders (renamed from `.tmp` once whole) are read once: their manifest's
    kernel and their size are cached; in-flight `.tmp` folders and `images/` are measured on
    every poll. A poll costs one directory listing plus one manifest per new launch.
    """

    def __init__(self, raw_dir: Path):
        self.raw_dir = Path(raw_dir)
        self._done: dict[str, tuple[str, int]] = {}  # launch folder -> (kernel, bytes)

    def poll(self) -> ProgressState:
        in_flight = in_flight_bytes = image_bytes = 0
        try:
            with os.scandir(self.raw_dir) as entries:
                names = [(e.name, e.path) for e in entries]
        except FileNotFoundError:
            names = []
        for name, path in names:
            if name == "images":
                image_bytes = _folder_bytes(path)
            elif not name.startswith("launch-"):
                continue
            elif name.endswith(".tmp"):
                in_flight += 1
                in_flight_bytes += _folder_bytes(path)
            elif name not in self._done:
                try:
                    kernel = json.loads(Path(path, "manifest.json").read_text()).get("kernel", "")
                except (OSError, ValueError, AttributeError):
                    continue  # not a launch folder the recorder finished; looked at again next time
                self._done[name] = (str(kernel), _folder_bytes(path))
        return ProgressState(
            kernels=len({k for k, _ in self._done.values()}),
            instances=len(self._done),
            bytes=sum(b for _, b in self._done.values()) + in_flight_bytes + image_bytes,
            in_flight=in_flight,
        )


def watch(proc: subprocess.Popen, raw_dir: Path, console, interval: float = 0.5) -> int:
    """Wait for `proc`, showing the recorder's progress as one live line on `console`; its exit code.

    The line is redrawn every `interval` seconds; it stays on screen with the final figures.
    A console that is not a terminal gets the final line only.
    """
    import time

    from rich.live import Live
    from rich.text import Text

    poller = ProgressPoller(raw_dir)
    start = time.monotonic()

    def render() -> Text:
        return Text(poller.poll().line(time.monotonic() - start), style="cyan")

    if not console.is_terminal:
        code = proc.wait()
        console.print(render())
        return code
    with Live(render(), console=console, auto_refresh=False, transient=False) as live:
        while True:
            try:
                code = proc.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                live.update(render(), refresh=True)
        live.update(render(), refresh=True)
    return code
