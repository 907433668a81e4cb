"""`optuna:<sampler>`: any Optuna sampler, proposing through the shared study.

Short names: tpe, cmaes, gp, nsga2, nsga3, qmc, random, grid, bruteforce; or any class name
of `optuna.samplers` (``optuna:TPESampler``). Sampler options (``--sampler-option K=V``) go
to the class's constructor. Infeasible points are reported to the samplers that accept a
``constraints_func`` (TPE, NSGA-II/III, GP), so they learn to avoid them.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from typing import Any

import optuna

from mneme.core import logs
from mneme.core.errors import MissingExtraError, UsageError
from mneme.core.tuning.samplers import Sampler

logs.third_party("optuna", "cmaes", warns=True)  # the libraries it drives: quiet unless -v

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


def constraint_violation(trial: optuna.trial.FrozenTrial) -> list[float]:
    """Optuna's constraint convention: <= 0 is feasible."""
    return [1.0 if trial.user_attrs.get("status") == INFEASIBLE else -1.0]


class OptunaSampler(Sampler):
    name = "optuna"
    native = True
    default_variant = "tpe"  # `mneme tune`'s default sampler
    variants = tuple(ALIASES)

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        super().__init__(variant or "tpe", seed=seed, **options)
        class_name = ALIASES.get(self.variant.lower(), self.variant)
        cls = getattr(optuna.samplers, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, optuna.samplers.BaseSampler)):
            known = ", ".join(sorted(ALIASES))
            raise UsageError(f"unknown Optuna sampler {self.variant!r}; use one of {known} or a class name "
                             "of optuna.samplers")
        if class_name in NEEDS:
            module, extra = NEEDS[class_name]
            if importlib.util.find_spec(module) is None:
                if extra:
                    raise MissingExtraError(f"optuna:{self.variant}", extra)
                raise UsageError(f"sampler optuna:{self.variant} needs the Python package {module!r}: "
                                 f"pip install {module}")
        self.cls = cls
        # Only samplers that read constraints are told them (CMA-ES warns about unused ones).
        self.uses_constraints = "constraints_func" in inspect.signature(cls.__init__).parameters
        self._sampler: optuna.samplers.BaseSampler | None = None

    def optuna_sampler(self) -> optuna.samplers.BaseSampler:
        if self._sampler is None:
            self._sampler = self._build()
        return self._sampler

    def _build(self) -> optuna.samplers.BaseSampler:
        accepted = inspect.signature(self.cls.__init__).parameters
        kwargs = dict(self.options)
        if "seed" in accepted and self.seed is not None:
            kwargs.setdefault("seed", self.seed)
        if "constraints_func" in accepted and not hasattr(optuna.trial.Trial, "set_constraint"):
            kwargs.setdefault("constraints_func", constraint_violation)
        if "search_space" in accepted and self.space is not None:
            kwargs.setdefault("search_space", {
                name: p.encoded_values() for name, p in self.space.primitives().items() if p.distribution()
            })
        from mneme.core.keys import check_keys

        check_keys(kwargs, set(accepted) - {"self"}, None, f"sampler optuna:{self.variant} options", error=UsageError)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                return self.cls(**kwargs)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"cannot create sampler optuna:{self.variant}: {exc}") from exc
