"""What the search loop, the final comparison and the event hooks receive: small frozen views of a session.

`TuningSession` owns the run; the pieces it drives see only what they use, fixed for the phase
they run in: `LoopContext` (the ask -> run -> tell loop), `MeasureContext` (the interleaved
comparison), `RunInfo` (which run an event is about) and `ToldTrial` (one trial as stored).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from mneme.core.tuning.stats import TABLE_CONFIDENCE
from mneme.core.types import ExperimentConfiguration, ExperimentResult


@attrs.frozen
class RunInfo:
    """Which tuning run an event reports on."""

    session_id: str
    kernel_name: str
    static_hash: str
    dynamic_hash: str
    space: str
    sampler: str
    study: str
    storage: str
    results_dir: Path


@attrs.frozen
class ToldTrial:
    """One trial as it was stored: its number, status (ok, failed, unverified, cached, infeasible), objective
    value (seconds, or the penalty), configuration (None for an infeasible point), the experiment's result
    (None when the store answered it), and the trial that answered it (``cached``)."""

    number: int
    status: str
    value: float
    params: dict[str, Any]
    config: ExperimentConfiguration | None = None
    result: ExperimentResult | None = None
    cached_from: int | None = None


@attrs.frozen
class LoopContext:
    """What the search loop reads, fixed once the baseline is known.

    `progress` is the session's live counters (the loop updates them; `on_progress` shows them);
    `owner` is what each trial records of the process that runs it.
    """

    run: RunInfo
    store: Any
    sampler: Any
    space: Any
    pool: Any
    lease: Any
    watch: Any
    owner: dict[str, Any]
    penalty: float
    timed_by: str
    trials: int
    timeout: float | None
    concurrency: int  # experiments in flight at most: workers + prefetch
    shared: bool  # the study may be shared with other processes (--storage)
    tuners: Any  # the live tuners of the study file (`lease.Tuners`), where it is an SQLite file; else None
    progress: Any
    on_progress: Callable[[Any], None]


@attrs.frozen
class MeasureContext:
    """What the final comparison reads: the store, the pool, the baseline and the measuring options."""

    session_id: str
    store: Any
    pool: Any
    baseline: dict[str, Any]
    timed_by: str
    retime_top: int
    retime_repeats: int
    ci_target: float
    measure_time: float
    max_pairs: int  # pairs a comparison may make at most (--max-pairs; `measure.Looks`)
    progress: Any
    on_progress: Callable[[Any], None]
    confidence: float = TABLE_CONFIDENCE  # the final table's level, for its verdicts together (--confidence)
