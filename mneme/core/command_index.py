"""The `mneme` command's names and one-line help, cached so `mneme --help` loads no plugin.

Loading every plugin imports LLVM, numpy, the result store's library and the backends
(~0.5 s); listing the commands needs only their names and help. The index is written after a full load and is
valid while the installed ``mneme`` entry points, the disabled plugins and the source files
that define the commands are unchanged (checked by metadata and ``stat``, not by import;
docs/design/interfaces.md "Plugins"). It also names each command's plugin, so running one
command imports only that plugin's command modules. Anything else loads the plugins as before.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FORMAT = 2


def _path() -> Path:
    from mneme.core import envvars

    return Path(envvars.get("MNEME_CACHE_DIR")).expanduser() / "command-index.json"


def _key(disabled: set[str]) -> list:
    """What the index depends on besides its source files: the installed entry points and disabled plugins."""
    from mneme.core.entrypoints import entry_points

    entries = sorted((dist, version, ep.name, ep.value) for dist, version, ep in entry_points())
    # The package's own folder: another checkout of the same version (PYTHONPATH, a second clone) has other commands.
    package = str(Path(__file__).resolve().parents[1])
    return [FORMAT, sys.prefix, package, sys.version_info[:2], sorted(disabled), [list(e) for e in entries]]


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def load(disabled: set[str]) -> dict[str, str] | None:
    """Command name -> one-line help of the listed (not hidden) commands, or None (then load the plugins)."""
    entries = load_entries(disabled)
    if entries is None:
        return None
    return {name: entry["help"] for name, entry in entries.items() if not entry["hidden"]}


def load_entries(disabled: set[str]) -> dict[str, dict] | None:
    """Command name -> {"help", "plugin", "hidden"} from a valid index, or None (then load the plugins)."""
    try:
        data = json.loads(_path().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != json.loads(json.dumps(_key(disabled))):
        return None
    files = data.get("files")
    commands = data.get("commands")
    if not isinstance(files, dict) or not isinstance(commands, dict):
        return None
    if any(_mtime(path) != mtime for path, mtime in files.items()):
        return None
    if not all(isinstance(v, dict) and {"help", "plugin", "hidden"} <= set(v) for v in commands.values()):
        return None
    return {
        str(k): {"help": str(v["help"]), "plugin": str(v["plugin"]), "hidden": bool(v["hidden"])}
        for k, v in commands.items()
    }


def _source(command) -> str | None:
    import inspect

    callback = getattr(command, "callback", None)
    target = callback or type(command)
    try:
        return inspect.getsourcefile(inspect.unwrap(target))
    except (TypeError, OSError):
        return None


def save(disabled: set[str], commands: dict, limit: int = 1000) -> None:
    """Write the index for these loaded commands (name -> (click.Command, plugin name)); failures are ignored."""
    files: dict[str, int | None] = {}
    for module in list(sys.modules.values()):  # every loaded plugin module, not only commands'
        path = getattr(module, "__file__", None)
        name = getattr(module, "__name__", "")
        if path and (name.startswith("mneme") or name.split(".")[0] in _plugin_packages()):
            files[path] = _mtime(path)
    for command, _ in commands.values():
        source = _source(command)
        if source:
            files[source] = _mtime(source)
    data = {
        "key": _key(disabled),
        "files": files,
        "commands": {
            name: {"help": cmd.get_short_help_str(limit), "plugin": plugin, "hidden": bool(cmd.hidden)}
            for name, (cmd, plugin) in commands.items()
        },
    }
    path = _path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


def _plugin_packages() -> set[str]:
    from mneme.core.entrypoints import entry_points

    return {ep.value.split(":")[0].split(".")[0] for _, _, ep in entry_points()}
