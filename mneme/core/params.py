"""Knobs: the parameters plugins add to `ExperimentConfiguration` (hook `mneme_parameters`).

A `Knob` (`mneme.core.knob`, re-exported here) declares one parameter beside the original Mneme
API's fields: its name, type, default, range or choices, the stage it affects, help, and how the
built-in spaces tune it; the registry (`mneme.core.plugins.declared_knobs`) collects and checks
the declarations. CLI flags of `mneme replay` / `mneme ir`, the built-in spaces and `build_fields()` are made
from the declarations. Why the knobs live where they do: docs/design/parameters.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from mneme.core import plugins
from mneme.core.knob import CORE_FIELDS, OPTIMIZE_KNOBS, STAGES, TYPES, Knob

__all__ = [
    "CORE_FIELDS",
    "OPTIMIZE_KNOBS",
    "STAGES",
    "TYPES",
    "Knob",
    "Knobs",
    "build_fields",
    "click_options",
    "default_of",
    "knobs",
    "known_names",
    "normalize",
    "schema1_knobs",
    "unused_when",
]

# Fields of the original Mneme API that reach optimization and code generation (the rest
# change the preprocessed IR, whose variant hash is part of every build key).
CORE_BUILD_FIELDS = ("passes", "codegen_opt", "codegen_method")

# Configuration schema 1 (before plugins declared knobs) had ten fields beside the original
# API's; their plugins declare them with `Knob(schema1=True)`. They keep their schema-1 defaults
# in `to_dict()` and `hash()`, so every hash written before stays valid
# (docs/design/parameters.md, "Compatibility").
SCHEMA = 2


class Knobs(Mapping):
    """A frozen, hashable mapping of knob values (only those that differ from the default)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None):
        object.__setattr__(self, "_items", tuple(sorted((items or {}).items())))

    def __getitem__(self, key: str) -> Any:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return dict(self) == dict(other) if isinstance(other, Mapping) else NotImplemented

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Knobs is immutable")

    def __reduce__(self):
        return (Knobs, (dict(self._items),))

    def __repr__(self) -> str:
        return f"Knobs({dict(self._items)!r})"


# -- the declared knobs (collected and checked by the registry) ----------------------------------


def _declared() -> dict[str, Knob]:
    return plugins.declared_knobs()


def knobs() -> dict[str, Knob]:
    """Name -> declaration of every knob the loaded plugins declare."""
    return dict(_declared())


def schema1_knobs() -> tuple[str, ...]:
    """Names of the declared knobs that were fields of configuration schema 1 (`Knob.schema1`)."""
    return tuple(name for name, knob in _declared().items() if knob.schema1)


def known_names() -> set[str]:
    """Names a configuration may carry beside the core fields: the declared knobs."""
    return set(_declared())


def default_of(name: str) -> Any:
    """The default of a declared knob; KeyError when no installed plugin declares it."""
    return _declared()[name].default


def unused_when(name: str) -> str | None:
    knob = _declared().get(name)
    return knob.unused_when if knob is not None else None


def normalize(values: Mapping[str, Any]) -> Knobs:
    """Checked knob values, without those equal to their default; unknown names raise ValueError."""
    declared = _declared()
    kept: dict[str, Any] = {}
    for name, value in values.items():
        if name in declared:
            value = declared[name].check(value)
        else:
            raise ValueError(
                f"unknown configuration field {name!r}: neither a field of the original Mneme API "
                f"nor a parameter an installed plugin declares ({nearest(name)})"
            )
        if value != default_of(name) or type(value) is not type(default_of(name)):
            kept[name] = value
    return Knobs(kept)


def nearest(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(set(CORE_FIELDS) | known_names()), n=1)
    return f"did you mean {close[0]!r}?" if close else "`mneme plugins --parameters` lists them"


#: The stages whose knobs shape a build; the first two also shape a backend's intermediate code
#: (`Backend.intermediate`), which the assembler alone finishes.
INTERMEDIATE_STAGES = ("optimize", "codegen")
BUILD_STAGES = (*INTERMEDIATE_STAGES, "assemble")


def build_fields(stages: tuple[str, ...] = BUILD_STAGES) -> tuple[str, ...]:
    """Names of the configuration fields that reach optimization, code generation or assembly.

    The original API's `passes`, `codegen_opt`, `codegen_method`, then every declared knob of
    those `stages`. Transforms' knobs are not here: their effect is in the variant hash.
    """
    return CORE_BUILD_FIELDS + tuple(sorted(k.name for k in _declared().values() if k.stage in stages))


def click_options(declared: Mapping[str, Knob] | None = None) -> list:
    """One click option per knob (``--inlining-threshold``, ``--fast-math/--no-fast-math``), default None: not given."""
    import click

    options = []
    for knob in (declared if declared is not None else _declared()).values():
        flag, help_ = knob.flag, knob.help + (f" [{knob.stage}; {knob.plugin}]" if knob.plugin else "")
        if knob.type == "bool":
            options.append(click.Option([f"{flag}/--no-{flag[2:]}", knob.name], default=None, help=help_))
        elif knob.choices is not None:
            options.append(
                click.Option(
                    [flag, knob.name], type=click.Choice([str(c) for c in knob.choices]), default=None, help=help_
                )
            )
        else:
            kind = click.IntRange if knob.type == "int" else click.FloatRange if knob.type == "float" else None
            type_ = kind(knob.low, knob.high) if kind else click.STRING
            options.append(click.Option([flag, knob.name], type=type_, default=None, help=help_))
    return options
