"""`optuna:<sampler>`: any Optuna sampler, behind Mneme's ask/tell interface.

Short names: tpe, cmaes, gp, nsga2, nsga3, qmc, random, grid, bruteforce; or any class name
of `optuna.samplers` (``optuna:TPESampler``). Sampler options (``--sampler-option K=V``) go
to the class's constructor.

The adapter keeps an in-memory Optuna study that mirrors what the sampler knows: each asked
point is a trial of it (``study.ask``/``study.tell``), and every result the session observes
(earlier runs, other processes sharing the result store) is added to it as a finished trial,
so the Optuna sampler reads the same history it would read in the shared study. Infeasible
points carry a violated constraint for the samplers that read constraints (TPE, NSGA-II/III,
GP), so they learn to avoid them.
"""

from __future__ import annotations

import importlib.util
import logging
import inspect
import warnings
from collections.abc import Mapping
from typing import Any

import optuna

from mneme.core import logs
from mneme.core.errors import MissingExtraError, UsageError
from mneme.core.tuning.samplers import Ask, Sampler
from mneme.core.types import canonical_json
from mneme.plugins.samplers.optuna_store import optuna_distributions

logs.third_party("optuna", "cmaes", warns=True)  # the libraries it drives: quiet unless -v
log = logging.getLogger(__name__)

ALIASES = {
    "tpe": "TPESampler",
    "cmaes": "CmaEsSampler",
    "cma": "CmaEsSampler",
    "gp": "GPSampler",
    "nsga2": "NSGAIISampler",
    "nsga3": "NSGAIIISampler",
    "qmc": "QMCSampler",
    "random": "RandomSampler",
    "grid": "GridSampler",
    "bruteforce": "BruteForceSampler",
}
# Optional packages some Optuna samplers need, and the extra of mneme that brings them (None: no extra).
NEEDS = {"CmaEsSampler": ("cmaes", "cmaes"), "GPSampler": ("torch", None), "QMCSampler": ("scipy", "qmc")}
INFEASIBLE = "infeasible"
CONSTRAINT_KEY = "mneme_infeasible"


def constraint_violation(trial: optuna.trial.FrozenTrial) -> list[float]:
    """Optuna's constraint convention: <= 0 is feasible."""
    return [1.0 if trial.user_attrs.get("status") == INFEASIBLE else -1.0]


def _key(encoded: Mapping[str, Any]) -> str:
    return canonical_json(dict(encoded))


class OptunaSampler(Sampler):
    name = "optuna"
    variants = tuple(ALIASES)

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        super().__init__(variant or "tpe", seed=seed, **options)
        class_name = ALIASES.get(self.variant.lower(), self.variant)
        cls = getattr(optuna.samplers, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, optuna.samplers.BaseSampler)):
            known = ", ".join(sorted(ALIASES))
            raise UsageError(
                f"unknown Optuna sampler {self.variant!r}; use one of {known} or a class name of optuna.samplers"
            )
        if class_name in NEEDS:
            module, extra = NEEDS[class_name]
            if importlib.util.find_spec(module) is None:
                if extra:
                    raise MissingExtraError(f"optuna:{self.variant}", extra)
                raise UsageError(
                    f"sampler optuna:{self.variant} needs the Python package {module!r}: pip install {module}"
                )
        self.cls = cls
        # Only samplers that read constraints are told them (CMA-ES warns about unused ones).
        self.uses_constraints = "constraints_func" in inspect.signature(cls.__init__).parameters
        self._study: optuna.Study | None = None
        self._dists: dict[str, Any] = {}
        self._infeasible: set[str] = set()

    def bind(self, space: Any, **kwargs: Any) -> None:
        super().bind(space, **kwargs)
        self._dists = optuna_distributions(space.distributions())
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" for the mirror
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._study = optuna.create_study(direction="minimize", sampler=self._build())
        logs.quiet_third_party("optuna")  # back to -q/-v's level: the samplers' own warnings follow it

    def ask(self) -> Ask:
        assert self._study is not None, "bind() first"
        trial = self._study.ask(self._dists)
        return Ask(dict(trial.params), trial)

    def infeasible(self, encoded: Mapping[str, Any]) -> None:
        self._infeasible.add(_key(encoded))

    def tell(self, ask: Ask, value: float) -> None:
        trial = ask.token
        feasible = _key(ask.encoded) not in self._infeasible
        trial.set_user_attr("status", "ok" if feasible else INFEASIBLE)  # read by constraint_violation
        if self.uses_constraints and hasattr(trial, "set_constraint"):
            trial.set_constraint(CONSTRAINT_KEY, -1.0 if feasible else 1.0)
        self._study.tell(trial, value)

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        if value is None or self._study is None:  # a running point: Optuna's samplers read finished ones
            return
        params = {name: v for name, v in encoded.items() if name in self._dists}
        feasible = _key(encoded) not in self._infeasible
        extra: dict[str, Any] = {}
        if self.uses_constraints and hasattr(optuna.trial.Trial, "set_constraint"):
            extra["constraints"] = {CONSTRAINT_KEY: -1.0 if feasible else 1.0}
        try:
            self._study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions={name: self._dists[name] for name in params},
                    value=value,
                    user_attrs={"status": "ok" if feasible else INFEASIBLE},
                    **extra,
                )
            )
        except ValueError as exc:  # a point of another space version: nothing to learn from it
            log.debug("optuna:%s cannot learn from %s: %s", self.variant, params, exc)

    def _build(self) -> optuna.samplers.BaseSampler:
        accepted = inspect.signature(self.cls.__init__).parameters
        kwargs = dict(self.options)
        if "seed" in accepted and self.seed is not None:
            kwargs.setdefault("seed", self.seed)
        if "constraints_func" in accepted and not hasattr(optuna.trial.Trial, "set_constraint"):
            kwargs.setdefault("constraints_func", constraint_violation)
        if "search_space" in accepted and self.space is not None:
            kwargs.setdefault(
                "search_space",
                {name: p.encoded_values() for name, p in self.space.primitives().items() if p.distribution()},
            )
        from mneme.core.keys import check_keys

        check_keys(kwargs, set(accepted) - {"self"}, None, f"sampler optuna:{self.variant} options", error=UsageError)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                return self.cls(**kwargs)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"cannot create sampler optuna:{self.variant}: {exc}") from exc
