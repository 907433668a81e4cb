"""What `mneme tune` is asked to do (`TuneOptions`), what it shows while it runs (`Progress`), and why it
stopped (`Stop`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from mneme.core.backend import check_cache_state
from mneme.core.errors import UsageError
from mneme.core.tuning.stats import TABLE_CONFIDENCE


def _default_sampler() -> str:
    from mneme.core.tuning.samplers import default_spec  # lazily: the sampler interface imports the store's library

    return default_spec()


@attrs.define
class TuneOptions:
    """What `mneme tune` is asked to do (the CLI's options, one to one)."""

    record_db: str
    record_id: str | None = None
    space: str = "quick"
    space_options: dict[str, Any] = attrs.Factory(dict)
    sampler: str = attrs.Factory(lambda: _default_sampler())  # the family that offers itself (Sampler.default_variant)
    sampler_options: dict[str, Any] = attrs.Factory(dict)
    trials: int = 20  # distinct measured configurations (duplicates are answered from the store, free)
    timeout: float | None = None
    devices: list[int] | None = None
    workers_per_device: int = 1
    results: str | None = None
    resume: bool = False
    force: bool = False
    storage: str | None = None
    study: str | None = None
    seed: int | None = None
    iterations: int = 3
    cache: str = "flushed"  # the state each timed run starts from (mneme.core.backend.CACHE_STATES)
    timer: str = "auto"  # what times the runs (the backend's `Device.timers`; auto: its best that works)
    retime_top: int = 3  # leading candidates compared with the baseline, interleaved, at the end
    retime_repeats: int = 2  # pairs of runs each comparison starts with (at least 2; more until the interval is narrow)
    ci_target: float = 0.02  # relative half-width of the speedup's interval that ends a comparison
    measure_time: float = 30.0  # seconds a comparison may take at most
    max_pairs: int = 960  # pairs a comparison may make at most: more than 60 only while its verdict is open
    accept_insignificant: bool = False  # best.json may be a candidate not significantly faster
    confidence: float = TABLE_CONFIDENCE  # the final table's verdicts all hold together at this level
    backend: str | None = None
    experiment_timeout: float | None = None
    prefetch: int | None = None
    heartbeat: float = 10.0  # seconds between lease refreshes of running trials; 0 keeps no lease

    def validate(self) -> None:
        if self.trials < 1:
            raise UsageError(f"--trials must be >= 1, got {self.trials}")
        if self.timeout is not None and self.timeout <= 0:
            raise UsageError(f"--timeout must be > 0 seconds, got {self.timeout}")
        if self.workers_per_device < 1:
            raise UsageError(f"--workers-per-device must be >= 1, got {self.workers_per_device}")
        if self.iterations < 1:
            raise UsageError(f"--iterations must be >= 1, got {self.iterations}")
        check_cache_state(self.cache)
        if self.retime_top < 0 or self.retime_repeats < 1:
            raise UsageError("--retime-top must be >= 0 and --retime-repeats >= 1")
        if not 0 < self.ci_target < 1:
            raise UsageError(f"--ci-target must be in (0, 1) (a relative half-width, e.g. 0.02), got {self.ci_target}")
        if self.max_pairs < 3:
            raise UsageError(f"--max-pairs must be >= 3 (a comparison's pairs at most), got {self.max_pairs}")
        if not 0.5 <= self.confidence < 1:
            raise UsageError(
                f"--confidence must be in [0.5, 1) (the level of the final table's verdicts together, e.g. 0.995), "
                f"got {self.confidence}"
            )
        if self.measure_time <= 0:
            raise UsageError(f"--measure-time must be > 0 seconds, got {self.measure_time}")
        if self.heartbeat < 0:
            raise UsageError(f"--heartbeat must be >= 0 seconds (0: keep no lease), got {self.heartbeat}")


@attrs.define
class Stop:
    """Why the search stopped: ``budget``, ``timeout``, ``exhausted`` or ``interrupted``, and in words."""

    reason: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "detail": self.detail}


@attrs.define
class Progress:
    """Live counters of a session, for displays."""

    trials: int = 0  # distinct configurations measured (what --trials counts), this run and earlier ones
    budget: int = 0
    experiments: int = 0
    cached: int = 0  # proposals answered from the store (duplicates), free
    equivalent: int = 0  # of those, configurations that compiled to code measured already (same launch)
    infeasible: int = 0
    failures: Counter = attrs.Factory(Counter)
    best_time: float | None = None
    best_trial: int | None = None
    best_samples: list[float] = attrs.Factory(list)
    baseline_time: float | None = None
    baseline_samples: list[float] = attrs.Factory(list)
    phase: str = "starting"
    stop: Stop = attrs.Factory(Stop)

    @property
    def speedup(self) -> float | None:
        if self.best_time and self.baseline_time:
            return self.baseline_time / self.best_time
        return None

    @property
    def speedup_interval(self) -> Any:
        """The best's speedup with its interval (`stats.RatioInterval`, times taken apart); None without samples."""
        from mneme.core.tuning.stats import unpaired_ratio

        return unpaired_ratio(self.baseline_samples, self.best_samples)
