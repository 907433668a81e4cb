"""Built-in samplers, registered through the `mneme_samplers` hook like third-party ones."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_samplers():
    from mneme.plugins.samplers.basic import ExhaustiveSampler, RandomSampler
    from mneme.plugins.samplers.nevergrad_family import NevergradSampler
    from mneme.plugins.samplers.optuna_family import OptunaSampler

    return [ExhaustiveSampler, RandomSampler, OptunaSampler, NevergradSampler]
