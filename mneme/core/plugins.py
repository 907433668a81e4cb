"""The plugin manager: loads entry-point group ``mneme`` and indexes what plugins provide."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import os
from collections.abc import Iterable
from typing import Any

import attrs
import click
import pluggy

from mneme.core import hookspecs, knob
from mneme.core.errors import MissingExtraError, MnemeError, PluginError

log = logging.getLogger(__name__)

# hook name -> the kind of thing it provides, as shown to users
KINDS = {
    "mneme_backends": "backend",
    "mneme_transforms": "transform",
    "mneme_samplers": "sampler",
    "mneme_spaces": "space",
    "mneme_ir_sources": "ir-source",
    "mneme_parameters": "parameter",
    "mneme_cli_commands": "command",
}
DISABLE_ENV = "MNEME_DISABLE_PLUGINS"
# Registered by the manager itself, not an entry point: the core's own stages' knobs. Never disabled.
CORE_PLUGIN = "core"


@attrs.frozen
class Provided:
    """One thing a plugin provides: its kind, name, object, the distribution it came from, and
    the extra to install when a module it needs is missing ("" when it is usable)."""

    kind: str
    name: str
    obj: Any
    plugin: str
    distribution: str
    version: str
    missing_extra: str = ""


_disabled_by_cli: set[str] = set()


def disable(names: Iterable[str]) -> None:
    """Disable plugins by name in this process (``mneme -p no:NAME``), as if not installed."""
    _disabled_by_cli.update(n.strip() for n in names if n.strip())
    # Worker processes (tuning, parallel code generation) must see the same plugins.
    os.environ[DISABLE_ENV] = ",".join(sorted(disabled_names()))
    reset()


def disabled_names() -> set[str]:
    """Plugins disabled by ``-p no:NAME`` and the MNEME_DISABLE_PLUGINS variable (comma-separated)."""
    from_env = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    return _disabled_by_cli | from_env


@functools.lru_cache(maxsize=1)
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with every installed ``mneme`` entry point loaded.

    Disabled plugins are not loaded; a plugin whose ``mneme_replaces`` names others takes
    their place (they are loaded, since only the replacer says so, but not registered).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(knob, name=CORE_PLUGIN)  # the core's own knobs
    _broken.clear()
    _origins.clear()
    _replaced.clear()
    disabled = disabled_names() - {CORE_PLUGIN}
    loaded: dict[str, object] = {}
    _seen.clear()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != hookspecs.PROJECT:
                continue
            _seen.add(ep.name)
            if ep.name in loaded or ep.name in disabled or ep.name == CORE_PLUGIN:
                continue
            try:
                loaded[ep.name] = ep.load()
                _origins[ep.name] = (dist.metadata["name"], dist.version)
            except Exception as exc:  # one broken plugin must not take the others down
                dist_name = dist.metadata["name"]
                _broken.append(BrokenPlugin(ep.name, ep.value, dist_name, dist.version, f"{type(exc).__name__}: {exc}"))
                log.warning("plugin %r (%s from %s) failed to load: %s", ep.name, ep.value, dist_name, exc)
    for name, plugin in loaded.items():
        for target in getattr(plugin, "mneme_replaces", ()) or ():
            if target in loaded and target != name:
                _replaced[target] = name
    for name, plugin in loaded.items():
        if name not in _replaced:
            pm.register(plugin, name=name)
    for name in sorted(disabled - _seen):
        log.warning("cannot disable plugin %r: no plugin of that name is installed (`mneme plugins` lists them)", name)
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
# entry-point names of group ``mneme`` installed, loaded or not
_seen: set[str] = set()
# replaced plugin name -> the plugin that replaces it
_replaced: dict[str, str] = {}


def disabled() -> list[str]:
    """Installed plugins that are disabled in this process."""
    get_plugin_manager()
    return sorted(disabled_names() & _seen)


def replaced() -> dict[str, str]:
    """Installed plugins another plugin replaces (name -> the replacer's name)."""
    get_plugin_manager()
    return dict(_replaced)


def origin(plugin_name: str) -> tuple[str, str]:
    """(distribution, version) a plugin came from."""
    get_plugin_manager()
    return _origins.get(plugin_name, ("mneme (core)" if plugin_name == CORE_PLUGIN else "(registered in process)", ""))


def broken() -> list[BrokenPlugin]:
    """Entry points of group ``mneme`` that failed to load in this process."""
    get_plugin_manager()
    return list(_broken)


def reset() -> None:
    """Forget the loaded plugin manager (after installing or disabling a plugin in this process)."""
    get_plugin_manager.cache_clear()
    _index_hook.cache_clear()
    declared_knobs.cache_clear()


def _missing_extra(plugin: object) -> str:
    """The extra to install for a plugin whose ``mneme_requires`` ({module: extra}) names a missing module."""
    for module, extra in (getattr(plugin, "mneme_requires", None) or {}).items():
        try:
            if importlib.util.find_spec(module) is None:
                return extra
        except (ImportError, ValueError):
            return extra
    return ""


def _call(impl, hook: str):
    if hook == "mneme_cli_commands":
        group = click.Group()  # what the plugin adds to it is mounted on the `mneme` group
        kwargs = {"cli": group, "registry": registry_view()}
        returned = impl.function(**{k: kwargs[k] for k in impl.argnames})
        return list(returned or ()) + [c for c in group.commands.values() if c not in (returned or ())]
    return list(impl.function() or ())


@functools.lru_cache(maxsize=None)
def _index_hook(hook: str) -> tuple[Provided, ...]:
    # One hook at a time: the CLI hook reads the parameters' declarations while it runs.
    pm = get_plugin_manager()
    kind = KINDS[hook]
    provided: list[Provided] = []
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):  # registration order
        plugin_name = impl.plugin_name
        dist, version = origin(plugin_name)
        try:
            objects = _call(impl, hook)
        except MnemeError:
            raise
        except Exception as exc:  # name the plugin instead of failing every command anonymously
            raise PluginError(f"plugin {plugin_name!r} ({dist}) failed in {hook}: {exc!r}") from exc
        missing = _missing_extra(impl.plugin)
        for obj in objects:
            name = obj.name if hasattr(obj, "name") else getattr(obj, "__name__", repr(obj))
            provided.append(Provided(kind, name, obj, plugin_name, dist, version, missing))
    return tuple(provided)


def _index() -> tuple[Provided, ...]:
    return tuple(item for hook in KINDS for item in _index_hook(hook))


def provided(kind: str | None = None) -> list[Provided]:
    """Everything registered plugins provide, optionally of one kind."""
    if kind is None:
        return list(_index())
    return [p for hook, k in KINDS.items() if k == kind for p in _index_hook(hook)]


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


def lookup(kind: str, name: str, *, what: str | None = None) -> Any:
    """The object of one kind with this name; a PluginError listing the known names, or a
    MissingExtraError naming the extra its plugin needs (`what` names it in that message)."""
    table = registry(kind)
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise PluginError(f"unknown {kind} {name!r}; known: {known}")
    item = next(p for p in provided(kind) if p.name == name)
    if item.missing_extra:
        raise MissingExtraError(what or f"{kind} {name!r}", item.missing_extra)
    return table[name]


def names(kind: str) -> list[str]:
    return sorted(registry(kind))


def register(plugin: object, name: str | None = None) -> None:
    """Register a plugin object in this process (tests, embedding applications)."""
    get_plugin_manager().register(plugin, name=name)
    _index_hook.cache_clear()
    declared_knobs.cache_clear()


@functools.lru_cache(maxsize=1)
def declared_knobs() -> dict[str, knob.Knob]:
    """Name -> declaration of every knob the registered plugins declare, checked (`mneme.core.params` uses them)."""
    found: dict[str, knob.Knob] = {}
    for item in provided("parameter"):
        declared = attrs.evolve(item.obj, plugin=item.plugin)
        if declared.name in knob.CORE_FIELDS or declared.name in ("schema", "knobs"):
            raise PluginError(f"plugin {item.plugin!r} ({item.distribution}) declares parameter {declared.name!r}, "
                              "a field of ExperimentConfiguration itself; rename it")
        if declared.name in found:
            raise PluginError(f"parameter {declared.name!r} is declared by both {found[declared.name].plugin!r} and "
                              f"{item.plugin!r}; disable one of them (mneme -p no:NAME)")
        try:
            declared.check(declared.default)
        except (TypeError, ValueError) as exc:
            raise PluginError(f"plugin {item.plugin!r} ({item.distribution}) declares parameter {declared.name!r} "
                              f"with a default its declaration refuses: {exc}") from None
        found[declared.name] = declared
    return found


def iter_kinds() -> Iterable[str]:
    return KINDS.values()


class RegistryView:
    """What a plugin may ask of the registry (handed to hooks such as `mneme_cli_commands`)."""

    provided = staticmethod(provided)
    registry = staticmethod(registry)
    lookup = staticmethod(lookup)
    names = staticmethod(names)

    @staticmethod
    def knobs() -> dict[str, knob.Knob]:
        return dict(declared_knobs())


def registry_view() -> RegistryView:
    return RegistryView()
