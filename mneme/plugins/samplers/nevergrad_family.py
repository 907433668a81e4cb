"""`nevergrad:<optimizer>`: any optimizer of `nevergrad.optimizers.registry` (NGOpt, OnePlusOne, TwoPointsDE, ...).

The space becomes an ``ng.p.Dict``: categorical dimensions are ``Choice``, ordered ones
``TransitionChoice``, reals ``Scalar``. Results of points the optimizer did not ask for
(earlier runs, other processes) are told to it as well, where the optimizer supports that.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mneme.core import logs
from mneme.core.errors import UsageError
from mneme.core.tuning import distributions as domains
from mneme.core.tuning.samplers import Ask, Sampler

logs.third_party("nevergrad", warns=True)  # the libraries it drives: quiet unless -v

log = logging.getLogger(__name__)
MAX_TRANSITION_CHOICES = 4096


def _parameter(dist: domains.Distribution):
    import nevergrad as ng

    if isinstance(dist, domains.Categorical):
        return ng.p.Choice(list(dist.choices))
    if isinstance(dist, domains.IntRange):
        count = (dist.high - dist.low) // dist.step + 1
        if count <= MAX_TRANSITION_CHOICES:
            return ng.p.TransitionChoice(list(range(dist.low, dist.high + 1, dist.step)))
        return ng.p.Scalar(lower=dist.low, upper=dist.high).set_integer_casting()
    if isinstance(dist, domains.FloatRange):
        if dist.log:
            return ng.p.Log(lower=dist.low, upper=dist.high)
        return ng.p.Scalar(lower=dist.low, upper=dist.high)
    raise UsageError(f"nevergrad cannot represent distribution {dist!r}")


def _snap(dist: domains.Distribution, value: Any) -> Any:
    if isinstance(dist, domains.IntRange):
        value = int(round(float(value)))
        value = dist.low + ((value - dist.low) // dist.step) * dist.step
        return min(max(value, dist.low), dist.high)
    if isinstance(dist, domains.FloatRange):
        return float(min(max(value, dist.low), dist.high))
    return value


class NevergradSampler(Sampler):
    name = "nevergrad"
    variants = ("NGOpt", "OnePlusOne", "TwoPointsDE", "CMA", "PSO", "DE", "RandomSearch")

    def __init__(self, variant: str = "", *, seed: int | None = None, **options: Any):
        super().__init__(variant or "NGOpt", seed=seed, **options)
        import nevergrad as ng

        if self.variant not in ng.optimizers.registry:
            close = [n for n in ng.optimizers.registry if n.lower() == self.variant.lower()]
            hint = f" (did you mean {close[0]}?)" if close else "; e.g. NGOpt, OnePlusOne, TwoPointsDE, CMA, PSO"
            raise UsageError(f"unknown nevergrad optimizer {self.variant!r}{hint}")
        self._optimizer = None
        self._dists: dict[str, domains.Distribution] = {}
        self._warned = False

    def bind(self, space: Any, **kwargs: Any) -> None:
        import nevergrad as ng

        super().bind(space, **kwargs)
        self._dists = space.distributions()
        if not self._dists:
            raise UsageError(f"space {space.name!r} has no sampled dimension; nothing for nevergrad to search")
        parametrization = ng.p.Dict(**{name: _parameter(d) for name, d in self._dists.items()})
        if self.seed is not None:
            parametrization.random_state.seed(self.seed)
        try:
            self._optimizer = ng.optimizers.registry[self.variant](
                parametrization=parametrization, budget=self.budget, num_workers=max(1, self.parallel), **self.options
            )
        except (TypeError, ValueError) as exc:
            raise UsageError(f"cannot create nevergrad optimizer {self.variant}: {exc}") from exc

    def ask(self) -> Ask | None:
        candidate = self._optimizer.ask()
        encoded = {name: _snap(self._dists[name], value) for name, value in candidate.value.items()}
        return Ask(encoded, candidate)

    def tell(self, ask: Ask, value: float) -> None:
        self._optimizer.tell(ask.token, value)

    def observe(self, encoded: Mapping[str, Any], value: float | None) -> None:
        if value is None:
            return
        import nevergrad as ng

        try:
            candidate = self._optimizer.parametrization.spawn_child(
                new_value={name: encoded[name] for name in self._dists}
            )
            self._optimizer.tell(candidate, value)
        except (ng.errors.TellNotAskedNotSupportedError, ValueError, KeyError) as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "nevergrad:%s cannot learn from results it did not ask for (%s); it starts afresh",
                    self.variant,
                    exc,
                )
