"""The sampler interface: one ask/tell contract for every search strategy.

Study, sampler and storage are kept apart, as in Optuna. Every trial of every sampler is
recorded in an Optuna study (the store); what differs is who proposes the point:

- a *native* sampler is an Optuna sampler: the session calls ``study.ask()`` and the Optuna
  sampler proposes, reading the shared study (so several processes cooperate for free);
- an *external* sampler (exhaustive, random, a plugin's library) proposes with ``ask()``; the session
  pins that point into the study's trial through `PinnedSampler`, and hands back results
  with ``tell()``. Results it did not ask for (earlier runs, other processes) reach it
  through ``observe()``.

Values are *encoded* (what Optuna stores, see `params`); `SearchSpace.decode` maps them
back. A sampler is named ``family[:variant]`` (``random``, ``FAMILY:VARIANT``); the family is
the plugin's name.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import optuna

from mneme.core import plugins
from mneme.core.errors import UsageError

log = logging.getLogger(__name__)


@attrs.define
class Ask:
    """One point an external sampler proposed; `token` is the sampler's own handle for it."""

    encoded: dict[str, Any]
    token: Any = None


class Sampler(abc.ABC):
    """A search strategy. Subclasses set `name` (the family) and implement ask/tell."""

    name: ClassVar[str]
    native: ClassVar[bool] = False
    variants: ClassVar[tuple[str, ...]] = ()  # well-known variants, for help texts
    uses_constraints: bool = False  # told which trials were infeasible (Optuna's constraints)
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

    def bind(self, space: Any, *, parallel: int = 1, budget: int | None = None) -> None:
        """Attach the search space, before any ask."""
        self.space = space
        self.parallel = parallel
        self.budget = budget

    def optuna_sampler(self) -> optuna.samplers.BaseSampler:
        """The Optuna sampler the study runs with (external samplers pin their own points)."""
        if getattr(self, "_pinned_sampler", None) is None:
            self._pinned_sampler = PinnedSampler()
        return self._pinned_sampler

    def ask(self) -> Ask | None:
        """The next point to try, or None when the sampler has nothing left (external only)."""
        raise NotImplementedError(f"sampler {self.spec} proposes through its Optuna sampler")

    def tell(self, ask: Ask, value: float) -> None:
        """The objective (seconds; a penalty for failures and infeasible points) of an asked point."""

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        """A point this sampler did not ask for: finished (value) or still running (None)."""


class PinnedSampler(optuna.samplers.BaseSampler):
    """Makes ``study.ask()`` take the point an external sampler chose (set with `pin`)."""

    def __init__(self) -> None:
        self._pinned: dict[str, Any] = {}
        self._fallback = optuna.samplers.RandomSampler()

    def pin(self, encoded: Mapping[str, Any]) -> None:
        self._pinned = dict(encoded)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        if param_name in self._pinned:
            return self._pinned[param_name]
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)


CONSTRAINT_KEY = "mneme_infeasible"


def mark_feasibility(trial: optuna.trial.Trial, feasible: bool, sampler: Sampler | None = None) -> None:
    """Tell Optuna whether a trial met the space's constraints (<= 0 is feasible), before it is told.

    Optuna >= 5 records constraints on the trial; older versions read them through the
    samplers' ``constraints_func`` (see the optuna sampler plugin), from the ``status`` attribute.
    """
    if hasattr(trial, "set_constraint") and (sampler is None or sampler.uses_constraints):
        trial.set_constraint(CONSTRAINT_KEY, -1.0 if feasible else 1.0)


def create_sampler(spec: str, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Sampler:
    """A sampler from ``family[:variant]``, looked up among the sampler plugins."""
    family, _, variant = spec.partition(":")
    table = plugins.registry("sampler")
    if family not in table:
        known = ", ".join(sorted(table)) or "none"
        raise UsageError(f"unknown sampler {spec!r}; known families: {known} (give family[:variant], "
                         "e.g. random; `mneme plugins` lists the variants)")
    cls = plugins.lookup("sampler", family, what=spec)  # names the extra to install when one is missing
    return cls(variant, seed=seed, **dict(options or {}))


FALLBACK_SAMPLER = "random"


def default_spec() -> str:
    """The default sampler: the first family by name that offers itself (`default_variant`), else random."""
    for family, cls in sorted(plugins.registry("sampler").items()):
        variant = getattr(cls, "default_variant", None)
        if variant is not None:
            return f"{family}:{variant}" if variant else family
    return FALLBACK_SAMPLER
