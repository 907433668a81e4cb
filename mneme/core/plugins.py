"""The plugin manager: loads entry-point group ``mneme`` and indexes what plugins provide."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Iterable
from typing import Any

import attrs
import pluggy

from mneme.core import hookspecs
from mneme.core.errors import PluginError

log = logging.getLogger(__name__)

# hook name -> the kind of thing it provides, as shown to users
KINDS = {
    "mneme_backends": "backend",
    "mneme_transforms": "transform",
    "mneme_samplers": "sampler",
    "mneme_spaces": "space",
    "mneme_ir_sources": "ir-source",
    "mneme_cli_commands": "command",
}


@attrs.frozen
class Provided:
    """One thing a plugin provides: its kind, name, object, and the distribution it came from."""

    kind: str
    name: str
    obj: Any
    plugin: str
    distribution: str
    version: str


@functools.lru_cache(maxsize=1)
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with every installed ``mneme`` entry point loaded."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    _broken.clear()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != hookspecs.PROJECT or pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
                _origins[ep.name] = (dist.metadata["name"], dist.version)
            except Exception as exc:  # one broken plugin must not take the others down
                dist_name = dist.metadata["name"]
                _broken.append(BrokenPlugin(ep.name, ep.value, dist_name, dist.version, f"{type(exc).__name__}: {exc}"))
                log.warning("plugin %r (%s from %s) failed to load: %s", ep.name, ep.value, dist_name, exc)
    return pm


@attrs.frozen
class BrokenPlugin:
    """An entry point that failed to load, with the reason."""

    name: str
    value: str
    distribution: str
    version: str
    error: str


_broken: list[BrokenPlugin] = []
# plugin name -> (distribution, version) of the entry point that registered it
_origins: dict[str, tuple[str, str]] = {}


def broken() -> list[BrokenPlugin]:
    """Entry points of group ``mneme`` that failed to load in this process."""
    get_plugin_manager()
    return list(_broken)


def reset() -> None:
    """Forget the loaded plugin manager (after installing a plugin in this process)."""
    get_plugin_manager.cache_clear()
    _index.cache_clear()


@functools.lru_cache(maxsize=1)
def _index() -> tuple[Provided, ...]:
    pm = get_plugin_manager()
    provided: list[Provided] = []
    for plugin in pm.get_plugins():
        plugin_name = pm.get_name(plugin) or repr(plugin)
        dist, version = _origins.get(plugin_name, ("(registered in process)", ""))
        for hook, kind in KINDS.items():
            impl = getattr(plugin, hook, None)
            if impl is None:
                continue
            try:
                objects = list(impl() or ())
            except Exception as exc:  # name the plugin instead of failing every command anonymously
                raise PluginError(f"plugin {plugin_name!r} ({dist}) failed in {hook}: {exc!r}") from exc
            for obj in objects:
                name = obj.name if hasattr(obj, "name") else getattr(obj, "__name__", repr(obj))
                provided.append(Provided(kind, name, obj, plugin_name, dist, version))
    return tuple(provided)


def provided(kind: str | None = None) -> list[Provided]:
    """Everything registered plugins provide, optionally of one kind."""
    return [p for p in _index() if kind is None or p.kind == kind]


def registry(kind: str) -> dict[str, Any]:
    """Name -> object for one kind; two plugins providing the same name is an error."""
    found: dict[str, Provided] = {}
    for item in provided(kind):
        if item.name in found:
            other = found[item.name]
            raise PluginError(
                f"{kind} {item.name!r} is provided by both {other.distribution} ({other.plugin}) "
                f"and {item.distribution} ({item.plugin}); uninstall one of them"
            )
        found[item.name] = item
    return {name: item.obj for name, item in found.items()}


def lookup(kind: str, name: str) -> Any:
    """The object of one kind with this name, or a PluginError listing the known names."""
    table = registry(kind)
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise PluginError(f"unknown {kind} {name!r}; known: {known}")
    return table[name]


def names(kind: str) -> list[str]:
    return sorted(registry(kind))


def register(plugin: object, name: str | None = None) -> None:
    """Register a plugin object in this process (tests, embedding applications)."""
    get_plugin_manager().register(plugin, name=name)
    _index.cache_clear()


def iter_kinds() -> Iterable[str]:
    return KINDS.values()
