"""`mneme.tuning.sample_strategy` of the original Mneme API: strategies are iterables."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


class SamplingStrategy(abc.ABC):
    """An iterable of samples of a search space."""

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """Yield samples."""


class ExhaustiveSamplingStrategy(SamplingStrategy):
    """Yields every valid derived configuration of the space."""

    def __init__(self, search_space):
        self.space = search_space

    def __iter__(self) -> Iterator[Any]:
        yield from self.space.sample_exhaustive()


class RandomSamplingStrategy(SamplingStrategy):
    """Yields `num_samples` independent `{"parameters": ...}` samples."""

    def __init__(self, search_space, num_samples: int):
        self.space = search_space
        self.num_samples = num_samples

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.num_samples):
            yield self.space.sample_random()


class OptunaSamplingStrategy(SamplingStrategy):
    """Yields `(configuration, trial)` until the study holds `n_trials` trials (a resumed study's count)."""

    def __init__(self, search_space, study, n_trials: int):
        self.space = search_space
        self.study = study
        self.n_trials = n_trials
        log.info("%s: %d trials already in the study, %d requested", type(self).__name__, len(study.trials), n_trials)

    def __iter__(self) -> Iterator[Any]:
        while len(self.study.trials) < self.n_trials:
            yield self.space.sample_optuna(self.study)
