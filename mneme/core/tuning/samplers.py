"""The sampler interface: one ask/tell contract for every search strategy.

Study, sampler and storage are kept apart. Every trial of every sampler is
recorded in the result store (`mneme.core.tuning.store`); the sampler only proposes. The loop
has one path for all of them: ``ask()`` a point, the store records it in a trial, the result
comes back with ``tell()``. Results the sampler did not ask for (earlier runs, other processes
sharing the study) reach it through ``observe()``, and points that violate the space's
constraints are named to it with ``infeasible()`` before their penalty is told, so a sampler
that models constraints learns to avoid them. A library's samplers take part through an
ask/tell adapter in their plugin (docs/design/interfaces.md, "Samplers").

Values are *encoded* (what the store keeps, see `params`); `SearchSpace.decode` maps them
back. A sampler is named ``family[:variant]`` (``random``, ``FAMILY:VARIANT``); the family is
the plugin's name.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from mneme.core import plugins
from mneme.core.errors import UsageError

log = logging.getLogger(__name__)


@attrs.define
class Ask:
    """One point a sampler proposed; `token` is the sampler's own handle for it."""

    encoded: dict[str, Any]
    token: Any = None


class Sampler(abc.ABC):
    """A search strategy. Subclasses set `name` (the family) and implement ask/tell."""

    name: ClassVar[str]
    variants: ClassVar[tuple[str, ...]] = ()  # well-known variants, for help texts
    #: A family that offers itself as the default sampler names the variant to use (`default_spec`).
    default_variant: ClassVar[str | None] = None

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        self.variant = variant
        self.seed = seed
        self.options = options
        self.space: Any = None
        self.parallel = 1
        self.budget: int | None = None

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.variant}" if self.variant else self.name

    #: The objective the loop tells for a failed, unverified or infeasible point (`PENALTY_FACTOR` times the
    #: baseline's time), set once the baseline is measured; None before, and for a loop that does not say.
    penalty: float | None = None

    def bind(self, space: Any, *, parallel: int = 1, budget: int | None = None) -> None:
        """Attach the search space, before any ask."""
        self.space = space
        self.parallel = parallel
        self.budget = budget

    @abc.abstractmethod
    def ask(self) -> Ask | None:
        """The next point to try, or None when the sampler has nothing left."""

    def tell(self, ask: Ask, value: float) -> None:
        """The objective (seconds; a penalty for failures and infeasible points) of an asked point."""

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        """A point this sampler did not ask for: finished (value) or still running (None)."""

    def infeasible(self, encoded: Mapping[str, Any]) -> None:
        """`encoded` violates the space's constraints; its penalty is told or observed next."""


def create_sampler(spec: str, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Sampler:
    """A sampler from ``family[:variant]``, looked up among the sampler plugins."""
    family, _, variant = spec.partition(":")
    table = plugins.LazyRegistry("sampler")  # names only: loading every family imports every sampler library
    if family not in table:
        known = ", ".join(sorted(table)) or "none"
        raise UsageError(
            f"unknown sampler {spec!r}; known families: {known} (give family[:variant], "
            "e.g. random; `mneme plugins` lists the variants)"
        )
    cls = plugins.lookup("sampler", family, what=spec)  # names the extra to install when one is missing
    return cls(variant, seed=seed, **dict(options or {}))


FALLBACK_SAMPLER = "random"


def default_spec() -> str:
    """The default sampler: the first family by name that offers itself (`default_variant`), else random."""
    table = plugins.LazyRegistry("sampler")  # loaded in name order until one offers itself, not all of them
    for family in sorted(table):
        variant = table.declared(family, "default_variant")
        if variant is not None:
            return f"{family}:{variant}" if variant else family
    return FALLBACK_SAMPLER
