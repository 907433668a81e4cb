"""The plugin manager: loads entry-point group ``mneme`` and indexes what plugins provide."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import click
import pluggy

from mneme.core import envvars, hookspecs, knob
from mneme.core.entrypoints import entry_points
from mneme.core.errors import MissingExtraError, MnemeError, PluginError
from mneme.core.plugin_switches import DISABLE_ENV, TRACE_ENV, disable, disabled_names, trace  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

# hook name -> the kind of thing it provides, as shown to users
KINDS = {
    "mneme_backends": "backend",
    "mneme_transforms": "transform",
    "mneme_samplers": "sampler",
    "mneme_spaces": "space",
    "mneme_ir_sources": "ir-source",
    "mneme_recording_formats": "recording-format",
    "mneme_recorders": "recorder",
    "mneme_parameters": "parameter",
    "mneme_cli_commands": "command",
}
# Registered by the manager itself, not an entry point: the core's own stages' knobs and its own
# implementations of the decision and pipeline hooks (mneme.core.corehooks). Never disabled.
CORE_PLUGIN = "core"
CORE_HOOKS_PLUGIN = "core-hooks"
CORE_PLUGINS = frozenset({CORE_PLUGIN, CORE_HOOKS_PLUGIN})


@attrs.frozen
class Described:
    """A provided class named without importing it: listed by name, imported on first use.

    `target` is ``"module:attr"``. For a backend, `availability` is ``"module:function"``
    returning a `mneme.core.backend.Availability` without loading LLVM or a device library,
    which `mneme plugins` calls instead of the backend's own. `description`, when given, is the
    class's own one-line `description` (a transform's), for listings (docs/design/interfaces.md).
    `priority`, when given, is the class's own (a backend's), so that choosing a backend for an
    architecture imports the candidates in priority order and stops at the first that claims it.
    """

    name: str
    target: str
    availability: str = ""
    description: str = ""
    priority: int | None = None

    def load(self) -> Any:
        obj = _import_target(self.target)
        for field in ("name", "description", "priority"):
            said = getattr(self, field)
            if said not in ("", None) and getattr(obj, field, said) != said:
                raise PluginError(
                    f"{self.target} is described with {field} {said!r} but has "
                    f"{getattr(obj, field)!r}; make the plugin's description match"
                )
        return obj


@functools.lru_cache(maxsize=None)
def _import_target(target: str) -> Any:
    import importlib

    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


@attrs.frozen
class Provided:
    """One thing a plugin provides: its kind, name, object, the distribution it came from, and
    the extra to install when a module it needs is missing ("" when it is usable).

    `ref` is what the plugin returned: the object, or a `Described` (or an indexed command) that
    `obj` loads on first use, so listing names loads no plugin module.
    """

    kind: str
    name: str
    ref: Any
    plugin: str
    distribution: str
    version: str
    missing_extra: str = ""

    @property
    def obj(self) -> Any:
        if isinstance(self.ref, (Described, _IndexedCommand)):
            return self.ref.load()
        return self.ref


@attrs.frozen
class _IndexedCommand:
    """A command known from the command index: loaded by calling only its plugin's hook."""

    plugin: str
    name: str

    def load(self) -> Any:
        commands = _plugin_commands(self.plugin)
        if self.name not in commands:
            raise PluginError(
                f"plugin {self.plugin!r} no longer provides command {self.name!r}; "
                "run `mneme plugins` again (its index is refreshed)"
            )
        return commands[self.name]


@functools.lru_cache(maxsize=1)
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with every installed ``mneme`` entry point loaded.

    Disabled plugins are not loaded; a plugin whose ``mneme_replaces`` names others takes
    their place (they are loaded, since only the replacer says so, but not registered).
    """
    from mneme.core import corehooks

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(knob, name=CORE_PLUGIN)  # the core's own knobs
    pm.register(corehooks, name=CORE_HOOKS_PLUGIN)  # the core's own backend choice and transform stage
    _broken.clear()
    _origins.clear()
    _replaced.clear()
    disabled = disabled_names() - CORE_PLUGINS
    loaded: dict[str, object] = {}
    _seen.clear()
    for dist_name, version, ep in entry_points():
        _seen.add(ep.name)
        if ep.name in loaded or ep.name in disabled or ep.name in CORE_PLUGINS:
            continue
        try:
            loaded[ep.name] = ep.load()
            _origins[ep.name] = (dist_name, version)
        except Exception as exc:  # one broken plugin must not take the others down
            _broken.append(BrokenPlugin(ep.name, ep.value, dist_name, version, f"{type(exc).__name__}: {exc}"))
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
    if envvars.get(TRACE_ENV):
        _trace(pm)
    return pm


def hook() -> pluggy.HookRelay:
    """The hooks of the process-wide plugin manager (``hook().mneme_backend_for_arch(arch=..., ...)``)."""
    return get_plugin_manager().hook


def _trace(pm: pluggy.PluginManager) -> None:
    """pluggy's tracing (``pm.enable_tracing``), written to stderr, or appended to the file MNEME_TRACE_PLUGINS names."""
    if getattr(pm, "_mneme_traced", False):
        return
    target = envvars.get(TRACE_ENV) or "1"

    def write(text: str) -> None:
        line = f"[mneme-trace pid {os.getpid()}] {text}"
        if target in ("1", "stderr"):
            sys.stderr.write(line)
            sys.stderr.flush()
        else:  # one write per call: lines of several processes do not interleave
            with open(target, "a", encoding="utf-8") as out:
                out.write(line)

    pm.trace.root.setwriter(write)
    pm.enable_tracing()
    pm._mneme_traced = True  # type: ignore[attr-defined]


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
# plugins registered by `register` in this process, not by entry points
_in_process: set[str] = set()


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
    entry_points.cache_clear()
    get_plugin_manager.cache_clear()
    _index_hook.cache_clear()
    _plugin_commands.cache_clear()
    declared_knobs.cache_clear()
    _in_process.clear()


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
    """One plugin's answer to a registration hook, called through pluggy (tracing and wrappers apply)."""
    pm = get_plugin_manager()
    others = [p for p in pm.get_plugins() if p is not impl.plugin]
    caller = pm.subset_hook_caller(hook, remove_plugins=others)
    if hook == "mneme_cli_commands":
        group = click.Group()  # what the plugin adds to it is mounted on the `mneme` group
        answers = caller(cli=group, registry=registry_view())
        returned = [c for answer in answers for c in (answer or ())]
        return returned + [c for c in group.commands.values() if c not in returned]
    return [item for answer in caller() for item in (answer or ())]


@functools.lru_cache(maxsize=None)
def _index_hook(hook: str) -> tuple[Provided, ...]:
    # One hook at a time: the CLI hook reads the parameters' declarations while it runs.
    pm = get_plugin_manager()
    if hook == "mneme_cli_commands" and not _in_process:
        indexed = _indexed_commands(pm)
        if indexed is not None:
            return indexed
    kind = KINDS[hook]
    provided: list[Provided] = []
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):  # registration order
        plugin_name = impl.plugin_name
        dist, version = origin(plugin_name)
        objects = _call_named(impl, hook)
        missing = _missing_extra(impl.plugin)
        for obj in objects:
            name = obj.name if hasattr(obj, "name") else getattr(obj, "__name__", repr(obj))
            provided.append(Provided(kind, name, obj, plugin_name, dist, version, missing))
    if hook == "mneme_cli_commands" and not _in_process:
        from mneme.core import command_index

        command_index.save(disabled_names(), {p.name: (p.ref, p.plugin) for p in provided})
    return tuple(provided)


def _call_named(impl, hook: str) -> list:
    try:
        return _call(impl, hook)
    except MnemeError:
        raise
    except Exception as exc:  # name the plugin instead of failing every command anonymously
        dist, _ = origin(impl.plugin_name)
        raise PluginError(f"plugin {impl.plugin_name!r} ({dist}) failed in {hook}: {exc!r}") from exc


def _indexed_commands(pm: pluggy.PluginManager) -> tuple[Provided, ...] | None:
    """The commands as the command index names them (no command module imported), or None when it is stale."""
    from mneme.core import command_index

    entries = command_index.load_entries(disabled_names())
    if entries is None:
        return None
    found = []
    for name, entry in sorted(entries.items()):
        plugin = pm.get_plugin(entry["plugin"])
        if plugin is None:
            return None
        dist, version = origin(entry["plugin"])
        found.append(
            Provided(
                "command",
                name,
                _IndexedCommand(entry["plugin"], name),
                entry["plugin"],
                dist,
                version,
                _missing_extra(plugin),
            )
        )
    return tuple(found)


@functools.lru_cache(maxsize=None)
def _plugin_commands(plugin_name: str) -> dict[str, Any]:
    """Name -> click command of the commands one plugin provides (its hook alone is called)."""
    for impl in get_plugin_manager().hook.mneme_cli_commands.get_hookimpls():
        if impl.plugin_name == plugin_name:
            return {command.name: command for command in _call_named(impl, "mneme_cli_commands")}
    return {}


def _index() -> tuple[Provided, ...]:
    return tuple(item for hook in KINDS for item in _index_hook(hook))


def provided(kind: str | None = None) -> list[Provided]:
    """Everything registered plugins provide, optionally of one kind."""
    if kind is None:
        return list(_index())
    return [p for hook, k in KINDS.items() if k == kind for p in _index_hook(hook)]


def registry(kind: str) -> dict[str, Any]:
    """Name -> object for one kind (each loaded); two plugins providing the same name is an error."""
    return {name: item.obj for name, item in _unique(kind).items()}


class LazyRegistry(Mapping):
    """Name -> object for one kind, like `registry`, but each object is imported when first looked up."""

    def __init__(self, kind: str):
        self._items = _unique(kind)

    def __getitem__(self, name: str) -> Any:
        return self._items[name].obj

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def declared(self, name: str, field: str) -> Any:
        """Attribute `field` of object `name`, as its `Described` declares it when it does (no import), else loaded."""
        ref = self._items[name].ref
        said = getattr(ref, field, None) if isinstance(ref, Described) else None
        return said if said not in ("", None) else getattr(self[name], field)


def _unique(kind: str) -> dict[str, Provided]:
    found: dict[str, Provided] = {}
    for item in provided(kind):
        if item.name in found:
            other = found[item.name]
            raise PluginError(
                f"{kind} {item.name!r} is provided by both {other.distribution} ({other.plugin}) "
                f"and {item.distribution} ({item.plugin}); uninstall one of them"
            )
        found[item.name] = item
    return found


def lookup(kind: str, name: str, *, what: str | None = None) -> Any:
    """The object of one kind with this name; a PluginError listing the known names, or a
    MissingExtraError naming the extra its plugin needs (`what` names it in that message)."""
    table = _unique(kind)
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise PluginError(f"unknown {kind} {name!r}; known: {known}")
    item = table[name]
    if item.missing_extra:
        raise MissingExtraError(what or f"{kind} {name!r}", item.missing_extra)
    return item.obj


def names(kind: str) -> list[str]:
    return sorted(_unique(kind))


def description(item: Provided) -> str:
    """The one-line `description` of what an item provides, through its `Described` when that says it."""
    if isinstance(item.ref, Described) and item.ref.description:
        return item.ref.description
    return getattr(item.obj, "description", "")


def availability(item: Provided) -> Any:
    """A backend's `Availability`, through its cheap check when it has one (`Described.availability`)."""
    if isinstance(item.ref, Described) and item.ref.availability:
        return _import_target(item.ref.availability)()
    return item.obj().availability()


def register(plugin: object, name: str | None = None) -> None:
    """Register a plugin object in this process (tests, embedding applications)."""
    registered = get_plugin_manager().register(plugin, name=name)
    _in_process.add(registered or name or repr(plugin))  # the command index knows entry points only
    _index_hook.cache_clear()
    _plugin_commands.cache_clear()
    declared_knobs.cache_clear()


@functools.lru_cache(maxsize=1)
def declared_knobs() -> dict[str, knob.Knob]:
    """Name -> declaration of every knob the registered plugins declare, checked (`mneme.core.params` uses them)."""
    found: dict[str, knob.Knob] = {}
    for item in provided("parameter"):
        declared = attrs.evolve(item.obj, plugin=item.plugin)
        if declared.name in knob.CORE_FIELDS or declared.name in ("schema", "knobs"):
            raise PluginError(
                f"plugin {item.plugin!r} ({item.distribution}) declares parameter {declared.name!r}, "
                "a field of ExperimentConfiguration itself; rename it"
            )
        if declared.name in found:
            raise PluginError(
                f"parameter {declared.name!r} is declared by both {found[declared.name].plugin!r} and "
                f"{item.plugin!r}; disable one of them (mneme -p no:NAME)"
            )
        try:
            declared.check(declared.default)
        except (TypeError, ValueError) as exc:
            raise PluginError(
                f"plugin {item.plugin!r} ({item.distribution}) declares parameter {declared.name!r} "
                f"with a default its declaration refuses: {exc}"
            ) from None
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
